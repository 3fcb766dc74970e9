#pragma once
// How a stack refuses what it cannot express: naming the flag, the stack, and the fix. Shared
// by the stacks' validation hooks (planner/stacks/<name>/validate.cpp).
#include <string>

#include "planner/core/knobs.h"
#include "planner/core/settings.h"

namespace longctx {

const std::string& flag(KnobId id);     // "--head-chunk"
const std::string& flag(SettingId id);  // "--attention"

// BadInput naming `field`: "--stack hf <what>; use --stack longctx for it".
Error refuse(const Plan& p, const std::string& field, const std::string& what);

// Each of the stacks built on transformers' (or torchtitan's) decoder layers wraps a layer
// whole: no head-chunked attention.
Result<bool> refuse_head_chunks(const Plan& p);

// transformers' decoder layers (the hf and arctic stacks): wrapped whole (refuse_head_chunks),
// checkpointed every one or none by its gradient checkpointing, and no ring attention
// modelled unless the stack runs torch's (`own_ring`: the hf stack's context parallel).
Result<bool> refuse_transformers_layers(const Plan& p, bool own_ring = false);

// The knobs of longctx's runtime that neither transformers alone nor torchtitan has: Ulysses
// and state offload (unless `own_deepspeed`: DeepSpeed's, under the Trainer), tiles, and
// checkpoint offload (unless `own_checkpoint_offload`: transformers 5.17's).
Result<bool> refuse_runtime_knobs(const Plan& p, bool own_checkpoint_offload, bool own_deepspeed = false);

}  // namespace longctx
