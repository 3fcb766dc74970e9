#pragma once
// The sharding a stack that shards only with FSDP2 decides itself (torchtitan's and
// accelerate's): full shard (zero3) across GPUs, none on one GPU, as neither's data-parallel
// replication is modelled. A StackProfile::conform hook.
#include "planner/core/plan.h"

namespace longctx::step::blocks {

// (No product of the cluster's sizes: probes run before validate() bounds them.)
inline void conform_fsdp2_sharding(const ModelConfig&, const Cluster& c, const TrainConfig&, ParallelConfig& p) {
  p.sharding = c.nodes > 1 || c.gpus_per_node > 1 ? Sharding::Zero3 : Sharding::None;
}

}  // namespace longctx::step::blocks
