// The hf stack's decoder layer (stack.h): transformers' LlamaDecoderLayer (4.57,
// models/llama/modeling_llama.py; Qwen2's and Qwen3's are copies of it, with q/k/v biases or
// per-head q and k norms) as autograd runs it, op by op: what each op allocates and what it
// saves for backward, forward then backward. Footprints: footprint/hf.h.
//
// Shapes below: n = b*S tokens; "q unit" [n, H*d] e, "kv unit" [n, K*d] e.
#include "planner/stacks/step/hf_step.h"

#include "planner/footprint/attention.h"
#include "planner/footprint/hf.h"
#include "planner/footprint/torchtitan.h"
#include "planner/footprint/zero.h"

namespace longctx::step::hf {

using namespace footprint;
using namespace footprint::hf;

namespace {

// What sdpa's kernel computes: with the model's additive mask it is not told the attention is
// causal (is_causal=False) and computes every pair, twice the causal work; without one, the
// causal kernel's blocks (footprint::attention_kernel_flops).
double sdpa_kernel_flops(const StepShapes& s, bool masked) {
  return masked ? 2.0 * attention_flops(s, s.H) : attention_kernel_flops(s, s.H);
}

// A layer's projection: matmul flops of [n, in] x [in, out].
double proj_flops(const StepShapes& s, std::int64_t in, std::int64_t out) { return matmul_flops(s.n, in, out); }

// torch's RMSNorm as torchtitan runs it (defined below).
NormActs torch_norm_forward(HfStep& sb, const NormSpec& ns, TensorId x, Phase phase, bool rc);
TensorId torch_fused_norm_backward(HfStep& sb, const NormSpec& ns, const NormActs& a, TensorId grad, TensorId residual,
                                   Ids& grads);

}  // namespace

// ---- LlamaRMSNorm ----------------------------------------------------------------------------
// forward (LlamaRMSNorm.forward):
//   x32 = x.to(float32)                 bf16 only: [rows, width] fp32, saved (pow, mul)
//   variance = x32.pow(2).mean(-1)      the square [rows, width] fp32 freed by mean; variance
//                                       [rows] fp32 held until the function returns
//   rstd = rsqrt(variance + eps)        [rows] fp32, saved
//   xr = x32 * rstd                     [rows, width] fp32, saved by the weight's mul (fp32)
//   xr = xr.to(input_dtype)             bf16 only: [rows, width] e, saved; the fp32 one freed
//   y = weight * xr                     [rows, width] e
NormActs norm_forward(HfStep& sb, const NormSpec& ns, TensorId x, Phase phase, bool rc) {
  if (liger(sb)) return liger_norm_forward(sb, ns, x, phase, rc);
  if (torchtitan(sb)) return torch_norm_forward(sb, ns, x, phase, rc);
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
//   MulBackward0 (x32 * rstd)    d_x32 [rows, width] fp32 and d_rstd [rows] fp32 (beside
//                                d_xr * x32 before its row sums)
//   RsqrtBackward0, MeanBackward1  d_variance [rows] fp32, then d_square expanded [rows, width] fp32
//   PowBackward0                 its product (workspace, pow_backward) added into d_x32
//   ToCopyBackward0              bf16 only: d_x32 to the input's dtype [rows, width] e
TensorId norm_backward(HfStep& sb, const NormSpec& ns, const NormActs& a, TensorId grad, TensorId residual,
                       Ids& grads) {
  if (liger(sb)) return liger_norm_backward(sb, ns, a, grad, residual, grads);
  const StepShapes& s = sb.shapes;
  if (torchtitan(sb) && !s.cpu) return torch_fused_norm_backward(sb, ns, a, grad, residual, grads);
  const std::int64_t rw = ns.rows * ns.width;
  TensorId d_xr = -1;
  const TensorId g_w = sb.graph.tensor(Name{ns.scope, ns.names.weight_grad, false}, ns.width * s.e, Category::Grads);
  grads.push_back(g_w);
  if (torchtitan(sb) && s.e != 4) {
    // torch's composite multiplies by the weight in fp32 and casts last: ToCopyBackward0
    // first ([rows, width] fp32), then MulBackward0 in fp32 (its weight gradient summed in
    // fp32 [width] and cast to the weight's dtype).
    const TensorId up = sb.graph.tensor(Name{ns.scope, ns.names.normed_grad32, false}, rw * 4, kTr);
    sb.graph.op(Name{ns.scope, ns.names.to_dtype_bwd, false}, kB, ns.layer, {grad}, {up});
    d_xr = sb.graph.tensor(Name{ns.scope, ns.names.normed_grad, false}, rw * 4, kTr);
    sb.graph.op(Name{ns.scope, ns.names.weight_bwd, false}, kB, ns.layer, {up, a.xr}, {d_xr, g_w},
                {.workspace = rw * 4 + ns.width * 4, .flops = 2.0 * double(rw)});
  } else {
    d_xr = sb.graph.tensor(Name{ns.scope, ns.names.normed_grad, false}, rw * s.e, kTr);
    sb.graph.op(Name{ns.scope, ns.names.weight_bwd, false}, kB, ns.layer, {grad, a.xr}, {d_xr, g_w},
                {.workspace = norm_weight_backward_workspace(s, ns.rows, ns.width), .flops = 2.0 * double(rw)});
    if (s.e != 4) {
      const TensorId up = sb.graph.tensor(Name{ns.scope, ns.names.normed_grad32, false}, rw * 4, kTr);
      sb.graph.op(Name{ns.scope, ns.names.to_dtype_bwd, false}, kB, ns.layer, {d_xr}, {up});
      d_xr = up;
    }
  }
  if (sb.grad_ready) sb.grad_ready(g_w, ns.width);
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

namespace {


// A gradient of q, k or v reshaped from [b, heads, S, d] to the projection's [n, heads*d]:
// a copy where the kernel's gradient is laid out head-major (ViewBackward0's reshape).
TensorId head_major_copy(HfStep& sb, int l, const char* name, const char* out_name, TensorId grad, std::int64_t heads) {
  const StepShapes& s = sb.shapes;
  const TensorId c = sb.graph.tensor(layer_name(l, out_name), s.n * heads * s.d * s.e, kTr);
  sb.graph.op(layer_name(l, name), kB, l, {grad}, {c});
  return c;
}

// repeat_kv (modeling_llama.py): k and v copied to the query heads, [n, H*d] e each, into
// a.k_rep and a.v_rep. With one key/value head the reshape of the expanded [b, 1, H, S, d]
// view merges a size-1 dimension with a stride-0 one, which aten's reshape does as a view
// (computeStride succeeds), so nothing is copied: a.k_rep and a.v_rep are k and v, read by
// the kernels through stride-0 heads. Their gradients still come back over the query heads
// and are summed (repeat_kv_backward), as the profiler shows.
void repeat_kv(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  if (s.K == 1) {
    a.k_rep = a.k;
    a.v_rep = a.v;
    return;
  }
  a.k_rep = sb.graph.tensor(layer_name(l, "attn.k_repeated", rc), s.n * s.H * s.d * s.e, kAct);
  sb.graph.op(layer_name(l, "attn.repeat_k", rc), phase, l, {a.k}, {a.k_rep});
  a.v_rep = sb.graph.tensor(layer_name(l, "attn.v_repeated", rc), s.n * s.H * s.d * s.e, kAct);
  sb.graph.op(layer_name(l, "attn.repeat_v", rc), phase, l, {a.v}, {a.v_rep});
}

// torch.matmul on 4-D operands (_matmul_impl, aten/src/ATen/native/LinearAlgebra.cpp) folds
// [b, H] into bmm's one batch dimension with reshape, a view only where the two dimensions
// merge: q (and k, v where repeat_kv copied nothing) are transposed views of their
// projection's [b, S, heads, d], so with b > 1 and more than one head the fold is a
// contiguous copy [b*H, S, d] e, which the bmm saves for its backward. `strided` says `t`
// is laid out that way; repeat_kv's copies and the softmax's output fold as views.
TensorId eager_matmul_operand(HfStep& sb, int l, const char* name, TensorId t, bool strided, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  if (!strided || s.b == 1 || s.H == 1) return t;
  const TensorId folded = sb.graph.tensor(layer_name(l, name, rc), s.n * s.H * s.d * s.e, kAct);
  sb.graph.op(layer_name(l, name, rc), phase, l, {t}, {folded});
  return folded;
}

// Its ExpandBackward0s: v's gradient summed over each group, then k's, [n, K*d] e each.
void repeat_kv_backward(HfStep& sb, int l, TensorId& dk, TensorId& dv) {
  const StepShapes& s = sb.shapes;
  const TensorId dv_sum = sb.graph.tensor(layer_name(l, "attn.v.grad"), s.n * s.K * s.d * s.e, kTr);
  sb.graph.op(layer_name(l, "attn.repeat_v.bwd"), kB, l, {dv}, {dv_sum});
  const TensorId dk_sum = sb.graph.tensor(layer_name(l, "attn.k_rotated.grad"), s.n * s.K * s.d * s.e, kTr);
  sb.graph.op(layer_name(l, "attn.repeat_k.bwd"), kB, l, {dk}, {dk_sum});
  dv = dv_sum;
  dk = dk_sum;
}

// torch's RMSNorm (nn.RMSNorm -> aten::rms_norm -> _fused_rms_norm), as torchtitan runs it.
// On the CPU the composite (torch/_decomp/decompositions.py mirrors it): x.to(fp32) (bf16
// only; saved), pow [rows, width] fp32 freed by mean, mean + eps freed by rsqrt, rstd [rows]
// fp32 (saved), xr = x32 * rstd [rows, width] fp32 (saved by the weight's multiply), the
// weight's multiply in fp32 (the bf16 weight converted inside, [width] fp32) and, in bf16, its
// cast to the input's dtype. On CUDA the fused kernel: its output and rstd [rows] fp32, the
// input saved; what the kernel allocates inside is not modelled (no GPU run holds it yet).
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
  if (s.e == 4) {
    a.y = sb.graph.tensor(Name{ns.scope, ns.names.out, rc}, rw * 4, kAct);
    Ids reads = {a.xr};
    for (const TensorId t : held) reads.push_back(t);
    sb.graph.op(Name{ns.scope, ns.names.weight, rc}, phase, ns.layer, reads, {a.y}, {.flops = double(rw)});
    return a;
  }
  const TensorId product = sb.graph.tensor(Name{ns.scope, ns.names.normed, rc}, rw * 4, kTr);
  sb.graph.op(Name{ns.scope, ns.names.weight, rc}, phase, ns.layer, {a.xr, a.x32}, {product},
              {.workspace = ns.width * 4, .flops = double(rw)});
  a.y = sb.graph.tensor(Name{ns.scope, ns.names.out, rc}, rw * s.e, kAct);
  Ids reads = {product};
  for (const TensorId t : held) reads.push_back(t);
  sb.graph.op(Name{ns.scope, ns.names.to_dtype, rc}, phase, ns.layer, reads, {a.y});
  return a;
}

// The fused kernel's backward (_fused_rms_norm_backward): the input's gradient [rows, width] e
// (the residual's added into it) and the weight's [width] e.
TensorId torch_fused_norm_backward(HfStep& sb, const NormSpec& ns, const NormActs& a, TensorId grad, TensorId residual,
                                   Ids& grads) {
  const StepShapes& s = sb.shapes;
  const std::int64_t rw = ns.rows * ns.width;
  const TensorId g_w = sb.graph.tensor(Name{ns.scope, ns.names.weight_grad, false}, ns.width * s.e, Category::Grads);
  grads.push_back(g_w);
  const TensorId d_x = sb.graph.tensor(Name{ns.scope, ns.names.in_grad, false}, rw * s.e, kTr);
  Ids reads = {grad, a.x, a.rstd};
  if (residual >= 0) reads.push_back(residual);
  sb.graph.op(Name{ns.scope, ns.names.weight_bwd, false}, kB, ns.layer, reads, {d_x, g_w}, {.flops = 8.0 * double(rw)});
  if (sb.grad_ready) sb.grad_ready(g_w, ns.width);
  return d_x;
}

// torchtitan's apply_rotary_emb for q or k (the first of `reads`): view_as_complex(x.float())
// * freqs_cis [n, heads, d/2] complex64, which is the output in fp32. In bf16 x.float() is a
// copy [n, heads*d] fp32 that the function's local holds until it returns (after k's
// rotation, which reads it from `reads`), and type_as casts the product to [n, heads*d] e.
// Multiplying by freqs_cis, which needs no gradient, saves only freqs_cis (a buffer).
// Returns the rotated tensor; `x32` gets the input's fp32 copy (bf16) or the input (fp32).
TensorId complex_rope(HfStep& sb, int l, const char* name, const char* copy_name, const char* out_name, TensorId x,
                      Ids held, std::int64_t heads, Phase phase, bool rc, TensorId& x32) {
  const StepShapes& s = sb.shapes;
  const std::int64_t elems = s.n * heads * s.d;
  x32 = x;
  if (s.e != 4) {
    x32 = sb.graph.tensor(layer_name(l, copy_name, rc), elems * 4, kTr);
    sb.graph.op(layer_name(l, copy_name, rc), phase, l, {x}, {x32});
  }
  held.push_back(x32);
  const TensorId y = sb.graph.tensor(layer_name(l, out_name, rc), elems * s.e, kAct);
  sb.graph.op(layer_name(l, name, rc), phase, l, held, {y},
              {.workspace = footprint::torchtitan::rope_forward_workspace(s, heads), .flops = 6.0 * double(elems)});
  return y;
}

// torchtitan's attention projections and rotation (llama3 and qwen3 Attention.forward): wq,
// wk, wv first, then qwen3's q and k norms (nn.RMSNorm over head_dim), then apply_rotary_emb:
// llama3's complex product from freqs_cis, or qwen3's rotate-half form from its rope_cache
// buffer, whose cos and sin slices `.to(x.dtype)` are views (of the fp32 buffer, or under
// FSDP2 in bf16 of the block's cast copy of it). q's input to the rotation lives until the
// function returns, after k's rotation. (Without FSDP torchtitan runs bf16 under autocast,
// where the slices would be copies: not modelled, refused.)
void torchtitan_project_qkv(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  const std::int64_t qw = s.H * s.d, kw = s.K * s.d;
  TensorId q = project(sb, l, "attn.q_proj", "attn.q", a.norm1.y, s.h, qw, phase, rc);
  TensorId k = project(sb, l, "attn.k_proj", "attn.k", a.norm1.y, s.h, kw, phase, rc);
  a.v = project(sb, l, "attn.v_proj", "attn.v", a.norm1.y, s.h, kw, phase, rc);
  if (!s.qk_norm) {
    Ids table;
    if (s.r > 1) {  // context parallel: freqs_cis at the rank's positions, saved by both products
      a.rope_table = sb.graph.tensor(layer_name(l, "attn.freqs_cis.positions", rc), footprint::torchtitan::cp_freqs_bytes(s), kAct);
      sb.graph.op(layer_name(l, "attn.freqs_cis.index", rc), phase, l, {sb.hf_model.cp_positions}, {a.rope_table},
                  {.workspace = footprint::torchtitan::cp_freqs_workspace(s)});
      table = {a.rope_table};
    }
    TensorId q32 = -1, k32 = -1;
    a.q = complex_rope(sb, l, "attn.rope_q", "attn.q.fp32", "attn.q_rotated", q, table, s.H, phase, rc, q32);
    Ids held = {q};
    if (a.rope_table >= 0) held.push_back(a.rope_table);
    if (q32 != q) held.push_back(q32);
    a.k = complex_rope(sb, l, "attn.rope_k", "attn.k.fp32", "attn.k_rotated", k, held, s.K, phase, rc, k32);
    return;
  }
  a.q_norm = norm_forward(sb, head_norm_spec(s, l, true), q, phase, rc);
  a.k_norm = norm_forward(sb, head_norm_spec(s, l, false), k, phase, rc);
  q = a.q_norm.y;
  k = a.k_norm.y;
  Ids reads_q = {q}, reads_k = {k, q};
  // Under FSDP2 in bf16 the block got rope_cache already cast (its cast_forward_inputs), and
  // the slices' `.to(x.dtype)` are views of it, saved by the products.
  if (static_cast<std::size_t>(l) < sb.fsdp2.cast_inputs.size()) a.rope_table = sb.fsdp2.cast_inputs[static_cast<std::size_t>(l)];
  if (a.rope_table >= 0) {
    reads_q.push_back(a.rope_table);
    reads_k.push_back(a.rope_table);
  }
  a.q = rope(sb, l, "attn.rope_q", "attn.q_rotated", reads_q, s.H, phase, rc);
  a.k = rope(sb, l, "attn.rope_k", "attn.k_rotated", reads_k, s.K, phase, rc);
}

// Its backward for qwen3's rotate-half form: as transformers' (footprint::hf::rope_workspace),
// reading cos and sin as views of the buffer or of the block's cast copy.
TensorId torchtitan_rope_backward(HfStep& sb, int l, const char* name, const char* out_name, TensorId grad,
                                  std::int64_t heads, const HfLayerActs& a) {
  const StepShapes& s = sb.shapes;
  const TensorId d_x = sb.graph.tensor(layer_name(l, out_name), s.n * heads * s.d * s.e, kTr);
  Ids reads = {grad};
  if (a.rope_table >= 0) reads.push_back(a.rope_table);
  sb.graph.op(layer_name(l, name), kB, l, reads, {d_x},
              {.workspace = rope_workspace(s, heads), .flops = 3.0 * double(s.n * heads * s.d)});
  return d_x;
}

}  // namespace

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

// A projection's forward: [n, in] x [in, out] (+ bias) -> [n, out] e.
TensorId project(HfStep& sb, int l, const char* name, const char* out_name, TensorId x, std::int64_t in,
                 std::int64_t out, Phase phase, bool rc, Category category) {
  const StepShapes& s = sb.shapes;
  // Per-op selective checkpointing keeps every odd-numbered aten.mm's output (step_build.h):
  // the recompute takes the kept tensor and runs no matmul.
  OpSac& sac = sb.op_sac;
  const bool kept = sac.mode != OpSac::Mode::Off && ++sac.mm_count % 2 == 1;
  if (kept && sac.mode == OpSac::Mode::Replay) return sac.take();
  const TensorId y = sb.graph.tensor(layer_name(l, out_name, rc), s.n * out * s.e, kept ? kAct : category);
  sb.graph.op(layer_name(l, name, rc), phase, l, {x}, {y}, {.flops = proj_flops(s, in, out)});
  if (kept) sac.kept.push_back(y);
  return y;
}

// A projection's backward (MmBackward0 of at::linear, AddmmBackward0 with a bias): its
// weight's gradient [out, in] (+ bias [out]) e, kept by AccumulateGrad, and, unless
// `input_grad` is false (the caller adds it into a gradient it already holds: `into`), the
// input's gradient [n, in] e.
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
    if (sb.grad_ready) sb.grad_ready(g_w, in * out + (bias ? out : 0));
    return into;
  }
  const TensorId d_x = sb.graph.tensor(layer_name(l, in_grad_name), s.n * in * s.e, kTr);
  sb.graph.op(layer_name(l, name), kB, l, reads, {d_x, g_w}, {.flops = 2 * proj_flops(s, in, out)});
  if (sb.grad_ready) sb.grad_ready(g_w, in * out + (bias ? out : 0));
  return d_x;
}

// apply_rotary_pos_emb for q or k of `heads` heads: (x * cos) + (rotate_half(x) * sin).
TensorId rope(HfStep& sb, int l, const char* name, const char* out_name, Ids reads, std::int64_t heads, Phase phase,
              bool rc) {
  const StepShapes& s = sb.shapes;
  if (liger(sb)) {
    // LigerRopeFunction rotates the projection's output in place (its [b, S, heads, d] layout
    // needs no copy) and saves only cos and sin.
    sb.graph.op(layer_name(l, name, rc), phase, l, reads, {}, {.flops = 3.0 * double(s.n * heads * s.d)});
    return *reads.begin();
  }
  const TensorId y = sb.graph.tensor(layer_name(l, out_name, rc), s.n * heads * s.d * s.e, kAct);
  sb.graph.op(layer_name(l, name, rc), phase, l, reads, {y}, {.workspace = rope_workspace(s, heads), .flops = 3.0 * double(s.n * heads * s.d)});
  return y;
}

TensorId rope_backward(HfStep& sb, int l, const char* name, const char* out_name, TensorId grad, std::int64_t heads,
                       TensorId table) {
  const StepShapes& s = sb.shapes;
  if (liger(sb)) {  // rope_backward: rotates the gradient in place
    sb.graph.op(layer_name(l, name), kB, l, {grad, sb.hf_model.cos, sb.hf_model.sin}, {},
                {.flops = 3.0 * double(s.n * heads * s.d)});
    return grad;
  }
  if (torchtitan(sb)) {
    // MulBackward0 of view_as_complex(x) * freqs_cis: grad * freqs_cis.conj() [n, heads*d]
    // (complex64, viewed as fp32; cast back in bf16).
    const TensorId d_x = sb.graph.tensor(layer_name(l, out_name), s.n * heads * s.d * s.e, kTr);
    Ids reads = {grad};
    if (table >= 0) reads.push_back(table);
    sb.graph.op(layer_name(l, name), kB, l, reads, {d_x},
                {.workspace = footprint::torchtitan::rope_backward_workspace(s, heads),
                 .flops = 6.0 * double(s.n * heads * s.d)});
    return d_x;
  }
  const HfModelActs& m = sb.hf_model;
  const TensorId d_x = sb.graph.tensor(layer_name(l, out_name), s.n * heads * s.d * s.e, kTr);
  sb.graph.op(layer_name(l, name), kB, l, {grad, m.cos, m.sin}, {d_x},
              {.workspace = rope_workspace(s, heads), .flops = 3.0 * double(s.n * heads * s.d)});
  return d_x;
}

// ---- LlamaAttention ----------------------------------------------------------------------
void project_qkv(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  const HfModelActs& m = sb.hf_model;
  const std::int64_t qw = s.H * s.d, kw = s.K * s.d;
  if (torchtitan(sb)) return torchtitan_project_qkv(sb, l, a, phase, rc);
  TensorId q = project(sb, l, "attn.q_proj", "attn.q", a.norm1.y, s.h, qw, phase, rc);
  if (s.qk_norm) {  // Qwen3Attention: q_norm(q_proj(x).view(b, S, H, d)), then k's
    a.q_norm = norm_forward(sb, head_norm_spec(s, l, true), q, phase, rc);
    q = a.q_norm.y;
  }
  TensorId k = project(sb, l, "attn.k_proj", "attn.k", a.norm1.y, s.h, kw, phase, rc);
  if (s.qk_norm) {
    a.k_norm = norm_forward(sb, head_norm_spec(s, l, false), k, phase, rc);
    k = a.k_norm.y;
  }
  a.v = project(sb, l, "attn.v_proj", "attn.v", a.norm1.y, s.h, kw, phase, rc);
  a.q = rope(sb, l, "attn.rope_q", "attn.q_rotated", {q, m.cos, m.sin}, s.H, phase, rc);
  // q's projection lives until apply_rotary_pos_emb returns, after k's rotation.
  a.k = rope(sb, l, "attn.rope_k", "attn.k_rotated", {k, m.cos, m.sin, q}, s.K, phase, rc);
}

TensorId project_qkv_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId dq, TensorId dk, TensorId dv,
                              bool k_head_major, bool qv_head_major, Ids& grads) {
  const StepShapes& s = sb.shapes;
  const std::int64_t qw = s.H * s.d, kw = s.K * s.d;
  // The engine runs k's rotation first (created last), then q's; then the projections.
  TensorId dk_pre = -1, dq_pre = -1;
  if (torchtitan(sb) && s.qk_norm) {
    dk_pre = torchtitan_rope_backward(sb, l, "attn.rope_k.bwd", "attn.k.grad.rotated", dk, s.K, a);
    dq_pre = torchtitan_rope_backward(sb, l, "attn.rope_q.bwd", "attn.q.grad.rotated", dq, s.H, a);
  } else {
    dk_pre = rope_backward(sb, l, "attn.rope_k.bwd", "attn.k.grad.rotated", dk, s.K);
    dq_pre = rope_backward(sb, l, "attn.rope_q.bwd", "attn.q.grad.rotated", dq, s.H);
  }
  if (k_head_major) dk_pre = head_major_copy(sb, l, "attn.k.view.bwd", "attn.k.grad.contiguous", dk_pre, s.K);
  if (s.qk_norm) {
    dk_pre = norm_backward(sb, head_norm_spec(s, l, false), a.k_norm, dk_pre, -1, grads);
    dq_pre = norm_backward(sb, head_norm_spec(s, l, true), a.q_norm, dq_pre, -1, grads);
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

// torchtitan's context parallel: torch's ring backward returns dq [b, H, Sl, d] and dk, dv as
// views of one pair [2, b, K, Sl, d], all laid out head-major. The rotations' backward
// (ViewAsRealBackward0) first copies k's and then q's gradient to the [b, Sl, heads, d] layout
// it works in; v's view (ViewBackward0) copies v's, which frees the pair; then the engine runs
// the projections, v's first (created last).
TensorId ring_project_qkv_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId dq, TensorId pair, Ids& grads) {
  const StepShapes& s = sb.shapes;
  const std::int64_t qw = s.H * s.d, kw = s.K * s.d;
  const TensorId dk = head_major_copy(sb, l, "attn.k.view_as_real.bwd", "attn.k_rotated.grad.contiguous", pair, s.K);
  const TensorId dk_pre = rope_backward(sb, l, "attn.rope_k.bwd", "attn.k.grad.rotated", dk, s.K, a.rope_table);
  const TensorId dq_c = head_major_copy(sb, l, "attn.q.view_as_real.bwd", "attn.q_rotated.grad.contiguous", dq, s.H);
  const TensorId dq_pre = rope_backward(sb, l, "attn.rope_q.bwd", "attn.q.grad.rotated", dq_c, s.H, a.rope_table);
  const TensorId dv = head_major_copy(sb, l, "attn.v.view.bwd", "attn.v.grad.contiguous", pair, s.K);
  const TensorId x = a.norm1.y;
  const TensorId d_xv = project_backward(sb, l, "attn.v_proj.bwd", "grad.attn.v", "attn_norm.out.grad.v", dv, x, s.h,
                                         kw, s.qkv_bias, grads);
  const TensorId d_xk = project_backward(sb, l, "attn.k_proj.bwd", "grad.attn.k", "attn_norm.out.grad.k", dk_pre, x, s.h,
                                         kw, s.qkv_bias, grads);
  const TensorId d_x = sb.graph.tensor(layer_name(l, "attn_norm.out.grad"), s.n * s.h * s.e, kTr);
  sb.graph.op(layer_name(l, "attn.proj.grad_sum"), kB, l, {d_xv, d_xk}, {d_x});
  project_backward(sb, l, "attn.q_proj.bwd", "grad.attn.q", "", dq_pre, x, s.h, qw, s.qkv_bias, grads, d_x);
  return d_x;
}

// torchtitan's context parallel (apply_cp_to_attention_module): the block's
// scaled_dot_product_attention on DTensors sharded on the sequence, which torch's dispatcher
// hands to its ring attention (footprint::torchtitan::ring_forward_workspace). Under load
// balancing the ring's output is merged [b, H, Sl, d] (its torch.cat) on every rank but the
// last, the plan's, so `output.transpose(1, 2).contiguous()` copies it [n, H*d] e for wo; the
// ring's own output is saved for its backward.
void ring_attention_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc) {
  namespace tt = footprint::torchtitan;
  const StepShapes& s = sb.shapes;
  const std::int64_t qw = s.H * s.d;
  a.o_heads = sb.graph.tensor(layer_name(l, "attn.out.heads", rc), s.n * qw * s.e, kAct);  // [b, H, Sl, d] e
  a.lse = sb.graph.tensor(layer_name(l, "attn.lse", rc), s.n * s.H * 4, kAct);             // [b, H, Sl] fp32
  const int o = sb.graph.op(layer_name(l, "attn.ring", rc), phase, l, {a.q, a.k, a.v}, {a.o_heads, a.lse},
                            {.workspace = tt::ring_forward_workspace(s), .flops = attention_flops(s, s.H),
                             .kernel_flops = attention_kernel_flops(s, s.H), .kind = OpKind::Attention});
  sb.graph.set_comm(o, CommKind::AllGather, tt::ring_forward_sent_bytes(s), static_cast<int>(s.r));
  a.o = sb.graph.tensor(layer_name(l, "attn.out", rc), s.n * qw * s.e, kAct);  // [b, Sl, H, d] e
  sb.graph.op(layer_name(l, "attn.out.contiguous", rc), phase, l, {a.o_heads}, {a.o});
}

TensorId ring_attention_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_o, Ids& grads) {
  namespace tt = footprint::torchtitan;
  const StepShapes& s = sb.shapes;
  const TensorId dq = sb.graph.tensor(layer_name(l, "attn.q_rotated.grad"), s.n * s.H * s.d * s.e, kTr);
  const TensorId pair = sb.graph.tensor(layer_name(l, "attn.kv_rotated.grad"), 2 * s.n * s.K * s.d * s.e, kTr);
  const int o = sb.graph.op(layer_name(l, "attn.ring.bwd"), kB, l, {d_o, a.q, a.k, a.v, a.o_heads, a.lse}, {dq, pair},
                            {.workspace = tt::ring_backward_workspace(s), .flops = 2.5 * attention_flops(s, s.H),
                             .kernel_flops = 2.5 * attention_kernel_flops(s, s.H), .kind = OpKind::Attention});
  sb.graph.set_comm(o, CommKind::AllToAll, tt::ring_backward_sent_bytes(s), static_cast<int>(s.r));
  return ring_project_qkv_backward(sb, l, a, dq, pair, grads);
}

void attention_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool cache) {
  const StepShapes& s = sb.shapes;
  const HfModelActs& m = sb.hf_model;
  const std::int64_t qw = s.H * s.d, kw = s.K * s.d;
  project_qkv(sb, l, a, phase, rc);
  if (torchtitan(sb) && s.r > 1) return ring_attention_forward(sb, l, a, phase, rc);
  if (cache) {
    // use_cache (no checkpointing): DynamicLayer.update concatenates k and v onto the empty
    // cache, copies [b, K, S, d] e each that replace them (the cache holds them until the
    // model's output is dropped, after the loss).
    const TensorId kc = sb.graph.tensor(layer_name(l, "attn.cache.k", rc), s.n * kw * s.e, kAct);
    const TensorId vc = sb.graph.tensor(layer_name(l, "attn.cache.v", rc), s.n * kw * s.e, kAct);
    sb.graph.op(layer_name(l, "attn.cache_update", rc), phase, l, {a.k, a.v}, {kc, vc});
    a.k = kc;
    a.v = vc;
    sb.hf_model.cache.push_back(kc);
    sb.hf_model.cache.push_back(vc);
  }
  // Per-op selective checkpointing on a GPU keeps the attention kernel's output and
  // log-sum-exp; its recompute takes them and runs no attention (step_build.h). The CPU's
  // kernel is not on the save list: recomputed.
  OpSac& sac = sb.op_sac;
  const bool kept = sac.mode != OpSac::Mode::Off && !s.cpu && sb.in.train.stack.attention != HfAttention::Eager;
  if (kept && sac.mode == OpSac::Mode::Replay) {
    a.o = sac.take();
    a.lse = sac.take();
    return;
  }
  a.o = sb.graph.tensor(layer_name(l, "attn.out", rc), s.n * qw * s.e, kAct);  // [b, S, H, d] e
  const double flops = attention_flops(s, s.H);
  if (sb.in.train.stack.attention != HfAttention::Eager) {
    // flash_attention_2 (integrations/flash_attention.py, flash_attn_func on the [b, S, H, d]
    // views; no mask without padding) allocates as sdpa's flash kernel does without one.
    // sdpa_attention_forward: without a mask, scaled_dot_product_attention(q, k, v,
    // is_causal=True, enable_gqa=True): the flash kernel takes grouped k, v as they are. With
    // the model's boolean mask (no cache: model_inputs) use_gqa_in_sdpa is false, repeat_kv
    // copies k and v to the query heads [n, H*d] e each, and sdpa turns the mask into an
    // additive one [b, 1, S, S] e (convert_boolean_attn_mask), which its backward saves. The
    // output is laid out [b, S, H, d]: `.transpose(1, 2).contiguous()` copies nothing.
    Ids reads = {a.q, a.k, a.v};
    if (m.mask >= 0) {
      if (s.H != s.K) {
        repeat_kv(sb, l, a, phase, rc);
        reads = {a.q, a.k_rep, a.v_rep};
      }
      a.mask = sb.graph.tensor(layer_name(l, "attn.mask.additive", rc), additive_mask_bytes(s), kAct);
      sb.graph.op(layer_name(l, "attn.mask.convert", rc), phase, l, {m.mask}, {a.mask});
      reads.push_back(a.mask);
    }
    a.lse = sb.graph.tensor(layer_name(l, "attn.lse", rc), s.b * s.H * s.S * 4, kAct);  // [b, H, S] fp32
    if (kept) {
      sac.kept.push_back(a.o);
      sac.kept.push_back(a.lse);
    }
    // LlamaAttention.forward's key_states and value_states hold the unrepeated k, v until it returns.
    if (a.k_rep >= 0 && a.k_rep != a.k) {
      reads.push_back(a.k);
      reads.push_back(a.v);
    }
    sb.graph.op(layer_name(l, "attn.sdpa", rc), phase, l, reads, {a.o, a.lse},
                {.workspace = flash_forward_scratch(s), .flops = flops, .kernel_flops = sdpa_kernel_flops(s, a.mask >= 0),
                 .kind = OpKind::Attention});
    return;
  }
  // eager_attention_forward: repeat_kv copies k and v to the query heads (none for one group,
  // none for one key/value head),
  // scores = q @ k^T * scaling + mask [b, H, S, S] e, softmax in fp32 (saved), cast back in
  // bf16 (saved by the matmul), @ v, and the output made contiguous [b, S, H, d] e.
  a.k_rep = a.k;
  a.v_rep = a.v;
  if (s.H != s.K) repeat_kv(sb, l, a, phase, rc);
  a.q_mm = eager_matmul_operand(sb, l, "attn.q.matmul_fold", a.q, true, phase, rc);
  // k and v fold as views where they are contiguous: repeat_kv's copies, or (unrepeated) the
  // cache's torch.cat copies. One key/value head repeats as a stride-0 view, which never folds.
  const bool kv_strided = s.K == 1 || (s.K == s.H && !cache);
  a.k_mm = eager_matmul_operand(sb, l, "attn.k.matmul_fold", a.k_rep, kv_strided, phase, rc);
  const TensorId sc = sb.graph.tensor(layer_name(l, "attn.scores", rc), eager_scores_bytes(s), kTr);
  sb.graph.op(layer_name(l, "attn.qk", rc), phase, l, {a.q_mm, a.k_mm}, {sc}, {.flops = flops});
  const TensorId scaled = sb.graph.tensor(layer_name(l, "attn.scores.scaled", rc), eager_scores_bytes(s), kTr);
  sb.graph.op(layer_name(l, "attn.scale", rc), phase, l, {sc}, {scaled});
  const TensorId masked = sb.graph.tensor(layer_name(l, "attn.scores.masked", rc), eager_scores_bytes(s), kTr);
  sb.graph.op(layer_name(l, "attn.mask", rc), phase, l, {scaled, m.mask}, {masked});
  a.probs32 = sb.graph.tensor(layer_name(l, "attn.probs.fp32", rc), eager_probs_bytes(s), kAct);
  // softmax(dtype=float32) of bf16 scores upcasts them first: [b, H, S, S] fp32 beside them.
  sb.graph.op(layer_name(l, "attn.softmax", rc), phase, l, {masked}, {a.probs32},
              {.workspace = s.e == 4 ? 0 : eager_probs_bytes(s)});
  a.probs = a.probs32;
  if (s.e != 4) {
    a.probs = sb.graph.tensor(layer_name(l, "attn.probs", rc), eager_scores_bytes(s), kAct);
    sb.graph.op(layer_name(l, "attn.probs.to_dtype", rc), phase, l, {a.probs32}, {a.probs});
  }
  a.v_mm = eager_matmul_operand(sb, l, "attn.v.matmul_fold", a.v_rep, kv_strided, phase, rc);
  const TensorId pv = sb.graph.tensor(layer_name(l, "attn.pv", rc), s.n * qw * s.e, kTr);  // [b, H, S, d] e
  sb.graph.op(layer_name(l, "attn.pv", rc), phase, l, {a.probs, a.v_mm}, {pv}, {.flops = flops});
  // eager_attention_forward's locals hold the repeated k, v until it returns.
  sb.graph.op(layer_name(l, "attn.out.contiguous", rc), phase, l, {pv, a.k_rep, a.v_rep}, {a.o});
}

TensorId attention_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_o, Ids& grads) {
  const StepShapes& s = sb.shapes;
  if (torchtitan(sb) && s.r > 1) return ring_attention_backward(sb, l, a, d_o, grads);
  const std::int64_t qw = s.H * s.d, kw = s.K * s.d;
  TensorId dq, dk, dv;
  const double flops = attention_flops(s, s.H);
  bool k_copy = false;
  if (sb.in.train.stack.attention != HfAttention::Eager) {
    const bool repeated = a.k_rep >= 0;
    dq = sb.graph.tensor(layer_name(l, "attn.q_rotated.grad"), s.n * qw * s.e, kTr);
    dk = sb.graph.tensor(layer_name(l, repeated ? "attn.k_repeated.grad" : "attn.k_rotated.grad"),
                         s.n * (repeated ? qw : kw) * s.e, kTr);
    dv = sb.graph.tensor(layer_name(l, repeated ? "attn.v_repeated.grad" : "attn.v.grad"), s.n * (repeated ? qw : kw) * s.e, kTr);
    Ids reads = {d_o, a.q, repeated ? a.k_rep : a.k, repeated ? a.v_rep : a.v, a.o, a.lse};
    if (a.mask >= 0) reads.push_back(a.mask);
    sb.graph.op(layer_name(l, "attn.sdpa.bwd"), kB, l, reads, {dq, dk, dv},
                {.workspace = sdpa_backward_workspace(s), .flops = 2.5 * flops,
                 .kernel_flops = 2.5 * sdpa_kernel_flops(s, a.mask >= 0), .kind = OpKind::Attention});
    if (repeated) repeat_kv_backward(sb, l, dk, dv);
    // k's gradient reaches its projection head-major [b, K, S, d], and ViewBackward0's reshape
    // copies it, when the kernel ran with a mask (as under eager); without one it arrives in
    // the projection's layout (both as the profiler shows them, tests/stacks).
    k_copy = a.mask >= 0;
  } else {
    // The output's gradient reaches the bmm through the transpose's view [b, H, S, d] of
    // [b, S, H, d]; UnsafeViewBackward0 folds it to [b*H, S, d], a copy where q's fold is one.
    TensorId d_pv = d_o;
    if (a.q_mm != a.q) {
      d_pv = sb.graph.tensor(layer_name(l, "attn.pv.grad.matmul_fold"), s.n * qw * s.e, kTr);
      sb.graph.op(layer_name(l, "attn.pv.matmul_fold.bwd"), kB, l, {d_o}, {d_pv});
    }
    // BmmBackward0 of probs @ v: d_v_rep [b, H, S, d] e and d_probs [b, H, S, S] e.
    const TensorId d_vrep = sb.graph.tensor(layer_name(l, "attn.v_repeated.grad"), s.n * qw * s.e, kTr);
    TensorId d_probs = sb.graph.tensor(layer_name(l, "attn.probs.grad"), eager_scores_bytes(s), kTr);
    sb.graph.op(layer_name(l, "attn.pv.bwd"), kB, l, {d_pv, a.probs, a.v_mm}, {d_vrep, d_probs}, {.flops = 2 * flops});
    if (s.e != 4) {
      const TensorId up = sb.graph.tensor(layer_name(l, "attn.probs.grad.fp32"), eager_probs_bytes(s), kTr);
      sb.graph.op(layer_name(l, "attn.probs.to_dtype.bwd"), kB, l, {d_probs}, {up});
      d_probs = up;
    }
    // SoftmaxBackward0 [b, H, S, S] fp32, cast back to the scores' dtype in bf16.
    TensorId d_masked = sb.graph.tensor(layer_name(l, "attn.scores.masked.grad.fp32"), eager_probs_bytes(s), kTr);
    sb.graph.op(layer_name(l, "attn.softmax.bwd"), kB, l, {d_probs, a.probs32}, {d_masked});
    if (s.e != 4) {
      const TensorId cast = sb.graph.tensor(layer_name(l, "attn.scores.masked.grad"), eager_scores_bytes(s), kTr);
      sb.graph.op(layer_name(l, "attn.softmax.upcast.bwd"), kB, l, {d_masked}, {cast});
      d_masked = cast;
    }
    // The mask's add passes the gradient on; the scaling's mul makes a new one.
    const TensorId d_sc = sb.graph.tensor(layer_name(l, "attn.scores.grad"), eager_scores_bytes(s), kTr);
    sb.graph.op(layer_name(l, "attn.scale.bwd"), kB, l, {d_masked}, {d_sc});
    dq = sb.graph.tensor(layer_name(l, "attn.q_rotated.grad"), s.n * qw * s.e, kTr);
    TensorId d_krep = sb.graph.tensor(layer_name(l, "attn.k_repeated.grad"), s.n * qw * s.e, kTr);
    sb.graph.op(layer_name(l, "attn.qk.bwd"), kB, l, {d_sc, a.q_mm, a.k_mm}, {dq, d_krep}, {.flops = 2 * flops});
    dv = d_vrep;
    dk = d_krep;
    if (s.H != s.K) repeat_kv_backward(sb, l, dk, dv);
    k_copy = true;
  }
  // sdpa's and eager's gradients of q and v arrive head-major [b, H, S, d] and are copied back
  // to the projections' layout (ViewBackward0's reshape). torchtitan's q, k and v reach the
  // kernel as transposed views of the [b, S, heads, d] layout, and the kernel's gradients
  // keep that layout (empty_like): nothing is copied.
  return project_qkv_backward(sb, l, a, dq, dk, dv, k_copy, /*qv_head_major=*/!torchtitan(sb), grads);
}

// ---- LlamaMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x)) ---------------------------------
void mlp_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool whole) {
  if (liger(sb)) return liger_mlp_forward(sb, l, a, phase, rc);
  const StepShapes& s = sb.shapes;
  const std::int64_t ni = s.n * s.I;
  const TensorId x = a.norm2.y;
  a.gate = project(sb, l, "mlp.gate_proj", "mlp.gate", x, s.h, s.I, phase, rc);
  a.act = sb.graph.tensor(layer_name(l, "mlp.silu", rc), ni * s.e, kAct);
  sb.graph.op(layer_name(l, "mlp.silu", rc), phase, l, {a.gate}, {a.act}, {.flops = 4.0 * double(ni)});
  a.up = project(sb, l, "mlp.up_proj", "mlp.up", x, s.h, s.I, phase, rc);
  a.prod = sb.graph.tensor(layer_name(l, "mlp.prod", rc), ni * s.e, kAct);
  sb.graph.op(layer_name(l, "mlp.mul", rc), phase, l, {a.act, a.up}, {a.prod}, {.flops = double(ni)});
  // A non-reentrant recompute stops once the last saved tensor is packed: down_proj saves its
  // input before it runs, so neither it nor the residual add is recomputed.
  if (!whole) return;
  a.down = project(sb, l, "mlp.down_proj", "mlp.down", a.prod, s.I, s.h, phase, rc, kTr);
  sb.graph.add_input(sb.graph.last_op(), x);  // the layer's hidden_states, until the MLP returns
}

TensorId mlp_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_out, Ids& grads) {
  if (liger(sb)) return liger_mlp_backward(sb, l, a, d_out, grads);
  const StepShapes& s = sb.shapes;
  const std::int64_t ni = s.n * s.I;
  const TensorId d_prod = project_backward(sb, l, "mlp.down_proj.bwd", "grad.mlp.down", "mlp.prod.grad", d_out, a.prod,
                                           s.I, s.h, s.mlp_bias, grads);
  const TensorId d_act = sb.graph.tensor(layer_name(l, "mlp.silu.grad"), ni * s.e, kTr);
  const TensorId d_up = sb.graph.tensor(layer_name(l, "mlp.up.grad"), ni * s.e, kTr);
  sb.graph.op(layer_name(l, "mlp.mul.bwd"), kB, l, {d_prod, a.act, a.up}, {d_act, d_up}, {.flops = 2.0 * double(ni)});
  const TensorId x = a.norm2.y;
  const TensorId d_xu = project_backward(sb, l, "mlp.up_proj.bwd", "grad.mlp.up", "mlp_norm.out.grad.up", d_up, x, s.h,
                                         s.I, s.mlp_bias, grads);
  const TensorId d_gate = sb.graph.tensor(layer_name(l, "mlp.gate.grad"), ni * s.e, kTr);
  sb.graph.op(layer_name(l, "mlp.silu.bwd"), kB, l, {d_act, a.gate}, {d_gate}, {.flops = 8.0 * double(ni)});
  const TensorId d_xg = project_backward(sb, l, "mlp.gate_proj.bwd", "grad.mlp.gate", "mlp_norm.out.grad.gate", d_gate,
                                         x, s.h, s.I, s.mlp_bias, grads);
  const TensorId d_x = sb.graph.tensor(layer_name(l, "mlp_norm.out.grad"), s.n * s.h * s.e, kTr);
  sb.graph.op(layer_name(l, "mlp.proj.grad_sum"), kB, l, {d_xu, d_xg}, {d_x});
  return d_x;
}

// ---- LlamaDecoderLayer -------------------------------------------------------------------
HfLayerActs layer_forward(HfStep& sb, int l, TensorId x, Phase phase, bool rc, LayerPass pass) {
  const StepShapes& s = sb.shapes;
  HfLayerActs a;
  a.in = x;
  a.norm1 = norm_forward(sb, layer_norm_spec(s, l, false), x, phase, rc);
  attention_forward(sb, l, a, phase, rc, pass == LayerPass::Plain && !torchtitan(sb) && !trl_chunked_loss(sb));
  const TensorId o = project(sb, l, "attn.o_proj", "attn.o_proj.out", a.o, s.H * s.d, s.h, phase, rc, kTr);
  // Python's locals outlive their last use: the decoder layer's hidden_states holds the norm's
  // output, and LlamaAttention.forward's query_states, key_states and value_states hold q, k
  // and v, until the attention returns (what a forward without a graph, checkpointed, keeps
  // longer).
  for (const TensorId t : {a.norm1.y, a.q, a.k, a.v}) sb.graph.add_input(sb.graph.last_op(), t);
  a.mid = sb.graph.tensor(layer_name(l, "mid", rc), s.n * s.h * s.e, kAct);
  sb.graph.op(layer_name(l, "attn.residual", rc), phase, l, {x, o}, {a.mid});
  a.norm2 = norm_forward(sb, layer_norm_spec(s, l, true), a.mid, phase, rc);
  mlp_forward(sb, l, a, phase, rc, pass != LayerPass::RecomputeUntilSaved);
  if (pass == LayerPass::RecomputeUntilSaved) {
    a.last_forward_op = sb.graph.last_op();
    return a;
  }
  const Name out = l + 1 < s.layers ? layer_name(l + 1, "in", rc) : step_name("loss.final_norm.in", rc);
  a.out = sb.graph.tensor(out, s.n * s.h * s.e, kAct);
  a.last_forward_op = sb.graph.op(layer_name(l, "mlp.residual", rc), phase, l, {a.mid, a.down}, {a.out});
  // LlamaDecoderLayer.forward's `hidden_states, _ = self.self_attn(...)`: `_` holds eager
  // attention's returned weights (the probabilities in the compute dtype) until the layer
  // returns, which a forward without a graph (checkpointed) would otherwise have freed.
  if (a.probs >= 0) sb.graph.add_input(a.last_forward_op, a.probs);
  // The model's loop (`hidden_states = decoder_layer(hidden_states, ...)`, torchtitan's
  // `h = layer(h, ...)`) holds the layer's input until the layer returns, which matters where
  // nothing saves it (bf16: the norms save fp32 copies).
  sb.graph.add_input(a.last_forward_op, a.in);
  return a;
}

TensorId layer_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_out, Ids& grads) {
  const StepShapes& s = sb.shapes;
  const TensorId d_xn2 = mlp_backward(sb, l, a, d_out, grads);
  const TensorId d_mid = norm_backward(sb, layer_norm_spec(s, l, true), a.norm2, d_xn2, d_out, grads);
  const TensorId d_o = project_backward(sb, l, "attn.o_proj.bwd", "grad.attn.o", "attn.out.grad", d_mid, a.o, s.H * s.d,
                                        s.h, s.o_bias, grads);
  const TensorId d_xn1 = attention_backward(sb, l, a, d_o, grads);
  return norm_backward(sb, layer_norm_spec(s, l, false), a.norm1, d_xn1, d_mid, grads);
}

}  // namespace longctx::step::hf
