// torchtitan's decoder-layer ops where its model code differs from transformers' (step.h):
// the attention's projections and rotation (llama3's complex RoPE, qwen3's q/k norms and
// rotate-half RoPE), torch's RMSNorm, and the attention under context parallel; the rest is
// transformers' sdpa layer. Footprints: footprint/torchtitan.h, footprint/hf.h.
#include "planner/footprint/hf.h"
#include "planner/footprint/torchtitan.h"
#include "planner/stacks/blocks/hf_layer.h"
#include "planner/stacks/blocks/torch_norm.h"
#include "planner/stacks/torchtitan/step.h"

namespace longctx::step::torchtitan {

using namespace blocks;
namespace tt = footprint::torchtitan;

namespace {

// torchtitan's apply_rotary_emb for q or k (the first of `reads`): view_as_complex(x.float())
// * freqs_cis [n, heads, d/2] complex64, which is the output in fp32. In bf16 x.float() is a
// copy [n, heads*d] fp32 that the function's local holds until it returns (after k's
// rotation, which reads it from `held`), and type_as casts the product to [n, heads*d] e.
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
              {.workspace = tt::rope_forward_workspace(s, heads), .flops = 6.0 * double(elems)});
  return y;
}

// llama3's rotation of q and k by complex multiplication; under context parallel freqs_cis
// indexed at the rank's positions first [n, d/2] complex64, saved by both products.
void llama3_rope(HfStep& sb, int l, HfLayerActs& a, TensorId q, TensorId k, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  Ids table;
  if (s.r > 1) {
    a.rope_table = sb.graph.tensor(layer_name(l, "attn.freqs_cis.positions", rc), tt::cp_freqs_bytes(s), kAct);
    sb.graph.op(layer_name(l, "attn.freqs_cis.index", rc), phase, l, {step_of(sb).cp_positions}, {a.rope_table},
                {.workspace = tt::cp_freqs_workspace(s)});
    table = {a.rope_table};
  }
  TensorId q32 = -1, k32 = -1;
  a.q = complex_rope(sb, l, "attn.rope_q", "attn.q.fp32", "attn.q_rotated", q, table, s.H, phase, rc, q32);
  Ids held = {q};
  if (a.rope_table >= 0) held.push_back(a.rope_table);
  if (q32 != q) held.push_back(q32);
  a.k = complex_rope(sb, l, "attn.rope_k", "attn.k.fp32", "attn.k_rotated", k, held, s.K, phase, rc, k32);
}

// torchtitan's attention projections and rotation (llama3 and qwen3 Attention.forward): wq,
// wk, wv first, then qwen3's q and k norms (nn.RMSNorm over head_dim), then apply_rotary_emb:
// llama3's complex product from freqs_cis, or qwen3's rotate-half form from its rope_cache
// buffer, whose cos and sin slices `.to(x.dtype)` are views (of the fp32 buffer, or under
// FSDP2 in bf16 of the block's cast copy of it, saved by the products). q's input to the
// rotation lives until the function returns, after k's rotation. (Without FSDP torchtitan
// runs bf16 under autocast, where the slices would be copies: not modelled, refused.)
void project_qkv(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  const std::int64_t qw = s.H * s.d, kw = s.K * s.d;
  TensorId q = project(sb, l, "attn.q_proj", "attn.q", a.norm1.y, s.h, qw, phase, rc);
  TensorId k = project(sb, l, "attn.k_proj", "attn.k", a.norm1.y, s.h, kw, phase, rc);
  a.v = project(sb, l, "attn.v_proj", "attn.v", a.norm1.y, s.h, kw, phase, rc);
  if (!s.qk_norm) return llama3_rope(sb, l, a, q, k, phase, rc);
  a.q_norm = sb.ops.norm_forward(sb, head_norm_spec(s, l, true), q, phase, rc);
  a.k_norm = sb.ops.norm_forward(sb, head_norm_spec(s, l, false), k, phase, rc);
  q = a.q_norm.y;
  k = a.k_norm.y;
  Ids reads_q = {q}, reads_k = {k, q};
  a.rope_table = step_of(sb).rope_cache_cast[static_cast<std::size_t>(l)];
  if (a.rope_table >= 0) {
    reads_q.push_back(a.rope_table);
    reads_k.push_back(a.rope_table);
  }
  a.q = transformers_rope(sb, l, "attn.rope_q", "attn.q_rotated", reads_q, s.H, phase, rc);
  a.k = transformers_rope(sb, l, "attn.rope_k", "attn.k_rotated", reads_k, s.K, phase, rc);
}

// The rotations' backward: qwen3's rotate-half as transformers' (footprint::hf::rope_workspace),
// reading cos and sin as views of the buffer or of the block's cast copy; llama3's complex one.
TensorId rope_backward(HfStep& sb, int l, const char* name, const char* out_name, TensorId grad, std::int64_t heads,
                       const HfLayerActs& a) {
  const StepShapes& s = sb.shapes;
  if (!s.qk_norm) return complex_rope_backward(sb, l, name, out_name, grad, heads, a.rope_table);
  const TensorId d_x = sb.graph.tensor(layer_name(l, out_name), s.n * heads * s.d * s.e, kTr);
  Ids reads = {grad};
  if (a.rope_table >= 0) reads.push_back(a.rope_table);
  sb.graph.op(layer_name(l, name), kB, l, reads, {d_x},
              {.workspace = footprint::hf::rope_workspace(s, heads), .flops = 3.0 * double(s.n * heads * s.d)});
  return d_x;
}

// Without context parallel, transformers' sdpa call without a mask or a cache.
void attention_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool cache) {
  if (sb.shapes.r > 1) return ring_attention_forward(sb, l, a, phase, rc);
  transformers_attention_forward(sb, l, a, phase, rc, cache);
}

// torchtitan's q, k and v reach the kernel as transposed views of the [b, S, heads, d] layout,
// and the kernel's gradients keep that layout (empty_like): q's and v's are not copied back.
TensorId attention_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_o, Ids& grads) {
  if (sb.shapes.r > 1) return ring_attention_backward(sb, l, a, d_o, grads);
  const QkvGrads g = attention_kernel_backward(sb, l, a, d_o);
  return project_qkv_backward(sb, l, a, g.dq, g.dk, g.dv, g.k_head_major, /*qv_head_major=*/false, grads);
}

}  // namespace

TensorId complex_rope_backward(HfStep& sb, int l, const char* name, const char* out_name, TensorId grad,
                               std::int64_t heads, TensorId table) {
  const StepShapes& s = sb.shapes;
  const TensorId d_x = sb.graph.tensor(layer_name(l, out_name), s.n * heads * s.d * s.e, kTr);
  Ids reads = {grad};
  if (table >= 0) reads.push_back(table);
  sb.graph.op(layer_name(l, name), kB, l, reads, {d_x},
              {.workspace = tt::rope_backward_workspace(s, heads), .flops = 6.0 * double(s.n * heads * s.d)});
  return d_x;
}

const LayerOps kTorchtitanOps = {
    .norm_forward = torch_norm_forward,
    .norm_backward = torch_norm_backward,
    .rope = transformers_rope,
    .rope_backward = rope_backward,
    .project_qkv = project_qkv,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .mlp_forward = llama_mlp_forward,
    .mlp_backward = llama_mlp_backward,
};

}  // namespace longctx::step::torchtitan
