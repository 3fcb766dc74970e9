#include "longctx/planner/memory_model.h"

#include "longctx/planner/cost_model.h"

namespace longctx {
namespace {

StepInputs step_inputs(const Plan& p) {
  return {p.model, p.cluster.shape, p.cluster.hardware.backend, p.train, p.parallel, false, p.cluster.hardware.threads};
}

Prediction fill(const Plan& p, const StepGraph& g, const SimResult& sim) {
  Prediction pr;
  const std::int64_t context = p.cluster.hardware.context_bytes;
  pr.peak_device_bytes = sim.peak_device_bytes + context;
  pr.peak_host_bytes = sim.peak_host_bytes_per_rank * p.cluster.shape.gpus_per_node;
  for (int c = 0; c < kCategories; ++c) pr.breakdown[to_string(static_cast<Category>(c))] = sim.breakdown[static_cast<std::size_t>(c)];
  pr.breakdown["allocator"] = 0;
  pr.breakdown["context"] = context;
  pr.peak_at = sim.peak_op >= 0 ? format(g.op(sim.peak_op).name) : "";
  const bool device_ok = pr.peak_device_bytes <= p.cluster.device_budget_bytes;
  const bool host_ok = pr.peak_host_bytes <= p.cluster.host_budget_bytes_per_node;
  pr.feasible = device_ok && host_ok;
  pr.binding = !device_ok ? "device memory" : !host_ok ? "host memory" : "";
  const StepTime t = estimate_step_time(p, g);
  pr.step_time_s = t.total_s;
  pr.tokens_per_s = t.tokens_per_s;
  pr.mfu = t.mfu;
  return pr;
}

}  // namespace

Evaluation evaluate(const Plan& inputs) {
  Evaluation e{inputs, build_step(step_inputs(inputs)), {}};
  e.sim = simulate(e.graph, inputs.cluster.hardware.backend);
  e.plan.prediction = fill(inputs, e.graph, e.sim);
  return e;
}

Prediction predict(const Plan& inputs) {
  const StepGraph g = build_step(step_inputs(inputs));
  return fill(inputs, g, simulate(g, inputs.cluster.hardware.backend));
}

}  // namespace longctx
