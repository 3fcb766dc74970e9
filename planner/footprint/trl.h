#pragma once
// TRL's chunked cross-entropy (the hf stack with `--hf-loss trl-chunked-nll`): SFTTrainer's
// `loss_type="chunked_nll"`, TRL 1.10 to 1.14.2 (trl/trainer/sft_trainer.py:
// _patch_chunked_ce_lm_head, _chunked_cross_entropy_loss, _chunk). The patched forward runs
// the backbone alone (use_cache=False) and computes lm_head and the loss itself: the hidden
// states' rows are shifted against the labels, gathered valid-first by an argsort of the
// label mask, and cut into chunks of 256 rows, each run under non-reentrant
// torch.utils.checkpoint, so no [n, V] tensor ever exists. Shapes: step_shapes.h; every figure
// is per rank, e bytes an element of the model's dtype. The ops: planner/stacks/blocks/trl_loss.cpp.
#include <cstdint>

#include "planner/footprint/step_shapes.h"

namespace longctx::footprint::trl {

// _CHUNKED_LM_HEAD_CHUNK_SIZE: rows of hidden states per chunk.
inline constexpr std::int64_t kChunkRows = 256;

// N = b*(S-1): the rows the loss sees, `hidden_states[..., :-1, :]` against `labels[..., 1:]`
// (every label valid: the batch's labels are its ids); under context parallel (s.r > 1) the
// rank's b*Sl rows against its shift_labels, unshifted.
std::int64_t loss_rows(const StepShapes& s);
// ceil(N / 256) chunks: all of 256 rows but the last, which holds what is left.
std::int64_t chunk_count(const StepShapes& s);
std::int64_t last_chunk_rows(const StepShapes& s);
// The rows of every chunk but the last (the last's when there is one chunk).
std::int64_t full_chunk_rows(const StepShapes& s);

// One chunk's `_chunk` over c rows (trl/trainer/sft_trainer.py), in forward and again in its
// recompute: logits = (h @ w.t()).float() [c, V] fp32 (in bf16 the matmul's [c, V] e output
// beside its copy while it is cast), log_softmax [c, V] fp32, and for the entropy metric
// log_p.exp() and its product with log_p, [c, V] fp32 each: four at once, beside the label mask
// `valid` [c] bool. The recompute keeps what backward reads, log_p and exp (the product's
// saved input), so the product's row sums [c] fp32 are made beside all four there; the scratch
// beside log_p is the rest, and the RNG state torch.random.fork_rng keeps while the
// non-reentrant checkpoint recomputes (device bytes on the CPU virtual device only: hf.h,
// checkpoint_rng_state_bytes).
std::int64_t chunk_forward_bytes(const StepShapes& s, std::int64_t c);
std::int64_t chunk_recompute_workspace(const StepShapes& s, std::int64_t c);

// Beside the argsort of the label mask: `valid.to(torch.int8)` [N] and the sorted values
// [N] int8 that argsort drops (the indices [N] int64 are `order`, kept for the gather's
// backward).
std::int64_t argsort_workspace(const StepShapes& s);

// preserve_rng_state: each chunk's frame keeps torch.get_rng_state() until its backward
// (device bytes only on the CPU virtual device; footprint/hf.h, checkpoint_rng_state_bytes).
std::int64_t rng_states_bytes(const StepShapes& s, std::int64_t chunks);

}  // namespace longctx::footprint::trl
