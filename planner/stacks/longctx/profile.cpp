// longctx's own runtime: every technique of the knob table, its step written by the
// technique emitters (planner/stacks/step/emitters.h); the one stack `longctx run` executes.
#include "planner/stacks/profile.h"

namespace longctx {
namespace step {
void build_longctx_step(StepBuild& sb);
}

extern const StackProfile kLongctxProfile;
const StackProfile kLongctxProfile = {
    .kind = StackKind::Longctx,
    .name = "longctx",
    .summary = "its own runtime",
    .defaults = {},
    .runtime_runs_it = true,
    .techniques = [](const Plan&) { return all_techniques(); },
    .describe = [](const StackSpec&) { return std::string("longctx"); },
    .build_step = step::build_longctx_step,
};

}  // namespace longctx
