// longctx's own runtime: every technique of the knob table, its step written by the
// technique emitters (planner/stacks/step/emitters.h).
#include "planner/stacks/profile.h"

namespace longctx {
namespace step {
void build_longctx_step(StepBuild& sb);
}

extern const StackProfile kLongctxProfile;
const StackProfile kLongctxProfile = {
    .kind = StackKind::Longctx,
    .name = "longctx",
    .techniques = [](const StackSpec&) { return all_techniques(); },
    .build_step = step::build_longctx_step,
};

}  // namespace longctx
