#include "planner/io/profiler_phases.h"

#include <algorithm>

namespace longctx::profiler {

bool scope_kind(const std::string& name, bool& optimizer) {
  if (name.rfind("Optimizer.", 0) == 0) return optimizer = true, true;
  if (name.rfind("autograd::engine::evaluate_function", 0) == 0) return optimizer = false, true;
  return false;
}

Attribution attribute(std::vector<MemoryEvent>& events, std::vector<Scope>& scopes) {
  Attribution a;
  if (scopes.empty()) return a;
  std::stable_sort(events.begin(), events.end(), [](const auto& x, const auto& y) { return x.ts < y.ts; });
  // Boundaries in time order: +1 where a scope opens, -1 where it closes; a scope's own
  // end is exclusive, so at equal times closes come first.
  struct Edge {
    double ts;
    int delta;
    bool optimizer;
  };
  std::vector<Edge> edges;
  edges.reserve(2 * scopes.size());
  for (const auto& s : scopes) {
    edges.push_back({s.begin, +1, s.optimizer});
    edges.push_back({s.end, -1, s.optimizer});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& x, const Edge& y) { return x.ts != y.ts ? x.ts < y.ts : x.delta < y.delta; });

  int in_optimizer = 0, in_backward = 0;
  std::size_t next_edge = 0;
  const char* phase = kForward;
  std::map<std::string, std::int64_t> optimizer_allocations;  // addr -> bytes, still live
  for (const auto& ev : events) {
    for (; next_edge < edges.size() && edges[next_edge].ts <= ev.ts; ++next_edge)
      (edges[next_edge].optimizer ? in_optimizer : in_backward) += edges[next_edge].delta;
    const char* now = in_optimizer > 0 ? kOptimizer : in_backward > 0 ? kBackward : phase == kOptimizer ? kForward : phase;
    phase = now;
    auto& peak = a.phase_peaks[now];
    peak = std::max(peak, ev.total);
    if (ev.bytes > 0 && now == kOptimizer) optimizer_allocations[ev.addr] = ev.bytes;
    else if (ev.bytes < 0) optimizer_allocations.erase(ev.addr);
  }
  for (const auto& [addr, bytes] : optimizer_allocations) a.optimizer_live_bytes += bytes;
  return a;
}

}  // namespace longctx::profiler
