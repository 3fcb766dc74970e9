#pragma once
// What torchtitan's training (0.2.2) cannot express, and the knobs it decides.
#include "planner/core/plan.h"
#include "common/result.h"

namespace longctx::torchtitan {

// Its llama3 model (models/llama3: no biases, no q/k norms, no tied embeddings, heads of
// hidden/heads) or, for a model with q/k norms, its qwen3 model (models.h); the checkpointing
// policies are its `activation_checkpoint` modes (full, selective every K layers: --checkpoint
// every:K, or selective per op: --checkpoint op). Across GPUs it shards with FSDP2
// (data_parallel_shard_degree = the ranks: --sharding zero3) in the plan's dtype as
// param_dtype; DDP and its CPU offload are not modelled. One GPU runs without FSDP, and there
// torchtitan trains under torch.autocast when mixed_precision_param is bf16
// (distributed/utils.py, maybe_enable_amp), which is not modelled: fp32 only.
Result<bool> validate(const Plan& p);

}  // namespace longctx::torchtitan
