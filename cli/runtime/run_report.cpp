// The run's report: measured beside predicted, as a table or JSON (run_report.h).
#include "cli/runtime/run_report.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "planner/core/units.h"
#include "planner/io/comparison.h"

namespace longctx::cli {

namespace {

// The prediction's error as compare reports it (comparison.h, relative_error): predicted less
// measured, of measured; + the plan predicted more than the run held. (It was measured less
// predicted, of predicted: the same run read -52.8% here and +112% in compare.)
std::string percent(std::int64_t measured, std::int64_t predicted) {
  if (measured == 0) return predicted == 0 ? "0.0%" : "n/a";
  return fmt::format("{:+.1f}%", 100.0 * relative_error(predicted, measured));
}

// The phase of the last step where the device peaked.
std::string measured_peak_at(const runtime::StepResult& last) {
  std::string at;
  std::int64_t best = -1;
  for (const auto& p : last.phases)
    if (p.peak_device > best) best = p.peak_device, at = p.name;
  return at;
}

// One phase's LibTorch operators by self time, longest first, and their calls in all.
std::pair<nlohmann::json, std::int64_t> measured_ops(const runtime::PhaseRecord& p) {
  std::vector<std::pair<std::string, runtime::OpTally>> ops(p.ops.begin(), p.ops.end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.self_s > b.second.self_s; });
  nlohmann::json list = nlohmann::json::array();
  std::int64_t calls = 0;
  for (const auto& [name, t] : ops) {
    list.push_back({{"op", name}, {"calls", t.calls}, {"self_s", t.self_s}});
    calls += t.calls;
  }
  return {list, calls};
}

// The planner's ops of one phase with their times, and their kernel launches in all.
std::pair<nlohmann::json, std::int64_t> predicted_ops(const runtime::PhasePrediction& p) {
  nlohmann::json list = nlohmann::json::array();
  std::int64_t launches = 0;
  for (const OpTime& t : p.ops) {
    list.push_back({{"op", t.op}, {"compute_s", t.compute_s}, {"comm_s", t.comm_s}, {"launches", t.launches}, {"bound", t.bound}});
    launches += t.launches;
  }
  return {list, launches};
}

// --json's "measured.phases": the last step's, each beside its prediction where there is one.
nlohmann::json phases_json(const runtime::StepResult& last, const runtime::PredictedStep& predicted) {
  nlohmann::json phases = nlohmann::json::array();
  for (const auto& p : last.phases) {
    nlohmann::json ph = {{"name", p.name},
                         {"peak_device_bytes", p.peak_device},
                         {"peak_host_bytes", p.peak_host},
                         {"time_s", p.end_s - p.start_s},
                         {"collectives", p.collectives}};
    if (auto it = predicted.phases.find(p.name); it != predicted.phases.end()) {
      ph["predicted_peak_device_bytes"] = it->second.peak_device_bytes;
      ph["predicted_time_s"] = it->second.time_s;
      ph["predicted_collectives"] = it->second.collectives;
    }
    phases.push_back(ph);
  }
  return phases;
}

nlohmann::json steps_json(const std::vector<StepLine>& lines) {
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : lines)
    steps.push_back({{"step", s.step},
                     {"loss", s.loss},
                     {"time_s", s.time_s},
                     {"peak_device_bytes", s.peak_device},
                     {"peak_host_bytes", s.peak_host}});
  return steps;
}

}  // namespace

nlohmann::json op_times_json(const runtime::StepResult& step, const runtime::PredictedStep& predicted) {
  nlohmann::json phases = nlohmann::json::array();
  for (const auto& p : step.phases) {
    const auto [ops, calls] = measured_ops(p);
    const auto it = predicted.phases.find(p.name);
    const bool known = it != predicted.phases.end();
    const auto [planned, launches] = known ? predicted_ops(it->second) : std::pair(nlohmann::json::array(), std::int64_t{0});
    phases.push_back({{"phase", p.name},
                      {"time_s", p.end_s - p.start_s},
                      {"predicted_time_s", known ? nlohmann::json(it->second.time_s) : nlohmann::json(nullptr)},
                      {"calls", calls},
                      {"predicted_launches", launches},
                      {"ops", ops},
                      {"predicted_ops", planned}});
  }
  return {{"step", step.step}, {"time_s", step.time_s}, {"phases", phases}};
}

void print_run_json(const RunComparison& c, const std::vector<StepLine>& steps) {
  const runtime::RunReport& run = c.run;
  const Prediction& totals = c.predicted.totals;
  const Prediction& recorded = c.plan.prediction;
  const auto& last = run.steps.back();
  nlohmann::json j = {{"steps", steps_json(steps)},
                      {"measured",
                       {{"peak_device_bytes", run.peak_device},
                        {"peak_host_bytes", run.peak_host},
                        {"peak_device_reserved_bytes", run.peak_device_reserved},
                        {"device_in_use_driver_bytes", run.device_in_use_driver},
                        {"persistent_device_bytes", run.persistent_device},
                        {"persistent_host_bytes", run.persistent_host},
                        {"peak_at", measured_peak_at(last)},
                        {"phases", phases_json(last, c.predicted)}}},
                      {"predicted",
                       {{"peak_device_bytes", totals.peak_device_bytes},
                        {"peak_host_bytes", totals.peak_host_bytes},  // per node, as the plan's
                        {"peak_host_bytes_per_rank", totals.peak_host_bytes / c.plan.cluster.shape.gpus_per_node},
                        {"peak_at", totals.peak_at},
                        {"step_time_s", totals.step_time_s}}},
                      {"plan_prediction",
                       {{"peak_device_bytes", recorded.peak_device_bytes},
                        {"peak_reserved_bytes", recorded.peak_reserved_bytes},
                        {"peak_nvidia_smi_bytes", recorded.peak_nvidia_smi_bytes},
                        {"peak_host_bytes", recorded.peak_host_bytes}}},
                      {"prediction_drift", drift_json(c.drift)},
                      {"device", run.device},
                      {"resumed_after_step", run.resumed_after}};
  fmt::print("{}\n", j.dump(2));
}

void print_run_table(const RunComparison& c, const std::string& trace_path) {
  const runtime::RunReport& run = c.run;
  const Prediction& totals = c.predicted.totals;
  const auto& last = run.steps.back();
  fmt::print("\n{:<22} {:>14} {:>14} {:>8}\n", "", "measured", "predicted", "error");
  fmt::print("{:<22} {:>14} {:>14} {:>8}\n", "peak device", format_bytes(run.peak_device),
             format_bytes(totals.peak_device_bytes), percent(run.peak_device, totals.peak_device_bytes));
  // The plan's host figure is per node (memory_model.cpp: per rank x GPUs per node); this
  // process measured one rank's.
  const std::int64_t host_per_rank = totals.peak_host_bytes / c.plan.cluster.shape.gpus_per_node;
  fmt::print("{:<22} {:>14} {:>14} {:>8}\n", "peak host (per rank)", format_bytes(run.peak_host),
             format_bytes(host_per_rank), percent(run.peak_host, host_per_rank));
  fmt::print("{:<22} {:>14} {:>14}\n", "peak at", measured_peak_at(last), totals.peak_at);
  fmt::print("\nper phase, last step   {:>14} {:>14} {:>8} {:>11} {:>11}\n", "device peak", "predicted", "error", "time",
             "predicted");
  for (const auto& p : last.phases) {
    auto it = c.predicted.phases.find(p.name);
    const bool known = it != c.predicted.phases.end();
    const std::int64_t pred = known ? it->second.peak_device_bytes : 0;
    const std::string pred_time = known ? fmt::format("{:.1f} ms", 1e3 * it->second.time_s) : "-";
    fmt::print("  {:<20} {:>14} {:>14} {:>8} {:>8.1f} ms {:>11}\n", p.name, format_bytes(p.peak_device),
               known ? format_bytes(pred) : "-", known ? percent(p.peak_device, pred) : "",
               1e3 * (p.end_s - p.start_s), pred_time);
  }
  if (!trace_path.empty()) fmt::print("\ntrace: {} (open in https://ui.perfetto.dev)\n", trace_path);
}

}  // namespace longctx::cli
