#pragma once
// What transformers' modeling code trained with torch.optim's AdamW on one GPU cannot express.
#include "planner/core/plan.h"
#include "common/result.h"

namespace longctx::hf {

// One process: no sharding, sequence parallelism, tiling or state offload of longctx's, every
// layer checkpointed or none (`gradient_checkpointing_enable` wraps each decoder layer), its
// checkpoint offload (transformers 5.17) on GPUs only, and a bound on what eager attention and
// a missing attention_mask materialize.
Result<bool> validate(const Plan& p);

// The sharding it decides itself: accelerate's FSDP2 full shard (zero3) across GPUs, none on
// one (no data-parallel replication is modelled), so that a search over its plans starts
// from what it runs.
void conform(const ModelConfig& m, const Cluster& c, const TrainConfig& t, ParallelConfig& p);

}  // namespace longctx::hf
