#pragma once
// The plan file: self-contained input of `run`, `explain` and `compare` (schema
// longctx.plan/1, docs/cli.md). The planner writes it; the runtime reads only it.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/core/hardware.h"
#include "planner/core/model_config.h"
#include "planner/core/parallel_config.h"
#include "common/result.h"

namespace longctx {

inline constexpr const char* kPlanSchema = "longctx.plan/1";

struct ClusterSpec {
  Cluster shape;
  Hardware hardware;
  std::int64_t device_budget_bytes = 0;          // per rank; the CPU virtual device enforces it
  std::int64_t host_budget_bytes_per_node = 0;
  // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True on CUDA (allocator_model.h, rules 7-8):
  // changes what the caching allocator reserves, not what it allocates.
  bool expandable_segments = false;
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

// Device figures are per rank. Allocated and reserved are torch.cuda.max_memory_allocated()
// and max_memory_reserved() over a run; nvidia-smi's adds what lives outside the caching
// allocator (hardware.h, device_context_bytes). On the CPU virtual device the three agree.
struct Prediction {
  bool feasible = false;
  std::int64_t peak_device_bytes = 0;           // allocated
  std::int64_t peak_reserved_bytes = 0;         // reserved by the caching allocator (reserved_replay.h)
  std::int64_t peak_nvidia_smi_bytes = 0;       // reserved + context: what binds on the device
  std::string reserved_peak_at;                 // the op at the reserved peak
  std::int64_t peak_host_bytes = 0;   // per node
  // Category -> bytes allocated at the device peak, plus "allocator" (reserved less allocated,
  // at their peaks) and "context": they add up to peak_nvidia_smi_bytes.
  std::map<std::string, std::int64_t> breakdown;
  std::string peak_at;                // the op at the device peak
  double step_time_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  std::string binding;                // what limits: "device memory (nvidia-smi)", "host memory", or "" if fits
  // Per phase, in schedule order (phase_peaks.h fills it); empty when not recorded (plan
  // files written before it was).
  std::vector<PredictedPhase> phases;
  // Of a prediction read from a plan file, the figures it left out (files written before they
  // were recorded: "peak_reserved_bytes", "breakdown", ...), which are left at 0 or "" here and
  // are not the file's to compare (prediction_drift.h). Empty for a fresh prediction.
  std::vector<std::string> not_recorded;
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
std::string plan_file_text(const Plan& p);                             // what write_plan_file writes

}  // namespace longctx
