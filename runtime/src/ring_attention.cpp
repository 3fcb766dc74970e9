#include "longctx/runtime/ring_attention.h"

#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace longctx::runtime {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::pair<std::int64_t, std::int64_t> ring_chunks(std::int64_t rank, std::int64_t ring_size) {
  return {rank, 2 * ring_size - 1 - rank};
}

Tensor ring_shard(const Tensor& seq_side, std::int64_t rank, std::int64_t ring_size) {
  const auto S = seq_side.size(1);
  if (S % (2 * ring_size) != 0)
    throw std::invalid_argument(fmt::format("ring_shard: {} tokens do not split into 2 x {} chunks", S, ring_size));
  const auto c = S / (2 * ring_size);
  const auto [a, b] = ring_chunks(rank, ring_size);
  return torch::cat({seq_side.narrow(1, a * c, c), seq_side.narrow(1, b * c, c)}, 1);
}

namespace {

// [b,c,K,d] -> [b,c,K*group,d], each kv head repeated `group` times (scratch: the kernels
// want as many k/v heads as q heads).
Tensor expand_heads(const Tensor& t, std::int64_t group) {
  if (group == 1) return t;
  const auto b = t.size(0), c = t.size(1), K = t.size(2), d = t.size(3);
  return t.unsqueeze(3).expand({b, c, K, group, d}).reshape({b, c, K * group, d});
}

// [b,c,K*group,d] gradient of expanded heads -> [b,c,K,d], summed over each group.
Tensor reduce_heads(const Tensor& t, std::int64_t group) {
  if (group == 1) return t;
  const auto b = t.size(0), c = t.size(1), H = t.size(2), d = t.size(3);
  return t.reshape({b, c, H / group, group, d}).sum(3);
}

Tensor bhsd(const Tensor& t) { return t.transpose(1, 2); }

// One block: q [b,c,H,d] against k, v [b,c,H,d] (expanded), causal on the diagonal.
// Returns out [b,H,c,d] and lse [b,H,c] fp32.
std::pair<Tensor, Tensor> block_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  if (q.is_cuda()) {
    // The CUDA flash kernel (aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp,
    // mha_fwd): bottom-right causal alignment equals top-left for equal lengths.
    auto r = at::_scaled_dot_product_flash_attention(bhsd(q), bhsd(k), bhsd(v), 0.0, causal, false, scale);
    return {std::get<0>(r), std::get<1>(r)};
  }
  auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(bhsd(q), bhsd(k), bhsd(v), 0.0, causal, {}, scale);
  return {out, lse};
}

// Its gradients given the whole attention's out [b,c,H,d] and lse [b,H,c]: dq, dk, dv as
// [b,c,H,d] views.
std::tuple<Tensor, Tensor, Tensor> block_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                                  const Tensor& out, const Tensor& lse, bool causal) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor dq, dk, dv;
  if (q.is_cuda()) {
    Tensor zero = at::zeros({}, q.options().dtype(torch::kLong));
    std::tie(dq, dk, dv) = at::_scaled_dot_product_flash_attention_backward(
        bhsd(dout), bhsd(q), bhsd(k), bhsd(v), bhsd(out), lse.contiguous(), Tensor(), Tensor(), q.size(1), k.size(1), 0.0,
        causal, zero, zero, scale);
  } else {
    std::tie(dq, dk, dv) = at::_scaled_dot_product_flash_attention_for_cpu_backward(bhsd(dout), bhsd(q), bhsd(k), bhsd(v),
                                                                                    bhsd(out), lse, 0.0, causal, {}, scale);
  }
  return {bhsd(dq), bhsd(dk), bhsd(dv)};
}

// The blocks a rank computes when it holds the k/v of ring rank j: for each of its query
// halves and each of the block's halves, whether the pair is attended (kv chunk not after
// the q chunk) and causal (the same chunk).
struct BlockPair {
  int q_half, kv_half;
  bool causal;
};
std::vector<BlockPair> blocks_at(std::int64_t rank, std::int64_t holder, std::int64_t r) {
  const auto [qa, qb] = ring_chunks(rank, r);
  const auto [ka, kb] = ring_chunks(holder, r);
  std::vector<BlockPair> pairs;
  const std::int64_t qs[2] = {qa, qb}, ks[2] = {ka, kb};
  for (int qi = 0; qi < 2; ++qi)
    for (int ki = 0; ki < 2; ++ki)
      if (ks[ki] <= qs[qi]) pairs.push_back({qi, ki, ks[ki] == qs[qi]});
  return pairs;
}

// Sends `out` to the next ring rank and receives as many same-shaped tensors from the
// previous one, all at once (Gloo posts both sides before waiting, so the ring cannot
// deadlock). Returns the received tensors. REQUIRES: ring.size > 1; every tensor contiguous.
std::vector<Tensor> pass_on(const RingGroup& ring, std::vector<Tensor> out) {
  const int next = (ring.rank + 1) % ring.size, prev = (ring.rank + ring.size - 1) % ring.size;
  std::vector<Tensor> in;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::vector<Tensor> send = {out[i]};
    works.push_back(ring.group->send(send, next, static_cast<int>(i)));
    std::vector<Tensor> recv = {torch::empty_like(out[i])};
    works.push_back(ring.group->recv(recv, prev, static_cast<int>(i)));
    in.push_back(recv[0]);
  }
  for (auto& w : works) w->wait();
  return in;
}

class RingAttentionFn : public torch::autograd::Function<RingAttentionFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v, RingGroup ring) {
    const auto b = q.size(0), n = q.size(1), H = q.size(2), d = q.size(3), c = n / 2;
    const auto group = H / k.size(2);
    // Running output [b,H,n,d] and log-sum-exp [b,H,n], fp32: a partial result merged in
    // q's dtype would round at every step.
    Tensor acc = torch::zeros({b, H, n, d}, q.options().dtype(torch::kFloat));
    Tensor lse = torch::full({b, H, n}, -std::numeric_limits<float>::infinity(), q.options().dtype(torch::kFloat));
    Tensor kc = k.contiguous(), vc = v.contiguous();
    for (int t = 0; t < ring.size; ++t) {
      const std::int64_t holder = (ring.rank - t + ring.size) % ring.size;
      for (const auto& p : blocks_at(ring.rank, holder, ring.size)) {
        auto [o, l] = block_forward(q.narrow(1, p.q_half * c, c), expand_heads(kc.narrow(1, p.kv_half * c, c), group),
                                    expand_heads(vc.narrow(1, p.kv_half * c, c), group), p.causal);
        Tensor acc_q = acc.narrow(2, p.q_half * c, c), lse_q = lse.narrow(2, p.q_half * c, c);
        Tensor merged = torch::logaddexp(lse_q, l);
        acc_q.mul_(torch::exp(lse_q - merged).unsqueeze(-1)).add_(o.to(torch::kFloat) * torch::exp(l - merged).unsqueeze(-1));
        lse_q.copy_(merged);
      }
      if (t + 1 < ring.size) {
        auto in = pass_on(ring, {kc, vc});
        kc = in[0], vc = in[1];
      }
    }
    Tensor out = bhsd(acc).to(q.scalar_type()).contiguous();  // [b,n,H,d]
    acc = Tensor();
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["rank"] = static_cast<std::int64_t>(ring.rank);
    ctx->saved_data["size"] = static_cast<std::int64_t>(ring.size);
    {
      std::lock_guard<std::mutex> lock(ring_mutex_);
      ring_of_[ctx] = ring.group;
    }
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    const Tensor &q = s[0], &k = s[1], &v = s[2], &out = s[3], &lse = s[4];
    RingGroup ring{nullptr, static_cast<int>(ctx->saved_data["rank"].toInt()),
                   static_cast<int>(ctx->saved_data["size"].toInt())};
    {
      std::lock_guard<std::mutex> lock(ring_mutex_);
      ring.group = ring_of_[ctx];
      ring_of_.erase(ctx);
    }
    const auto n = q.size(1), c = n / 2, group = q.size(2) / k.size(2);
    Tensor dout = grads[0].contiguous();
    Tensor dq = torch::zeros(q.sizes(), q.options().dtype(torch::kFloat));
    Tensor kc = k.contiguous(), vc = v.contiguous();
    Tensor dk = torch::zeros(k.sizes(), k.options().dtype(torch::kFloat));
    Tensor dv = torch::zeros(v.sizes(), v.options().dtype(torch::kFloat));
    for (int t = 0; t < ring.size; ++t) {
      const std::int64_t holder = (ring.rank - t + ring.size) % ring.size;
      for (const auto& p : blocks_at(ring.rank, holder, ring.size)) {
        const auto qs = p.q_half * c, ks = p.kv_half * c;
        auto [dq_b, dk_b, dv_b] =
            block_backward(dout.narrow(1, qs, c), q.narrow(1, qs, c), expand_heads(kc.narrow(1, ks, c), group),
                           expand_heads(vc.narrow(1, ks, c), group), out.narrow(1, qs, c), lse.narrow(2, qs, c), p.causal);
        dq.narrow(1, qs, c).add_(dq_b);
        dk.narrow(1, ks, c).add_(reduce_heads(dk_b, group));
        dv.narrow(1, ks, c).add_(reduce_heads(dv_b, group));
      }
      if (ring.size == 1) break;
      // The block moves on with its gradient accumulators; after the last step only the
      // accumulators move, which brings each home to the rank that holds its k/v.
      if (t + 1 < ring.size) {
        auto in = pass_on(ring, {kc, vc, dk, dv});
        kc = in[0], vc = in[1], dk = in[2], dv = in[3];
      } else {
        auto in = pass_on(ring, {dk, dv});
        dk = in[0], dv = in[1];
      }
    }
    return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type()), Tensor()};
  }

 private:
  // The process group of each pending node: saved_data holds IValues, which cannot hold a
  // c10d::Backend. Several ranks may share a process (threads, in the tests).
  static inline std::mutex ring_mutex_;
  static inline std::map<AutogradContext*, c10::intrusive_ptr<c10d::Backend>> ring_of_;
};

}  // namespace

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const RingGroup& ring) {
  if (q.size(1) % 2 != 0)
    throw std::invalid_argument(fmt::format("ring_attention: {} local tokens are not two equal chunks", q.size(1)));
  if (ring.size > 1 && !ring.group) throw std::invalid_argument("ring_attention: a ring of several ranks needs its group");
  return RingAttentionFn::apply(q, k, v, ring);
}

}  // namespace longctx::runtime
