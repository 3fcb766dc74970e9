#include "planner/stacks/stack_tiles.h"

#include "planner/core/limits.h"
#include "planner/core/parallel_config.h"

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

std::optional<std::int64_t> stack_tile_count(const ModelConfig& m, const TrainConfig& t, int ulysses, bool loss) {
  if (t.stack.kind != StackKind::Arctic) return std::nullopt;
  const std::int64_t n = tokens_per_rank(t, ulysses);
  if (!loss) return arctic_mlp_shards(n, m.hidden);
  if (t.stack.arctic_model == ArcticModel::Liger) return liger_loss_chunks(n, m.hidden, m.vocab);
  return 1;  // the model's own loss over the full logits (ArcticTraining's huggingface model)
}

bool stack_tiles_defined(const ModelConfig& m, const TrainConfig& t, int ulysses) {
  return m.hidden >= 1 && m.hidden <= limits::kMaxHidden && m.vocab >= 1 && m.vocab <= limits::kMaxVocab && ulysses >= 1 && ulysses <= limits::kMaxHeads && t.seq >= 1 && t.seq <= limits::kMaxSeq && t.micro_batch >= 1 &&
         t.micro_batch <= limits::kMaxMicroBatch;
}

bool stack_always_tiles_loss(const TrainConfig& t) {
  return t.stack.kind == StackKind::Arctic && t.stack.arctic_model == ArcticModel::Liger;
}

void conform_to_stack(const ModelConfig& m, const Cluster& c, const TrainConfig& t, ParallelConfig& p) {
  // torchtitan shards with FSDP2 whenever it runs on more than one rank; on one it applies no
  // FSDP at all.
  // (No product of the cluster's sizes: probes run before validate() bounds them.)
  // Its context parallel exchanges k/v by all-gather only (parallel_config.cpp).
  if (t.stack.kind == StackKind::Torchtitan) {
    p.sharding = c.nodes > 1 || c.gpus_per_node > 1 ? Sharding::Zero3 : Sharding::None;
    if (p.ring > 1) p.ring_exchange = RingExchange::AllGather;
  }
  if (t.stack.kind != StackKind::Arctic) return;
  p.sharding = Sharding::Zero3;
  if (!stack_tiles_defined(m, t, p.ulysses)) return;
  if (stack_always_tiles_loss(t)) p.loss_tiles = static_cast<int>(*stack_tile_count(m, t, p.ulysses, true));
}

}  // namespace longctx
