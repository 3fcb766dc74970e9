#pragma once
// The loss: output projection and cross-entropy, plain or tiled over rows. Forward and
// backward together. Shapes: step_shapes.h; T = loss tiles, t = ceil(n/T) rows in the largest
// tile (tile_split, parallel_config.h: the last tile is shorter when T does not divide n).
#include <cstdint>
#include <vector>

#include "planner/footprint/step_shapes.h"

namespace longctx::footprint {

// One loss tile (runtime/src/loss.cpp, TiledCrossEntropyFn), forward and backward alike:
// the tile's fp32 logits [t, V] x 4, and inside logsumexp exp(logits - max) [t, V] fp32 with
// the rows' maxima and sums [t] fp32 each. In bf16 the tile's bf16 logits [t, V] e are freed
// once upcast, before logsumexp. Backward recomputes the logits as forward does, logsumexp
// beside them; the softmax gradient then overwrites the logits (bf16: cast to bf16,
// [t, V] e, after logsumexp's buffer is gone).
std::int64_t tiled_loss_workspace(const StepShapes& s, std::int64_t tiles);
// The same buffers as the caching allocator is asked for them (OpSpec::workspace_sequence),
// for the first tile and, when the last is shorter, the last (every tile frees what it asked
// for, so the ones between find the first one's blocks cached and leave the cache as they
// found it), each tile t_i rows: forward, in bf16 the logits [t_i, V] e,
// their fp32 copy [t_i, V] x 4, the bf16 logits freed; logsumexp's row maxima and sums [t_i]
// x 8 and exp(logits - max) [t_i, V] x 4, both freed; the fp32 logits freed at the tile's
// end. Backward the same up to logsumexp, then in bf16 the gradient cast [t_i, V] e, freed
// after the two matmuls, and the fp32 logits last. Its peak is tiled_loss_workspace.
std::vector<std::int64_t> tiled_loss_workspace_sequence(const StepShapes& s, std::int64_t tiles, bool backward);

// What the loss's kernels cost beyond flops over [n, V] (runtime/src/loss.cpp), per element:
//   log_softmax forward (LibTorch's last-dimension kernel): the row's max, the sum of
//   exp(x - max), and x - max - log(sum) read and written: 16 bytes, one exp; its backward,
//   grad - exp(out) * sum(grad): grad read for the sum, then grad and out read and the
//   result written, 16 bytes, one exp;
//   tiled forward (TiledCrossEntropyFn): the tile's logits written (e; bf16: upcast, e + 4),
//   logsumexp (at::logsumexp: max, x - max into a temporary, exp in place, sum: 24 bytes, one
//   exp); tiled backward: the logits and logsumexp again, then - lse and exp in place, the
//   padding's fill and the scale (32 bytes, one exp), the gradient cast back (bf16: 4 + e) and
//   read by the two matmuls (2e).
double log_softmax_forward_traffic(const StepShapes& s);
double log_softmax_backward_traffic(const StepShapes& s);
double tiled_loss_forward_traffic(const StepShapes& s);
double tiled_loss_backward_traffic(const StepShapes& s);
// Elements through exp: n*V each for the untiled forward and backward and the tiled
// forward, 2 n*V for the tiled backward.
double loss_transcendentals(const StepShapes& s, int evaluations);

}  // namespace longctx::footprint
