// A CUDA run's allocation log replayed through the caching-allocator model, beside the
// reserved bytes the log's own segments record (allocation_log_replay.h); with --plan, the
// plan's own requests (reserved_replay.h) written as a log of the same form and replayed
// beside it, phase by phase.
//
//   replay_allocation_log LOG[.gz] [--expandable-segments] [--plan PLAN [--write-plan-log FILE]]
//
// A diagnostic for reading a GPU run, not a test: it prints the peaks, the first request
// where the model and the allocator part, and each phase's peaks.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>

#include <fmt/format.h>

#include "planner/graph/allocation_log_replay.h"
#include "common/atomic_file.h"
#include "common/input_file.h"
#include "planner/search/memory_model.h"
#include "planner/search/phase_peaks.h"
#include "planner/core/plan.h"
#include "planner/graph/reserved_replay.h"
#include "planner/stacks/step_builder.h"

namespace {

using namespace longctx;

// The plan's step requests as `run --allocation-log` writes a run's (no segment lines: the
// replay makes its own). Before the first op the phase is "setup", as in a run.
std::string plan_requests_as_log(const Plan& plan) {
  const StepGraph graph = build_step(step_inputs(plan));
  std::string out;
  std::int64_t in_use = 0;
  for (const AllocatorEvent& e : step_allocator_events(graph)) {
    const std::string phase = e.op < 0 ? (e.step == 0 ? "setup" : "batch") : phase_of(graph.ops()[static_cast<std::size_t>(e.op)]);
    in_use += e.allocate ? e.bytes : -e.bytes;
    // The op's name after the address, for a reader: the replay reads no further.
    const std::string where = fmt::format("stream {} addr {} op {}", e.stream, e.block,
                                          e.op < 0 ? std::string("-") : format(graph.ops()[static_cast<std::size_t>(e.op)].name));
    if (e.allocate)
      out += fmt::format("{} device +{} -> {} {}\n", phase, e.bytes, in_use, where);
    else
      out += fmt::format("{} device -{} -> {} {}\n{} returned -{} {}\n", phase, e.bytes, in_use, where, phase, e.bytes,
                         where);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string log_path, plan_path, write_plan_log;
  AllocatorSettings settings;
  bool usage = false;
  for (int i = 1; i < argc && !usage; ++i) {
    const std::string a = argv[i];
    if (a == "--expandable-segments") settings.expandable_segments = true;
    else if (a == "--plan" && i + 1 < argc) plan_path = argv[++i];
    else if (a == "--write-plan-log" && i + 1 < argc) write_plan_log = argv[++i];
    else if (log_path.empty() && !a.empty() && a[0] != '-') log_path = a;
    else usage = true;
  }
  if (usage || log_path.empty()) {
    std::fprintf(stderr, "usage: %s LOG[.gz] [--expandable-segments] [--plan PLAN [--write-plan-log FILE]]\n", argv[0]);
    return 2;
  }
  auto fail = [](const Error& e) {
    std::fprintf(stderr, "%s\n", e.what().c_str());
    return 2;
  };
  auto text = read_text_file(log_path, "LOG");
  if (!text) return fail(text.error());
  auto r = replay_allocation_log(*text, settings, "LOG");
  if (!r) return fail(r.error());
  constexpr double MiB = 1 << 20;
  fmt::print("{} requests on {} stream(s)\n", r->requests, r->streams);
  fmt::print("peak reserved: log {:.1f} MiB, model {:.1f} MiB ({:+.2f}%)\n", r->measured_peak_reserved / MiB,
             r->modelled_peak_reserved / MiB,
             100.0 * (r->modelled_peak_reserved - r->measured_peak_reserved) / r->measured_peak_reserved);
  fmt::print("largest difference after a request: {:.1f} MiB\n", r->largest_difference / MiB);
  if (r->first_divergent_line > 0)
    fmt::print("first divergence: line {} ({}), log {:.1f} MiB, model {:.1f} MiB\n", r->first_divergent_line,
               r->first_divergent_phase, r->measured_at_divergence / MiB, r->modelled_at_divergence / MiB);
  std::vector<ReservedByPhase> planned;
  if (!plan_path.empty()) {
    auto plan = read_plan_file(plan_path);
    if (!plan) return fail(plan.error());
    settings.expandable_segments = plan->cluster.expandable_segments;
    const std::string plan_log = plan_requests_as_log(*plan);
    if (!write_plan_log.empty()) std::ofstream(write_plan_log) << plan_log;
    auto p = replay_allocation_log(plan_log, settings, "PLAN");
    if (!p) return fail(p.error());
    fmt::print("the plan's requests: {} on {} stream(s), peak reserved {:.1f} MiB ({:+.2f}% of the log's)\n",
               p->requests, p->streams, p->modelled_peak_reserved / MiB,
               100.0 * (p->modelled_peak_reserved - r->measured_peak_reserved) / r->measured_peak_reserved);
    planned = p->phases;
  }
  fmt::print("  {:<32} {:>10} {:>10} {:>10} {:>12} {:>12}  (MiB; largest free block at the phase's start)\n", "phase",
             "log", "model", plan_path.empty() ? "" : "plan", "free, log", plan_path.empty() ? "" : "free, plan");
  // The plan's rows matched to the log's in order, by name (a run has phases the plan has not).
  std::size_t next = 0;
  for (const auto& ph : r->phases) {
    std::string plan_peak, plan_free;
    for (std::size_t k = next; k < planned.size(); ++k)
      if (planned[k].phase == ph.phase) {
        plan_peak = fmt::format("{:.1f}", planned[k].modelled_peak / MiB);
        plan_free = fmt::format("{:.1f}", planned[k].largest_free_at_start / MiB);
        next = k + 1;
        break;
      }
    fmt::print("  {:<32} {:>10.1f} {:>10.1f} {:>10} {:>12.1f} {:>12}\n", ph.phase, ph.measured_peak / MiB,
               ph.modelled_peak / MiB, plan_peak, ph.largest_free_at_start / MiB, plan_free);
  }
  return 0;
}
