#pragma once
// Untied Ulysses (head-chunked attention): the staged schedule's buffers, sized for one
// stage of c query heads per rank and reused, with the kv heads of a GQA group kept across
// the group's stages. Forward and backward together. Shapes: step_shapes.h; c = head chunk.
#include <cstdint>

#include "planner/footprint/step_shapes.h"

namespace longctx::footprint {

// Stages of one op: hl / c (runtime/src/attention.cpp, HeadChunkedAttentionFn's stage loop).
std::int64_t untied_stages(const StepShapes& s, std::int64_t c);

// Kv heads a stage reads, kvs = max(1, c / group) with group = hl / kvr query heads per kv
// head (runtime/src/attention.cpp, stage_of). K and V are projected and exchanged once per
// kv load and reused by the stages of their group.
std::int64_t untied_stage_kv_heads(const StepShapes& s, std::int64_t c);

// Times an op loads a group's kv heads: min(stages, kvr), the distinct groups its stages
// read (consecutive stages of one GQA group share the load).
std::int64_t untied_kv_loads(const StepShapes& s, std::int64_t c);

// One stage tensor of `heads` heads on either side of an all-to-all: [n, u*heads, d] before
// it, [b*S, heads, d] after it, e bytes (a "unit").
std::int64_t untied_stage_unit(const StepShapes& s, std::int64_t heads);

// q or k of `heads` heads from the projection to after RoPE (runtime/src/attention.cpp,
// qk_send): the send buffer [n, u*heads, d] (one unit), and one destination's slice at a
// time: its projection pre [n, heads, d] e and, with qk norm, the rstd [n*heads] fp32, the
// normed copy [n, heads, d] e and the norm's scratch beyond it (bf16: its fp32 copy of the
// slice, rms_norm_forward_workspace), before the slice is rotated into the send buffer.
std::int64_t untied_qk_projection_peak(const StepShapes& s, std::int64_t heads);

// What a group keeps across its stages in forward: k after RoPE and v, one unit of kvs heads
// each, or instead k and v expanded to the stage's c heads when that takes a copy
// (kv_expansion; the unexpanded ones are freed once expanded).
std::int64_t untied_group_forward(const StepShapes& s, std::int64_t c);

// attn.untied (runtime/src/attention.cpp, HeadChunkedAttentionFn::forward). Per stage: q is
// projected and rotated (its projection freed, or with qk norm held until q's rotation is
// done), then the kernel writes the stage's output o [b*S, c, d] e and log-sum-exp
// [b, c, S] fp32 with its block buffers, which the output out [n, H*d] e and lse
// [b, hl, S] fp32 of the whole op receive. u > 1: the exchanges' send and receive buffers
// (q's; the output's beside the kernel's output and log-sum-exp) are never more than the
// kernel's own moment holds.
std::int64_t untied_forward_workspace(const StepShapes& s, std::int64_t c);

// attn.untied.bwd (runtime/src/attention.cpp, HeadChunkedAttentionFn::backward, with
// q_or_k_backward and stage_heads). The input gradient dx [n, h] and the weight gradients are
// the op's outputs, allocated before the first stage; with qk norm the norms' weight
// gradients accumulate in fp32 [d] each and are cast at the end. A group keeps k (after
// RoPE; with qk norm also its projection and rstd) and v, or instead their expanded copies
// where expanding copies (kv_expansion), and the accumulated gradients dk_acc, dv_acc
// [b*S, kvs, d] e. A stage recomputes q (its projection too with qk norm), then the kernel
// allocates dq, and dk and dv over the stage's heads [b*S, c, d] e each (the CPU kernel, which
// takes grouped k and v: over its kv heads [b*S, kvs, d] e, added as they are), and a contiguous
// copy of the stage's slice of the output gradient when the stage does not span every head,
// beside its block buffers. After it q is freed, dk and dv are reduced over the group (one
// [b*S, kvs, d] sum) into the accumulators; then dq is pushed back one destination's slice
// [n, c, d] at a time: RoPE's backward of the slice and, with qk norm, the norm's backward
// over its n*c rows (rms_norm_backward_scratch: its weight gradient stays fp32) and its
// input gradient, into the input and weight gradients with in-place matmuls. u > 1: the
// stage's output and its gradient arrive as contiguous [b*S, c, d] copies (no slice copy for
// the kernel), q arrives beside its send buffer, and dq leaves through a send and a receive
// buffer.
std::int64_t untied_backward_workspace(const StepShapes& s, std::int64_t c);

// Bytes a rank sends in the all-to-alls of the staged forward (q, k, v in and the output
// back) and backward (q, k, v and the output and its gradient in, dq, dk, dv back).
double untied_forward_sent_bytes(const StepShapes& s);
double untied_backward_sent_bytes(const StepShapes& s);
// With a ring (r > 1), each stage's ring attention over its c heads: the bytes its hops send
// (ring_attention.h), every stage's; 0 without a ring.
double untied_ring_forward_sent_bytes(const StepShapes& s, std::int64_t c);
double untied_ring_backward_sent_bytes(const StepShapes& s, std::int64_t c);
// Of the stages' forward ring bytes, those beside their blocks (ring_forward_overlapped_bytes).
double untied_ring_forward_overlapped_bytes(const StepShapes& s, std::int64_t c);

}  // namespace longctx::footprint
