#include "longctx/runtime/trace.h"

#include <nlohmann/json.hpp>

namespace longctx::runtime {

std::string chrome_trace_json(const RunReport& r) {
  using nlohmann::json;
  json events = json::array();
  const auto us = [](double s) { return s * 1e6; };
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0},
                    {"args", {{"name", "longctx run: " + r.device}}}});
  for (std::size_t i = 0; i < r.steps.size(); ++i) {
    const StepResult& s = r.steps[i];
    for (const auto& p : s.phases) {
      events.push_back({{"name", p.name},
                        {"cat", "phase"},
                        {"ph", "X"},
                        {"pid", 1},
                        {"tid", 1},
                        {"ts", us(p.start_s)},
                        {"dur", us(p.end_s - p.start_s)},
                        {"args",
                         {{"step", i},
                          {"peak_device_bytes", p.peak_device},
                          {"peak_host_bytes", p.peak_host},
                          {"device_bytes_at_start", p.device_at_start}}}});
      // The phase's peak on its own track, drawn from the phase's start.
      events.push_back({{"name", "phase peak bytes"}, {"ph", "C"}, {"pid", 1}, {"ts", us(p.start_s)},
                        {"args", {{"device", p.peak_device}, {"host", p.peak_host}}}});
    }
    for (const auto& c : s.samples)
      events.push_back({{"name", "live bytes"}, {"ph", "C"}, {"pid", 1}, {"ts", us(c.t_s)},
                        {"args", {{"device", c.device}, {"host", c.host}}}});
  }
  json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"},
              {"otherData", {{"peak_device_bytes", r.peak_device}, {"peak_host_bytes", r.peak_host}}}};
  return doc.dump();
}

}  // namespace longctx::runtime
