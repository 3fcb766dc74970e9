#pragma once
// The planner's prediction in the runtime's terms: peak bytes and seconds per phase, under the phase
// names the runtime measures (forward.embed, forward.layer.L, loss, backward.loss,
// backward.layer.L, backward.embed, optimizer), so `run` can show them side by side.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "planner/graph/cost_model.h"
#include "planner/core/plan.h"

namespace longctx::runtime {

struct PhasePrediction {
  std::int64_t peak_device_bytes = 0;
  std::int64_t peak_host_bytes = 0;  // per rank
  double time_s = 0;                 // cost_model.h, phase_step_times
  std::int64_t collectives = 0;      // cost_model.h, phase_collective_calls
  std::vector<OpTime> ops;           // cost_model.h, phase_op_times (measured rates only)
};

struct PredictedStep {
  Prediction totals;                               // as `plan -o` records it, phases included
  std::map<std::string, PhasePrediction> phases;   // keyed by runtime phase name
};

// Evaluates the plan's inputs with the current planner. REQUIRES: the plan validates.
PredictedStep predict_step(const Plan& plan);

}  // namespace longctx::runtime
