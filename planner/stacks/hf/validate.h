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

}  // namespace longctx::hf
