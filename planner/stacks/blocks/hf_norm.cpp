// transformers' LlamaRMSNorm (models/llama/modeling_llama.py, LlamaRMSNorm.forward) as
// autograd runs it, and the names of every RMSNorm call of a decoder model. Footprints:
// footprint/hf.h.
#include "planner/footprint/hf.h"
#include "planner/stacks/blocks/hf_layer.h"

namespace longctx::step::blocks {

using namespace footprint::hf;

NormSpec layer_norm_spec(const StepShapes& s, int l, bool mlp) {
  return {l, l, s.n, s.h,
          mlp ? LONGCTX_HF_NORM_NAMES("mlp_norm", "grad.mlp_norm", "mid.grad")
              : LONGCTX_HF_NORM_NAMES("attn_norm", "grad.attn_norm", "in.grad")};
}

NormSpec final_norm_spec(const StepShapes& s) {
  return {Name::kNone, -1, s.n, s.h, LONGCTX_HF_NORM_NAMES("loss.final_norm", "head.grad.final_norm", "loss.final_norm.in.grad")};
}

// Qwen3's per-head norm of q or k: rows n*heads of width d; its weight [d].
NormSpec head_norm_spec(const StepShapes& s, int l, bool q) {
  return {l, l, s.n * (q ? s.H : s.K), s.d,
          q ? LONGCTX_HF_NORM_NAMES("attn.q_norm", "grad.attn.q_norm", "attn.q.grad")
            : LONGCTX_HF_NORM_NAMES("attn.k_norm", "grad.attn.k_norm", "attn.k.grad")};
}

// forward (LlamaRMSNorm.forward):
//   x32 = x.to(float32)                 bf16 only: [rows, width] fp32, saved (pow, mul)
//   variance = x32.pow(2).mean(-1)      the square [rows, width] fp32 freed by mean; variance
//                                       [rows] fp32 held until the function returns
//   rstd = rsqrt(variance + eps)        [rows] fp32, saved
//   xr = x32 * rstd                     [rows, width] fp32, saved by the weight's mul (fp32)
//   xr = xr.to(input_dtype)             bf16 only: [rows, width] e, saved; the fp32 one freed
//   y = weight * xr                     [rows, width] e
NormActs llama_norm_forward(HfStep& sb, const NormSpec& ns, TensorId x, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  const std::int64_t rw = ns.rows * ns.width;
  NormActs a;
  a.x = x;
  a.x32 = x;
  if (s.e != 4) {
    a.x32 = sb.graph.tensor(Name{ns.scope, ns.names.x32, rc}, rw * 4, kAct);
    sb.graph.op(Name{ns.scope, ns.names.to_fp32, rc}, phase, ns.layer, {x}, {a.x32});
  }
  const TensorId variance = sb.graph.tensor(Name{ns.scope, ns.names.variance, rc}, ns.rows * 4, kTr);
  a.rstd = sb.graph.tensor(Name{ns.scope, ns.names.rstd, rc}, ns.rows * 4, kAct);
  sb.graph.op(Name{ns.scope, ns.names.stats, rc}, phase, ns.layer, {a.x32}, {variance, a.rstd},
              {.workspace = norm_square_bytes(ns.rows, ns.width), .flops = 3.0 * double(rw)});
  a.xr = sb.graph.tensor(Name{ns.scope, ns.names.normed32, rc}, rw * 4, kAct);
  sb.graph.op(Name{ns.scope, ns.names.scale, rc}, phase, ns.layer, {a.x32, a.rstd}, {a.xr}, {.flops = double(rw)});
  if (s.e != 4) {
    const TensorId cast = sb.graph.tensor(Name{ns.scope, ns.names.normed, rc}, rw * s.e, kAct);
    sb.graph.op(Name{ns.scope, ns.names.to_dtype, rc}, phase, ns.layer, {a.xr}, {cast});
    a.xr = cast;
  }
  a.y = sb.graph.tensor(Name{ns.scope, ns.names.out, rc}, rw * s.e, kAct);
  sb.graph.op(Name{ns.scope, ns.names.weight, rc}, phase, ns.layer, {a.xr, variance}, {a.y}, {.flops = double(rw)});
  return a;
}

// backward, node by node as the engine runs them; `residual` is the gradient the residual
// stream already holds for x (or -1): autograd adds the norm's gradient into one of the two
// in place and frees the other, here at the node whose output meets it.
//   MulBackward0 (weight * xr)   d_xr [rows, width] e and the weight's [width] e (beside
//                                grad * xr before its sum); grad and xr freed
//   ToCopyBackward0              bf16 only: d_xr to fp32 [rows, width] fp32
//   then norm_statistics_backward
TensorId llama_norm_backward(HfStep& sb, const NormSpec& ns, const NormActs& a, TensorId grad, TensorId residual,
                             Ids& grads) {
  const StepShapes& s = sb.shapes;
  const std::int64_t rw = ns.rows * ns.width;
  const TensorId g_w = sb.graph.tensor(Name{ns.scope, ns.names.weight_grad, false}, ns.width * s.e, Category::Grads);
  grads.push_back(g_w);
  TensorId d_xr = sb.graph.tensor(Name{ns.scope, ns.names.normed_grad, false}, rw * s.e, kTr);
  sb.graph.op(Name{ns.scope, ns.names.weight_bwd, false}, kB, ns.layer, {grad, a.xr}, {d_xr, g_w},
              {.workspace = norm_weight_backward_workspace(s, ns.rows, ns.width), .flops = 2.0 * double(rw)});
  if (s.e != 4) {
    const TensorId up = sb.graph.tensor(Name{ns.scope, ns.names.normed_grad32, false}, rw * 4, kTr);
    sb.graph.op(Name{ns.scope, ns.names.to_dtype_bwd, false}, kB, ns.layer, {d_xr}, {up});
    d_xr = up;
  }
  grad_ready(sb, g_w, ns.width);
  return norm_statistics_backward(sb, ns, a, d_xr, residual);
}

//   MulBackward0 (x32 * rstd)    d_x32 [rows, width] fp32 and d_rstd [rows] fp32 (beside
//                                d_xr * x32 before its row sums)
//   RsqrtBackward0, MeanBackward1  d_variance [rows] fp32, then d_square expanded [rows, width] fp32
//   PowBackward0                 its product (workspace, pow_backward) added into d_x32
//   ToCopyBackward0              bf16 only: d_x32 to the input's dtype [rows, width] e
TensorId norm_statistics_backward(HfStep& sb, const NormSpec& ns, const NormActs& a, TensorId d_xr, TensorId residual) {
  const StepShapes& s = sb.shapes;
  const std::int64_t rw = ns.rows * ns.width;
  const TensorId d_x32 = sb.graph.tensor(Name{ns.scope, ns.names.x32_grad, false}, rw * 4, kTr);
  const TensorId d_rstd = sb.graph.tensor(Name{ns.scope, ns.names.rstd_grad, false}, ns.rows * 4, kTr);
  Ids scale_reads = {d_xr, a.x32, a.rstd};
  if (s.e == 4 && residual >= 0) scale_reads.push_back(residual);  // fp32: the residual meets d_x32 here
  sb.graph.op(Name{ns.scope, ns.names.scale_bwd, false}, kB, ns.layer, scale_reads, {d_x32, d_rstd},
              {.workspace = norm_scale_backward_workspace(ns.rows, ns.width), .flops = 3.0 * double(rw)});
  const TensorId d_var = sb.graph.tensor(Name{ns.scope, ns.names.variance_grad, false}, ns.rows * 4, kTr);
  sb.graph.op(Name{ns.scope, ns.names.rsqrt_bwd, false}, kB, ns.layer, {d_rstd, a.rstd}, {d_var},
              {.workspace = norm_rsqrt_backward_workspace(ns.rows)});
  const TensorId d_sq = sb.graph.tensor(Name{ns.scope, ns.names.square_grad, false}, rw * 4, kTr);
  sb.graph.op(Name{ns.scope, ns.names.mean_bwd, false}, kB, ns.layer, {d_var}, {d_sq});
  sb.graph.op(Name{ns.scope, ns.names.pow_bwd, false}, kB, ns.layer, {d_sq, a.x32, d_x32},
              {}, {.workspace = norm_pow_backward_workspace(ns.rows, ns.width), .flops = 3.0 * double(rw)});
  if (s.e == 4) return d_x32;
  const TensorId d_x = sb.graph.tensor(Name{ns.scope, ns.names.in_grad, false}, rw * s.e, kTr);
  Ids cast_reads = {d_x32};
  if (residual >= 0) cast_reads.push_back(residual);  // bf16: the residual meets the cast gradient
  sb.graph.op(Name{ns.scope, ns.names.to_fp32_bwd, false}, kB, ns.layer, cast_reads, {d_x});
  return d_x;
}

}  // namespace longctx::step::blocks
