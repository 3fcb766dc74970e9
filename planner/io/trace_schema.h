#pragma once
// The keys of the Chrome trace event JSON `longctx run --trace` writes
// (runtime/src/trace.cpp) and `compare` reads back (measured_trace.cpp), and those of the
// PyTorch profiler's memory events that `compare` also reads. One definition, so writer and
// reader cannot drift apart.
//
// A longctx trace: {"traceEvents": [...], "displayTimeUnit": "ms",
//                   "otherData": {"peak_device_bytes": N, "peak_host_bytes": N}}
// with, per phase of every step, a complete event
//   {"name": <phase name, phase_names.h>, "cat": "phase", "ph": "X", "ts", "dur",
//    "args": {"step", "peak_device_bytes", "peak_host_bytes", "device_bytes_at_start"}}
// and counter events ("ph": "C") on the "phase peak bytes" and "live bytes" tracks, whose
// args are {"device", "host"}.
namespace longctx::trace_schema {

// Chrome trace event format.
inline constexpr const char* kEvents = "traceEvents";
inline constexpr const char* kDisplayTimeUnit = "displayTimeUnit";
inline constexpr const char* kOtherData = "otherData";
inline constexpr const char* kName = "name";
inline constexpr const char* kCategory = "cat";
inline constexpr const char* kType = "ph";
inline constexpr const char* kPid = "pid";
inline constexpr const char* kTid = "tid";
inline constexpr const char* kTimestamp = "ts";  // microseconds
inline constexpr const char* kDuration = "dur";  // microseconds
inline constexpr const char* kArgs = "args";
inline constexpr const char* kComplete = "X";
inline constexpr const char* kCounter = "C";
inline constexpr const char* kMetadata = "M";

// longctx's phase events and totals (the latter in otherData).
inline constexpr const char* kPhaseCategory = "phase";
inline constexpr const char* kStep = "step";
inline constexpr const char* kPeakDevice = "peak_device_bytes";  // allocated, per rank
inline constexpr const char* kPeakHost = "peak_host_bytes";      // per rank
inline constexpr const char* kDeviceAtStart = "device_bytes_at_start";
// Counter tracks and their series.
inline constexpr const char* kPhasePeakTrack = "phase peak bytes";
inline constexpr const char* kLiveTrack = "live bytes";
inline constexpr const char* kDeviceSeries = "device";
inline constexpr const char* kHostSeries = "host";

// torch.profiler.profile(profile_memory=True).export_chrome_trace: an instant event per
// allocation and free; Device Type 1 is CUDA, 0 the CPU.
inline constexpr const char* kProfilerMemoryEvent = "[memory]";
inline constexpr const char* kProfilerTotalAllocated = "Total Allocated";
inline constexpr const char* kProfilerDeviceType = "Device Type";
inline constexpr const char* kProfilerBytes = "Bytes";    // > 0 allocated, < 0 freed
inline constexpr const char* kProfilerAddress = "Addr";

}  // namespace longctx::trace_schema
