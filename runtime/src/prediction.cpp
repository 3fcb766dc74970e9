#include "longctx/runtime/prediction.h"

#include <fmt/format.h>

#include "longctx/planner/memory_model.h"

namespace longctx::runtime {

namespace {
// The runtime phase an op of the planner's schedule runs in.
std::string phase_of(const OpSpec& op) {
  switch (op.phase) {
    case Phase::Forward: return op.layer >= 0 ? fmt::format("forward.layer.{}", op.layer) : "forward.embed";
    case Phase::Loss: return "loss";
    case Phase::Backward:
      if (op.layer >= 0) return fmt::format("backward.layer.{}", op.layer);
      return op.name.rfind("embed", 0) == 0 ? "backward.embed" : "backward.loss";
    case Phase::Optimizer: return "optimizer";
  }
  return "?";
}
}  // namespace

PredictedStep predict_step(const Plan& plan) {
  const Evaluation e = evaluate(plan);
  PredictedStep p;
  p.totals = e.plan.prediction;
  for (std::size_t i = 0; i < e.graph.ops().size(); ++i) {
    auto& ph = p.phases[phase_of(e.graph.ops()[i])];
    ph.peak_device_bytes = std::max(ph.peak_device_bytes, e.sim.per_op[i].device_during);
    ph.peak_host_bytes = std::max(ph.peak_host_bytes, e.sim.per_op[i].host_during);
  }
  return p;
}

}  // namespace longctx::runtime
