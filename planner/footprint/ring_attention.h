#pragma once
// Ring attention (context parallelism) over the r ranks of a ring, after the Ulysses exchange
// (runtime/src/ring_attention.cpp, RingAttentionFn): each rank keeps its queries; the k/v
// blocks travel round the ring one neighbour hop per step; partial outputs merge by their
// log-sum-exp. Forward and backward, CPU and CUDA. Shapes: step_shapes.h, and
//   c   = S/(2r): a chunk; the sequence is cut into 2r chunks and ring rank i holds chunks
//         i and 2r-1-i (causal load balance), Sr = 2c = S/r tokens of each sample
//   the ring's local q [b, Sr, hl, d] e, k and v [b, Sr, kvr, d] e (after the Ulysses
//   all-to-all: the rank's heads of its ring group's tokens)
// Every block is c query rows against c key rows: the block's kernel footprints are the
// whole-attention ones (attention.h) at S = c (ring_block_shapes).
#include <cstdint>

#include "planner/footprint/step_shapes.h"

namespace longctx::footprint {

// s with the sequence of one ring block: S = c, so attention.h's kernel footprints (scratch,
// GQA expansion, dq accumulator) read as one block's.
StepShapes ring_block_shapes(const StepShapes& s);

// Rows of a block, c = S/(2r).
std::int64_t ring_chunk(const StepShapes& s);

// s for a ring over `heads` query heads and `kv_heads` kv heads of the rank (a head-chunked
// stage: its c heads and the kv heads they read).
StepShapes ring_stage_shapes(const StepShapes& s, std::int64_t heads, std::int64_t kv_heads);

// attn.ring (RingAttentionFn::forward), beyond its outputs o_sp [b, Sr, hl, d] e and the
// log-sum-exp [2, b, hl, c] fp32 (each query half's contiguous, as the CUDA backward reads
// it). Live through the op: the running output [b, Sr, hl, d] fp32 (in fp32 runs it is o_sp
// itself). The next k/v pair, P = 2 [b, Sr, kvr, d] e, is received while the current one is
// attended: beside every block the pair arriving (all steps but the last) and the pair
// attended (all but the first, which attends the op's own k and v). Per block: the kernel's output [b, c, hl, d] e and lse [b, hl, c]
// fp32 beside its scratch (and on CUDA the block's k/v expanded to hl heads); then the merge:
// the merged lse, one weight [b, hl, c] fp32, and for bf16 the block output in fp32
// [b, c, hl, d]. At the end (bf16) o_sp is made from the fp32 output.
std::int64_t ring_forward_workspace(const StepShapes& s);

// attn.ring.bwd (RingAttentionFn::backward), beyond its outputs dq [b, Sr, hl, d] e and
// dk, dv [b, Sr, kvr, d] e. Live through the op: dq [b, Sr, hl, d] fp32 and the travelling
// dk, dv accumulators A = 2 [b, Sr, kvr, d] fp32 (in fp32 runs these are the outputs). The
// next k/v pair arrives while a step's blocks run (as in forward); then the accumulators hop,
// received beside the ones sent and the pair the next step attends; the last hop carries the
// accumulators home alone. Per block: the kernel's dq, dk, dv (e, over the kv heads on
// the CPU, over hl heads on CUDA before their sum) beside its scratch, then each summed
// into its fp32 accumulator through an fp32 copy (bf16). At the end (bf16) the three
// outputs are made from the fp32 ones, one at a time.
// `head_sliced_dout`: the output gradient is a slice of the rank's heads (a head-chunked stage
// without Ulysses), so a block's slice of it is never contiguous and the CPU kernel copies it
// whatever b is.
std::int64_t ring_backward_workspace(const StepShapes& s, bool head_sliced_dout = false);

// All-gather exchange (s.ring_gather; runtime ring_attention.h): forward, the gathered pairs
// [r, 2, b, Sr, kvr, d] e live through the blocks in place of the pairs in flight. Backward:
// dq fp32, the gathered pairs and every holder's accumulators [r, 2, b, Sr, kvr, d] fp32
// through the blocks; then the pairs are freed and this rank's sums [2, b, Sr, kvr, d] fp32
// received beside the accumulators (the reduce-scatter); then the outputs made from dq and
// the sums, dq first.

// Bytes one rank sends round the ring in forward (k and v, r-1 hops; all-gather: (r-1)/r of
// the gathered pairs) and in backward (k, v and their fp32 gradient accumulators, r-1 hops,
// and the accumulators once more; all-gather: the pairs gathered again and (r-1)/r of every
// holder's accumulators reduce-scattered).
double ring_forward_sent_bytes(const StepShapes& s);
double ring_backward_sent_bytes(const StepShapes& s);
// The exchanges each direction issues, each paying a collective's latency (OpSpec::launches):
// p2p, a hop per step (backward: and the accumulators' last); all-gather, the gather (backward:
// and the reduce-scatter).
int ring_forward_calls(const StepShapes& s);
int ring_backward_calls(const StepShapes& s);
// Of the forward's bytes, those that travel beside the blocks' compute (cost_model.h).
double ring_forward_overlapped_bytes(const StepShapes& s);

}  // namespace longctx::footprint
