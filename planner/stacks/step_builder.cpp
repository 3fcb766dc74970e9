// The step graph of one rank: its stack's profile writes it (planner/stacks/<name>/).
#include "planner/stacks/step_builder.h"

#include "planner/graph/work_counts.h"
#include "planner/stacks/profile.h"

namespace longctx {

StepGraph build_step(const StepInputs& in) {
  // A build that may end at its prefix is counted by its caller, who knows where it ended.
  if (!in.prefix_only && !in.states_only && !in.end_at_prefix) ++work_counts().whole_graphs;
  return stack_profile(in.train.stack.kind).build_step(in);
}

}  // namespace longctx
