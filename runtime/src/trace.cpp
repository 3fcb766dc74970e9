#include "longctx/runtime/trace.h"

#include <nlohmann/json.hpp>

#include "planner/io/trace_schema.h"

namespace longctx::runtime {

std::string chrome_trace_json(const RunReport& r, const TraceIdentity& identity) {
  using nlohmann::json;
  namespace k = trace_schema;
  json events = json::array();
  const auto us = [](double s) { return s * 1e6; };
  events.push_back({{k::kName, "process_name"}, {k::kType, k::kMetadata}, {k::kPid, 1}, {k::kTid, 0},
                    {k::kArgs, {{"name", "longctx run: " + r.device}}}});
  auto counter = [&](const char* track, double t_s, std::int64_t device, std::int64_t host) {
    events.push_back({{k::kName, track}, {k::kType, k::kCounter}, {k::kPid, 1}, {k::kTimestamp, us(t_s)},
                      {k::kArgs, {{k::kDeviceSeries, device}, {k::kHostSeries, host}}}});
  };
  for (std::size_t i = 0; i < r.steps.size(); ++i) {
    const StepResult& s = r.steps[i];
    for (const auto& p : s.phases) {
      events.push_back({{k::kName, p.name},
                        {k::kCategory, k::kPhaseCategory},
                        {k::kType, k::kComplete},
                        {k::kPid, 1},
                        {k::kTid, 1},
                        {k::kTimestamp, us(p.start_s)},
                        {k::kDuration, us(p.end_s - p.start_s)},
                        {k::kArgs,
                         {{k::kStep, i},
                          {k::kPeakDevice, p.peak_device},
                          {k::kPeakHost, p.peak_host},
                          {k::kDeviceAtStart, p.device_at_start}}}});
      // The phase's peak on its own track, drawn from the phase's start.
      counter(k::kPhasePeakTrack, p.start_s, p.peak_device, p.peak_host);
    }
    for (const auto& c : s.samples) counter(k::kLiveTrack, c.t_s, c.device, c.host);
  }
  json other = {{k::kPeakDevice, r.peak_device}, {k::kPeakHost, r.peak_host}};
  if (!identity.model.empty()) other[kTraceModelKey] = identity.model;
  if (!identity.plan_fingerprint.empty()) other[kTracePlanKey] = identity.plan_fingerprint;
  if (!identity.cluster.empty()) other[kTraceClusterKey] = identity.cluster;
  json doc = {{k::kEvents, events}, {k::kDisplayTimeUnit, "ms"}, {k::kOtherData, other}};
  return doc.dump();
}

}  // namespace longctx::runtime
