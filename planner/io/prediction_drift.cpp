#include "planner/io/prediction_drift.h"

#include <algorithm>
#include <map>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "planner/core/units.h"
#include "planner/io/quoted_text.h"

namespace longctx {
namespace {

const PredictedPhase* find_phase(const std::vector<PredictedPhase>& phases, const std::string& name) {
  for (const auto& p : phases)
    if (p.phase == name) return &p;
  return nullptr;
}

void compare(std::vector<PredictionDifference>& out, const std::string& what, DriftValue plan, DriftValue planner) {
  if (plan != planner) out.push_back({what, std::move(plan), std::move(planner)});
}

void compare_phase(std::vector<PredictionDifference>& out, const std::string& name, const PredictedPhase* plan,
                   const PredictedPhase* planner) {
  if (!plan || !planner) {
    compare(out, name + " (phase)", plan ? DriftValue(plan->peak_device_bytes) : DriftValue(),
            planner ? DriftValue(planner->peak_device_bytes) : DriftValue());
    return;
  }
  compare(out, name + " peak_device_bytes", plan->peak_device_bytes, planner->peak_device_bytes);
  compare(out, name + " peak_host_bytes", plan->peak_host_bytes, planner->peak_host_bytes);
  if (plan->peak_device_reserved_bytes && planner->peak_device_reserved_bytes)
    compare(out, name + " peak_device_reserved_bytes", *plan->peak_device_reserved_bytes, *planner->peak_device_reserved_bytes);
}

// A value as a note prints it: bytes with their unit, a string quoted.
std::string shown(const DriftValue& v) {
  struct Show {
    std::string operator()(std::monostate) const { return "no such phase"; }
    std::string operator()(std::int64_t b) const { return fmt::format("{} ({} bytes)", format_bytes(b), b); }
    std::string operator()(double d) const { return fmt::format("{:.6g}", d); }
    std::string operator()(bool b) const { return b ? "fits" : "does not fit"; }
    // Read from a plan file: one line, nothing that drives the terminal (quoted_text.h).
    std::string operator()(const std::string& s) const { return fmt::format("'{}'", terminal_line(s)); }
  };
  return std::visit(Show{}, v);
}

nlohmann::json as_json(const DriftValue& v) {
  return std::visit([](const auto& x) -> nlohmann::json {
    if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::monostate>) return nullptr;
    else return x;
  }, v);
}

}  // namespace

std::vector<PredictionDifference> prediction_differences(const Prediction& recorded, const Prediction& now) {
  std::vector<PredictionDifference> out;
  if (recorded.peak_device_bytes == 0 && recorded.phases.empty()) return out;
  // What the file recorded: an older file's missing figures read as 0 or "", not as its say.
  const auto recorded_has = [&](const std::string& key) {
    return std::find(recorded.not_recorded.begin(), recorded.not_recorded.end(), key) == recorded.not_recorded.end();
  };
  const auto compare_recorded = [&](const std::string& what, DriftValue plan, DriftValue planner) {
    if (recorded_has(what)) compare(out, what, std::move(plan), std::move(planner));
  };
  compare(out, "feasible", recorded.feasible, now.feasible);
  compare(out, "peak_device_bytes", recorded.peak_device_bytes, now.peak_device_bytes);
  compare_recorded("peak_reserved_bytes", recorded.peak_reserved_bytes, now.peak_reserved_bytes);
  compare_recorded("peak_nvidia_smi_bytes", recorded.peak_nvidia_smi_bytes, now.peak_nvidia_smi_bytes);
  compare(out, "peak_host_bytes", recorded.peak_host_bytes, now.peak_host_bytes);
  compare_recorded("peak_at", recorded.peak_at, now.peak_at);
  compare_recorded("reserved_peak_at", recorded.reserved_peak_at, now.reserved_peak_at);
  compare_recorded("binding", recorded.binding, now.binding);
  // The categories either side has, in their order (a category one lacks counts as 0 there).
  std::map<std::string, std::int64_t> categories = recorded.breakdown;
  if (recorded_has("breakdown"))
    for (const auto& [category, bytes] : now.breakdown) categories.try_emplace(category, 0);
  for (const auto& entry : categories) {
    const std::string& category = entry.first;  // a plain name: a lambda may not capture a binding in C++20
    const auto in = [&category](const std::map<std::string, std::int64_t>& b) {
      const auto it = b.find(category);
      return it == b.end() ? std::int64_t{0} : it->second;
    };
    compare(out, "breakdown." + category, in(recorded.breakdown), in(now.breakdown));
  }
  compare_recorded("step_time_s", recorded.step_time_s, now.step_time_s);
  compare_recorded("tokens_per_s", recorded.tokens_per_s, now.tokens_per_s);
  compare_recorded("mfu", recorded.mfu, now.mfu);
  if (recorded.phases.empty()) return out;
  for (const auto& p : recorded.phases) compare_phase(out, p.phase, &p, find_phase(now.phases, p.phase));
  for (const auto& p : now.phases)
    if (!find_phase(recorded.phases, p.phase)) compare_phase(out, p.phase, nullptr, &p);
  return out;
}

std::string drift_note(const std::vector<PredictionDifference>& d, std::size_t max_lines) {
  std::string s;
  for (std::size_t i = 0; i < d.size() && i < max_lines; ++i)
    s += fmt::format("note: {}: the plan says {}, this planner says {}\n", terminal_line(d[i].what), shown(d[i].plan),
                     shown(d[i].planner));
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
                   {"plan_says", as_json(x.plan)},
                   {"planner_says", as_json(x.planner)}});
  return out;
}

}  // namespace longctx
