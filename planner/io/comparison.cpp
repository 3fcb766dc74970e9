#include "planner/io/comparison.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "planner/search/phase_peaks.h"

namespace longctx {

double relative_error(std::int64_t predicted, std::int64_t measured) {
  return measured > 0 ? double(predicted - measured) / double(measured) : 0.0;
}

namespace {

// A phase of the plan as a profiler trace's scopes group it (profiler_phases.h).
std::string profiler_phase(const std::string& phase) {
  if (phase.rfind("backward", 0) == 0) return "backward";
  if (phase == "optimizer") return "optimizer";
  return "forward";
}

// Bytes on the device before the step begins, by category: the persistent tensors.
std::int64_t persistent_device_bytes(const StepGraph& g, Category category) {
  std::int64_t sum = 0;
  for (const auto& t : g.tensors())
    if (t.persistent && t.producer < 0 && t.place == Place::Device && t.category == category) sum += t.bytes;
  return sum;
}

// What a trace that counts from the profiler's start is missing. Parameters always existed
// before; the optimizer's state did unless the trace shows it created (a profile of the
// very first step, where torch.optim allocates it lazily inside the step).
void set_baseline(Comparison& c, const MeasuredTrace& trace) {
  if (trace.recorded_baseline_bytes >= 0) {
    c.baseline = trace.recorded_baseline_bytes;
    c.baseline_source = "recorded in the trace (otherData.baseline_bytes)";
    return;
  }
  if (!trace.counts_from_profiling_start) return;
  const StepGraph& g = c.evaluation.graph;
  const std::int64_t params = persistent_device_bytes(g, Category::Params);
  const std::int64_t state = persistent_device_bytes(g, Category::Optimizer);
  const std::int64_t state_before = std::max<std::int64_t>(0, state - trace.optimizer_live_bytes);
  c.baseline = params + state_before;
  c.baseline_source = fmt::format("the plan's parameters ({} bytes) and the optimizer state the trace did not see "
                                  "allocated ({} of {} bytes): a CPU profile counts only what was allocated while it ran",
                                  params, state_before, state);
}

}  // namespace

Result<Comparison> compare_to_trace(const Plan& plan, const MeasuredTrace& trace, const std::string& trace_path) {
  LONGCTX_TRY(const bool matches, check_trace_matches(trace, plan, trace_path));
  (void)matches;
  Comparison c;
  c.evaluation = evaluate(plan);
  const Evaluation& e = c.evaluation;
  c.drift = prediction_differences(plan.prediction, with_phase_predictions(e).prediction);
  c.trace_source = trace.source;
  const bool profiler = trace.source != "longctx";
  set_baseline(c, trace);

  const auto peaks = phase_peaks(e);
  std::vector<std::pair<std::string, PhasePeak>> ordered(peaks.begin(), peaks.end());
  std::sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) { return a.second.order < b.second.order; });
  for (const auto& [name, peak] : ordered) {
    const std::string phase = profiler ? profiler_phase(name) : name;
    auto row = std::find_if(c.phases.begin(), c.phases.end(), [&](const auto& r) { return r.phase == phase; });
    if (row == c.phases.end()) row = c.phases.insert(c.phases.end(), PhaseComparison{phase, 0, -1});
    row->predicted = std::max(row->predicted, peak.device_bytes);
  }
  std::int64_t best = -1;
  for (auto& r : c.phases) {
    if (auto it = trace.phases.find(r.phase); it != trace.phases.end()) r.measured = it->second + c.baseline;
    if (r.measured > best) best = r.measured, c.measured_peak_phase = r.phase;
  }
  if (trace.phases.empty())
    c.phase_note = profiler ? "the trace has no optimizer or autograd scopes to attribute its memory to phases; profile "
                              "with torch.profiler around whole training steps"
                            : "the trace records no phases";
  c.predicted = e.sim.peak_device_bytes;
  c.measured = trace.peak_device_bytes + c.baseline;
  c.error = relative_error(c.predicted, c.measured);
  const std::string predicted_phase = e.sim.peak_op >= 0 ? phase_of(e.graph.op(e.sim.peak_op)) : "";
  c.predicted_peak_phase = profiler && !predicted_phase.empty() ? profiler_phase(predicted_phase) : predicted_phase;
  c.same_peak_phase = !c.measured_peak_phase.empty() && c.measured_peak_phase == c.predicted_peak_phase;
  return c;
}

nlohmann::json comparison_json(const Comparison& c) {
  nlohmann::json j = {{"predicted_peak_bytes", c.predicted},
                      {"measured_peak_bytes", c.measured},
                      {"error", c.error},
                      {"trace_source", c.trace_source},
                      {"stack", to_string(c.evaluation.plan.train.stack.kind)},
                      {"predicted_peak_phase", c.predicted_peak_phase},
                      {"predicted_peak_op", c.evaluation.plan.prediction.peak_at},
                      {"measured_peak_phase", c.measured_peak_phase},
                      {"same_peak_phase", c.same_peak_phase},
                      {"baseline_bytes", c.baseline},
                      {"baseline_source", c.baseline_source},
                      {"phase_note", c.phase_note},
                      {"prediction_drift", drift_json(c.drift)}};
  j["phases"] = nlohmann::json::array();
  for (const auto& r : c.phases)
    j["phases"].push_back({{"phase", r.phase},
                           {"predicted_bytes", r.predicted},
                           {"measured_bytes", r.measured},
                           {"error", r.measured >= 0 ? nlohmann::json(relative_error(r.predicted, r.measured)) : nlohmann::json()}});
  return j;
}

}  // namespace longctx
