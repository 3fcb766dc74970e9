#pragma once
// The SwiGLU MLP, plain or tiled over rows: scratch beyond the op's outputs. Forward and
// backward together. Shapes: step_shapes.h; T = MLP tiles, t = ceil(n/T) rows in the largest
// tile (tile_split, parallel_config.h: the last tile is shorter when T does not divide n).
#include <cstdint>

#include "planner/footprint/step_shapes.h"

namespace longctx::footprint {

// Rows of the chunks SwiGLU's backward takes over `rows` rows (runtime/src/mlp.cpp,
// swiglu_backward_in_place): row_chunk (row_chunk.h) of rows of I elements of e bytes.
std::int64_t swiglu_chunk_rows(const StepShapes& s, std::int64_t rows);

// Plain MLP backward of silu(gate) * up (runtime/src/mlp.cpp, SwiGluFn::backward): the
// gradients are written into gate's and up's buffers (d_gate into up's, d_up into gate's),
// which then live until the gate/up projection's backward has read them; beside them one
// chunk's scratch [r, I] e (silu(gate), then 1 + gate - silu(gate), then sigmoid(gate)).
std::int64_t swiglu_backward_workspace(const StepShapes& s);

// Tiled MLP forward (runtime/src/mlp.cpp, TiledMlpFn::forward), per tile: gate [t, I] e,
// which silu and then the product with up overwrite in place, and up [t, I] e; the tile's
// rows of the output [n, h] are written into the output directly.
std::int64_t tiled_mlp_forward_workspace(const StepShapes& s, std::int64_t tiles);

// Tiled MLP backward (runtime/src/mlp.cpp, TiledMlpFn::backward), per tile: gate and up
// recomputed [t, I] e each, their product a [t, I] e, whose buffer then receives the
// product's gradient da, and SwiGLU's in-place backward over gate and up with one chunk's
// scratch [r, I] e (r = swiglu_chunk_rows over the tile's t rows): 3 x [t, I] e + [r, I] e.
std::int64_t tiled_mlp_backward_workspace(const StepShapes& s, std::int64_t tiles);

// What SwiGLU's kernels cost beyond flops (runtime/src/mlp.cpp), over [n, I] e:
//   forward (SwiGluFn): silu(gate), then *= up: 5 passes, n*I SiLUs;
//   backward (swiglu_backward_in_place): silu, da*u, 1+g-silu, two products, sigmoid, a
//   product, silu in place and da*silu, 25 passes, 3 n*I transcendentals (silu, sigmoid, silu);
//   tiled forward (TiledMlpFn): gate and up written, silu in place, *= up, read by down: 8
//   passes, n*I SiLUs; tiled backward: the tile's gate and up and their product recomputed
//   (7 passes and a SiLU), the product read by down's weight gradient and overwritten with
//   its gradient (2), the plain backward (25, 3 transcendentals), d_gate and d_up read by the
//   weight gradients and dx (4): 38 passes, 4 n*I transcendentals.
// Transcendentals: elements through exp, sigmoid or log (OpSpec::transcendentals).
double swiglu_forward_traffic(const StepShapes& s);
double swiglu_backward_traffic(const StepShapes& s);
double tiled_mlp_forward_traffic(const StepShapes& s);
double tiled_mlp_backward_traffic(const StepShapes& s);
double swiglu_transcendentals(const StepShapes& s, int evaluations);

}  // namespace longctx::footprint
