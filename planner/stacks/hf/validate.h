#pragma once
// What transformers' modeling code under the Trainer cannot express: alone on one GPU, under
// accelerate's FSDP2 and torch's context parallel, or under DeepSpeed ZeRO-3 and its Ulysses.
#include "planner/core/plan.h"
#include "common/result.h"

namespace longctx::hf {

// Whether the Trainer runs the plan under DeepSpeed ZeRO-3 (accelerate's distributed_type
// DEEPSPEED) rather than alone or under accelerate's FSDP2: ZeRO-3 with Ulysses (sp_backend
// "deepspeed"), with a state offload (FSDP2's is not modelled), or on one GPU.
inline bool runs_deepspeed(const ParallelConfig& p, std::int64_t world) {
  return p.sharding == Sharding::Zero3 && (world == 1 || p.ulysses > 1 || p.offload_optimizer || p.offload_params);
}
inline bool runs_deepspeed(const Plan& p) { return runs_deepspeed(p.parallel, p.cluster.shape.world()); }

// Alone: no sharding, sequence parallelism, tiling or state offload; every layer checkpointed
// or none (`gradient_checkpointing_enable` wraps each decoder layer), its checkpoint offload
// (transformers 5.17) on GPUs only, and a bound on what eager attention and a missing
// attention_mask materialize. Across GPUs FSDP2 (with context parallel) or DeepSpeed ZeRO-3
// (with Ulysses and its offloads), each as far as it is modelled.
Result<bool> validate(const Plan& p);

}  // namespace longctx::hf
