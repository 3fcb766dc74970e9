#pragma once
// A measured run read back from Chrome trace event JSON: the trace `longctx run --trace`
// writes, or the one PyTorch's profiler exports with memory profiling on
// (torch.profiler.profile(profile_memory=True).export_chrome_trace), so a plan can be held
// against a user's own PyTorch run.
#include <cstdint>
#include <map>
#include <string>

#include "longctx/planner/result.h"

namespace longctx {

struct MeasuredTrace {
  std::string source;                          // "longctx" or "pytorch-profiler"
  std::int64_t peak_device_bytes = 0;          // allocated, per rank
  std::int64_t peak_host_bytes = 0;            // per rank (longctx traces only)
  std::map<std::string, std::int64_t> phases;  // phase -> peak device bytes (longctx traces only)
};

// Missing files, malformed JSON and traces with no memory events are BadInput naming the
// file and what to record.
Result<MeasuredTrace> read_trace_file(const std::string& path);
Result<MeasuredTrace> trace_from_json_text(const std::string& text, const std::string& what);

}  // namespace longctx
