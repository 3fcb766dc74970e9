#include "longctx/planner/measured_trace.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "json_fields.h"
#include "longctx/planner/trace_schema.h"

namespace longctx {
namespace {

std::int64_t as_int(const nlohmann::json& v) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number()) return static_cast<std::int64_t>(v.get<double>());
  return 0;
}

}  // namespace

Result<MeasuredTrace> trace_from_json_text(const std::string& text, const std::string& what) {
  namespace k = trace_schema;
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded()) return Error::bad_input(what, "is not valid JSON; pass the trace file a run wrote");
  const nlohmann::json* events = nullptr;
  if (doc.is_object() && doc.contains(k::kEvents) && doc[k::kEvents].is_array()) events = &doc[k::kEvents];
  else if (doc.is_array()) events = &doc;
  if (!events) return Error::bad_input(what, "has no traceEvents array; pass a Chrome trace event file");

  MeasuredTrace m;
  bool longctx = false, profiler = false;
  for (const auto& ev : *events) {
    if (!ev.is_object() || !ev.contains(k::kArgs) || !ev[k::kArgs].is_object()) continue;
    const auto& args = ev[k::kArgs];
    const std::string ph = ev.value(k::kType, "");
    const std::string name = ev.contains(k::kName) && ev[k::kName].is_string() ? ev[k::kName].get<std::string>() : "";
    if (ph == k::kComplete && args.contains(k::kPeakDevice)) {
      longctx = true;
      auto& v = m.phases[name];
      v = std::max(v, as_int(args[k::kPeakDevice]));
      m.peak_device_bytes = std::max(m.peak_device_bytes, as_int(args[k::kPeakDevice]));
      if (args.contains(k::kPeakHost)) m.peak_host_bytes = std::max(m.peak_host_bytes, as_int(args[k::kPeakHost]));
    } else if (name == k::kProfilerMemoryEvent && args.contains(k::kProfilerTotalAllocated)) {
      // PyTorch profiler: one instant event per allocation and free. Device Type 1 is CUDA;
      // a CPU-only run reports the CPU (0).
      profiler = true;
      const int device_type = args.contains(k::kProfilerDeviceType) ? static_cast<int>(as_int(args[k::kProfilerDeviceType])) : 0;
      const std::int64_t total = as_int(args[k::kProfilerTotalAllocated]);
      if (device_type == 1) m.peak_device_bytes = std::max(m.peak_device_bytes, total);
      else m.peak_host_bytes = std::max(m.peak_host_bytes, total);
    }
  }
  if (doc.is_object() && doc.contains(k::kOtherData) && doc[k::kOtherData].is_object()) {
    const auto& o = doc[k::kOtherData];
    if (o.contains(k::kPeakDevice)) m.peak_device_bytes = std::max(m.peak_device_bytes, as_int(o[k::kPeakDevice]));
    if (o.contains(k::kPeakHost)) m.peak_host_bytes = std::max(m.peak_host_bytes, as_int(o[k::kPeakHost]));
  }
  if (!longctx && !profiler)
    return Error::bad_input(what, "has no memory events; write it with `longctx run --trace FILE`, or export a PyTorch "
                                  "profiler trace with profile_memory=True");
  if (profiler && !longctx) {
    m.source = "pytorch-profiler";
    // A CPU-only profile measures the CPU allocator: that is the device of the CPU virtual device.
    if (m.peak_device_bytes == 0) std::swap(m.peak_device_bytes, m.peak_host_bytes);
  } else {
    m.source = "longctx";
  }
  return m;
}

Result<MeasuredTrace> read_trace_file(const std::string& path) {
  LONGCTX_TRY(auto text, json_fields::read_file(path, "--trace"));
  return trace_from_json_text(text, path);
}

}  // namespace longctx
