#pragma once
// Running a plan on the CPU virtual device and holding the planner's figures to what each rank
// measured: the peaks of the whole run and of every phase of the last step, device and host,
// and the collectives each phase issued.
// Shared by the validation tests (random_grid_test.cpp, answer_twin_test.cpp).
#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/wait.h>

#include "planner/graph/cost_model.h"
#include "planner/search/memory_model.h"
#include "planner/search/phase_peaks.h"
#include "longctx/runtime/runner.h"
#include "tests/test_paths.h"

namespace longctx::validation {

inline constexpr double kBound = 0.01;
// Where the runtime and the planner are known to differ by more than kBound, and why
// (docs/validation.md, "The validation label"). There the phases are only printed and the
// peaks held to `peak_bound` (0: only printed), so that drift elsewhere still fails.
struct KnownGap {
  std::string reason;       // empty: every figure is held to kBound
  bool peaks = false;       // the peaks differ too
  double peak_bound = 0.10;
};
// What one rank measured: the peaks of the whole run and each phase of its last step.
struct Peaks {
  std::int64_t device = 0, host = 0;
};
struct RankMeasure {
  Peaks total;
  std::map<std::string, Peaks> phases;
  std::map<std::string, std::int64_t> collectives = {};  // per phase; phases without any absent
};

inline std::vector<RankMeasure> run_in_process(const Plan& plan) {
  runtime::RunOptions o;
  o.steps = 2;
  o.threads = 1;
  auto r = runtime::run_plan(plan, o);
  if (!r) throw std::runtime_error(r.error().what());
  RankMeasure m{{r->peak_device, r->peak_host}, {}};
  for (const auto& ph : r->steps.back().phases) {
    m.phases[ph.name] = {ph.peak_device, ph.peak_host};
    if (ph.collectives > 0) m.collectives[ph.name] = ph.collectives;
  }
  return {m};
}

// What `cmd` prints on stdout; throws, naming `cmd`, unless it exits 0.
inline std::string output_of(const std::string& cmd, const std::string& see = "") {
  std::string out;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = ::pclose(p);
  if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) throw std::runtime_error(fmt::format("`{}` failed ({}){}", cmd, rc, see));
  return out;
}

// Several ranks: `longctx run --nproc N`, one process per rank (the meter counts a process).
inline std::vector<RankMeasure> run_ranks(const std::string& plan_file, std::int64_t world) {
  const std::string cmd = fmt::format("{} run --plan {} --nproc {} --steps 2 --threads 1 --json 2>{}.stderr",
                                      longctx::testing::longctx_cli(), plan_file, world, plan_file);
  const auto j = nlohmann::json::parse(output_of(cmd, fmt::format("; see {}.stderr", plan_file)));
  std::vector<RankMeasure> ranks;
  for (const auto& r : j.at("ranks")) {
    const auto& m = r.at("measured");
    RankMeasure rm{{m.at("peak_device_bytes").get<std::int64_t>(), m.at("peak_host_bytes").get<std::int64_t>()}, {}};
    for (const auto& ph : m.at("phases")) {
      const auto name = ph.at("name").get<std::string>();
      rm.phases[name] = {ph.at("peak_device_bytes").get<std::int64_t>(), ph.at("peak_host_bytes").get<std::int64_t>()};
      if (const auto n = ph.at("collectives").get<std::int64_t>(); n > 0) rm.collectives[name] = n;
    }
    ranks.push_back(std::move(rm));
  }
  return ranks;
}

// (predicted - measured) / measured: negative where the planner under-predicts.
inline double error_of(std::int64_t predicted, std::int64_t measured) {
  if (measured == 0) return predicted == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return double(predicted - measured) / double(measured);
}

// The comparisons of one point: every figure of every rank, the worst kept for the table.
struct Comparison {
  std::vector<std::string> failures;
  double worst = 0, worst_held = 0;  // worst_held: over the figures held to kBound
  std::string worst_at;
  // gap: why the figure is not held to kBound (empty: it is); `bound` what it is held to then
  // (0: only printed).
  void hold(const std::string& what, std::int64_t predicted, std::int64_t measured, const std::string& gap = "",
            double bound = kBound) {
    const double e = error_of(predicted, measured);
    if (std::abs(e) > std::abs(worst) || worst_at.empty()) worst = e, worst_at = what;
    if (gap.empty() && std::abs(e) > std::abs(worst_held)) worst_held = e;
    if (bound > 0 && !(std::abs(e) <= bound))
      failures.push_back(fmt::format("{}: predicted {} measured {} ({:+.3f}%, bound {:.0f}%{})", what, predicted, measured,
                                     100 * e, 100 * bound, gap.empty() ? "" : "; known gap: " + gap));
  }
};

// "phase: n, ..." of a per-phase count.
inline std::string describe(const std::map<std::string, std::int64_t>& counts) {
  std::string out;
  for (const auto& [name, n] : counts) out += fmt::format("{}{}: {}", out.empty() ? "" : ", ", name, n);
  return out.empty() ? "none" : out;
}

inline Comparison compare(const Evaluation& e, const std::vector<RankMeasure>& ranks, const KnownGap& gap) {
  Comparison c;
  const auto collectives = phase_collective_calls(e.graph);
  const auto phases = phase_peaks(e);
  const std::string peaks_gap = gap.peaks ? gap.reason : "", phases_gap = gap.reason;
  const double peak_bound = gap.peaks ? gap.peak_bound : kBound, phase_bound = gap.reason.empty() ? kBound : 0;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const auto& m = ranks[r];
    const std::string rank = ranks.size() > 1 ? fmt::format("rank {} ", r) : "";
    c.hold(rank + "device peak", e.sim.peak_device_bytes, m.total.device, peaks_gap, peak_bound);
    c.hold(rank + "host peak", e.sim.peak_host_bytes_per_rank, m.total.host, peaks_gap, peak_bound);
    for (const auto& [name, predicted] : phases) {
      const auto it = m.phases.find(name);
      if (it == m.phases.end()) {
        c.failures.push_back(fmt::format("{}{}: predicted, never measured", rank, name));
        continue;
      }
      c.hold(rank + name + " device", predicted.device_bytes, it->second.device, phases_gap, phase_bound);
      c.hold(rank + name + " host", predicted.host_bytes, it->second.host, phases_gap, phase_bound);
    }
    // The collectives each phase issued, exactly: the cost model charges each its latency. A
    // ring's hops are not counted by either side; with head chunks a ring's stages carry
    // their all-to-alls in the ring's op, which the planner does not count, so not held there.
    if (e.plan.parallel.ring == 1 && m.collectives != collectives)
      c.failures.push_back(fmt::format("{}collectives per phase: predicted {}, measured {}", rank,
                                       describe(collectives), describe(m.collectives)));
  }
  return c;
}

}  // namespace longctx::validation
