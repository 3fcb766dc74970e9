#pragma once
// The plan file: self-contained input of `run`, `explain` and `compare` (schema
// longctx.plan/1, docs/cli.md). The planner writes it; the runtime reads only it.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "longctx/planner/hardware.h"
#include "longctx/planner/model_config.h"
#include "longctx/planner/parallel_config.h"
#include "longctx/planner/result.h"

namespace longctx {

inline constexpr const char* kPlanSchema = "longctx.plan/1";

struct ClusterSpec {
  Cluster shape;
  Hardware hardware;
  std::int64_t device_budget_bytes = 0;          // per rank; the CPU virtual device enforces it
  std::int64_t host_budget_bytes_per_node = 0;
};

// One phase's predicted peaks, under phase_names.h's names: what the plan file records so
// that a later planner, or the runtime's measurement, can be held against it.
struct PredictedPhase {
  std::string phase;
  std::int64_t peak_device_bytes = 0;  // allocated, per rank (without the context outside the allocator)
  std::int64_t peak_host_bytes = 0;    // per rank
  // Device bytes reserved by the caching allocator: not predicted yet. Absent from the file
  // (and from comparisons) until the allocator model predicts it.
  std::optional<std::int64_t> peak_device_reserved_bytes;
  bool operator==(const PredictedPhase&) const = default;
};

struct Prediction {
  bool feasible = false;
  std::int64_t peak_device_bytes = 0;
  std::int64_t peak_host_bytes = 0;   // per node
  std::map<std::string, std::int64_t> breakdown;  // category -> bytes live at the device peak
  std::string peak_at;                // the op at the device peak
  double step_time_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  std::string binding;                // what limits: "device memory", "host memory", or "" if fits
  // Per phase, in schedule order (phase_peaks.h fills it); empty when not recorded (plan
  // files written before it was).
  std::vector<PredictedPhase> phases;
};

struct Plan {
  ModelConfig model;
  ClusterSpec cluster;
  TrainConfig train;
  ParallelConfig parallel;
  Prediction prediction;
};

nlohmann::json plan_to_json(const Plan& p);
// Every missing or wrong field is named ("parallel.ulysses"); another schema is refused.
Result<Plan> plan_from_json(const nlohmann::json& j);
Result<Plan> read_plan_file(const std::string& path);
Result<bool> write_plan_file(const Plan& p, const std::string& path);  // write, then rename

}  // namespace longctx
