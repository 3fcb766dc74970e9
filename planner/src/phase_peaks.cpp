#include "longctx/planner/phase_peaks.h"

#include <algorithm>

#include <fmt/format.h>

namespace longctx {

std::string phase_of(const OpSpec& op) {
  switch (op.phase) {
    case Phase::Forward: return op.layer >= 0 ? fmt::format("forward.layer.{}", op.layer) : "forward.embed";
    case Phase::Loss: return "loss";
    case Phase::Backward:
      if (op.layer >= 0) return fmt::format("backward.layer.{}", op.layer);
      return op.name.scope == Name::kEmbed ? "backward.embed" : "backward.loss";
    case Phase::Optimizer: return "optimizer";
  }
  return "?";
}

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

}  // namespace longctx
