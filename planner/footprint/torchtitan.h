#pragma once
// The torchtitan stack (stack.h): what torchtitan's Llama 3 model (0.2.2,
// models/llama3/model/model.py) allocates beyond its ops' outputs where it differs from
// transformers' (footprint/hf.h, whose layer it otherwise shares). Shapes: step_shapes.h;
// figures per rank, e bytes an element of the model's dtype. The ops that use them:
// planner/stacks/torchtitan/ (model.cpp, context_parallel.cpp, step.cpp).
#include <cstdint>

#include "planner/footprint/step_shapes.h"
#include "planner/footprint/torch_ring_attention.h"

namespace longctx::footprint::torchtitan {

// Transformer.__init__ registers freqs_cis = precompute_freqs_cis(d, max_seq_len): [S, d/2]
// complex64, 8 bytes an element, on the model's device for the whole run.
std::int64_t freqs_cis_bytes(const StepShapes& s);

// qwen3's model (models/qwen3/model/model.py) registers rope_cache = [cos | sin] [S, 2d] fp32
// instead, passed to every block. Under FSDP2 with a bf16 param_dtype each block's pre-forward
// casts its floating-point inputs (MixedPrecisionPolicy.cast_forward_inputs), rope_cache among
// them: [S, 2d] e a block (rope_cache_cast_bytes), which apply_rotary_emb's slices view and
// its products save; a checkpointed block keeps it as its input until its backward.
std::int64_t rope_cache_bytes(const StepShapes& s);
std::int64_t rope_cache_cast_bytes(const StepShapes& s);

// apply_rotary_emb on q or k of `heads` heads: view_as_complex(x.float()) * freqs_cis, a
// complex64 [n, heads, d/2] product, viewed back as [n, heads*d] fp32 and cast with
// type_as. In fp32 the product is the output and nothing else is made. In bf16 the input's
// fp32 copy (a separate tensor: the function's local lives until it returns) and the
// product beside the cast output: this is the product.
std::int64_t rope_forward_workspace(const StepShapes& s, std::int64_t heads);

// Its backward (MulBackward0 of the complex product): grad * freqs_cis.conj(), where the
// conjugate of the table the product saved is materialized (resolve_conj) for the product:
// the [S, d/2] slice, S·d/2·8 bytes (context parallel: the rank's [n, d/2] table); in bf16 also the gradient's fp32 copy (ToCopyBackward0 of type_as) and the complex
// product before the cast back (ToCopyBackward0 of x.float()).
std::int64_t rope_backward_workspace(const StepShapes& s, std::int64_t heads);

// ---- Context parallel (parallelism.context_parallel_degree = r, s.r) ----------------------
// torchtitan's context parallel runs torch's ring attention (torch_ring_attention.h) with its
// defaults: load balanced (the head-tail balancer), k/v all-gathered, q, k and v the
// transposed views of [b, Sl, heads, d] the model makes, the output's gradient laid out
// [b, Sl, H, d] (the gradient of `output.transpose(1, 2).contiguous()`). The ring's rank
// decides which blocks it skips, so its temporaries differ by rank, and the last rank's output
// keeps q's layout (no block of a later rank is merged into it by torch.cat), so its
// `.contiguous()` copies nothing: it holds one [n, H*d] e less in every block. The plan is
// the other ranks' step, with the most any rank holds in attention, the last included: the
// last rank's own temporaries can be the larger (at r = 2 it is the only rank whose later
// steps attend half of k/v with all of q: on an H100 for Llama-3.1-8B's heads at 128K tokens a
// rank, 2.7 GB more in forward and 268 MB more in backward than rank 0), and it holds no more
// than the others anywhere else, so the plan bounds every rank and is the last rank's step
// wherever the other ranks' copies of earlier blocks are not live (checkpointed layers, the
// first block).
torch_ring::RingShape ring_shape(const StepShapes& s, int rank);

// The attention's forward beyond q, k, v and its outputs (out [b, H, Sl, d] e, lse [b, H, Sl]
// fp32), and its backward beyond its inputs and dq [n, H*d] e with the dk/dv pair
// [2, n, K*d] e: the most of every rank.
std::int64_t ring_forward_workspace(const StepShapes& s);
std::int64_t ring_backward_workspace(const StepShapes& s);

// Bytes a rank sends: forward, its k/v pair to the r-1 others (the all-gather); backward, the
// pair gathered again and the fp32 dk/dv pair passed on at each of the r steps (all-to-all).
double ring_forward_sent_bytes(const StepShapes& s);
double ring_backward_sent_bytes(const StepShapes& s);

// train.py post_dataloading_process -> prepare_context_parallel_input
// (distributed/context_parallel.py): positions = arange(S) int32 [S] (expanded to [b, S], a
// view), then cp_shard -> torch's _context_parallel_buffers: the head-tail balancer's indices
// [1, S] int32 (_HeadTailLoadBalancer._generate_indices), and for each of the inputs, labels
// [b, S] int64 and positions: torch.gather(buffer, 1, indices.expand(b, S)) [b, S], which
// makes its int32 index int64 [b, S] while it runs, then
// distribute_tensor(..., [Shard(1)], src_data_rank=None).to_local(): the rank's [b, Sl] copy.
// The gathered buffer goes when the loop takes the next one; the positions and indices when
// the function returns.
std::int64_t cp_positions_bytes(const StepShapes& s);  // [S] int32
std::int64_t cp_indices_bytes(const StepShapes& s);    // [1, S] int32
// Beyond the shard it returns ([b, Sl] of `elem` bytes), what sharding one buffer holds at
// its most: the gathered [b, S] buffer and the int64 index beside it.
std::int64_t cp_shard_workspace(const StepShapes& s, std::int64_t elem);

// Every block's reshape_for_broadcast (model.py) with positions: freqs_cis indexed by them,
// [n, d/2] complex64 (b = 1: freqs_cis[positions.squeeze(0)], [Sl, d/2]; b > 1:
// torch.gather of the table expanded over the batch, [b, Sl, 1, d/2]), saved by the q and k
// products until their backward. While it is made: the index in int64 (b = 1: positions [Sl];
// b > 1: expanded to the output's shape [b, Sl, 1, d/2]).
std::int64_t cp_freqs_bytes(const StepShapes& s);
std::int64_t cp_freqs_workspace(const StepShapes& s);

}  // namespace longctx::footprint::torchtitan
