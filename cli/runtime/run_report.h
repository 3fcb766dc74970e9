#pragma once
// What `longctx run` shows once the steps ran: the measured peaks beside the predicted ones,
// as a table or as JSON (--json), and the last step's operator times (--op-times).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/core/plan.h"
#include "planner/io/prediction_drift.h"
#include "longctx/runtime/prediction.h"
#include "longctx/runtime/runner.h"

namespace longctx::cli {

// One step of --json's "steps".
struct StepLine {
  int step;
  double loss, time_s;
  std::int64_t peak_device, peak_host;
};

// What a run measured beside what its plan predicts. REQUIRES: run has at least one step.
struct RunComparison {
  const Plan& plan;
  const runtime::RunReport& run;
  const runtime::PredictedStep& predicted;                  // by the current planner
  const std::vector<PredictionDifference>& drift;           // the plan file's figures against predicted
};

// --op-times: the step's phases, each with its measured and predicted time and its LibTorch
// operators by self time, longest first, beside the planner's ops of that phase.
nlohmann::json op_times_json(const runtime::StepResult& step, const runtime::PredictedStep& predicted);

// --json: the steps' lines, the measured and predicted peaks (the last step's per phase), the
// plan file's prediction and its drift, printed to stdout.
void print_run_json(const RunComparison& c, const std::vector<StepLine>& steps);

// The table of measured, predicted and error: the peaks, then the last step per phase; the
// trace's path when one was written.
void print_run_table(const RunComparison& c, const std::string& trace_path);

}  // namespace longctx::cli
