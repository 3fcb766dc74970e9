// transformers' projections (at::linear as nn.Linear runs it) and RoPE
// (modeling_llama.py, apply_rotary_pos_emb), and LlamaAttention's q, k and v before the
// attention kernel: what each op allocates and saves, forward then backward. Footprints:
// footprint/hf.h.
#include "planner/footprint/hf.h"
#include "planner/footprint/zero.h"
#include "planner/stacks/blocks/hf_layer.h"

namespace longctx::step::blocks {

using namespace footprint;
using namespace footprint::hf;

namespace {

// A layer's projection: matmul flops of [n, in] x [in, out].
double proj_flops(const StepShapes& s, std::int64_t in, std::int64_t out) { return matmul_flops(s.n, in, out); }

}  // namespace

TensorId project(HfStep& sb, int l, const char* name, const char* out_name, TensorId x, std::int64_t in,
                 std::int64_t out, Phase phase, bool rc, Category category) {
  const StepShapes& s = sb.shapes;
  // Per-op selective checkpointing keeps every odd-numbered aten.mm's output (OpSac): the
  // recompute takes the kept tensor and runs no matmul.
  OpSac& sac = sb.op_sac;
  const bool kept = sac.mode != OpSac::Mode::Off && ++sac.mm_count % 2 == 1;
  if (kept && sac.mode == OpSac::Mode::Replay) return sac.take();
  const TensorId y = sb.graph.tensor(layer_name(l, out_name, rc), s.n * out * s.e, kept ? kAct : category);
  sb.graph.op(layer_name(l, name, rc), phase, l, {x}, {y}, {.flops = proj_flops(s, in, out)});
  if (kept) sac.kept.push_back(y);
  return y;
}

// MmBackward0 of at::linear (AddmmBackward0 with a bias): the weight's gradient [out, in]
// (+ bias [out]) e, kept by AccumulateGrad, and, unless the caller adds it into a gradient it
// already holds (`into`), the input's gradient [n, in] e.
TensorId project_backward(HfStep& sb, int l, const char* name, const char* grad_name, const char* in_grad_name,
                          TensorId d_y, TensorId x, std::int64_t in, std::int64_t out, bool bias, Ids& grads,
                          TensorId into) {
  const StepShapes& s = sb.shapes;
  const TensorId g_w = sb.graph.tensor(layer_name(l, grad_name), (in * out + (bias ? out : 0)) * s.e, Category::Grads);
  grads.push_back(g_w);
  Ids reads = {d_y, x};
  if (into >= 0) {
    reads.push_back(into);
    // The input's gradient [n, in] e, added into `into` in place and freed.
    sb.graph.op(layer_name(l, name), kB, l, reads, {g_w}, {.workspace = s.n * in * s.e, .flops = 2 * proj_flops(s, in, out)});
    grad_ready(sb, g_w, in * out + (bias ? out : 0));
    return into;
  }
  const TensorId d_x = sb.graph.tensor(layer_name(l, in_grad_name), s.n * in * s.e, kTr);
  sb.graph.op(layer_name(l, name), kB, l, reads, {d_x, g_w}, {.flops = 2 * proj_flops(s, in, out)});
  grad_ready(sb, g_w, in * out + (bias ? out : 0));
  return d_x;
}

// apply_rotary_pos_emb for q or k of `heads` heads: (x * cos) + (rotate_half(x) * sin).
TensorId transformers_rope(HfStep& sb, int l, const char* name, const char* out_name, Ids reads, std::int64_t heads,
                           Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  const TensorId y = sb.graph.tensor(layer_name(l, out_name, rc), s.n * heads * s.d * s.e, kAct);
  sb.graph.op(layer_name(l, name, rc), phase, l, reads, {y},
              {.workspace = rope_workspace(s, heads), .flops = 3.0 * double(s.n * heads * s.d)});
  return y;
}

TensorId transformers_rope_backward(HfStep& sb, int l, const char* name, const char* out_name, TensorId grad,
                                    std::int64_t heads, const HfLayerActs&) {
  const StepShapes& s = sb.shapes;
  const HfModelActs& m = sb.model;
  const TensorId d_x = sb.graph.tensor(layer_name(l, out_name), s.n * heads * s.d * s.e, kTr);
  sb.graph.op(layer_name(l, name), kB, l, {grad, m.cos, m.sin}, {d_x},
              {.workspace = rope_workspace(s, heads), .flops = 3.0 * double(s.n * heads * s.d)});
  return d_x;
}

TensorId head_major_copy(HfStep& sb, int l, const char* name, const char* out_name, TensorId grad, std::int64_t heads) {
  const StepShapes& s = sb.shapes;
  const TensorId c = sb.graph.tensor(layer_name(l, out_name), s.n * heads * s.d * s.e, kTr);
  sb.graph.op(layer_name(l, name), kB, l, {grad}, {c});
  return c;
}

// LlamaAttention.forward up to the kernel: q_proj (Qwen3Attention: then q_norm over each
// head of q_proj(x).view(b, S, H, d)), k_proj (and k_norm), v_proj, and the rotation of q and k.
void transformers_project_qkv(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  const HfModelActs& m = sb.model;
  const std::int64_t qw = s.H * s.d, kw = s.K * s.d;
  TensorId q = project(sb, l, "attn.q_proj", "attn.q", a.norm1.y, s.h, qw, phase, rc);
  if (s.qk_norm) {
    a.q_norm = sb.ops.norm_forward(sb, head_norm_spec(s, l, true), q, phase, rc);
    q = a.q_norm.y;
  }
  TensorId k = project(sb, l, "attn.k_proj", "attn.k", a.norm1.y, s.h, kw, phase, rc);
  if (s.qk_norm) {
    a.k_norm = sb.ops.norm_forward(sb, head_norm_spec(s, l, false), k, phase, rc);
    k = a.k_norm.y;
  }
  a.v = project(sb, l, "attn.v_proj", "attn.v", a.norm1.y, s.h, kw, phase, rc);
  a.q = sb.ops.rope(sb, l, "attn.rope_q", "attn.q_rotated", {q, m.cos, m.sin}, s.H, phase, rc);
  // q's projection lives until apply_rotary_pos_emb returns, after k's rotation.
  a.k = sb.ops.rope(sb, l, "attn.rope_k", "attn.k_rotated", {k, m.cos, m.sin, q}, s.K, phase, rc);
}

TensorId project_qkv_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId dq, TensorId dk, TensorId dv,
                              bool k_head_major, bool qv_head_major, Ids& grads) {
  const StepShapes& s = sb.shapes;
  const std::int64_t qw = s.H * s.d, kw = s.K * s.d;
  // The engine runs k's rotation first (created last), then q's; then the projections.
  TensorId dk_pre = sb.ops.rope_backward(sb, l, "attn.rope_k.bwd", "attn.k.grad.rotated", dk, s.K, a);
  TensorId dq_pre = sb.ops.rope_backward(sb, l, "attn.rope_q.bwd", "attn.q.grad.rotated", dq, s.H, a);
  if (k_head_major) dk_pre = head_major_copy(sb, l, "attn.k.view.bwd", "attn.k.grad.contiguous", dk_pre, s.K);
  if (s.qk_norm) {
    dk_pre = sb.ops.norm_backward(sb, head_norm_spec(s, l, false), a.k_norm, dk_pre, -1, grads);
    dq_pre = sb.ops.norm_backward(sb, head_norm_spec(s, l, true), a.q_norm, dq_pre, -1, grads);
  }
  const TensorId x = a.norm1.y;
  const TensorId d_xk = project_backward(sb, l, "attn.k_proj.bwd", "grad.attn.k", "attn_norm.out.grad.k", dk_pre, x, s.h,
                                         kw, s.qkv_bias, grads);
  if (qv_head_major) dv = head_major_copy(sb, l, "attn.v.view.bwd", "attn.v.grad.contiguous", dv, s.K);
  const TensorId d_xv = project_backward(sb, l, "attn.v_proj.bwd", "grad.attn.v", "attn_norm.out.grad.v", dv, x, s.h,
                                         kw, s.qkv_bias, grads);
  // The first two input gradients meet in a new buffer; the third is added into it in place.
  const TensorId d_x = sb.graph.tensor(layer_name(l, "attn_norm.out.grad"), s.n * s.h * s.e, kTr);
  sb.graph.op(layer_name(l, "attn.proj.grad_sum"), kB, l, {d_xk, d_xv}, {d_x});
  if (qv_head_major) dq_pre = head_major_copy(sb, l, "attn.q.view.bwd", "attn.q.grad.contiguous", dq_pre, s.H);
  project_backward(sb, l, "attn.q_proj.bwd", "grad.attn.q", "", dq_pre, x, s.h, qw, s.qkv_bias, grads, d_x);
  return d_x;
}

}  // namespace longctx::step::blocks
