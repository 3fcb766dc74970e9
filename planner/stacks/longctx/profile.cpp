// longctx's own runtime: every technique of the knob table, its step written by the
// technique emitters (planner/stacks/longctx/emitters.h); the one stack `longctx run` executes.
#include "planner/stacks/longctx/emitters.h"
#include "planner/stacks/longctx/export.h"
#include "planner/stacks/profile.h"

namespace longctx {

extern const StackProfile kLongctxProfile;
const StackProfile kLongctxProfile = {
    .kind = StackKind::Longctx,
    .name = "longctx",
    .summary = "its own runtime",
    .defaults = {},
    .runtime_runs_it = true,
    .techniques = [](const Plan&) { return all_techniques(); },
    .describe = [](const StackSpec&) { return std::string("longctx"); },
    .build_step = step::build_step,
    .exporter = &kDeepSpeedExporter,
};

}  // namespace longctx
