#include "planner/search/memory_model.h"

#include <algorithm>

#include "planner/footprint/communication.h"
#include "planner/stacks/profile.h"
#include "planner/graph/cost_model.h"
#include "planner/graph/reserved_replay.h"
#include "planner/graph/work_counts.h"

namespace longctx {
namespace {

// The device as the allocator holds it: reserved bytes (the replay on CUDA; what is allocated
// on the CPU virtual device, whose counting allocator caches nothing), the op where they
// peak (-1: at the allocated peak), and whether they fit the budget with the context.
// `exact` false: a verdict only (predict_verdict), the replay stopped short or not run.
struct ReservedFigure {
  std::int64_t peak_reserved = 0;
  int peak_op = -1;
  bool fits = false;
  bool exact = true;
};

// What device_fits() asks of a replay beyond its verdict, and where the replay goes.
struct ReplayWatch {
  bool look = false;
  ReservedReplay* replay = nullptr;  // the replay, where one runs
  const ReplayOptions::ScriptFrom* script_from = nullptr;
};

// `allocated_peak_op`: the op where the step peaks as allocated (-1: not known). `host_over`:
// the step is over the host's budget, so a verdict needs no replay: it does not fit whatever
// the device holds, and its figure, a bound, is settled only where the smallest peak of a
// search that finds no plan is named (search_order.h); `fits` then says only that the device
// is not known to be over.
ReservedFigure reserved_figure(const Plan& p, const StepGraph& g, std::int64_t allocated_peak, int allocated_peak_op,
                               bool verdict_only, bool host_over = false, const ReplayWatch& watch = {}) {
  ReservedFigure f{allocated_peak, -1, true, true};
  if (p.cluster.hardware.backend == Backend::Cuda) {
    // Over budget as allocated is over as reserved, which is never less.
    if (verdict_only && over_device_budget(p, allocated_peak)) return {allocated_peak, -1, false, false};
    if (verdict_only && host_over) return {allocated_peak, -1, true, false};
    ReservedReplay r = replay_reserved(
        g, allocator_settings(p),
        ReplayOptions{.stop_at_failure = verdict_only,
                      .allocated_peak_op = allocated_peak_op,
                      .look_at_requests = watch.look,
                      .script_from = watch.script_from});
    // Never under allocated: the replay's blocks include the simulation's rounded requests.
    f = {std::max(r.peak_reserved, allocated_peak), r.peak_op, r.failed_requests == 0,
         !verdict_only || r.failed_requests == 0};
    if (watch.replay != nullptr) *watch.replay = std::move(r);
  }
  f.fits = f.fits && !over_device_budget(p, f.peak_reserved);
  return f;
}

Prediction fill(const Plan& p, const StepGraph& g, const SimResult& sim, bool verdict_only, bool& exact) {
  Prediction pr;
  const std::int64_t context = plan_context_bytes(p);
  pr.peak_device_bytes = sim.peak_device_bytes;
  pr.peak_host_bytes = sim.peak_host_bytes_per_rank * p.cluster.shape.gpus_per_node;
  for (int c = 0; c < kCategories; ++c) pr.breakdown[to_string(static_cast<Category>(c))] = sim.breakdown[static_cast<std::size_t>(c)];
  pr.peak_at = sim.peak_op >= 0 ? format(g.op(sim.peak_op).name) : "";
  const bool host_ok = pr.peak_host_bytes <= p.cluster.host_budget_bytes_per_node;
  const ReservedFigure reserved =
      reserved_figure(p, g, pr.peak_device_bytes, sim.peak_op, verdict_only, !host_ok && verdict_skips_host_over());
  exact = reserved.exact;
  pr.peak_reserved_bytes = reserved.peak_reserved;
  pr.reserved_peak_at = reserved.peak_op >= 0 ? format(g.op(reserved.peak_op).name) : pr.peak_at;
  pr.peak_nvidia_smi_bytes = pr.peak_reserved_bytes + context;
  pr.breakdown["allocator"] = pr.peak_reserved_bytes - pr.peak_device_bytes;
  // NCCL's share by communicator ("context.nccl.<group>"), the CUDA context's the rest.
  std::int64_t nccl = 0;
  for (const footprint::nccl::Communicator& c : plan_communicators(p)) {
    const std::int64_t bytes = footprint::nccl::communicator_bytes(p.cluster.hardware, c);
    if (bytes > 0) pr.breakdown[std::string("context.nccl.") + c.name] += bytes;
    nccl += bytes;
  }
  pr.breakdown["context"] = context - nccl;
  const bool device_ok = reserved.fits;
  pr.feasible = device_ok && host_ok;
  pr.binding = !device_ok ? device_binding(p) : !host_ok ? "host memory" : "";
  const StepTime t = estimate_step_time(p, g);
  pr.step_time_s = t.total_s;
  pr.tokens_per_s = t.tokens_per_s;
  pr.mfu = t.mfu;
  return pr;
}

}  // namespace

const char* device_binding(const Plan& p) {
  return p.cluster.hardware.backend == Backend::Cuda ? "device memory (nvidia-smi: reserved + context)" : "device memory";
}

// The CUDA context, and NCCL's buffers on every communicator the plan's stack makes
// (footprint/communication.h: per communicator, per peer and per node, from NCCL's source).
std::int64_t plan_context_bytes(const Plan& p) {
  return p.cluster.hardware.context_bytes + footprint::nccl::nccl_bytes(p.cluster.hardware, plan_communicators(p));
}

std::vector<footprint::nccl::Communicator> plan_communicators(const Plan& p) {
  if (p.cluster.shape.world() < 2) return {};
  return stack_profile(p.train.stack.kind).communicators(p);
}

AllocatorSettings allocator_settings(const Plan& p) {
  AllocatorSettings s;
  s.expandable_segments = p.cluster.expandable_segments;
  // What the context leaves of the budget; none when it takes it all (or the budget is out of
  // its bounds, which predict() does not check: no subtraction that could overflow).
  const std::int64_t budget = p.cluster.device_budget_bytes, context = plan_context_bytes(p);
  s.capacity = budget > context ? budget - context : 0;
  return s;
}

StepInputs step_inputs(const Plan& p, StepExtent extent) {
  StepInputs in{p.model, p.cluster.shape, p.cluster.hardware.backend, p.train, p.parallel};
  in.prefix_only = extent == StepExtent::Prefix;
  in.states_only = extent == StepExtent::States;
  in.cpu_threads = p.cluster.hardware.threads;
  in.multiprocessors = p.cluster.hardware.multiprocessors;
  in.cublas_workspace_bytes = p.cluster.hardware.cublas_workspace_bytes;
  return in;
}

StandingBytes states_bytes(const Plan& p) {
  return standing_bytes(build_step(step_inputs(p, StepExtent::States)), p.cluster.hardware.backend);
}

StepUnlessPrefixOver step_unless_prefix_over(const Plan& p) {
  StepUnlessPrefixOver r;
  StepInputs in = step_inputs(p);
  bool ended = false;
  const std::function<bool(const StepGraph&)> over = [&](const StepGraph& prefix) {
    const OpTotals t = simulate_totals(prefix, p.cluster.hardware.backend);
    if (fits_as_allocated(p, t)) return false;
    r.device_over = !t.device_during.empty() &&
                    over_device_budget(p, *std::max_element(t.device_during.begin(), t.device_during.end()));
    return ended = true;
  };
  in.end_at_prefix = &over;
  StepGraph g = build_step(in);
  if (!ended) {
    ++work_counts().whole_graphs;
    r.whole = std::move(g);
  }
  return r;
}

bool over_device_budget(const Plan& p, std::int64_t device_bytes) {
  return device_bytes + plan_context_bytes(p) > p.cluster.device_budget_bytes;
}

bool allocator_binds(const Plan& p, const Prediction& pr) {
  return !pr.feasible && pr.binding == device_binding(p) && p.cluster.hardware.backend == Backend::Cuda &&
         !over_device_budget(p, pr.peak_device_bytes);
}

bool fits_as_allocated(const Plan& p, std::int64_t device_bytes, std::int64_t host_bytes_per_node) {
  return !over_device_budget(p, device_bytes) && host_bytes_per_node <= p.cluster.host_budget_bytes_per_node;
}

bool fits_as_allocated(const Plan& p, const StandingBytes& s) {
  return fits_as_allocated(p, s.device, s.host * p.cluster.shape.gpus_per_node);
}

bool fits_as_allocated(const Plan& p, const OpTotals& t) {
  if (t.device_during.empty()) return true;
  const std::int64_t device = *std::max_element(t.device_during.begin(), t.device_during.end());
  const std::int64_t host = *std::max_element(t.host_during.begin(), t.host_during.end());
  return fits_as_allocated(p, device, host * p.cluster.shape.gpus_per_node);
}

bool fits_as_allocated(const Plan& p) {
  return fits_as_allocated(p, p.prediction.peak_device_bytes, p.prediction.peak_host_bytes);
}

DeviceFit device_fits(const Plan& p, const StepGraph& g, std::int64_t allocated_peak, int allocated_peak_op, bool look,
                      const ReplayOptions::ScriptFrom* script_from) {
  ReservedReplay replay;
  const bool fits =
      reserved_figure(p, g, allocated_peak, allocated_peak_op, /*verdict_only=*/true, false, {look, &replay, script_from}).fits;
  return {fits, std::move(replay.looks)};
}

Evaluation evaluate(const Plan& inputs) {
  Evaluation e{inputs, build_step(step_inputs(inputs)), {}};
  e.sim = simulate(e.graph, inputs.cluster.hardware.backend);
  bool exact = true;
  e.plan.prediction = fill(inputs, e.graph, e.sim, false, exact);
  return e;
}

Prediction predict(const Plan& inputs) {
  const StepGraph g = build_step(step_inputs(inputs));
  bool exact = true;
  return fill(inputs, g, simulate(g, inputs.cluster.hardware.backend, /*per_op=*/false), false, exact);
}

namespace {
Verdict verdict_of(const Plan& inputs, const StepGraph& g) {
  Verdict v;
  v.prediction = fill(inputs, g, simulate(g, inputs.cluster.hardware.backend, /*per_op=*/false), true, v.exact);
  return v;
}
}  // namespace

bool& verdict_skips_host_over() {
  thread_local bool skips = true;
  return skips;
}

Verdict predict_verdict(const Plan& inputs) { return verdict_of(inputs, build_step(step_inputs(inputs))); }

std::optional<Verdict> predict_verdict_unless_prefix_over(const Plan& inputs) {
  const StepUnlessPrefixOver built = step_unless_prefix_over(inputs);
  if (!built.whole) return std::nullopt;
  return verdict_of(inputs, *built.whole);
}

}  // namespace longctx
