#pragma once
// The plan file as a contract: where the prediction it records differs from what this
// planner predicts for the same inputs (the memory model changed since it was written, or the
// file was edited). `run`, `compare` and `explain` say so; when they agree, nothing is said.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/core/plan.h"

namespace longctx {

struct PredictionDifference {
  std::string what;                   // "peak_device_bytes", "forward.layer.3 peak_host_bytes"
  std::optional<std::int64_t> plan;   // what the plan file says; nullopt: it has no such phase
  std::optional<std::int64_t> planner;  // what this planner says; nullopt: it has no such phase
};

// The differences between a recorded prediction and a fresh one: the peaks of the whole step,
// then each phase's (device, host, and reserved where both have it). A recording without a
// prediction (peak 0, no phases) has nothing to differ; one without phases (older files) is
// compared on the step's peaks only.
std::vector<PredictionDifference> prediction_differences(const Prediction& recorded, const Prediction& now);

// "note: the plan says X, this planner says Y" lines, at most `max_lines` of them and a count
// of the rest; empty when there are no differences.
std::string drift_note(const std::vector<PredictionDifference>& d, std::size_t max_lines = 6);

// [{"what", "plan_says", "planner_says"}] (null for a phase one side lacks).
nlohmann::json drift_json(const std::vector<PredictionDifference>& d);

}  // namespace longctx
