#pragma once
// flash-attn's own kernels as transformers calls them (integrations/flash_attention.py, with
// `attn_implementation` flash_attention_2 or flash_attention_3), on `heads` query heads and
// `kv_heads` kv heads over the b*S tokens of a full sequence: what the backward allocates
// beyond dq, dk, dv (which flash_attn_interface.py makes with torch.empty_like). The forward
// allocates only its outputs, out [b*S, heads, d] e and softmax_lse [b, heads, S] fp32.
// Shapes: step_shapes.h.
#include <cstdint>
#include <vector>

#include "planner/footprint/step_shapes.h"

namespace longctx::footprint::flash {

// FlashAttention-2 (csrc/flash_attn/flash_api.cpp, mha_bwd): softmax_d [b, heads, S128] fp32,
// dq_accum [b, S128, heads, d32] fp32 (S128: S rounded up to 128; d32: d rounded up to 32),
// and under GQA dk_expanded, dv_expanded [b, S, heads, d] e each, summed into dk and dv over
// each group when the kernel returns.
std::int64_t fa2_backward_workspace(const StepShapes& s, std::int64_t heads, std::int64_t kv_heads);
// Its two fp32 scratch buffers alone, for `rows` query rows (PyTorch's copy of the kernel, which
// `at::_scaled_dot_product_flash_attention_backward` runs, allocates the same): dq_accum
// [b, rows128, heads, d32] (d32: 256 above a head of 192) and softmax_d [b, heads, rows128].
std::int64_t fa2_dq_accum_bytes(std::int64_t b, std::int64_t rows, std::int64_t heads, std::int64_t d);
std::int64_t fa2_softmax_d_bytes(std::int64_t b, std::int64_t rows, std::int64_t heads);

// FlashAttention-3 (hopper/flash_api.cpp, mha_bwd, head_dim <= 128, causal: blocks of 64 query
// rows and 128 keys): softmax_d and softmax_lse_log2 [b, heads, S64] fp32 each, dq_accum
// [b, heads, S64 * D] fp32, under GQA dk_accum, dv_accum [b, kv_heads, S128 * D] fp32 each (no
// copies over the query heads), and dq_semaphore [S64 / 64, b, heads] int32; D is the head
// size rounded up to 64, 96, 128, 192 or 256 (fa3_rounded_head_dim).
std::int64_t fa3_rounded_head_dim(std::int64_t d);
std::int64_t fa3_backward_workspace(const StepShapes& s, std::int64_t heads, std::int64_t kv_heads);

// Each backward's scratch as mha_bwd asks the caching allocator for it
// (OpSpec::workspace_sequence): the op's outputs dq, dk, dv first (0: the interface's
// torch.empty_like before the call), then the buffers above in the order listed, every one
// held until mha_bwd returns. As one block the scratch would need a hole as large as their
// sum (FA3 on 600K tokens of Llama-3.1-8B: 14.9 GB) where the pieces fit in smaller ones.
// The sums are fa2_backward_workspace and fa3_backward_workspace.
std::vector<std::int64_t> fa2_backward_workspace_sequence(const StepShapes& s, std::int64_t heads, std::int64_t kv_heads);
std::vector<std::int64_t> fa3_backward_workspace_sequence(const StepShapes& s, std::int64_t heads, std::int64_t kv_heads);

}  // namespace longctx::footprint::flash
