#include "longctx/planner/footprint/loss.h"

namespace longctx::footprint {

std::int64_t tiled_loss_workspace(const StepShapes& s, std::int64_t tiles) {
  const std::int64_t t = tile_split(s.n, tiles).rows;  // the largest tile's
  // logits and exp(logits - max) [t, V] fp32; row maxima and sums [t] fp32.
  return t * s.V * 8 + t * 8;
}

}  // namespace longctx::footprint
