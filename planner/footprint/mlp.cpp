#include "planner/footprint/mlp.h"

#include "planner/core/row_chunk.h"

namespace longctx::footprint {

std::int64_t swiglu_chunk_rows(const StepShapes& s, std::int64_t rows) {
  return rows < 1 ? 1 : row_chunk(rows, s.I * s.e);
}

std::int64_t swiglu_backward_workspace(const StepShapes& s) {
  return swiglu_chunk_rows(s, s.n) * s.I * s.e;  // one chunk's scratch [r, I] e
}

std::int64_t tiled_mlp_forward_workspace(const StepShapes& s, std::int64_t tiles) {
  const std::int64_t t = tile_split(s.n, tiles).rows;  // the largest tile's
  return 2 * t * s.I * s.e;  // gate (then silu, then the product), up [t, I] e
}

std::int64_t tiled_mlp_backward_workspace(const StepShapes& s, std::int64_t tiles) {
  const std::int64_t t = tile_split(s.n, tiles).rows;  // the largest tile's
  // gate (then d_up), up (then d_gate), a (then da) [t, I] e, and the in-place backward's
  // chunk scratch [r, I] e
  return 3 * t * s.I * s.e + swiglu_chunk_rows(s, t) * s.I * s.e;
}

namespace {
double passes(const StepShapes& s, int count) { return double(count) * double(s.n * s.I) * double(s.e); }
}  // namespace

double swiglu_forward_traffic(const StepShapes& s) { return passes(s, 5); }
double swiglu_backward_traffic(const StepShapes& s) { return passes(s, 25); }
double tiled_mlp_forward_traffic(const StepShapes& s) { return passes(s, 8); }
double tiled_mlp_backward_traffic(const StepShapes& s) { return passes(s, 38); }
double swiglu_transcendentals(const StepShapes& s, int evaluations) { return double(evaluations) * double(s.n * s.I); }

}  // namespace longctx::footprint
