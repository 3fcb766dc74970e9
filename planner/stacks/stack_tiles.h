#pragma once
// The tile counts a stack picks itself. longctx's own runtime tiles the MLP and the loss in any
// count the search chooses; ArcticTraining (the arctic stack, stack.h) does not take a count:
// DeepSpeed's TiledMLP runs one shard per `hidden` tokens of the rank's sequence, and Liger's
// fused linear cross-entropy chunks the tokens so that one chunk's logits are about the size
// of the hidden states. Those are then the only values besides 1 (untiled) a plan of that
// stack holds: validate() refuses others, and the search and max-context offer exactly them
// (knobs.cpp, max_seq.cpp), all from here.
#include <cstdint>
#include <optional>

#include "planner/core/model_config.h"
#include "planner/core/plan.h"

namespace longctx {

// DeepSpeed's TiledMLP as ArcticTraining calls it (arctic_training/model/tiled_compute.py
// tiled_mlp_forward_common: num_shards = ceil(seqlen / hidden), seqlen the rank's slice).
std::int64_t arctic_mlp_shards(std::int64_t tokens_per_rank, std::int64_t hidden);

// Liger's fused linear cross-entropy (liger_kernel/ops/fused_linear_cross_entropy.py
// fused_linear_cross_entropy_forward): inc_factor = ceil(V / H), chunk_size =
// next_power_of_2(ceil(BT / inc_factor)), chunks = ceil(BT / chunk_size).
std::int64_t liger_loss_chunks(std::int64_t tokens, std::int64_t hidden, std::int64_t vocab);

// The count the plan's stack runs when the MLP (`loss` false) or the loss (`loss` true) is
// tiled at all, or nothing where any count may be chosen (longctx's own runtime).
// REQUIRES: stack_tiles_defined(m, t, ulysses) (validate() checks it first).
std::optional<std::int64_t> stack_tile_count(const ModelConfig& m, const TrainConfig& t, int ulysses, bool loss);
// Whether the model's width and vocabulary, the length, the batch and the degree are within
// the bounds a plan may hold (limits.h), so that the counts exist.
bool stack_tiles_defined(const ModelConfig& m, const TrainConfig& t, int ulysses);

// Whether the stack computes its loss tiled whatever the plan asks (arctic with Liger: the
// fused linear cross-entropy replaces the model's loss).
bool stack_always_tiles_loss(const TrainConfig& t);

// Sets the knobs the plan's stack decides itself: the arctic stack's ZeRO-3, torchtitan's
// FSDP2 (zero3 on several ranks of cluster c, none on one), and the loss
// chunks of one that always tiles its loss (for p's Ulysses degree and t's length). What
// every probe of a configuration starts from, so that validate() judges the knob probed. A
// configuration outside stack_tile_count's requirements is left as it is, for validate().
void conform_to_stack(const ModelConfig& m, const Cluster& c, const TrainConfig& t, ParallelConfig& p);

}  // namespace longctx
