#include "longctx/runtime/prediction.h"

#include "planner/graph/cost_model.h"
#include "planner/search/memory_model.h"
#include "planner/search/phase_peaks.h"

namespace longctx::runtime {

PredictedStep predict_step(const Plan& plan) {
  const Evaluation e = evaluate(plan);
  PredictedStep p;
  p.totals = with_phase_predictions(e).prediction;
  for (const auto& [name, peak] : phase_peaks(e)) {
    p.phases[name].peak_device_bytes = peak.device_bytes;
    p.phases[name].peak_host_bytes = peak.host_bytes;
  }
  for (const auto& [name, seconds] : phase_step_times(e.plan, e.graph)) p.phases[name].time_s = seconds;
  for (const auto& [name, calls] : phase_collective_calls(e.graph)) p.phases[name].collectives = calls;
  for (auto& [name, ops] : phase_op_times(e.plan, e.graph)) p.phases[name].ops = std::move(ops);
  return p;
}

}  // namespace longctx::runtime
