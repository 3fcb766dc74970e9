#pragma once
// torch.optim.AdamW (optim/adamw.py: _fused_adamw, the Trainer's default and torchtitan's; or
// _single_tensor_adamw on the CPU and _multi_tensor_adamw on CUDA) over parameters in the
// model's dtype, as the hf and torchtitan stacks train them. Footprints: footprint/optimizer.h.
#include <cstdint>

#include "planner/stacks/blocks/hf_step.h"

namespace longctx::step::blocks {

// Parameters [group_params] e and AdamW's state beside them, per group.
void adamw_model_states(HfStep& sb);
// AdamW's step over every group's gradient, then zero_grad(set_to_none=True), which frees
// them; the training loop holds its batch until the step returns. `stepped_elems`: the
// elements of a group the rank steps (its shard under FSDP2).
void adamw_step(HfStep& sb, std::int64_t (*stepped_elems)(const StepShapes& s, int group));

}  // namespace longctx::step::blocks
