// One decoder layer (runtime/src/llama_step.cpp, LlamaStep::layer_forward): attention norm,
// attention (whole or head-chunked), output projection and residual, MLP norm, MLP and
// residual; then the same in reverse for its backward. RoPE's tables, which every layer's
// attention reads, are built here too.
#include "planner/stacks/longctx/emitters.h"
#include "planner/footprint/zero.h"
#include "planner/footprint/attention.h"

namespace longctx::step {

using namespace footprint;

void rope_tables(StepBuild& sb) {
  // cos, sin [S/u, d/2] e each, built once for the run.
  sb.graph.persistent(step_name("rope.tables"), rope_tables_bytes(sb.shapes), Category::Activations, Place::Device);
}

LayerActs layer_forward(LongctxStep& sb, int l, TensorId x, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  const Category act = Category::Activations;
  LayerActs a;
  a.in = x;
  attn_norm_forward(sb, l, a, phase, rc);
  if (sb.parallel.head_chunk > 0) {
    untied_attention_forward(sb, l, a, phase, rc);
  } else {
    ulysses_attention_forward(sb, l, a, phase, rc);
  }
  const TensorId o = sb.graph.tensor(layer_name(l, "attn.o_proj.out", rc), s.n * s.h * s.e, Category::Transient);  // [n, h] e
  sb.graph.op(layer_name(l, "attn.o_proj", rc), phase, l, {a.o_loc}, {o}, {.flops = matmul_flops(s.n, s.H * s.d, s.h)});
  a.mid = sb.graph.tensor(layer_name(l, "mid", rc), s.n * s.h * s.e, act);  // [n, h] e
  sb.graph.op(layer_name(l, "attn.residual", rc), phase, l, {x, o}, {a.mid});

  mlp_norm_forward(sb, l, a, phase, rc);
  // A recompute runs the whole layer, as reentrant checkpointing does: the recomputed
  // output is the root the layer's backward starts from, held until that backward ends.
  const TensorId down = mlp_forward(sb, l, a, phase, rc);
  // The next layer's input, or the last layer's output [n, h] e
  const Name out = l + 1 < s.layers ? layer_name(l + 1, "in", rc) : step_name("loss.final_norm.in", rc);
  a.out = sb.graph.tensor(out, s.n * s.h * s.e, act);
  a.last_forward_op = sb.graph.op(layer_name(l, "mlp.residual", rc), phase, l, {a.mid, down}, {a.out});
  return a;
}

TensorId layer_backward(LongctxStep& sb, int l, const LayerActs& a, TensorId d_out, int& compute_end) {
  const StepShapes& s = sb.shapes;
  const Category tr = Category::Transient;
  Ids grad;  // the layer's gradient, piece by piece
  const TensorId d_xn2 = mlp_backward(sb, l, a, d_out, grad);
  const TensorId d_mid = mlp_norm_backward(sb, l, a, d_xn2, d_out, grad);
  const TensorId d_oloc = sb.graph.tensor(layer_name(l, "attn.out.grad"), s.n * s.H * s.d * s.e, tr);  // [n, H*d] e
  const TensorId g_o = grad_piece(sb, l, "grad.full.attn.o", "grad.attn.o",
                                  s.H * s.d * s.h + footprint::bias_params(s, {ParamRole::Bo}), grad);  // [h * H*d (+ h)] g
  const int o_proj = sb.graph.op(layer_name(l, "attn.o_proj.bwd"), Phase::Backward, l, {d_mid, a.o_loc}, {d_oloc, g_o},
                                 {.flops = matmul_flops(s.n, s.H * s.d, s.h) * 2});
  frees_param_copies(sb, l, o_proj, {ParamRole::Wo});  // at::linear's node saves the weight, not the bias
  const TensorId d_xn1 = sb.graph.tensor(layer_name(l, "attn_norm.out.grad"), s.n * s.h * s.e, tr);  // [n, h] e
  if (sb.parallel.head_chunk > 0) {
    untied_attention_backward(sb, l, a, d_oloc, d_xn1, grad);
  } else {
    ulysses_attention_backward(sb, l, a, d_oloc, d_xn1, grad);
  }
  const TensorId d_in = attn_norm_backward(sb, l, a, d_xn1, d_mid, grad);
  compute_end = sb.graph.last_op();
  finish_group_grad(sb, l, grad, Phase::Backward);
  return d_in;
}

}  // namespace longctx::step
