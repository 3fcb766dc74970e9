#include "planner/footprint/loss.h"

namespace longctx::footprint {

std::int64_t tiled_loss_workspace(const StepShapes& s, std::int64_t tiles) {
  const std::int64_t t = tile_split(s.n, tiles).rows;  // the largest tile's
  // logits and exp(logits - max) [t, V] fp32; row maxima and sums [t] fp32.
  return t * s.V * 8 + t * 8;
}

std::vector<std::int64_t> tiled_loss_workspace_sequence(const StepShapes& s, std::int64_t tiles, bool backward) {
  const TileSplit split = tile_split(s.n, tiles);
  std::vector<std::int64_t> seq;
  std::int64_t blocks = 0;
  auto request = [&](std::int64_t bytes) {
    seq.push_back(bytes);
    return ++blocks;
  };
  auto give_back = [&](std::int64_t block) { seq.push_back(-block); };
  // A tile frees every block it asks for, so a tile after the first asks the same sizes of the
  // cache the first left, which serves them without a new segment and is the same once the
  // tile ends: only the first tile and a shorter last one are given (the search replays
  // thousands of plans with up to thousands of tiles).
  const bool short_last = split.count > 1 && split.last != split.rows;
  for (std::int64_t i = 0; i < (short_last ? 2 : 1); ++i) {
    const std::int64_t t = i == 0 ? split.rows : split.last;
    const std::int64_t low = s.e != 4 ? request(t * s.V * s.e) : 0;  // the matmul's logits [t, V] e
    const std::int64_t logits = request(t * s.V * 4);                // [t, V] fp32
    if (low) give_back(low);
    const std::int64_t rows = request(t * 8);                        // maxima and sums [t] fp32
    const std::int64_t shifted = request(t * s.V * 4);               // exp(logits - max) [t, V] fp32
    give_back(shifted);
    give_back(rows);
    if (backward && s.e != 4) give_back(request(t * s.V * s.e));     // the gradient cast [t, V] e
    give_back(logits);
  }
  return seq;
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
