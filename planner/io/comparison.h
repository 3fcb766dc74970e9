#pragma once
// A plan's prediction held against a measured trace: the peak and each phase, predicted
// beside measured. `longctx compare` prints it; the Python package returns its JSON.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/io/measured_trace.h"
#include "planner/search/memory_model.h"
#include "planner/core/plan.h"
#include "planner/io/prediction_drift.h"
#include "common/result.h"

namespace longctx {

struct PhaseComparison {
  std::string phase;
  std::int64_t predicted = 0, measured = -1;  // -1: the trace has no such phase
};

struct Comparison {
  Evaluation evaluation;                    // the plan, re-evaluated by this planner
  std::vector<PredictionDifference> drift;  // the plan file's prediction against this planner's
  std::vector<PhaseComparison> phases;      // in schedule order
  std::int64_t predicted = 0;  // allocated bytes at the peak, without the context outside the allocator
  std::int64_t measured = 0;
  double error = 0;            // (predicted - measured) / measured
  std::string trace_source;
  std::string predicted_peak_phase, measured_peak_phase;  // the latter empty when the trace has no phases
  bool same_peak_phase = false;
  // Added to every measured figure: what existed before a CPU profiler trace began
  // (MeasuredTrace::counts_from_profiling_start), and where the figure came from. 0 for
  // traces that count everything.
  std::int64_t baseline = 0;
  std::string baseline_source;
  // Why the trace's phases cannot be held to the plan's; empty when they are.
  std::string phase_note;
};

// (predicted - measured) / measured, 0 when nothing was measured.
double relative_error(std::int64_t predicted, std::int64_t measured);

// BadInput when the trace is of another model or plan (check_trace_matches). A profiler
// trace is held to the plan's phases grouped as it records them: forward (the embedding,
// the layers and the loss, which transformers computes inside the model's forward),
// backward, optimizer.
Result<Comparison> compare_to_trace(const Plan& plan, const MeasuredTrace& trace, const std::string& trace_path);

// The JSON `longctx compare --json` prints.
nlohmann::json comparison_json(const Comparison& c);

}  // namespace longctx
