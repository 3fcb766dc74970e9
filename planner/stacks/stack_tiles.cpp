#include "planner/stacks/stack_tiles.h"

#include "planner/core/limits.h"
#include "planner/stacks/profile.h"

namespace longctx {

std::optional<std::int64_t> stack_tile_count(const ModelConfig& m, const TrainConfig& t, int ulysses, bool loss) {
  const StackProfile& s = stack_profile(t.stack.kind);
  if (!s.tile_count) return std::nullopt;
  return s.tile_count(m, t, ulysses, loss);
}

bool stack_tiles_defined(const ModelConfig& m, const TrainConfig& t, int ulysses) {
  return m.hidden >= 1 && m.hidden <= limits::kMaxHidden && m.vocab >= 1 && m.vocab <= limits::kMaxVocab &&
         ulysses >= 1 && ulysses <= limits::kMaxHeads && t.seq >= 1 && t.seq <= limits::kMaxSeq &&
         t.micro_batch >= 1 && t.micro_batch <= limits::kMaxMicroBatch;
}

bool stack_always_tiles_loss(const TrainConfig& t) {
  const StackProfile& s = stack_profile(t.stack.kind);
  return s.always_tiles_loss && s.always_tiles_loss(t.stack);
}

void conform_to_stack(const ModelConfig& m, const Cluster& c, const TrainConfig& t, ParallelConfig& p) {
  const StackProfile& s = stack_profile(t.stack.kind);
  if (s.ring_exchange && p.ring > 1) p.ring_exchange = *s.ring_exchange;
  if (s.conform) s.conform(m, c, t, p);
}

}  // namespace longctx
