#include "longctx/runtime/ring_attention.h"

#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "longctx/runtime/attention.h"
#include "longctx/runtime/process_group.h"
#include "exception_text.h"

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

// b,S,H,d <-> b,H,S,d views.
Tensor bhsd(const Tensor& t) { return t.transpose(1, 2); }

// [b,H,c] -> [b,c,H,1]: a per-row weight broadcast over the head dimension of [b,c,H,d].
Tensor per_row(const Tensor& t) { return t.transpose(1, 2).unsqueeze(-1); }

// One block: q [b,c,H,d] against k, v [b,c,K,d] (grouped; the kernel's device decides
// whether they are expanded, attention.h kv_for_kernel), causal on the diagonal. Merges the
// block's output into the running output acc [b,c,H,d] fp32 and log-sum-exp lse [b,H,c] fp32
// (footprint/ring_attention.h, ring_forward_workspace: the kernel's out and lse beside its
// scratch; then the merged lse, one weight, and the block's output in fp32).
void attend_block(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor& acc, const Tensor& lse) {
  const auto group = q.size(2) / k.size(2);
  FlashOut f;
  {
    Tensor ke = kv_for_kernel(k, group), ve = kv_for_kernel(v, group);  // CUDA: copies, freed here
    f = flash_forward(bhsd(q), bhsd(ke), bhsd(ve), causal);
  }
  Tensor merged = at::logaddexp(lse, f.lse);  // [b,H,c] fp32
  acc.mul_(per_row(at::sub(lse, merged).exp_()));
  f.lse.sub_(merged).exp_();  // the block's weight, in place
  acc.addcmul_(bhsd(f.out).to(torch::kFloat), per_row(f.lse));
  lse.copy_(merged);
}

// Its gradients given the whole attention's out and lse, accumulated into dq [b,c,H,d] and
// dk, dv [b,c,K,d] fp32, one at a time (footprint/ring_attention.h, ring_backward_workspace).
void block_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                    const Tensor& lse, bool causal, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const auto group = q.size(2) / k.size(2), kv_heads = k.size(2);
  Tensor dq_b, dk_b, dv_b;
  {
    Tensor ke = kv_for_kernel(k, group), ve = kv_for_kernel(v, group);
    std::tie(dq_b, dk_b, dv_b) = flash_backward(bhsd(dout), bhsd(q), bhsd(ke), bhsd(ve), bhsd(out), lse, causal);
  }
  dq.add_(bhsd(dq_b).to(torch::kFloat));
  dq_b = Tensor();
  dk.add_(reduce_kv(bhsd(dk_b), kv_heads).to(torch::kFloat));
  dk_b = Tensor();
  dv.add_(reduce_kv(bhsd(dv_b), kv_heads).to(torch::kFloat));
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

// The running output [b,n,H,d] fp32 (in fp32 runs it becomes the output itself) and the
// log-sum-exp per query half [2,b,H,c] fp32: each half's contiguous, as the CUDA backward
// reads it. A partial result merged in q's dtype would round at every step.
RingResult running_output(const Tensor& q) {
  const auto b = q.size(0), n = q.size(1), H = q.size(2), d = q.size(3), c = n / 2;
  return {torch::zeros({b, n, H, d}, q.options().dtype(torch::kFloat)),
          torch::full({2, b, H, c}, -std::numeric_limits<float>::infinity(), q.options().dtype(torch::kFloat))};
}

// Every block of this rank's queries q [b,n,H,d] against the k, v [b,n,K,d] of ring rank
// `holder`, merged into the running output and log-sum-exp.
void attend_holder(const Tensor& q, const Tensor& kh, const Tensor& vh, std::int64_t holder, const RingGroup& ring,
                   const RingResult& running) {
  const auto c = q.size(1) / 2;
  for (const auto& p : blocks_at(ring.rank, holder, ring.size))
    attend_block(q.narrow(1, p.q_half * c, c), kh.narrow(1, p.kv_half * c, c), vh.narrow(1, p.kv_half * c, c),
                 p.causal, running.out.narrow(1, p.q_half * c, c), running.lse[p.q_half]);
}

// Those blocks' gradients, accumulated into dq [b,n,H,d] and the holder's dk, dv [b,n,K,d] fp32.
void backward_holder(const Tensor& dout, const Tensor& q, const Tensor& kh, const Tensor& vh, const Tensor& out,
                     const Tensor& lse, std::int64_t holder, const RingGroup& ring, const Tensor& dq, const Tensor& dkh,
                     const Tensor& dvh) {
  const auto c = q.size(1) / 2;
  for (const auto& p : blocks_at(ring.rank, holder, ring.size)) {
    const auto qs = p.q_half * c, ks = p.kv_half * c;
    block_backward(dout.narrow(1, qs, c), q.narrow(1, qs, c), kh.narrow(1, ks, c), vh.narrow(1, ks, c),
                   out.narrow(1, qs, c), lse[p.q_half], p.causal, dq.narrow(1, qs, c), dkh.narrow(1, ks, c),
                   dvh.narrow(1, ks, c));
  }
}

// A hop in flight: `out` sent to the next ring rank, as many same-shaped tensors being
// received from the previous one. Gloo posts both sides before anyone waits, so the ring
// cannot deadlock; NCCL's sends and receives are one coalesced group (ProcessGroupNCCL's
// startCoalescing/endCoalescing: ncclGroupStart/End), as a ring of blocking sends would
// deadlock.
struct Hop {
  std::vector<Tensor> in;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  bool nccl = false;
};

// REQUIRES: ring.size > 1; every tensor contiguous, alive until the hop is landed.
Hop start_hop(const RingGroup& ring, const std::vector<Tensor>& out) {
  const int next = (ring.rank + 1) % ring.size, prev = (ring.rank + ring.size - 1) % ring.size;
  Hop h;
  h.nccl = !out.empty() && out[0].is_cuda();
  if (h.nccl) ring.group->startCoalescing();
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::vector<Tensor> send = {out[i]};
    h.works.push_back(ring.group->send(send, next, static_cast<int>(i)));
    std::vector<Tensor> recv = {torch::empty_like(out[i])};
    h.works.push_back(ring.group->recv(recv, prev, static_cast<int>(i)));
    h.in.push_back(recv[0]);
  }
  if (h.nccl) h.works = {ring.group->endCoalescing()};
  return h;
}

// Waits for one exchange of the ring within its timeout (a peer that died throws instead of
// hanging); on Gloo until its thread lets go of the tensors (process_group.h,
// wait_gloo_and_release).
void finish(const c10::intrusive_ptr<c10d::Work>& w, bool nccl, const RingGroup& ring, const char* what) {
  try {
    if (nccl)
      w->wait();
    else
      wait_gloo_and_release(w, ring.timeout);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("ring attention's {} failed on ring rank {} of {} (a peer rank died or "
                                         "stalled): {}",
                                         what, ring.rank, ring.size, exception_text(e)));
  }
}

// Waits for the hop and returns what it received.
std::vector<Tensor> land(Hop& h, const RingGroup& ring) {
  for (auto& w : h.works) finish(w, h.nccl, ring, "hop");
  h.works.clear();
  return std::move(h.in);
}

// The all-gather exchange's buffer [r, 2, b, n, K, d] in k's dtype, gathering: this rank's
// slot holds its own k and v, the others arrive while the caller computes.
struct Gather {
  Tensor all;
  c10::intrusive_ptr<c10d::Work> work;
  bool nccl = false;

  // Frees the gathered buffer. The finished work holds `all` too (Gloo's allreduce work keeps
  // its tensors, ProcessGroupNCCL's WorkNCCL its outputs): dropping the tensor alone would
  // keep the buffer until the Gather goes out of scope, beside the reduce-scatter's and the
  // outputs' allocations, where the plan has it freed (ring_backward_workspace).
  void release() {
    work.reset();
    all = Tensor();
  }
};

// REQUIRES: ring.size > 1; k and v [b, n, K, d] alike.
Gather start_gather(const RingGroup& ring, const Tensor& k, const Tensor& v) {
  std::vector<std::int64_t> sizes = {ring.size, 2};
  for (auto d : k.sizes()) sizes.push_back(d);
  Gather g;
  g.nccl = k.is_cuda();
  g.all = torch::empty(sizes, k.options());
  Tensor slot = g.all[ring.rank];
  slot[0].copy_(k);
  slot[1].copy_(v);
  g.work = start_gather_in_place(*ring.group, g.nccl ? CommBackend::Nccl : CommBackend::Gloo, ring.rank, g.all, slot);
  return g;
}

// [2, b, n, K, d] fp32: the sum over the ring's ranks of slot `ring.rank` of `all`
// [r, 2, b, n, K, d] fp32. On Gloo `all` is summed in place (it holds the whole sum after).
Tensor reduce_scatter_slots(Tensor& all, const RingGroup& ring) {
  Tensor mine = torch::empty(all[0].sizes(), all.options());
  if (all.is_cuda()) {
    finish(ring.group->_reduce_scatter_base(mine, all), true, ring, "reduce-scatter of dk/dv");
  } else {
    std::vector<Tensor> ts = {all};
    finish(ring.group->allreduce(ts), false, ring, "reduce-scatter of dk/dv");
    mine.copy_(all[ring.rank]);
  }
  return mine;
}

// The all-gather exchange (ring_attention.h). The rank's own blocks run while the gather
// travels; every other holder's come from the gathered buffer.
RingResult gathered_forward(const Tensor& q, const Tensor& k, const Tensor& v, const RingGroup& ring) {
  const RingResult running = running_output(q);
  Tensor kc = k.contiguous(), vc = v.contiguous();
  Gather g = start_gather(ring, kc, vc);
  for (int t = 0; t < ring.size; ++t) {
    const std::int64_t holder = (ring.rank - t + ring.size) % ring.size;
    if (t == 1) finish(g.work, g.nccl, ring, "all-gather of k/v");
    attend_holder(q, t == 0 ? kc : g.all[holder][0], t == 0 ? vc : g.all[holder][1], holder, ring, running);
  }
  g.release();
  return {running.out.to(q.scalar_type()), running.lse};
}

std::tuple<Tensor, Tensor, Tensor> gathered_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                                     const Tensor& v, const Tensor& out, const Tensor& lse,
                                                     const RingGroup& ring) {
  Tensor dq = torch::zeros(q.sizes(), q.options().dtype(torch::kFloat));
  Tensor kc = k.contiguous(), vc = v.contiguous();
  Gather g = start_gather(ring, kc, vc);
  Tensor dkv_all = torch::zeros(g.all.sizes(), g.all.options().dtype(torch::kFloat));  // [r, 2, b, n, K, d]
  for (int t = 0; t < ring.size; ++t) {
    const std::int64_t holder = (ring.rank - t + ring.size) % ring.size;
    if (t == 1) finish(g.work, g.nccl, ring, "all-gather of k/v");
    backward_holder(dout, q, t == 0 ? kc : g.all[holder][0], t == 0 ? vc : g.all[holder][1], out, lse, holder, ring, dq,
                    dkv_all[holder][0], dkv_all[holder][1]);
  }
  g.release();
  Tensor dkv = reduce_scatter_slots(dkv_all, ring);  // [2, b, n, K, d] fp32
  dkv_all = Tensor();
  // The outputs in the inputs' dtype, dq first (fp32 runs: the accumulators themselves).
  Tensor dq_out = dq.to(q.scalar_type());
  dq = Tensor();
  Tensor dk_out = dkv[0].to(k.scalar_type());
  Tensor dv_out = dkv[1].to(v.scalar_type());
  return {dq_out, dk_out, dv_out};
}

}  // namespace

RingResult ring_forward(const Tensor& q, const Tensor& k, const Tensor& v, const RingGroup& ring) {
  if (ring.size > 1 && ring.exchange == RingExchange::AllGather) return gathered_forward(q, k, v, ring);
  const RingResult running = running_output(q);
  Tensor kc = k.contiguous(), vc = v.contiguous();
  for (int t = 0; t < ring.size; ++t) {
    // The next block travels while this one is attended.
    std::optional<Hop> next;
    if (t + 1 < ring.size) next = start_hop(ring, {kc, vc});
    attend_holder(q, kc, vc, (ring.rank - t + ring.size) % ring.size, ring, running);
    if (next) {
      auto in = land(*next, ring);
      kc = in[0], vc = in[1];
    }
  }
  kc = vc = Tensor();
  Tensor out = running.out.to(q.scalar_type());  // [b,n,H,d]; the running output itself in fp32
  return {out, running.lse};
}

std::tuple<Tensor, Tensor, Tensor> ring_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const Tensor& out, const Tensor& lse, const RingGroup& ring) {
  if (ring.size > 1 && ring.exchange == RingExchange::AllGather)
    return gathered_backward(dout, q, k, v, out, lse, ring);
  Tensor dq = torch::zeros(q.sizes(), q.options().dtype(torch::kFloat));
  Tensor kc = k.contiguous(), vc = v.contiguous();
  Tensor dk = torch::zeros(k.sizes(), k.options().dtype(torch::kFloat));
  Tensor dv = torch::zeros(v.sizes(), v.options().dtype(torch::kFloat));
  for (int t = 0; t < ring.size; ++t) {
    // The next k/v block travels while this one's gradients are computed; the gradient
    // accumulators follow once they hold this step's sums. After the last step only the
    // accumulators move, which brings each home to the rank that holds its k/v.
    std::optional<Hop> next;
    if (t + 1 < ring.size) next = start_hop(ring, {kc, vc});
    backward_holder(dout, q, kc, vc, out, lse, (ring.rank - t + ring.size) % ring.size, ring, dq, dk, dv);
    if (ring.size == 1) break;
    if (next) {
      auto in = land(*next, ring);
      kc = in[0], vc = in[1];
    } else {
      kc = vc = Tensor();
    }
    Hop grads_hop = start_hop(ring, {dk, dv});
    auto in = land(grads_hop, ring);
    dk = in[0], dv = in[1];
  }
  kc = vc = Tensor();
  // The outputs in the inputs' dtype, one at a time (fp32 runs: the accumulators themselves).
  Tensor dq_out = dq.to(q.scalar_type());
  dq = Tensor();
  Tensor dk_out = dk.to(k.scalar_type());
  dk = Tensor();
  Tensor dv_out = dv.to(v.scalar_type());
  return {dq_out, dk_out, dv_out};
}

namespace {

class RingAttentionFn : public torch::autograd::Function<RingAttentionFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v, RingGroup ring) {
    auto [out, lse] = ring_forward(q, k, v, ring);
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["rank"] = static_cast<std::int64_t>(ring.rank);
    ctx->saved_data["size"] = static_cast<std::int64_t>(ring.size);
    ctx->saved_data["timeout_ms"] = static_cast<std::int64_t>(ring.timeout.count());
    ctx->saved_data["exchange"] = static_cast<std::int64_t>(ring.exchange);
    {
      std::lock_guard<std::mutex> lock(ring_mutex_);
      ring_of_[ctx] = ring.group;
    }
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    RingGroup ring{nullptr, static_cast<int>(ctx->saved_data["rank"].toInt()),
                   static_cast<int>(ctx->saved_data["size"].toInt()),
                   std::chrono::milliseconds(ctx->saved_data["timeout_ms"].toInt()),
                   static_cast<RingExchange>(ctx->saved_data["exchange"].toInt())};
    {
      std::lock_guard<std::mutex> lock(ring_mutex_);
      ring.group = ring_of_[ctx];
      ring_of_.erase(ctx);
    }
    auto [dq, dk, dv] = ring_backward(grads[0].contiguous(), s[0], s[1], s[2], s[3], s[4], ring);
    return {dq, dk, dv, Tensor()};
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
