#include "longctx/runtime/ulysses.h"

#include <algorithm>

#include "planner/core/parallel_config.h"
#include "longctx/runtime/loss.h"
#include "longctx/runtime/ring_attention.h"

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

std::int64_t SequenceShard::cols() const {
  std::int64_t n = 0;
  for (const Range& r : ranges) n += r.cols;
  return n;
}

std::vector<std::int64_t> SequenceShard::positions() const {
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(cols()));
  for (const Range& r : ranges)
    for (std::int64_t i = 0; i < r.cols; ++i) out.push_back(r.first + i);
  return out;
}

SequenceShard sequence_shard(std::int64_t seq, std::int64_t u, std::int64_t rank) {
  ParallelConfig p;
  p.ulysses = static_cast<int>(u);
  return sequence_shard(seq, p, 0, rank);
}

SequenceShard sequence_shard(std::int64_t seq, const ParallelConfig& p, std::int64_t ring_rank,
                             std::int64_t ulysses_rank) {
  SequenceShard s;
  s.seq = seq;
  const std::int64_t padded = padded_seq(seq, p), u = p.ulysses, r = p.ring;
  const std::int64_t piece = padded / (u * r);
  if (r == 1) {
    s.ranges.push_back({ulysses_rank * piece, piece});
    return s;
  }
  // The group's 2c columns: chunk i, then chunk 2r-1-i; this rank's piece of them.
  const std::int64_t c = padded / (2 * r);
  const auto [early, late] = ring_chunks(ring_rank, r);
  const std::int64_t begin = ulysses_rank * piece, end = begin + piece;
  if (begin < c) s.ranges.push_back({early * c + begin, std::min(end, c) - begin});
  if (end > c) {
    const std::int64_t from = std::max(begin, c) - c;
    s.ranges.push_back({late * c + from, end - c - from});
  }
  return s;
}

ShardBatch shard_batch(const Tensor& window, const SequenceShard& shard, torch::Device device) {
  const auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto take = [&](std::int64_t offset, std::int64_t pad) {
    Tensor t = torch::empty({window.size(0), shard.cols()}, opts);  // [rows, cols] int64
    std::int64_t at = 0;
    for (const SequenceShard::Range& r : shard.ranges) {
      const std::int64_t real = std::clamp<std::int64_t>(shard.seq - r.first, 0, r.cols);
      if (real > 0) t.narrow(1, at, real).copy_(window.narrow(1, r.first + offset, real));
      if (real < r.cols) t.narrow(1, at + real, r.cols - real).fill_(pad);
      at += r.cols;
    }
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
