#pragma once
// A measured run read back from Chrome trace event JSON: the trace `longctx run --trace`
// writes, or the one PyTorch's profiler exports with memory profiling on
// (torch.profiler.profile(profile_memory=True).export_chrome_trace), so a plan can be held
// against a user's own PyTorch run.
#include <cstdint>
#include <map>
#include <string>

#include "planner/core/plan.h"
#include "common/result.h"

namespace longctx {

// Which plan a longctx trace measured, in its otherData: the model's name, a fingerprint of
// the plan's model, parallel and train sections (what decides the step's memory), and the
// cluster it ran on (nodes x GPUs a node and the backend, "1 x 8 cuda": what the same step's
// per-rank figures depend on beside them). `compare` refuses a trace of another plan,
// or of a run on another cluster (traces written before the cluster was recorded name none).
struct TraceIdentity {
  std::string model;
  std::string plan_fingerprint;
  std::string cluster;
};
inline constexpr const char* kTraceModelKey = "model";
inline constexpr const char* kTracePlanKey = "plan_fingerprint";
inline constexpr const char* kTraceClusterKey = "cluster";
TraceIdentity trace_identity(const Plan& plan);

struct MeasuredTrace {
  std::string source;                          // "longctx" or "pytorch-profiler"
  std::int64_t peak_device_bytes = 0;          // allocated, per rank
  std::int64_t peak_host_bytes = 0;            // per rank (longctx traces only)
  // phase -> peak device bytes: a longctx trace's own phases; a profiler trace's "forward",
  // "backward" and "optimizer" from its scopes (profiler_phases.h), empty when it has none.
  std::map<std::string, std::int64_t> phases;
  TraceIdentity identity;                      // empty where the trace does not say (profiler traces)

  // Profiler traces of the CPU count only what was allocated while the profiler ran: the
  // CPU allocator's reporter keeps its own total of the blocks it saw allocated and ignores
  // frees of any other (c10/core/CPUAllocator.cpp, ProfiledCPUMemoryReporter::New and
  // ::Delete). Memory that existed before profiling (parameters; after a warm-up step also
  // the optimizer's state) is missing from every figure. A CUDA trace carries the caching
  // allocator's own total, which counts everything.
  bool counts_from_profiling_start = false;
  std::int64_t recorded_baseline_bytes = -1;   // otherData.baseline_bytes; -1: not recorded
  std::int64_t optimizer_live_bytes = 0;       // profiler traces: see profiler::Attribution
};
inline constexpr const char* kTraceBaselineKey = "baseline_bytes";

// Plain or gzip-compressed JSON (the profiler writes `trace.json.gz` when asked to).
// Missing files, malformed JSON, traces with no memory events, and figures that are not
// byte counts (strings, fractions, negatives, values past 2^62; a device peak of 0) are
// BadInput naming the file, the figure and what to record.
Result<MeasuredTrace> read_trace_file(const std::string& path);
Result<MeasuredTrace> trace_from_json_text(const std::string& text, const std::string& what);

// BadInput (naming --trace) when `trace` names a model or plan other than `plan`'s; a
// trace that names none passes.
Result<bool> check_trace_matches(const MeasuredTrace& trace, const Plan& plan, const std::string& trace_path);

}  // namespace longctx
