#include "planner/stacks/arctic/tiles.h"

#include "planner/stacks/stack_tiles.h"

namespace longctx {

std::int64_t arctic_mlp_shards(std::int64_t tokens_per_rank, std::int64_t hidden) {
  return (tokens_per_rank + hidden - 1) / hidden;
}

std::int64_t liger_loss_chunks(std::int64_t tokens, std::int64_t hidden, std::int64_t vocab) {
  const std::int64_t inc = (vocab + hidden - 1) / hidden;
  const std::int64_t want = (tokens + inc - 1) / inc;
  std::int64_t chunk = 1;
  while (chunk < want) chunk *= 2;
  return (tokens + chunk - 1) / chunk;
}

namespace arctic {

std::optional<std::int64_t> tile_count(const ModelConfig& m, const TrainConfig& t, int ulysses, bool loss) {
  const std::int64_t n = tokens_per_rank(t, ulysses);
  if (!loss) return arctic_mlp_shards(n, m.hidden);
  if (t.stack.arctic_model == ArcticModel::Liger) return liger_loss_chunks(n, m.hidden, m.vocab);
  return 1;  // the model's own loss over the full logits (ArcticTraining's huggingface model)
}

bool always_tiles_loss(const StackSpec& s) { return s.arctic_model == ArcticModel::Liger; }

void conform(const ModelConfig& m, const Cluster&, const TrainConfig& t, ParallelConfig& p) {
  p.sharding = Sharding::Zero3;
  if (!stack_tiles_defined(m, t, p.ulysses)) return;
  if (always_tiles_loss(t.stack)) p.loss_tiles = static_cast<int>(*tile_count(m, t, p.ulysses, true));
}

}  // namespace arctic
}  // namespace longctx
