#include "planner/footprint/trl.h"

#include <algorithm>

#include "planner/footprint/hf.h"

namespace longctx::footprint::trl {

// Under context parallel the Trainer hands the rank's shift_labels (trainer.py
// _prepare_context_parallel_inputs) and _chunked_cross_entropy_loss takes every row of its
// hidden states against them: N = b*Sl, no shift.
std::int64_t loss_rows(const StepShapes& s) { return s.r > 1 ? s.n : s.b * (s.S - 1); }

std::int64_t chunk_count(const StepShapes& s) { return std::max<std::int64_t>(1, (loss_rows(s) + kChunkRows - 1) / kChunkRows); }

std::int64_t last_chunk_rows(const StepShapes& s) { return loss_rows(s) - kChunkRows * (chunk_count(s) - 1); }

std::int64_t full_chunk_rows(const StepShapes& s) { return std::min(kChunkRows, loss_rows(s)); }

std::int64_t chunk_forward_bytes(const StepShapes& s, std::int64_t c) {
  // logits fp32, log_p, exp, exp * log_p as it is made, beside the label mask `valid` [c] bool
  // (the first pass saves nothing: exp dies at the product, before its row sums); in bf16 the
  // cast's moment (the [c, V] e output and its fp32 copy) is smaller.
  return std::max(4 * c * s.V * 4 + c, c * s.V * (s.e + 4));
}

std::int64_t chunk_recompute_workspace(const StepShapes& s, std::int64_t c) {
  // Beside log_p: logits, exp (saved for the product's backward) and the product while its row
  // sums [c] fp32 are made, `valid`, and fork_rng's state.
  return 3 * c * s.V * 4 + c * 4 + c + hf::checkpoint_rng_state_bytes(s);
}

std::int64_t argsort_workspace(const StepShapes& s) { return 2 * loss_rows(s); }

std::int64_t rng_states_bytes(const StepShapes& s, std::int64_t chunks) { return chunks * hf::checkpoint_rng_state_bytes(s); }

}  // namespace longctx::footprint::trl
