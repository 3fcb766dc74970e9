// torch's RMSNorm (blocks/torch_norm.h): on the CPU the composite (torch/_decomp/
// decompositions.py mirrors it), on CUDA the fused kernel.
#include "planner/stacks/blocks/torch_norm.h"

#include "planner/footprint/hf.h"
#include "planner/stacks/blocks/hf_layer.h"

namespace longctx::step::blocks {

using namespace footprint::hf;

namespace {

// The fused kernel's backward (_fused_rms_norm_backward): the input's gradient [rows, width] e
// (the residual's added into it) and the weight's [width] e.
TensorId fused_backward(HfStep& sb, const NormSpec& ns, const NormActs& a, TensorId grad, TensorId residual, Ids& grads) {
  const StepShapes& s = sb.shapes;
  const std::int64_t rw = ns.rows * ns.width;
  const TensorId g_w = sb.graph.tensor(Name{ns.scope, ns.names.weight_grad, false}, ns.width * s.e, Category::Grads);
  grads.push_back(g_w);
  const TensorId d_x = sb.graph.tensor(Name{ns.scope, ns.names.in_grad, false}, rw * s.e, kTr);
  Ids reads = {grad, a.x, a.rstd};
  if (residual >= 0) reads.push_back(residual);
  sb.graph.op(Name{ns.scope, ns.names.weight_bwd, false}, kB, ns.layer, reads, {d_x, g_w}, {.flops = 8.0 * double(rw)});
  grad_ready(sb, g_w, ns.width);
  return d_x;
}

// The composite's forward after the statistics, in fp32 only: the weight's multiply, reading
// what the norm holds until it returns.
NormActs composite_output_fp32(HfStep& sb, const NormSpec& ns, NormActs a, const Ids& held, Phase phase, bool rc) {
  const std::int64_t rw = ns.rows * ns.width;
  a.y = sb.graph.tensor(Name{ns.scope, ns.names.out, rc}, rw * 4, kAct);
  Ids reads = {a.xr};
  for (const TensorId t : held) reads.push_back(t);
  sb.graph.op(Name{ns.scope, ns.names.weight, rc}, phase, ns.layer, reads, {a.y}, {.flops = double(rw)});
  return a;
}

}  // namespace

// On the CPU the composite: x.to(fp32) (bf16 only; saved), pow [rows, width] fp32 freed by
// mean, mean + eps freed by rsqrt, rstd [rows] fp32 (saved), xr = x32 * rstd [rows, width]
// fp32 (saved by the weight's multiply), the weight's multiply in fp32 (the bf16 weight
// converted inside, [width] fp32) and, in bf16, its cast to the input's dtype. On CUDA the
// fused kernel: its output and rstd [rows] fp32, the input saved; what the kernel allocates
// inside is not modelled (no GPU run holds it yet).
NormActs torch_norm_forward(HfStep& sb, const NormSpec& ns, TensorId x, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  const std::int64_t rw = ns.rows * ns.width;
  NormActs a;
  a.x = a.x32 = x;
  a.rstd = sb.graph.tensor(Name{ns.scope, ns.names.rstd, rc}, ns.rows * 4, kAct);
  if (!s.cpu) {
    a.y = sb.graph.tensor(Name{ns.scope, ns.names.out, rc}, rw * s.e, kAct);
    sb.graph.op(Name{ns.scope, ns.names.stats, rc}, phase, ns.layer, {x}, {a.y, a.rstd}, {.flops = 5.0 * double(rw)});
    return a;
  }
  if (s.e != 4) {
    a.x32 = sb.graph.tensor(Name{ns.scope, ns.names.x32, rc}, rw * 4, kAct);
    sb.graph.op(Name{ns.scope, ns.names.to_fp32, rc}, phase, ns.layer, {x}, {a.x32});
  }
  sb.graph.op(Name{ns.scope, ns.names.stats, rc}, phase, ns.layer, {a.x32}, {a.rstd},
              {.workspace = norm_square_bytes(ns.rows, ns.width) + ns.rows * 4, .flops = 3.0 * double(rw)});
  a.xr = sb.graph.tensor(Name{ns.scope, ns.names.normed32, rc}, rw * 4, kAct);
  sb.graph.op(Name{ns.scope, ns.names.scale, rc}, phase, ns.layer, {a.x32, a.rstd}, {a.xr}, {.flops = double(rw)});
  // Until the norm returns, after its last op: the caller's input (its local holds it), the
  // composite's upcast copy, and rstd (returned beside the output by _fused_rms_norm).
  Ids held = {x, a.rstd};
  if (a.x32 != x) held.push_back(a.x32);
  if (s.e == 4) return composite_output_fp32(sb, ns, a, held, phase, rc);
  const TensorId product = sb.graph.tensor(Name{ns.scope, ns.names.normed, rc}, rw * 4, kTr);
  sb.graph.op(Name{ns.scope, ns.names.weight, rc}, phase, ns.layer, {a.xr, a.x32}, {product},
              {.workspace = ns.width * 4, .flops = double(rw)});
  a.y = sb.graph.tensor(Name{ns.scope, ns.names.out, rc}, rw * s.e, kAct);
  Ids reads = {product};
  for (const TensorId t : held) reads.push_back(t);
  sb.graph.op(Name{ns.scope, ns.names.to_dtype, rc}, phase, ns.layer, reads, {a.y});
  return a;
}

// The composite's backward in fp32 runs LlamaRMSNorm's nodes. In bf16 it multiplies by the
// weight in fp32 and casts last: ToCopyBackward0 first ([rows, width] fp32), then
// MulBackward0 in fp32 (its weight gradient summed in fp32 [width] and cast to the weight's
// dtype), then the statistics' nodes as LlamaRMSNorm's.
TensorId torch_norm_backward(HfStep& sb, const NormSpec& ns, const NormActs& a, TensorId grad, TensorId residual,
                             Ids& grads) {
  const StepShapes& s = sb.shapes;
  if (!s.cpu) return fused_backward(sb, ns, a, grad, residual, grads);
  if (s.e == 4) return llama_norm_backward(sb, ns, a, grad, residual, grads);
  const std::int64_t rw = ns.rows * ns.width;
  const TensorId g_w = sb.graph.tensor(Name{ns.scope, ns.names.weight_grad, false}, ns.width * s.e, Category::Grads);
  grads.push_back(g_w);
  const TensorId up = sb.graph.tensor(Name{ns.scope, ns.names.normed_grad32, false}, rw * 4, kTr);
  sb.graph.op(Name{ns.scope, ns.names.to_dtype_bwd, false}, kB, ns.layer, {grad}, {up});
  const TensorId d_xr = sb.graph.tensor(Name{ns.scope, ns.names.normed_grad, false}, rw * 4, kTr);
  sb.graph.op(Name{ns.scope, ns.names.weight_bwd, false}, kB, ns.layer, {up, a.xr}, {d_xr, g_w},
              {.workspace = rw * 4 + ns.width * 4, .flops = 2.0 * double(rw)});
  grad_ready(sb, g_w, ns.width);
  return norm_statistics_backward(sb, ns, a, d_xr, residual);
}

}  // namespace longctx::step::blocks
