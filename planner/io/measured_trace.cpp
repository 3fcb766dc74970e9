#include "planner/io/measured_trace.h"

#include <algorithm>
#include <cmath>
#include <vector>


#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/input_file.h"
#include "common/json_depth.h"
#include "planner/core/fingerprint.h"
#include "planner/io/quoted_text.h"
#include "planner/io/trace_schema.h"
#include "planner/io/profiler_phases.h"

namespace longctx {
namespace {

// Past this a figure is not a memory size but a broken trace (2^62 bytes = 4 EiB).
constexpr double kMaxBytes = 4611686018427387904.0;

// A figure of the trace as a byte count: a finite, whole, non-negative number below 2^62.
// `where` names it in the error ("args.peak_device_bytes of phase 'forward'").
Result<std::int64_t> byte_count(const nlohmann::json& v, const std::string& what, const std::string& where) {
  const auto refuse = [&] {
    return Error::bad_input(what, fmt::format("{} is {}, not a byte count (a whole number from 0 to below 2^62); pass a trace "
                                              "`longctx run --trace` or the PyTorch profiler wrote",
                                              where, v.dump()));
  };
  if (v.is_number_integer()) {
    // Below 2^62, not up to it: a peak and a baseline, added, stay within int64 (two of 2^62
    // made the measured peak -2^63).
    if (v.is_number_unsigned() ? v.get<std::uint64_t>() >= std::uint64_t(kMaxBytes) : v.get<std::int64_t>() < 0)
      return refuse();
    return v.get<std::int64_t>();
  }
  if (!v.is_number_float()) return refuse();
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < 0 || d >= kMaxBytes || d != std::floor(d)) return refuse();
  return static_cast<std::int64_t>(d);
}

// An allocation's signed size in a profiler's memory event (`Bytes`: > 0 allocated, < 0
// freed): a whole number of magnitude below 2^62; absent, 0.
Result<std::int64_t> signed_byte_count(const nlohmann::json& args, const char* key, const std::string& what,
                                       const std::string& where) {
  if (!args.contains(key)) return std::int64_t{0};
  const nlohmann::json& v = args[key];
  if (v.is_number_integer() && !v.is_number_unsigned()) {
    const std::int64_t b = v.get<std::int64_t>();
    if (b < 0 && b > -std::int64_t(kMaxBytes)) return b;
  }
  if (v.is_number() && !(v.is_number_integer() && !v.is_number_unsigned())) return byte_count(v, what, where);
  return Error::bad_input(what, fmt::format("{} is {}, not a byte count (a whole number of magnitude below 2^62); pass a "
                                            "trace `longctx run --trace` or the PyTorch profiler wrote",
                                            where, v.dump()));
}

struct Reader {
  MeasuredTrace m;
  bool longctx = false, profiler = false;
  std::string what;

  Result<bool> phase_event(const std::string& name, const nlohmann::json& args) {
    namespace k = trace_schema;
    longctx = true;
    const std::string where = fmt::format("args.{} of phase '{}'", k::kPeakDevice, name);
    LONGCTX_TRY(const auto device, byte_count(args[k::kPeakDevice], what, where));
    // The figures the comparison does not read are held to the schema too: a trace whose
    // figures are not counts is not one a run wrote.
    if (args.contains(k::kDeviceAtStart)) {
      LONGCTX_TRY(const auto at_start, byte_count(args[k::kDeviceAtStart], what,
                                                  fmt::format("args.{} of phase '{}'", k::kDeviceAtStart, name)));
      (void)at_start;
    }
    if (args.contains(k::kStep)) {
      LONGCTX_TRY(const auto step, byte_count(args[k::kStep], what, fmt::format("args.{} of phase '{}' (a step number)", k::kStep, name)));
      (void)step;
    }
    auto& v = m.phases[name];
    v = std::max(v, device);
    m.peak_device_bytes = std::max(m.peak_device_bytes, device);
    if (args.contains(k::kPeakHost)) {
      LONGCTX_TRY(const auto host, byte_count(args[k::kPeakHost], what, fmt::format("args.{} of phase '{}'", k::kPeakHost, name)));
      m.peak_host_bytes = std::max(m.peak_host_bytes, host);
    }
    return true;
  }

  // PyTorch profiler: one instant event per allocation and free. Device Type 1 is CUDA; a
  // CPU-only run reports the CPU (0).
  Result<bool> profiler_event(const nlohmann::json& ev, const nlohmann::json& args) {
    namespace k = trace_schema;
    profiler = true;
    const auto& type = args.contains(k::kProfilerDeviceType) ? args[k::kProfilerDeviceType] : nlohmann::json(0);
    LONGCTX_TRY(const auto total, byte_count(args[k::kProfilerTotalAllocated], what, "a memory event's Total Allocated"));
    const bool cuda = type == 1;
    if (cuda) m.peak_device_bytes = std::max(m.peak_device_bytes, total);
    else m.peak_host_bytes = std::max(m.peak_host_bytes, total);
    profiler::MemoryEvent e;
    e.ts = number_or(ev, k::kTimestamp, 0);
    LONGCTX_TRY(e.bytes, signed_byte_count(args, k::kProfilerBytes, what, "a memory event's Bytes"));
    e.total = total;
    e.addr = args.contains(k::kProfilerAddress) ? args[k::kProfilerAddress].dump() : "";
    (cuda ? cuda_events : cpu_events).push_back(std::move(e));
    return true;
  }

  void scope_event(const nlohmann::json& ev, const std::string& name) {
    namespace k = trace_schema;
    profiler::Scope s;
    if (!profiler::scope_kind(name, s.optimizer)) return;
    s.begin = number_or(ev, k::kTimestamp, 0);
    s.end = s.begin + number_or(ev, k::kDuration, 0);
    scopes.push_back(s);
  }

  static double number_or(const nlohmann::json& o, const char* key, double fallback) {
    return o.contains(key) && o[key].is_number() ? o[key].get<double>() : fallback;
  }

  std::vector<profiler::MemoryEvent> cuda_events, cpu_events;
  std::vector<profiler::Scope> scopes;

  Result<bool> other_data(const nlohmann::json& o) {
    namespace k = trace_schema;
    for (const char* key : {k::kPeakDevice, k::kPeakHost}) {
      if (!o.contains(key)) continue;
      LONGCTX_TRY(const auto v, byte_count(o[key], what, fmt::format("otherData.{}", key)));
      auto& peak = std::string(key) == k::kPeakDevice ? m.peak_device_bytes : m.peak_host_bytes;
      peak = std::max(peak, v);
    }
    if (o.contains(kTraceBaselineKey)) {
      LONGCTX_TRY(m.recorded_baseline_bytes,
                  byte_count(o[kTraceBaselineKey], what, fmt::format("otherData.{}", kTraceBaselineKey)));
    }
    for (const auto& [key, field] : {std::pair{kTraceModelKey, &TraceIdentity::model},
                                     std::pair{kTracePlanKey, &TraceIdentity::plan_fingerprint},
                                     std::pair{kTraceClusterKey, &TraceIdentity::cluster}}) {
      if (!o.contains(key)) continue;
      if (!o[key].is_string())
        return Error::bad_input(what, fmt::format("otherData.{} is {}, not a string", key, o[key].dump()));
      m.identity.*field = o[key].get<std::string>();
    }
    return true;
  }
};

}  // namespace

TraceIdentity trace_identity(const Plan& plan) {
  const auto j = plan_to_json(plan);
  // The fingerprint keeps its sections (traces and training checkpoints already written name
  // it); the cluster is said beside it, as what the step's allocated figures per rank depend
  // on: the ranks and how they sit on nodes, and the device's allocator (CUDA's caching
  // allocator or the CPU's). Not the preset's name: a calibrated preset of the same device
  // (calibrate -o) plans the same bytes under another name.
  const ClusterSpec& c = plan.cluster;
  return {plan.model.name, fnv1a_64_hex(j.at("model").dump() + j.at("parallel").dump() + j.at("train").dump()),
          fmt::format("{} x {} {}", c.shape.nodes, c.shape.gpus_per_node, c.hardware.backend == Backend::Cpu ? "cpu" : "cuda")};
}

Result<MeasuredTrace> trace_from_json_text(const std::string& text, const std::string& what) {
  namespace k = trace_schema;
  LONGCTX_TRY(auto shallow, check_json_depth(text, what));
  (void)shallow;
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded()) return Error::bad_input(what, "is not valid JSON; pass the trace file a run wrote");
  const nlohmann::json* events = nullptr;
  if (doc.is_object() && doc.contains(k::kEvents) && doc[k::kEvents].is_array()) events = &doc[k::kEvents];
  else if (doc.is_array()) events = &doc;
  if (!events) return Error::bad_input(what, "has no traceEvents array; pass a Chrome trace event file");

  Reader r;
  r.what = what;
  const nlohmann::json no_args = nlohmann::json::object();
  for (const auto& ev : *events) {
    if (!ev.is_object()) continue;
    // `args` is optional in Chrome's trace format: a profiler's scope ("Optimizer.step#...",
    // "autograd::engine::evaluate_function: ...") may come without one, and skipping it lost
    // every phase of the comparison.
    const bool has_args = ev.contains(k::kArgs) && ev[k::kArgs].is_object();
    const auto& args = has_args ? ev[k::kArgs] : no_args;
    const std::string ph = ev.contains(k::kType) && ev[k::kType].is_string() ? ev[k::kType].get<std::string>() : "";
    const std::string name = ev.contains(k::kName) && ev[k::kName].is_string() ? ev[k::kName].get<std::string>() : "";
    // The profiler writes every allocation and free with its running total: a memory event
    // without one is a trace edited or written by something else, whose peak cannot be read.
    if (name == k::kProfilerMemoryEvent && !args.contains(k::kProfilerTotalAllocated))
      return Error::bad_input(what, fmt::format("has a '{}' event without args.\"{}\" (PyTorch's profiler writes one "
                                                "with every allocation and free); export the trace again with "
                                                "profile_memory=True",
                                                name, k::kProfilerTotalAllocated));
    if (ph == k::kComplete && args.contains(k::kPeakDevice)) {
      if (auto ok = r.phase_event(name, args); !ok) return ok.error();
    } else if (name == k::kProfilerMemoryEvent && args.contains(k::kProfilerTotalAllocated)) {
      if (auto ok = r.profiler_event(ev, args); !ok) return ok.error();
    } else if (ph == k::kComplete) {
      r.scope_event(ev, name);
    } else if (ph == k::kCounter && (name == k::kPhasePeakTrack || name == k::kLiveTrack)) {
      for (const char* series : {k::kDeviceSeries, k::kHostSeries})
        if (args.contains(series)) {
          auto ok = byte_count(args[series], what, fmt::format("args.{} of a '{}' counter event", series, name));
          if (!ok) return ok.error();
        }
    }
  }
  if (doc.is_object() && doc.contains(k::kOtherData) && doc[k::kOtherData].is_object())
    if (auto ok = r.other_data(doc[k::kOtherData]); !ok) return ok.error();
  if (!r.longctx && !r.profiler)
    return Error::bad_input(what, "has no memory events; write it with `longctx run --trace FILE`, or export a PyTorch "
                                  "profiler trace with profile_memory=True");
  MeasuredTrace m = std::move(r.m);
  if (r.profiler && !r.longctx) {
    m.source = "pytorch-profiler";
    // A CPU-only profile measures the CPU allocator: that is the device of the CPU virtual device.
    m.counts_from_profiling_start = r.cuda_events.empty();
    if (m.counts_from_profiling_start) std::swap(m.peak_device_bytes, m.peak_host_bytes);
    const auto a = profiler::attribute(m.counts_from_profiling_start ? r.cpu_events : r.cuda_events, r.scopes);
    m.phases = a.phase_peaks;
    m.optimizer_live_bytes = a.optimizer_live_bytes;
  } else {
    m.source = "longctx";
  }
  // Every step allocates: a peak of 0 is a trace that measured nothing, and any error
  // against it would be meaningless.
  if (m.peak_device_bytes == 0)
    return Error::bad_input(what, "records a device peak of 0 bytes: it measured nothing; pass the trace of a run that "
                                  "trained at least one step");
  return m;
}

Result<MeasuredTrace> read_trace_file(const std::string& path) {
  LONGCTX_TRY(const std::string text, read_text_file(path, "--trace"));
  return trace_from_json_text(text, path);
}

Result<bool> check_trace_matches(const MeasuredTrace& trace, const Plan& plan, const std::string& trace_path) {
  const TraceIdentity mine = trace_identity(plan);
  // A run's trace names its plan; one that names none could be of any plan (a tiny model's
  // trace was held to an 8B plan at +411,779%). A profiler's trace names nothing of longctx's.
  if (trace.source == "longctx" && (trace.identity.model.empty() || trace.identity.plan_fingerprint.empty()))
    return Error::bad_input("--trace", fmt::format("{} names no plan (otherData.model and otherData.plan_fingerprint, "
                                                   "which `longctx run --trace` writes); pass the trace of a run of this plan",
                                                   trace_path));
  if (!trace.identity.model.empty() && trace.identity.model != mine.model)
    return Error::bad_input("--trace", fmt::format("{} is a trace of model {}, the plan is of {}; pass the trace of a run "
                                                   "of this plan",
                                                   trace_path, trace.identity.model, mine.model));
  if (!trace.identity.plan_fingerprint.empty() && trace.identity.plan_fingerprint != mine.plan_fingerprint)
    return Error::bad_input("--trace", fmt::format("{} is a trace of another plan of {} (plan fingerprint {} there, {} "
                                                   "here: its model, parallel or train settings differ); pass the trace of a "
                                                   "run of this plan",
                                                   trace_path, mine.model, trace.identity.plan_fingerprint,
                                                   mine.plan_fingerprint));
  if (!trace.identity.cluster.empty() && trace.identity.cluster != mine.cluster)
    return Error::bad_input("--trace", fmt::format("{} is a trace of a run on {} (nodes x GPUs a node, backend), the plan is "
                                                   "for {}: its per-rank figures are another cluster's; pass the trace of a "
                                                   "run of this plan on its cluster",
                                                   trace_path, terminal_line(trace.identity.cluster), mine.cluster));
  // A profiler's trace names no plan, but it says which device it measured: a CUDA
  // allocator's events held to a plan of the CPU virtual device (or the CPU allocator's alone
  // to a GPU plan) are another run's, whatever the error would read.
  if (trace.source == "pytorch-profiler") {
    const bool plan_on_cuda = plan.cluster.hardware.backend == Backend::Cuda;
    const bool trace_on_cuda = !trace.counts_from_profiling_start;
    if (plan_on_cuda != trace_on_cuda)
      return Error::bad_input(
          "--trace", fmt::format("{} measured {}, the plan is for {} ({}); pass the profile of a run on the plan's device",
                                 trace_path,
                                 trace_on_cuda ? "a CUDA device (memory events of \"Device Type\" 1)"
                                               : "the CPU allocator alone (no CUDA memory event)",
                                 plan_on_cuda ? "a CUDA device" : "the CPU virtual device", plan.cluster.hardware.name));
  }
  return true;
}

}  // namespace longctx
