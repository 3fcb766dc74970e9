#pragma once
// Evaluates one configuration: builds the step graph, simulates it, and fills in a Plan's
// prediction. The single entry point the CLI, the search and the tests share.
#include <memory>
#include <optional>

#include "planner/footprint/communication.h"
#include "planner/graph/allocator_model.h"
#include "planner/graph/reserved_replay.h"
#include "planner/core/plan.h"
#include "planner/graph/simulator.h"
#include "planner/stacks/step_builder.h"

namespace longctx {

struct Evaluation {
  Plan plan;            // the inputs, with prediction filled in
  StepGraph graph;      // what was simulated
  SimResult sim;
};

// The breakdown keys of PLAN: the step categories, plus "allocator" (reserved minus
// allocated) and "context" (outside the allocator). The device binds on the nvidia-smi
// figure, reserved + context, and on the CUDA caching allocator finding every block within
// the device's memory (allocator_model.h, rule 6).
// REQUIRES: plan's inputs are valid (plan_from_json and the CLI validate them).
Evaluation evaluate(const Plan& inputs);

// Just the numbers, for the search's inner loop.
Prediction predict(const Plan& inputs);

// predict()'s verdict with less work where a plan does not fit: its figures are predict()'s
// where it fits, and where it does not, its verdict (feasible), allocated and host figures and
// speed are still predict()'s, but on CUDA its reserved figure may stop short (`exact` false):
// the caching-allocator replay stops at the first request that fails, and is not run at all
// where the step is over the device budget as allocated, or over the host's budget (then its
// binding names the host where predict()'s may name the device, also over). Such a figure is
// at most predict()'s, so it ranks against any plan that fits as predict()'s does. What the
// search evaluates with.
struct Verdict {
  Prediction prediction;
  bool exact = true;
};
Verdict predict_verdict(const Plan& inputs);
// Whether predict_verdict skips the replay of a step over the host's budget; on by default.
// This thread's switch, for tests to hold the search's answers to those of verdicts that
// replay it.
bool& verdict_skips_host_over();

// How much of a plan's step a build writes: all of it, up to the last layer's backward
// (StepInputs::prefix_only), or the model states alone (StepInputs::states_only).
enum class StepExtent { Whole, Prefix, States };
// The step builder's inputs for a plan.
StepInputs step_inputs(const Plan& p, StepExtent extent = StepExtent::Whole);
// The plan's model states alone (standing_bytes of a StepExtent::States build): held at every
// op, so fitting them (fits_as_allocated) is necessary for the step to fit, and known before
// any layer is built.
StandingBytes states_bytes(const Plan& p);

// The plan's whole step, built unless its prefix (the step up to its last layer's backward,
// StepExtent::Prefix) is over the device's or the host's budget as allocated, which makes the
// whole step so, since it holds no less at each of those ops (properties_test.cpp,
// AStepPrefixIsALowerBound): then `whole` is empty, and `device_over` says whether the device
// alone is over there. The prefix is written once, and the rest only where it fits. A stack
// whose prefix leaves out only the optimizer step is judged by its step without it.
struct StepUnlessPrefixOver {
  std::optional<StepGraph> whole;
  bool device_over = false;
};
StepUnlessPrefixOver step_unless_prefix_over(const Plan& p);
// predict_verdict() of the whole step, unless its prefix is over as allocated (none then).
std::optional<Verdict> predict_verdict_unless_prefix_over(const Plan& p);

// What a plan's `binding` calls the device when it binds: on CUDA, the nvidia-smi figure.
const char* device_binding(const Plan& p);
// Device memory outside the caching allocator for the plan's world (hardware.h).
std::int64_t plan_context_bytes(const Plan& p);
// The NCCL communicators p's stack makes (its profile's), none on one rank.
std::vector<footprint::nccl::Communicator> plan_communicators(const Plan& p);
// The allocator the plan's device runs: its capacity is the budget less the context.
AllocatorSettings allocator_settings(const Plan& p);
// Whether `device_bytes` allocated (plus the context) and `host_bytes_per_node` fit the plan's
// budgets: necessary for a fit, and monotone in the tiles, where the reserved figure is not
// (on CUDA finer tiles can leave smaller cached segments a later large request cannot use).
bool fits_as_allocated(const Plan& p, std::int64_t device_bytes, std::int64_t host_bytes_per_node);
// The same for bytes every op holds, host bytes per rank (standing_bytes).
bool fits_as_allocated(const Plan& p, const StandingBytes& s);
// The same for the most a step's ops hold (simulate_totals; host bytes per rank); true where
// the step has no op.
bool fits_as_allocated(const Plan& p, const OpTotals& t);
// The same for an evaluated plan's own peaks (p.prediction).
bool fits_as_allocated(const Plan& p);
// Whether `device_bytes` as allocated and the context exceed the device's budget (the host's aside).
bool over_device_budget(const Plan& p, std::int64_t device_bytes);
// Whether a prediction that does not fit is held back by the caching allocator alone: on CUDA,
// within the device's budget as allocated, its replay could not place a request (its reserved
// figure then stops at the budget, which is no peak to name).
bool allocator_binds(const Plan& p, const Prediction& pr);
// Whether the step fits the device budget: allocated_peak (the simulation's) + context, then
// on CUDA the reserved replay of `g`. The check max-context confirms lengths with.
// `allocated_peak_op`: the op where it is reached (-1: not known), where the replay looks first.
// `look`: keep the replay's looks at the cache, which tell the verdicts of the same step at
// other MLP tile counts where they are this one's (variants_alike, reserved_replay.h: for plans
// that fit as allocated, with p's allocator_settings(), a verdict is its replay's).
struct DeviceFit {
  bool fits = false;
  std::vector<RequestLook> looks;  // empty where no replay ran
};
// `script_from`: where the replay reads its script (ReplayOptions::script_from), null: written for g.
DeviceFit device_fits(const Plan& p, const StepGraph& g, std::int64_t allocated_peak, int allocated_peak_op,
                      bool look = false, const ReplayOptions::ScriptFrom* script_from = nullptr);

}  // namespace longctx
