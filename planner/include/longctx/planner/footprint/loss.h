#pragma once
// The loss: output projection and cross-entropy, plain or tiled over rows. Forward and
// backward together. Shapes: step_shapes.h; T = loss tiles, t = ceil(n/T) rows in the largest
// tile (tile_split, parallel_config.h: the last tile is shorter when T does not divide n).
#include <cstdint>

#include "longctx/planner/footprint/step_shapes.h"

namespace longctx::footprint {

// One loss tile (runtime/src/layers.cpp, TiledCrossEntropyFn), forward and backward alike:
// the tile's fp32 logits [t, V] x 4, and inside logsumexp exp(logits - max) [t, V] fp32 with
// the rows' maxima and sums [t] fp32 each. In bf16 the tile's bf16 logits [t, V] e are freed
// once upcast, before logsumexp. Backward recomputes the logits as forward does, logsumexp
// beside them; the softmax gradient then overwrites the logits (bf16: cast to bf16,
// [t, V] e, after logsumexp's buffer is gone).
std::int64_t tiled_loss_workspace(const StepShapes& s, std::int64_t tiles);

}  // namespace longctx::footprint
