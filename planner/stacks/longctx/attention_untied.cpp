// Untied Ulysses: attention in stages of c heads per rank, projection, qk norm, RoPE, the
// all-to-alls and the kernel inside one op each way (runtime/src/attention.cpp,
// HeadChunkedAttentionFn::forward and ::backward). Forward, then backward. Footprints:
// footprint/attention_untied.h.
#include "planner/stacks/longctx/emitters.h"
#include "planner/footprint/zero.h"
#include "planner/footprint/attention.h"
#include "planner/footprint/attention_untied.h"

namespace longctx::step {

using namespace footprint;

namespace {

// Kernel launches of the staged schedule, `per_stage` each stage; with Ulysses and no ring,
// the all-to-alls it issues (runtime/src/attention.cpp, HeadChunkedAttentionFn): each stage
// exchanges `per_stage_exchanges` (forward: q and the output; backward: q, the output and its
// gradient, dq), each kv load `per_load_exchanges` (forward: k and v; backward: k, v, dk, dv).
int stage_launches(const StepShapes& s, std::int64_t c, int per_stage, int per_stage_exchanges, int per_load_exchanges) {
  if (s.u > 1 && s.r == 1)
    return static_cast<int>(per_stage_exchanges * untied_stages(s, c) + per_load_exchanges * untied_kv_loads(s, c));
  return per_stage * static_cast<int>(untied_stages(s, c));
}

// The staged op's traffic: the all-to-alls alone, or with a ring its hops beside them
// (`overlapped` of the ring's bytes travel while blocks compute), counted over the u*r
// ranks the ring spans.
void set_stage_comm(LongctxStep& sb, int op, double all_to_all, double ring, double overlapped) {
  const StepShapes& s = sb.shapes;
  if (s.r > 1)
    sb.graph.set_comm(op, CommKind::SendRecv, all_to_all + ring, static_cast<int>(s.u * s.r), overlapped);
  else if (s.u > 1)
    sb.graph.set_comm(op, CommKind::AllToAll, all_to_all, static_cast<int>(s.u));
}

}  // namespace

void untied_attention_forward(LongctxStep& sb, int l, LayerActs& a, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  const std::int64_t c = sb.parallel.head_chunk;
  // The op keeps only its output and log-sum-exp: backward recomputes q, k and v.
  a.o_loc = sb.graph.tensor(layer_name(l, "attn.out", rc), s.n * s.H * s.d * s.e, Category::Activations);  // [n, H*d] e
  a.lse = sb.graph.tensor(layer_name(l, "attn.flash.lse", rc), s.n * s.H * 4, Category::Activations);     // [b, hl, S] fp32
  const double projection = matmul_flops(s.n, s.h, (s.H + 2 * s.K) * s.d);
  const double flops = projection + attention_flops(s, s.hl), kernel = projection + attention_kernel_flops(s, s.hl);
  const int o = sb.graph.op(layer_name(l, "attn.untied", rc), phase, l, {a.xn1}, {a.o_loc, a.lse},
                            {.workspace = untied_forward_workspace(s, c), .flops = flops, .kernel_flops = kernel, .kind = OpKind::Attention,
                             .launches = stage_launches(s, c, 4, 2, 2), .repeats = static_cast<int>(untied_stages(s, c)), .projects = true});
  set_stage_comm(sb, o, untied_forward_sent_bytes(s), untied_ring_forward_sent_bytes(s, c),
                 untied_ring_forward_overlapped_bytes(s, c));
}

void untied_attention_backward(LongctxStep& sb, int l, const LayerActs& a, TensorId d_oloc, TensorId d_xn1, Ids& grad) {
  const StepShapes& s = sb.shapes;
  const std::int64_t c = sb.parallel.head_chunk;
  const double projection = matmul_flops(s.n, s.h, (s.H + 2 * s.K) * s.d);
  // The projection's two gradient matmuls and its recompute, and the flash backward (2.5x the
  // forward, its own recompute of the scores included). The forward kernel is not run again:
  // each stage's output and log-sum-exp are saved (runtime/src/attention.cpp,
  // HeadChunkedAttentionFn::backward calls flash_backward or ring_backward only).
  const double flops = 2 * projection + projection + 2.5 * attention_flops(s, s.hl);
  const double kernel = 3 * projection + 2.5 * attention_kernel_flops(s, s.hl);
  // wq, wk, wv (and the q and k norms, the q/k/v biases) in one gradient [h * (H + 2K) * d (+ 2d) (+ (H + 2K) * d)] g
  const std::int64_t elems = s.h * (s.H + 2 * s.K) * s.d + (s.qk_norm ? 2 * s.d : 0) +
                             footprint::bias_params(s, {ParamRole::Bq, ParamRole::Bk, ParamRole::Bv});
  const TensorId g_qkv = grad_piece(sb, l, "grad.full.attn.qkv", "grad.attn.qkv", elems, grad);
  const int o = sb.graph.op(layer_name(l, "attn.untied.bwd"), Phase::Backward, l, {d_oloc, a.xn1, a.o_loc, a.lse},
                            {d_xn1, g_qkv},
                            {.workspace = untied_backward_workspace(s, c), .flops = flops, .kernel_flops = kernel, .kind = OpKind::Attention,
                             .launches = stage_launches(s, c, 10, 4, 4), .repeats = static_cast<int>(untied_stages(s, c)), .projects = true});
  set_stage_comm(sb, o, untied_backward_sent_bytes(s), untied_ring_backward_sent_bytes(s, c),
                 untied_ring_forward_overlapped_bytes(s, c));
  // HeadChunkedAttentionFn saves the projections' weights and the q and k norms.
  frees_param_copies(sb, l, o, {ParamRole::Wq, ParamRole::Wk, ParamRole::Wv, ParamRole::QNorm, ParamRole::KNorm});
}

}  // namespace longctx::step
