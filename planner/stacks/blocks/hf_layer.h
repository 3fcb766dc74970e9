#pragma once
// transformers' decoder layer (4.57, models/llama/modeling_llama.py; Qwen2's and Qwen3's are
// copies of it, with q/k/v biases or per-head q and k norms) as autograd runs it, op by op:
// its RMSNorm (hf_norm.cpp), projections and RoPE (hf_projection.cpp), attention
// (hf_attention.cpp), MLP and the layer around them (hf_layer.cpp). The layer calls the
// stack's variant of each op through sb.ops; kTransformersOps names transformers' own.
// Footprints: footprint/hf.h.
#include "planner/stacks/blocks/hf_step.h"

namespace longctx::step::blocks {

// transformers' own ops, every one.
extern const LayerOps kTransformersOps;

// ---- RMSNorm names and LlamaRMSNorm (hf_norm.cpp) -------------------------------------------
// A decoder layer's two norms (the MLP's when `mlp`), the model's final norm, and Qwen3's
// per-head norm of q or k.
NormSpec layer_norm_spec(const StepShapes& s, int l, bool mlp);
NormSpec final_norm_spec(const StepShapes& s);
NormSpec head_norm_spec(const StepShapes& s, int l, bool q);
NormActs llama_norm_forward(HfStep& sb, const NormSpec& ns, TensorId x, Phase phase, bool rc);
TensorId llama_norm_backward(HfStep& sb, const NormSpec& ns, const NormActs& a, TensorId grad, TensorId residual,
                             Ids& grads);
// The norm's backward from d_xr, the normalized input's gradient in fp32, to the input's
// (RsqrtBackward0 to PowBackward0, and in bf16 the cast back), which torch's composite
// RMSNorm shares (torch_norm.cpp).
TensorId norm_statistics_backward(HfStep& sb, const NormSpec& ns, const NormActs& a, TensorId d_xr, TensorId residual);

// ---- Projections and RoPE (hf_projection.cpp) ---------------------------------------------
// A projection's forward: [n, in] x [in, out] (+ bias) -> [n, out] e (its `category`).
TensorId project(HfStep& sb, int l, const char* name, const char* out_name, TensorId x, std::int64_t in,
                 std::int64_t out, Phase phase, bool rc, Category category = kAct);
// A projection's backward: its weight's gradient (appended to `grads`) and, unless `into` is
// given (the input's gradient is added into it in place), the input's gradient [n, in] e.
TensorId project_backward(HfStep& sb, int l, const char* name, const char* grad_name, const char* in_grad_name,
                          TensorId d_y, TensorId x, std::int64_t in, std::int64_t out, bool bias, Ids& grads,
                          TensorId into = -1);
// apply_rotary_pos_emb on q or k of `heads` heads ([n, heads*d] e out), and its backward.
TensorId transformers_rope(HfStep& sb, int l, const char* name, const char* out_name, Ids reads, std::int64_t heads,
                           Phase phase, bool rc);
TensorId transformers_rope_backward(HfStep& sb, int l, const char* name, const char* out_name, TensorId grad,
                                    std::int64_t heads, const HfLayerActs& a);
// A gradient of q, k or v reshaped from [b, heads, S, d] to the projection's [n, heads*d]:
// a copy where the kernel's gradient is laid out head-major (ViewBackward0's reshape).
TensorId head_major_copy(HfStep& sb, int l, const char* name, const char* out_name, TensorId grad, std::int64_t heads);
// q_proj, k_proj, v_proj (Qwen3's q and k norms) and the rotation of q and k, into a.q, a.k, a.v.
void transformers_project_qkv(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc);
// Their backward from the attention's dq, dk, dv (each [n, heads*d] e), returning the
// attention norm's output gradient: gradients laid out head-major are copied back first (k's
// when `k_head_major`, q's and v's when `qv_head_major`).
TensorId project_qkv_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId dq, TensorId dk, TensorId dv,
                              bool k_head_major, bool qv_head_major, Ids& grads);

// ---- sdpa, flash_attention_2 and eager attention (hf_attention.cpp) -------------------------
// The kernel's gradients of q, k and v, and whether k's reaches its projection head-major.
struct QkvGrads {
  TensorId dq = -1, dk = -1, dv = -1;
  bool k_head_major = false;
};
void transformers_attention_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool cache);
QkvGrads attention_kernel_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_o);
// The kernel's backward, then the projections' (q and v gradients arrive head-major).
TensorId transformers_attention_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_o, Ids& grads);

// ---- LlamaMLP and the decoder layer (hf_layer.cpp) ----------------------------------------
void llama_mlp_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool whole);
TensorId llama_mlp_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_out, Ids& grads);
HfLayerActs layer_forward(HfStep& sb, int l, TensorId x, Phase phase, bool rc, LayerPass pass);
// Returns the layer input's gradient; appends the layer's weight gradients to `grads`.
TensorId layer_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_out, Ids& grads);

}  // namespace longctx::step::blocks
