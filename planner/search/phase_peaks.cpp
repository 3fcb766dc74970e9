#include "planner/search/phase_peaks.h"

#include <algorithm>

#include "planner/core/phase_names.h"

namespace longctx {

std::map<std::string, PhasePeak> phase_peaks(const Evaluation& e) {
  std::map<std::string, PhasePeak> out;
  int order = 0;
  for (std::size_t i = 0; i < e.graph.ops().size(); ++i) {
    auto [it, fresh] = out.try_emplace(phase_of(e.graph.ops()[i]));
    if (fresh) it->second.order = order++;
    it->second.device_bytes = std::max(it->second.device_bytes, e.sim.per_op[i].device_during);
    it->second.host_bytes = std::max(it->second.host_bytes, e.sim.per_op[i].host_during);
  }
  return out;
}

Plan with_phase_predictions(const Evaluation& e) {
  const auto peaks = phase_peaks(e);
  Plan p = e.plan;
  p.prediction.phases.assign(peaks.size(), {});
  for (const auto& [name, peak] : peaks)
    p.prediction.phases[static_cast<std::size_t>(peak.order)] = {name, peak.device_bytes, peak.host_bytes, std::nullopt};
  return p;
}

}  // namespace longctx
