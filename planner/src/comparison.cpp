#include "longctx/planner/comparison.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "longctx/planner/phase_peaks.h"

namespace longctx {

double relative_error(std::int64_t predicted, std::int64_t measured) {
  return measured > 0 ? double(predicted - measured) / double(measured) : 0.0;
}

Result<Comparison> compare_to_trace(const Plan& plan, const MeasuredTrace& trace, const std::string& trace_path) {
  LONGCTX_TRY(const bool matches, check_trace_matches(trace, plan, trace_path));
  (void)matches;
  Comparison c;
  c.evaluation = evaluate(plan);
  const Evaluation& e = c.evaluation;
  c.drift = prediction_differences(plan.prediction, with_phase_predictions(e).prediction);
  const auto peaks = phase_peaks(e);
  std::vector<std::pair<std::string, PhasePeak>> ordered(peaks.begin(), peaks.end());
  std::sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) { return a.second.order < b.second.order; });
  std::int64_t best = -1;
  for (const auto& [name, peak] : ordered) {
    PhaseComparison r{name, peak.device_bytes, -1};
    if (auto it = trace.phases.find(name); it != trace.phases.end()) r.measured = it->second;
    if (r.measured > best) best = r.measured, c.measured_peak_phase = r.phase;
    c.phases.push_back(r);
  }
  c.predicted = e.sim.peak_device_bytes;
  c.measured = trace.peak_device_bytes;
  c.error = relative_error(c.predicted, c.measured);
  c.trace_source = trace.source;
  c.predicted_peak_phase = e.sim.peak_op >= 0 ? phase_of(e.graph.op(e.sim.peak_op)) : "";
  c.same_peak_phase = !c.measured_peak_phase.empty() && c.measured_peak_phase == c.predicted_peak_phase;
  return c;
}

nlohmann::json comparison_json(const Comparison& c) {
  nlohmann::json j = {{"predicted_peak_bytes", c.predicted},
                      {"measured_peak_bytes", c.measured},
                      {"error", c.error},
                      {"trace_source", c.trace_source},
                      {"predicted_peak_phase", c.predicted_peak_phase},
                      {"predicted_peak_op", c.evaluation.plan.prediction.peak_at},
                      {"measured_peak_phase", c.measured_peak_phase},
                      {"same_peak_phase", c.same_peak_phase},
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
