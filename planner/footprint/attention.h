#pragma once
// Attention over all of a rank's heads at once, with or without Ulysses: the flash kernel's
// scratch on CPU and CUDA, GQA's kv expansion, FlashAttention-2's dq accumulator, and the
// all-to-all send buffers. Forward and backward together. Shapes: step_shapes.h.
#include <cstdint>
#include <vector>

#include "planner/footprint/step_shapes.h"

namespace longctx::footprint {

// RoPE's cos and sin tables for this rank's S/(u*r) positions, built once for the run
// (runtime/src/norm_rope.cpp, RopeTables::make): cos, sin [S/(u*r), d/2] e bytes each.
std::int64_t rope_tables_bytes(const StepShapes& s);

// Bytes RoPE moves rotating `elems` elements (runtime/src/norm_rope.cpp, rope_rotate_out), forward
// or backward (which rotates the gradient back): each half written by x*cos, then read with
// the other half by the addcmul that writes it again, 5 passes of e bytes. The tables are
// read once per head from cache: not counted.
double rope_traffic(const StepShapes& s, std::int64_t elems);

// QK^T and PV over the causal half: 2 matmuls x 2 flops x S^2/2 per head, `heads` heads; a
// ring rank's share, 1/r of it.
double attention_flops(const StepShapes& s, std::int64_t heads);

// The flops the flash kernel computes for attention_flops' causal work, forward (backward
// computes 2.5x as many, over the same pairs). LibTorch's CPU kernel walks, for each block of
// qs queries, every block of ks keys up to the block's last row (FlashAttentionKernel.cpp,
// cpu_flash_attention and cpu_flash_attention_backward: num_keys = min(m + qBlockSize,
// kvSize), taken in steps of kvSplitSize), so it computes whole blocks across the diagonal:
// 1.25x the causal pairs at 2K tokens, 1.125x at 4K, 1.0625x at 8K. A ring rank's two
// diagonal chunk pairs are such kernels over S/(2r) tokens; its other pairs are whole blocks.
// On CUDA the causal work itself: FlashAttention-2's blocks of 128 rows walk at most 128
// keys past the diagonal, under 1% of the work from 16K tokens.
double attention_kernel_flops(const StepShapes& s, std::int64_t heads);

// Query-key pairs the CPU kernel computes over a causal attention of L tokens (above).
double cpu_causal_kernel_pairs(std::int64_t L);

// Elements of k (or v) around the Ulysses all-to-all: before it [n, u*kvr, d] (kv heads
// replicated to u when u > K), after it [b*S, kvr, d].
std::int64_t kv_sp_elems(const StepShapes& s);

// GQA inside the attention op (runtime/src/attention.cpp, kv_for_kernel, expand_kv and
// reduce_kv). LibTorch's CPU flash kernel takes grouped k and v as they are and returns dk, dv
// over the kv heads: nothing (0). On CUDA k and v are expanded to the query heads for the
// kernel, k_expanded, v_expanded [b*S, q_heads, d] e bytes each: a copy, except that one kv
// head expands as a view with stride 0 (and none is needed when q_heads == kv_heads). In
// backward the CUDA kernel's dk and dv are over the query heads too and are summed back over
// each group.
std::int64_t kv_expansion(const StepShapes& s, std::int64_t q_heads, std::int64_t kv_heads);

// FlashAttention-2's dq accumulator on CUDA, dq_accum [b*S, q_heads, d] fp32; the CPU kernel
// accumulates in place (0).
std::int64_t dq_accumulator(const StepShapes& s, std::int64_t q_heads);

// LibTorch's CPU flash kernel (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp) works in
// blocks of qs query rows by ks keys: qs = 256 from 768 rows up, 64 from 192, else
// min(32, S); ks = min(512, S).
std::int64_t cpu_flash_q_block(const StepShapes& s);
std::int64_t cpu_flash_kv_block(const StepShapes& s);

// The kernel's forward scratch (runtime/src/attention.cpp, flash_forward), per intra-op
// thread T on the CPU: a block's scores [qs, ks] fp32, its rows' running max and sum [qs] fp32
// each, its output accumulator [qs, d] fp32, and for bf16 inputs the scores in bf16 too
// [qs, ks] e. On CUDA nothing beyond the outputs (0).
std::int64_t flash_forward_scratch(const StepShapes& s);
// The CPU kernel's forward scratch for `q_rows` query rows against `keys` keys (blocks as
// above, from each), d the head size, e the element size, on `threads` threads.
std::int64_t cpu_flash_forward_scratch(std::int64_t q_rows, std::int64_t keys, std::int64_t d, std::int64_t e,
                                       std::int64_t threads);

// The kernel's backward scratch (runtime/src/attention.cpp, flash_backward). CPU, per thread
// T: a block's probabilities and their gradient [qs, ks] fp32 each (bf16: in bf16 too,
// [qs, ks] e each), and the rows' sums of dO*O [qs] fp32. CUDA: the dq accumulator
// (dq_accumulator) and the row sums of dO*O, [b, q_heads, S] fp32.
std::int64_t flash_backward_scratch(const StepShapes& s, std::int64_t q_heads);
// The CPU kernel's backward scratch for `q_rows` query rows against `keys` keys: its buffer
// (and for bf16 the buffer's copy in e) and row sums, all held until it returns.
std::int64_t cpu_flash_backward_scratch(std::int64_t q_rows, std::int64_t keys, std::int64_t e, std::int64_t threads);

// attn.flash (runtime/src/attention.cpp, AttentionFn::forward): the kv expansion to this
// rank's hl query heads beside the kernel's forward scratch.
std::int64_t flash_op_forward_workspace(const StepShapes& s);
// Its blocks in the order the caching allocator is asked for them (OpSpec::workspace_sequence):
// under GQA on CUDA the expanded k, then v, before the kernel makes the outputs, both
// returned once it has; otherwise one block after the outputs (empty).
std::vector<std::int64_t> flash_op_forward_workspace_sequence(const StepShapes& s);

// attn.flash.bwd (runtime/src/attention.cpp, AttentionFn::backward). CPU: the kernel's
// scratch alone (its dk, dv are the op's outputs). CUDA, under GQA the kernel
// writes dk_e and dv_e [b*S, hl, d] e over the query heads, beside the expanded k and v and
// its own scratch; once it returns the expanded k and v are freed and dk, then dv, are summed
// over their groups into the op's outputs dk_sp, dv_sp [b*S, kvr, d] e (one at a time beside
// the kernel's two). So at the kernel only dq of the outputs exists, and at the first sum dq
// and dk: the most beyond the op's outputs.
std::int64_t flash_op_backward_workspace(const StepShapes& s);

// Ulysses all-to-all of q, k, v (runtime/src/ulysses.cpp, ulysses_to_sequence with q_send and
// kv_send): the send buffers, q [n, H, d] and k, v laid out per destination [n, u*kvr, d]
// (replicated when u > K), e bytes. The same buffers carry dq, dk, dv back in backward.
std::int64_t ulysses_qkv_send_bytes(const StepShapes& s);

// The workspace of a forward exchange of `send` bytes (attn.a2a_qkv, attn.a2a_out) and of
// the output gradient's (attn.a2a_out.bwd): the send buffers, and with b > 1 samples the
// received ones too, [u, b, n, x, d] by source rank, which is not [b, u*n, x, d] in memory:
// the op's output is a copy made beside them (runtime/src/ulysses.cpp, to_sequence, q_from).
std::int64_t ulysses_exchange_workspace(const StepShapes& s, std::int64_t send);

// attn.a2a_qkv.bwd (runtime/src/ulysses.cpp, ToSequenceFn::backward): the received dq, dk and
// dv, as large as the send buffers (with kv replication, kvr*u > K, dk and dv arrive as
// [n, u*kvr, d] e and are summed over the replicas straight into the outputs), live beside
// the outputs; each exchange's send buffer is freed before the next one's.
std::int64_t ulysses_qkv_backward_workspace(const StepShapes& s);

// Ulysses all-to-all of the attention output, and of its gradient in backward
// (runtime/src/ulysses.cpp, ulysses_to_heads, ToHeadsFn): one send buffer o [n, H, d] e.
std::int64_t ulysses_out_send_bytes(const StepShapes& s);

// Bytes one rank sends in an all-to-all of `send` bytes over the u ranks of its group: all
// but its own slice.
double ulysses_sent_bytes(const StepShapes& s, std::int64_t send);

}  // namespace longctx::footprint
