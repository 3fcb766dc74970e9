#pragma once
// The SwiGLU MLP, plain or tiled over rows: scratch beyond the op's outputs. Forward and
// backward together. Shapes: step_shapes.h; T = MLP tiles, t = ceil(n/T) rows in the largest
// tile (tile_split, parallel_config.h: the last tile is shorter when T does not divide n).
#include <cstdint>

#include "longctx/planner/footprint/step_shapes.h"

namespace longctx::footprint {

// Plain MLP backward of silu(gate) * up (runtime/src/layers.cpp, SwiGluFn::backward): one
// scratch [n, I] e (silu(gate), then 1 + gate - silu(gate), then sigmoid(gate)) beside the
// gradients d_gate, d_up [n, I] e it returns.
std::int64_t swiglu_backward_workspace(const StepShapes& s);

// Tiled MLP forward (runtime/src/layers.cpp, TiledMlpFn::forward), per tile: gate [t, I] e,
// which silu and then the product with up overwrite in place, and up [t, I] e; the tile's
// rows of the output [n, h] are written into the output directly.
std::int64_t tiled_mlp_forward_workspace(const StepShapes& s, std::int64_t tiles);

// Tiled MLP backward (runtime/src/layers.cpp, TiledMlpFn::backward), per tile: gate, up and
// silu(gate) recomputed, their product a, the product's gradient da, and the gradients of
// gate and up, one of which reuses a's buffer: 5 x [t, I] e.
std::int64_t tiled_mlp_backward_workspace(const StepShapes& s, std::int64_t tiles);

}  // namespace longctx::footprint
