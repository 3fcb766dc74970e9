// The step graph of one rank: its stack's profile writes it (planner/stacks/<name>/).
#include "planner/stacks/step_builder.h"

#include "planner/stacks/profile.h"

namespace longctx {

StepGraph build_step(const StepInputs& in) { return stack_profile(in.train.stack.kind).build_step(in); }

}  // namespace longctx
