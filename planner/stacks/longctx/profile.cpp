// longctx's own runtime: every technique of the knob table, its step written by the
// technique emitters (planner/stacks/longctx/emitters.h); the one stack `longctx run` executes.
#include "planner/stacks/longctx/emitters.h"
#include "planner/stacks/longctx/export.h"
#include "planner/footprint/communication.h"
#include "planner/stacks/profile.h"

namespace longctx {

extern const StackProfile kLongctxProfile;
const StackProfile kLongctxProfile = {
    .kind = StackKind::Longctx,
    .name = "longctx",
    .summary = "its own runtime",
    .defaults = {},
    .runtime_runs_it = true,
    // A profiler trace is most often of transformers; a plan of longctx's runtime predicts
    // less than its modules keep (docs/stacks.md).
    .profiler_trace_note = "the plan predicts longctx's own runtime; for a transformers run, plan with --stack hf "
                           "(and its --attention, --hf-checkpointing) and compare that plan",
    .techniques = [](const Plan&) { return all_techniques(); },
    .describe = [](const StackSpec&) { return std::string("longctx"); },
    .build_step = step::build_step,
    .retile_mlp = step::retile_mlp,
    .exporter = &kDeepSpeedExporter,
    .communicators = footprint::nccl::runtime_communicators,
};

}  // namespace longctx
