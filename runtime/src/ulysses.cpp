#include "longctx/runtime/ulysses.h"

#include <algorithm>

#include "longctx/planner/parallel_config.h"
#include "longctx/runtime/loss.h"

namespace longctx::runtime {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

UlyssesLayout UlyssesLayout::make(const ModelConfig& m, Communicator* comm) {
  UlyssesLayout l;
  l.comm = comm && comm->sp_size() > 1 ? comm : nullptr;
  l.u = l.comm ? comm->sp_size() : 1;
  l.rank = l.comm ? comm->sp_rank() : 0;
  l.heads = m.heads;
  l.kv_heads = m.kv_heads;
  l.head_dim = m.head_dim;
  l.hl = m.heads / l.u;
  l.kvr = kv_heads_per_rank(m, static_cast<int>(l.u));
  return l;
}

SequenceShard sequence_shard(std::int64_t seq, std::int64_t u, std::int64_t rank) {
  SequenceShard s;
  s.cols = padded_seq(seq, u) / u;
  s.first = s.cols * rank;
  s.real = std::clamp<std::int64_t>(seq - s.first, 0, s.cols);
  return s;
}

ShardBatch shard_batch(const Tensor& window, const SequenceShard& shard, torch::Device device) {
  const auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto take = [&](std::int64_t offset, std::int64_t pad) {
    Tensor t = torch::empty({window.size(0), shard.cols}, opts);  // [rows, cols] int64
    if (shard.real > 0) t.narrow(1, 0, shard.real).copy_(window.narrow(1, shard.first + offset, shard.real));
    if (shard.real < shard.cols) t.narrow(1, shard.real, shard.cols - shard.real).fill_(pad);
    return t;
  };
  return {take(0, 0), take(1, kIgnoreIndex)};
}

Tensor to_ranks(const Tensor& t, std::int64_t u) {
  const auto b = t.size(0), S = t.size(1), c = t.size(2), d = t.size(3);
  if (b == 1) return t.contiguous().view({u, 1, S / u, c, d});
  return t.reshape({b, u, S / u, c, d}).permute({1, 0, 2, 3, 4}).contiguous();
}

Tensor to_sequence(const Tensor& r) {
  const auto u = r.size(0), b = r.size(1), n = r.size(2), c = r.size(3), d = r.size(4);
  if (b == 1) return r.view({1, u * n, c, d});
  return r.permute({1, 0, 2, 3, 4}).reshape({b, u * n, c, d});
}

namespace {

const UlyssesLayout& layout_of(AutogradContext* ctx) {
  return *reinterpret_cast<const UlyssesLayout*>(ctx->saved_data["layout"].toInt());
}

// [b,n,X,d] -> send [u,b,n,x,d], slice j holding the heads rank j receives.
Tensor q_send(const Tensor& q, const UlyssesLayout& L) {
  const auto b = q.size(0), n = q.size(1), d = q.size(3);
  return q.view({b, n, L.u, L.hl, d}).permute({2, 0, 1, 3, 4}).contiguous();
}
Tensor kv_send(const Tensor& k, const UlyssesLayout& L) {
  const auto b = k.size(0), n = k.size(1), d = k.size(3);
  if (!L.replicated()) return k.view({b, n, L.u, L.kvr, d}).permute({2, 0, 1, 3, 4}).contiguous();
  Tensor send = at::empty({L.u, b, n, 1, d}, k.options());
  for (std::int64_t j = 0; j < L.u; ++j) send[j].copy_(k.narrow(2, L.kv_head(j, 0), 1));
  return send;
}
// recv [u,b,n,x,d] (slice j from rank j, our tokens) -> [b,n,X,d].
Tensor q_from(const Tensor& recv) {
  const auto u = recv.size(0), b = recv.size(1), n = recv.size(2), x = recv.size(3), d = recv.size(4);
  Tensor out = at::empty({b, n, u, x, d}, recv.options());
  out.copy_(recv.permute({1, 2, 0, 3, 4}));
  return out.view({b, n, u * x, d});
}
Tensor kv_from(const Tensor& recv, const UlyssesLayout& L) {
  if (!L.replicated()) return q_from(recv);
  // u/K ranks hold each kv head: their gradients are summed, written straight into [b,n,K,d].
  const auto b = recv.size(1), n = recv.size(2), d = recv.size(4), K = L.kv_heads;
  Tensor out = at::empty({b, n, K, d}, recv.options());
  Tensor heads_first = out.permute({2, 0, 1, 3});
  at::sum_out(heads_first, recv.view({K, L.u / K, b, n, d}), {1});
  return out;
}

class ToSequenceFn : public torch::autograd::Function<ToSequenceFn> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                               const UlyssesLayout* L) {
    ctx->saved_data["layout"] = reinterpret_cast<std::int64_t>(L);
    Tensor sq = q_send(q, *L), sk = kv_send(k, *L), sv = kv_send(v, *L);
    Tensor rq = L->comm->all_to_all(sq), rk = L->comm->all_to_all(sk), rv = L->comm->all_to_all(sv);
    return {to_sequence(rq), to_sequence(rk), to_sequence(rv)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const UlyssesLayout& L = layout_of(ctx);
    Tensor rq = L.comm->all_to_all(to_ranks(g[0], L.u));
    Tensor rk = L.comm->all_to_all(to_ranks(g[1], L.u));
    Tensor rv = L.comm->all_to_all(to_ranks(g[2], L.u));
    g.clear();
    return {q_from(rq), kv_from(rk, L), kv_from(rv, L), Tensor()};
  }
};

class ToHeadsFn : public torch::autograd::Function<ToHeadsFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& o, const UlyssesLayout* L) {
    ctx->saved_data["layout"] = reinterpret_cast<std::int64_t>(L);
    return q_from(L->comm->all_to_all(to_ranks(o, L->u)));
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const UlyssesLayout& L = layout_of(ctx);
    Tensor send = q_send(g[0].contiguous(), L);
    g.clear();
    return {to_sequence(L.comm->all_to_all(send)), Tensor()};
  }
};

}  // namespace

std::vector<Tensor> ulysses_to_sequence(const Tensor& q, const Tensor& k, const Tensor& v, const UlyssesLayout& L) {
  if (L.u == 1) return {q, k, v};
  return ToSequenceFn::apply(q.contiguous(), k.contiguous(), v.contiguous(), &L);
}

Tensor ulysses_to_heads(const Tensor& o, const UlyssesLayout& L) {
  if (L.u == 1) return o;
  return ToHeadsFn::apply(o, &L);
}

}  // namespace longctx::runtime
