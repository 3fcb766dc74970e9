#include "longctx/planner/footprint/mlp.h"

namespace longctx::footprint {

std::int64_t swiglu_backward_workspace(const StepShapes& s) { return s.n * s.I * s.e; }  // scratch [n, I]

std::int64_t tiled_mlp_forward_workspace(const StepShapes& s, std::int64_t tiles) {
  const std::int64_t t = tile_split(s.n, tiles).rows;  // the largest tile's
  return 2 * t * s.I * s.e;  // gate (then silu, then the product), up [t, I] e
}

std::int64_t tiled_mlp_backward_workspace(const StepShapes& s, std::int64_t tiles) {
  const std::int64_t t = tile_split(s.n, tiles).rows;  // the largest tile's
  return 5 * t * s.I * s.e;  // gate, up, silu(gate), a (then d_up), da (then d_gate) [t, I] e
}

}  // namespace longctx::footprint
