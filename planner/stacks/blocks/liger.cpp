// Liger-Kernel's RMSNorm, RoPE and SwiGLU (blocks/liger.h): one fused kernel each way, and
// backward kernels that write their gradients into buffers they already hold.
#include "planner/stacks/blocks/liger.h"

#include "planner/footprint/liger.h"
#include "planner/stacks/blocks/hf_layer.h"

namespace longctx::step::blocks {

namespace {

// rms_norm_forward: Y [rows, width] e and RSTD [rows] fp32, new; LigerRMSNormFunction saves
// the input, the weight and RSTD (not Y).
NormActs norm_forward(HfStep& sb, const NormSpec& ns, TensorId x, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  NormActs a;
  a.x = x;
  a.rstd = sb.graph.tensor(Name{ns.scope, ns.names.rstd, rc}, ns.rows * 4, kAct);
  a.y = sb.graph.tensor(Name{ns.scope, ns.names.out, rc}, ns.rows * ns.width * s.e, kAct);
  sb.graph.op(Name{ns.scope, ns.names.stats, rc}, phase, ns.layer, {x}, {a.y, a.rstd},
              {.flops = 4.0 * double(ns.rows * ns.width)});
  return a;
}

// rms_norm_backward with in_place=True: dX is written into dY, the weight's gradient summed
// from the per-SM partials. `residual`, the gradient the residual stream holds for x, then
// meets dX: autograd adds one into the other in place and frees it.
TensorId norm_backward(HfStep& sb, const NormSpec& ns, const NormActs& a, TensorId grad, TensorId residual, Ids& grads) {
  const StepShapes& s = sb.shapes;
  const TensorId g_w = sb.graph.tensor(Name{ns.scope, ns.names.weight_grad, false}, ns.width * s.e, Category::Grads);
  grads.push_back(g_w);
  Ids reads = {grad, a.x, a.rstd};
  if (residual >= 0) reads.push_back(residual);
  sb.graph.op(Name{ns.scope, ns.names.weight_bwd, false}, kB, ns.layer, reads, {g_w},
              {.workspace = footprint::liger::norm_backward_workspace(s, ns.width),
               .flops = 6.0 * double(ns.rows * ns.width)});
  grad_ready(sb, g_w, ns.width);
  return grad;
}

// LigerRopeFunction rotates the projection's output in place (its [b, S, heads, d] layout
// needs no copy) and saves only cos and sin.
TensorId rope(HfStep& sb, int l, const char* name, const char*, Ids reads, std::int64_t heads, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  sb.graph.op(layer_name(l, name, rc), phase, l, reads, {}, {.flops = 3.0 * double(s.n * heads * s.d)});
  return *reads.begin();
}

// rope_backward: rotates the gradient in place.
TensorId rope_backward(HfStep& sb, int l, const char* name, const char*, TensorId grad, std::int64_t heads,
                       const HfLayerActs&) {
  const StepShapes& s = sb.shapes;
  sb.graph.op(layer_name(l, name), kB, l, {grad, sb.model.cos, sb.model.sin}, {},
              {.flops = 3.0 * double(s.n * heads * s.d)});
  return grad;
}

// LigerSwiGLUMLP.forward: down_proj(LigerSiLUMulFunction(gate_proj(x), up_proj(x))): the
// product c [n, I] e is new; the function saves gate and up (not silu(gate)), down_proj c. The
// arctic stack recomputes a layer whole (reentrant checkpointing): `whole` is always true.
void mlp_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool /*whole*/) {
  const StepShapes& s = sb.shapes;
  const std::int64_t ni = s.n * s.I;
  const TensorId x = a.norm2.y;
  a.gate = project(sb, l, "mlp.gate_proj", "mlp.gate", x, s.h, s.I, phase, rc);
  a.up = project(sb, l, "mlp.up_proj", "mlp.up", x, s.h, s.I, phase, rc);
  a.prod = sb.graph.tensor(layer_name(l, "mlp.prod", rc), ni * s.e, kAct);
  sb.graph.op(layer_name(l, "mlp.swiglu", rc), phase, l, {a.gate, a.up}, {a.prod}, {.flops = 5.0 * double(ni)});
  a.down = project(sb, l, "mlp.down_proj", "mlp.down", a.prod, s.I, s.h, phase, rc, kTr);
  sb.graph.add_input(sb.graph.last_op(), x);  // the layer's hidden_states, until the MLP returns
}

// swiglu_backward writes d_gate into gate and d_up into up in place: no new [n, I].
TensorId mlp_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_out, Ids& grads) {
  const StepShapes& s = sb.shapes;
  const std::int64_t ni = s.n * s.I;
  const TensorId d_prod = project_backward(sb, l, "mlp.down_proj.bwd", "grad.mlp.down", "mlp.prod.grad", d_out, a.prod,
                                           s.I, s.h, s.mlp_bias, grads);
  sb.graph.op(layer_name(l, "mlp.swiglu.bwd"), kB, l, {d_prod, a.gate, a.up}, {}, {.flops = 10.0 * double(ni)});
  const TensorId x = a.norm2.y;
  const TensorId d_xu = project_backward(sb, l, "mlp.up_proj.bwd", "grad.mlp.up", "mlp_norm.out.grad.up", a.up, x, s.h,
                                         s.I, s.mlp_bias, grads);
  const TensorId d_xg = project_backward(sb, l, "mlp.gate_proj.bwd", "grad.mlp.gate", "mlp_norm.out.grad.gate", a.gate,
                                         x, s.h, s.I, s.mlp_bias, grads);
  const TensorId d_x = sb.graph.tensor(layer_name(l, "mlp_norm.out.grad"), s.n * s.h * s.e, kTr);
  sb.graph.op(layer_name(l, "mlp.proj.grad_sum"), kB, l, {d_xu, d_xg}, {d_x});
  return d_x;
}

}  // namespace

const LayerOps kLigerOps = {
    .norm_forward = norm_forward,
    .norm_backward = norm_backward,
    .rope = rope,
    .rope_backward = rope_backward,
    .project_qkv = transformers_project_qkv,
    .attention_forward = transformers_attention_forward,
    .attention_backward = transformers_attention_backward,
    .mlp_forward = mlp_forward,
    .mlp_backward = mlp_backward,
};

}  // namespace longctx::step::blocks
