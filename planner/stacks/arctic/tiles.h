#pragma once
// The tile counts ArcticTraining picks itself, and the knobs it decides. longctx's own runtime
// tiles the MLP and the loss in any count the search chooses; ArcticTraining does not take a
// count: DeepSpeed's TiledMLP runs one shard per `hidden` tokens of the rank's sequence, and
// Liger's fused linear cross-entropy chunks the tokens so that one chunk's logits are about
// the size of the hidden states. Those are then the only values besides 1 (untiled) a plan of
// the stack holds: its validation refuses others, and the search and max-context offer exactly
// them (stack_tiles.h), all from here.
#include <cstdint>
#include <optional>

#include "planner/core/plan.h"

namespace longctx {

// DeepSpeed's TiledMLP as ArcticTraining calls it (arctic_training/model/tiled_compute.py
// tiled_mlp_forward_common: num_shards = ceil(seqlen / hidden), seqlen the rank's slice).
std::int64_t arctic_mlp_shards(std::int64_t tokens_per_rank, std::int64_t hidden);

// Liger's fused linear cross-entropy (liger_kernel/ops/fused_linear_cross_entropy.py
// fused_linear_cross_entropy_forward): inc_factor = ceil(V / H), chunk_size =
// next_power_of_2(ceil(BT / inc_factor)), chunks = ceil(BT / chunk_size).
std::int64_t liger_loss_chunks(std::int64_t tokens, std::int64_t hidden, std::int64_t vocab);

namespace arctic {

// The profile's hooks (profile.h): TiledMLP's shards, the loss's chunks (1: the huggingface
// model's own loss over the full logits), whether the loss is always tiled (the liger model),
// and ZeRO-3 with the loss's chunks set.
std::optional<std::int64_t> tile_count(const ModelConfig& m, const TrainConfig& t, int ulysses, bool loss);
bool always_tiles_loss(const StackSpec& s);
void conform(const ModelConfig& m, const Cluster& c, const TrainConfig& t, ParallelConfig& p);

// What ArcticTraining cannot express (validate.cpp).
Result<bool> validate(const Plan& p);

}  // namespace arctic
}  // namespace longctx
