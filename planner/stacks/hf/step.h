#pragma once
// The hf stack's step (core/stack.h): transformers' modeling code trained with torch.optim's
// AdamW, built from the blocks of planner/stacks/blocks/ with transformers' own ops.
#include "planner/core/step_inputs.h"
#include "planner/graph/step_graph.h"

namespace longctx::step::hf {

StepGraph build_step(const StepInputs& in);

}  // namespace longctx::step::hf
