#include "planner/io/prediction_drift.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "planner/core/units.h"

namespace longctx {
namespace {

const PredictedPhase* find_phase(const std::vector<PredictedPhase>& phases, const std::string& name) {
  for (const auto& p : phases)
    if (p.phase == name) return &p;
  return nullptr;
}

void compare(std::vector<PredictionDifference>& out, const std::string& what, std::optional<std::int64_t> plan,
             std::optional<std::int64_t> planner) {
  if (plan != planner) out.push_back({what, plan, planner});
}

void compare_phase(std::vector<PredictionDifference>& out, const std::string& name, const PredictedPhase* plan,
                   const PredictedPhase* planner) {
  if (!plan || !planner) {
    compare(out, name + " (phase)", plan ? std::optional<std::int64_t>(plan->peak_device_bytes) : std::nullopt,
            planner ? std::optional<std::int64_t>(planner->peak_device_bytes) : std::nullopt);
    return;
  }
  compare(out, name + " peak_device_bytes", plan->peak_device_bytes, planner->peak_device_bytes);
  compare(out, name + " peak_host_bytes", plan->peak_host_bytes, planner->peak_host_bytes);
  if (plan->peak_device_reserved_bytes && planner->peak_device_reserved_bytes)
    compare(out, name + " peak_device_reserved_bytes", plan->peak_device_reserved_bytes, planner->peak_device_reserved_bytes);
}

std::string bytes_or_none(const std::optional<std::int64_t>& b) {
  return b ? fmt::format("{} ({} bytes)", format_bytes(*b), *b) : "no such phase";
}

}  // namespace

std::vector<PredictionDifference> prediction_differences(const Prediction& recorded, const Prediction& now) {
  std::vector<PredictionDifference> out;
  if (recorded.peak_device_bytes == 0 && recorded.phases.empty()) return out;
  compare(out, "peak_device_bytes", recorded.peak_device_bytes, now.peak_device_bytes);
  compare(out, "peak_host_bytes", recorded.peak_host_bytes, now.peak_host_bytes);
  if (recorded.phases.empty()) return out;
  for (const auto& p : recorded.phases) compare_phase(out, p.phase, &p, find_phase(now.phases, p.phase));
  for (const auto& p : now.phases)
    if (!find_phase(recorded.phases, p.phase)) compare_phase(out, p.phase, nullptr, &p);
  return out;
}

std::string drift_note(const std::vector<PredictionDifference>& d, std::size_t max_lines) {
  std::string s;
  for (std::size_t i = 0; i < d.size() && i < max_lines; ++i)
    s += fmt::format("note: {}: the plan says {}, this planner says {}\n", d[i].what, bytes_or_none(d[i].plan),
                     bytes_or_none(d[i].planner));
  if (d.size() > max_lines) s += fmt::format("note: and {} more differences\n", d.size() - max_lines);
  if (!d.empty())
    s += "note: the plan file's prediction is not this planner's; write the plan again (longctx plan ... -o FILE) "
         "to record this one\n";
  return s;
}

nlohmann::json drift_json(const std::vector<PredictionDifference>& d) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& x : d)
    out.push_back({{"what", x.what},
                   {"plan_says", x.plan ? nlohmann::json(*x.plan) : nlohmann::json()},
                   {"planner_says", x.planner ? nlohmann::json(*x.planner) : nlohmann::json()}});
  return out;
}

}  // namespace longctx
