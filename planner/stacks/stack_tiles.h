#pragma once
// The knobs a plan's stack decides itself, from its profile (profile.h): the tile counts it
// picks (ArcticTraining's TiledMLP shards and Liger's loss chunks, stacks/arctic/tiles.h), the
// sharding it always runs (ArcticTraining's ZeRO-3, torchtitan's FSDP2 across GPUs), and the
// one ring exchange it has (torchtitan's all-gather). Those are then the only values (besides
// 1, untiled, for tiles) a plan of that stack holds: its validation refuses others, and the
// search and max-context offer exactly them (knob_candidates.cpp, max_seq.cpp).
#include <cstdint>
#include <optional>

#include "planner/core/model_config.h"
#include "planner/core/plan.h"

namespace longctx {

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

// Sets the knobs the plan's stack decides itself (for p's Ulysses degree and ring, t's length
// and cluster c). What every probe of a configuration starts from, so that validate() judges
// the knob probed. A configuration outside stack_tile_count's requirements keeps its tiles, for
// validate().
void conform_to_stack(const ModelConfig& m, const Cluster& c, const TrainConfig& t, ParallelConfig& p);

}  // namespace longctx
