#pragma once
// The hf stack (stack.h): what Hugging Face transformers' Llama-family modeling code
// (transformers 4.57, models/llama/modeling_llama.py and the Qwen2/Qwen3/Mistral copies of
// it) and torch.optim.AdamW allocate beyond their ops' outputs, op by op as autograd runs
// them. Shapes: step_shapes.h; every figure is per rank, e bytes an element of the model's
// dtype. The ops that use them: planner/stacks/blocks/hf_*.cpp and planner/stacks/hf/step.cpp.
#include <cstdint>

#include "planner/footprint/step_shapes.h"

namespace longctx::footprint::hf {

// ---- LlamaRotaryEmbedding.forward, once per model forward -------------------------------
// cos and sin [1, S, d] e each: `emb.cos() * attention_scaling`, cast to the model's dtype
// (position_ids is cache_position.unsqueeze(0): one row whatever the batch).
std::int64_t rope_table_bytes(const StepShapes& s);
// Beside them while they are made: position_ids as float [1, 1, S] fp32, freqs = inv_freq @
// positions [1, S, d/2] fp32, emb = cat(freqs, freqs) [1, S, d] fp32, and cos() before its
// scaling [1, S, d] fp32; in bf16 the fp32 cos and sin both, before `.to(x.dtype)`.
std::int64_t rope_tables_workspace(const StepShapes& s);
// The same with the batch's own position_ids [b, S/u] (ArcticTraining passes them, per rank
// under Ulysses): tables [b, S/u, d] e each, over the rank's n tokens.
std::int64_t rope_table_bytes_per_token(const StepShapes& s);
std::int64_t rope_tables_workspace_per_token(const StepShapes& s);

// ---- LlamaRMSNorm over `rows` rows of `width` --------------------------------------------
// forward: `hidden_states.pow(2)` [rows, width] fp32, freed once `.mean(-1)` has reduced it.
std::int64_t norm_square_bytes(std::int64_t rows, std::int64_t width);
// backward of `weight * x_normed` (MulBackward0): grad * x_normed [rows, width] e before its
// sum over the rows gives the weight's gradient.
std::int64_t norm_weight_backward_workspace(const StepShapes& s, std::int64_t rows, std::int64_t width);
// backward of `x * rsqrt(variance + eps)`: grad * x [rows, width] fp32 before its row sums.
std::int64_t norm_scale_backward_workspace(std::int64_t rows, std::int64_t width);
// backward of `rsqrt`: -0.5 * grad * rstd^3 through two [rows] fp32 temporaries.
std::int64_t norm_rsqrt_backward_workspace(std::int64_t rows);
// backward of `pow(2)` (PowBackward0: grad * 2 * x^1): x^1, 2 * x^1 and their product with the
// gradient, [rows, width] fp32 each; the product is then added into the gradient that
// `x * rstd`'s backward produced (autograd's in-place accumulation) and freed.
std::int64_t norm_pow_backward_workspace(std::int64_t rows, std::int64_t width);

// ---- apply_rotary_pos_emb on q or k of `heads` heads ------------------------------------
// (q * cos) + (rotate_half(q) * sin): the two products [n, heads*d] e beside the sum
// (rotate_half's cat is freed before the second product is complete: at most two at once
// beside the output, or beside the cat and the first product). Backward alike: the sine
// path's gradient and the two slice gradients of rotate_half, at most two beside the output.
std::int64_t rope_workspace(const StepShapes& s, std::int64_t heads);

// ---- sdpa ---------------------------------------------------------------------------------
// Backward scratch of scaled_dot_product_attention's flash kernel: the CPU kernel's block
// buffers (attention.h, flash_backward_scratch); on CUDA its dq accumulator and row sums,
// and under GQA the gradients of k and v over the query heads before their sum over each
// group, dk_expanded and dv_expanded [b, S, H, d] e (flash_attn/flash_api.cpp, mha_bwd).
std::int64_t sdpa_backward_workspace(const StepShapes& s);

// ---- eager_attention_forward --------------------------------------------------------------
// The [b, H, S, S] scores in the model's dtype, and the softmax's fp32 output.
std::int64_t eager_scores_bytes(const StepShapes& s);
std::int64_t eager_probs_bytes(const StepShapes& s);
// An additive causal mask [b, 1, S, S] e of 0 and the dtype's minimum: the one
// create_causal_mask builds for eager attention (masking_utils.py, eager_mask, from a [S, S]
// bool comparison), and sdpa's conversion of a boolean mask (convert_boolean_attn_mask).
std::int64_t additive_mask_bytes(const StepShapes& s);
std::int64_t eager_mask_workspace(const StepShapes& s);
// The boolean mask sdpa gets without a cache: [b, 1, S, S] bool, built from two [S, S] bool
// comparisons combined (causal, and the packed-sequence check) beside it.
std::int64_t boolean_mask_bytes(const StepShapes& s);
std::int64_t boolean_mask_workspace(const StepShapes& s);

// ---- ForCausalLMLoss (loss/loss_utils.py) -----------------------------------------------
// The labels padded by one ignore index and shifted: [b, S+1] int64, held by nll_loss.
std::int64_t shifted_labels_bytes(const StepShapes& s);

// ---- torch.utils.checkpoint ---------------------------------------------------------------
// preserve_rng_state: each checkpointed layer keeps torch.get_rng_state(), the CPU
// generator's state [5056] uint8, until its backward; on the CPU virtual device that is the
// device. (The CUDA generator's state is a CPU tensor too: no device bytes.)
std::int64_t checkpoint_rng_state_bytes(const StepShapes& s);

// ---- torch.optim.AdamW -------------------------------------------------------------------
// State per parameter tensor: exp_avg and exp_avg_sq in the parameter's dtype, and `step`, a
// scalar fp32 tensor: on the parameter's device when fused, else on the CPU (device bytes
// only on the CPU virtual device).
std::int64_t adamw_state_bytes(const StepShapes& s, int group, bool fused);
// Scratch of one group's update on the CPU, where torch.optim picks no foreach kernels
// (_single_tensor_adamw): a parameter at a time, `exp_avg_sq.sqrt()` and its quotient by the
// bias correction [elems] e each, beside the previous parameter's quotient (`denom`, a loop
// local until it is replaced): the largest such sum over the group's parameters, in the order
// transformers registers them.
std::int64_t adamw_single_tensor_workspace(const StepShapes& s, int group);
// Scratch of the whole update on CUDA (foreach, _multi_tensor_adamw): `torch._foreach_sqrt`
// of every parameter's exp_avg_sq at once, divided and added to in place: all the model's
// parameter elements, e bytes each.
std::int64_t adamw_foreach_workspace(const StepShapes& s);

}  // namespace longctx::footprint::hf
