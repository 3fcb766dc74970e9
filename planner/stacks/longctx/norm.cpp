// RMSNorm's ops (runtime/src/norm_rope.cpp, rms_norm_forward and rms_norm_backward, through
// RmsNormFn): the layers' attention and MLP norms, the final norm, Qwen3's q and k norms.
// Footprints: footprint/norm.h.
#include "planner/stacks/longctx/emitters.h"
#include "planner/footprint/norm.h"

namespace longctx::step {

using namespace footprint;

namespace {

struct NormNames {
  const char* op;
  const char* out;
  const char* rstd;
};

// A norm over the n tokens of width h: rstd [n] fp32 and out [n, h] e.
void hidden_norm_forward(LongctxStep& sb, int scope, NormNames names, TensorId x, Phase phase, int layer, bool rc,
                         TensorId& out, TensorId& rstd) {
  const StepShapes& s = sb.shapes;
  rstd = sb.graph.tensor(Name{scope, names.rstd, rc}, s.n * 4, Category::Activations);           // [n] fp32
  out = sb.graph.tensor(Name{scope, names.out, rc}, s.n * s.h * s.e, Category::Activations);  // [n, h] e
  sb.graph.op(Name{scope, names.op, rc}, phase, layer, {x}, {out, rstd},
              {.workspace = rms_norm_forward_workspace(s, s.n, s.h), .flops = rms_norm_forward_flops(s.n, s.h),
               .traffic = rms_norm_forward_traffic(s, s.n, s.h)});
}

// The backward of a layer's norm: the input gradient d_in [n, h] e and the weight's [h] g.
TensorId layer_norm_backward(LongctxStep& sb, int l, ParamRole weight, const char* op, const char* d_in_name,
                             const char* grad_name, const char* full_grad_name, Ids reads, Ids& grad) {
  const StepShapes& s = sb.shapes;
  const TensorId d_in = sb.graph.tensor(layer_name(l, d_in_name), s.n * s.h * s.e, Category::Transient);  // [n, h] e
  const TensorId g_w = grad_piece(sb, l, full_grad_name, grad_name, s.h, grad);                           // [h] g
  const int o = sb.graph.op(layer_name(l, op), Phase::Backward, l, reads, {d_in, g_w},
                            {.workspace = rms_norm_backward_workspace(s, s.n, s.h), .flops = rms_norm_backward_flops(s.n, s.h),
                             .traffic = rms_norm_backward_traffic(s, s.n, s.h)});
  frees_param_copies(sb, l, o, {weight});  // RmsNormFn saves its weight
  return d_in;
}

}  // namespace

void attn_norm_forward(LongctxStep& sb, int l, LayerActs& a, Phase phase, bool rc) {
  hidden_norm_forward(sb, l, {"attn_norm", "attn_norm.out", "attn_norm.rstd"}, a.in, phase, l, rc, a.xn1, a.rstd1);
}

void mlp_norm_forward(LongctxStep& sb, int l, LayerActs& a, Phase phase, bool rc) {
  hidden_norm_forward(sb, l, {"mlp_norm", "mlp_norm.out", "mlp_norm.rstd"}, a.mid, phase, l, rc, a.xn2, a.rstd2);
}

void final_norm_forward(LongctxStep& sb) {
  OuterActs& o = sb.outer;
  hidden_norm_forward(sb, Name::kNone, {"loss.final_norm", "loss.final_norm.out", "loss.final_norm.rstd"}, o.final_x,
                      Phase::Loss, -1, false, o.xf, o.rstd_f);
}

void qk_norm_forward(LongctxStep& sb, int l, LayerActs& a, TensorId& q, TensorId& k, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  // q and k before the per-head norm are saved for its backward (their producer made them
  // activations).
  a.q_pre = q;
  a.k_pre = k;
  a.rstd_q = sb.graph.tensor(layer_name(l, "attn.q_norm.rstd", rc), s.n * s.H * 4, Category::Activations);  // [n*H] fp32
  a.rstd_k = sb.graph.tensor(layer_name(l, "attn.k_norm.rstd", rc), s.n * s.K * 4, Category::Activations);  // [n*K] fp32
  const TensorId qn = sb.graph.tensor(layer_name(l, "attn.q_norm.out", rc), s.n * s.H * s.d * s.e, Category::Transient);  // [n, H*d] e
  const TensorId kn = sb.graph.tensor(layer_name(l, "attn.k_norm.out", rc), s.n * s.K * s.d * s.e, Category::Transient);  // [n, K*d] e
  // Two ops, q's then k's (two calls of rms_norm): without a graph (a checkpointed layer's
  // forward) q and its rstd are freed before k's norm begins.
  sb.graph.op(layer_name(l, "attn.q_norm", rc), phase, l, {q}, {qn, a.rstd_q},
              {.workspace = rms_norm_forward_workspace(s, s.n * s.H, s.d), .flops = rms_norm_forward_flops(s.n * s.H, s.d),
               .traffic = rms_norm_forward_traffic(s, s.n * s.H, s.d)});
  sb.graph.op(layer_name(l, "attn.k_norm", rc), phase, l, {k}, {kn, a.rstd_k},
              {.workspace = rms_norm_forward_workspace(s, s.n * s.K, s.d), .flops = rms_norm_forward_flops(s.n * s.K, s.d),
               .traffic = rms_norm_forward_traffic(s, s.n * s.K, s.d)});
  q = qn;
  k = kn;
}

TensorId mlp_norm_backward(LongctxStep& sb, int l, const LayerActs& a, TensorId d_xn2, TensorId d_out, Ids& grad) {
  return layer_norm_backward(sb, l, ParamRole::MlpNorm, "mlp_norm.bwd", "mid.grad", "grad.mlp_norm", "grad.full.mlp_norm",
                             {d_xn2, a.mid, a.rstd2, d_out}, grad);
}

TensorId attn_norm_backward(LongctxStep& sb, int l, const LayerActs& a, TensorId d_xn1, TensorId d_mid, Ids& grad) {
  return layer_norm_backward(sb, l, ParamRole::AttnNorm, "attn_norm.bwd", "in.grad", "grad.attn_norm", "grad.full.attn_norm",
                             {d_xn1, a.in, a.rstd1, d_mid}, grad);
}

TensorId final_norm_backward(LongctxStep& sb, TensorId d_xf) {
  const StepShapes& s = sb.shapes;
  const OuterActs& o = sb.outer;
  // loss.final_norm.in.grad [n, h] e; the weight's gradient is part of the head's buffer.
  const TensorId d_x = sb.graph.tensor(step_name("loss.final_norm.in.grad"), s.n * s.h * s.e, Category::Transient);
  sb.graph.op(step_name("loss.final_norm.bwd"), Phase::Backward, -1, {d_xf, o.final_x, o.rstd_f}, {d_x},
              {.workspace = rms_norm_backward_workspace(s, s.n, s.h), .flops = rms_norm_backward_flops(s.n, s.h),
               .traffic = rms_norm_backward_traffic(s, s.n, s.h)});
  return d_x;
}

void qk_norm_backward(LongctxStep& sb, int l, const LayerActs& a, TensorId& dq, TensorId& dk, Ids& grad) {
  const StepShapes& s = sb.shapes;
  // Two ops in autograd's order: k's norm was made after q's in forward, so its backward runs
  // first, and its inputs (k's gradient, k before the norm, its rstd) are gone before q's
  // norm backward starts.
  // attn.k_pre.grad [n, K*d] e, the k norm's weight [d] g
  const TensorId dk_pre = sb.graph.tensor(layer_name(l, "attn.k_pre.grad"), s.n * s.K * s.d * s.e, Category::Transient);
  const TensorId g_k = grad_piece(sb, l, "grad.full.attn.k_norm", "grad.attn.k_norm", s.d, grad);
  const int ok = sb.graph.op(layer_name(l, "attn.k_norm.bwd"), Phase::Backward, l, {dk, a.k_pre, a.rstd_k}, {dk_pre, g_k},
                             {.workspace = rms_norm_backward_workspace(s, s.n * s.K, s.d),
                              .traffic = rms_norm_backward_traffic(s, s.n * s.K, s.d)});
  // attn.q_pre.grad [n, H*d] e, the q norm's weight [d] g
  const TensorId dq_pre = sb.graph.tensor(layer_name(l, "attn.q_pre.grad"), s.n * s.H * s.d * s.e, Category::Transient);
  const TensorId g_q = grad_piece(sb, l, "grad.full.attn.q_norm", "grad.attn.q_norm", s.d, grad);
  const int oq = sb.graph.op(layer_name(l, "attn.q_norm.bwd"), Phase::Backward, l, {dq, a.q_pre, a.rstd_q}, {dq_pre, g_q},
                             {.workspace = rms_norm_backward_workspace(s, s.n * s.H, s.d),
                              .traffic = rms_norm_backward_traffic(s, s.n * s.H, s.d)});
  frees_param_copies(sb, l, ok, {ParamRole::KNorm});
  frees_param_copies(sb, l, oq, {ParamRole::QNorm});
  dq = dq_pre;
  dk = dk_pre;
}

}  // namespace longctx::step
