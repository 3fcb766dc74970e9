#include "longctx/planner/footprint/loss.h"

namespace longctx::footprint {

std::int64_t tiled_loss_workspace(const StepShapes& s, std::int64_t tiles) {
  const std::int64_t t = tile_split(s.n, tiles).rows;  // the largest tile's
  // logits and exp(logits - max) [t, V] fp32; row maxima and sums [t] fp32.
  return t * s.V * 8 + t * 8;
}

namespace {
double per_element(const StepShapes& s, double bytes) { return double(s.n * s.V) * bytes; }
double upcast(const StepShapes& s) { return s.e == 4 ? 0.0 : double(s.e + 4); }
}  // namespace

double log_softmax_forward_traffic(const StepShapes& s) { return per_element(s, 16); }
double log_softmax_backward_traffic(const StepShapes& s) { return per_element(s, 16); }
double tiled_loss_forward_traffic(const StepShapes& s) { return per_element(s, double(s.e) + upcast(s) + 24); }
double tiled_loss_backward_traffic(const StepShapes& s) {
  return per_element(s, double(s.e) + upcast(s) + 24 + 32 + upcast(s) + 2.0 * double(s.e));
}
double loss_transcendentals(const StepShapes& s, int evaluations) { return double(evaluations) * double(s.n * s.V); }

}  // namespace longctx::footprint
