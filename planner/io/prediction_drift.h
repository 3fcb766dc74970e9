#pragma once
// The plan file as a contract: where the prediction it records differs from what this
// planner predicts for the same inputs (the memory model changed since it was written, or the
// file was edited). `run`, `compare` and `explain` say so; when they agree, nothing is said.
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/core/plan.h"

namespace longctx {

// One recorded figure: bytes (int64), a time, speed or fraction (double), the verdict (bool),
// an op or binding (string); monostate where that side has no such phase.
using DriftValue = std::variant<std::monostate, std::int64_t, double, bool, std::string>;

struct PredictionDifference {
  std::string what;    // "peak_device_bytes", "breakdown.activations", "forward.layer.3 peak_host_bytes"
  DriftValue plan;     // what the plan file says
  DriftValue planner;  // what this planner says
};

// The differences between a recorded prediction and a fresh one: every figure the plan file
// records (the verdict, the step's peaks and where they fall, the breakdown at the device
// peak by category, what binds, the step's time, speed and MFU), then each phase's peaks
// (device, host, and reserved where both have it). A recording without a prediction (peak 0,
// no phases) has nothing to differ; one without phases (older files) is compared on the
// step's figures only.
std::vector<PredictionDifference> prediction_differences(const Prediction& recorded, const Prediction& now);

// "note: the plan says X, this planner says Y" lines, at most `max_lines` of them and a count
// of the rest; empty when there are no differences.
std::string drift_note(const std::vector<PredictionDifference>& d, std::size_t max_lines = 6);

// [{"what", "plan_says", "planner_says"}] (null for a phase one side lacks; bytes as integers).
nlohmann::json drift_json(const std::vector<PredictionDifference>& d);

}  // namespace longctx
