#include "longctx/planner/memory_model.h"

#include "longctx/planner/cost_model.h"
#include "longctx/planner/reserved_replay.h"

namespace longctx {
namespace {

StepInputs step_inputs(const Plan& p) {
  return {p.model, p.cluster.shape, p.cluster.hardware.backend, p.train, p.parallel, false, p.cluster.hardware.threads};
}

Prediction fill(const Plan& p, const StepGraph& g, const SimResult& sim) {
  Prediction pr;
  const std::int64_t context = plan_context_bytes(p);
  pr.peak_device_bytes = sim.peak_device_bytes;
  pr.peak_host_bytes = sim.peak_host_bytes_per_rank * p.cluster.shape.gpus_per_node;
  for (int c = 0; c < kCategories; ++c) pr.breakdown[to_string(static_cast<Category>(c))] = sim.breakdown[static_cast<std::size_t>(c)];
  pr.peak_at = sim.peak_op >= 0 ? format(g.op(sim.peak_op).name) : "";
  bool reserved_fits = true;
  if (p.cluster.hardware.backend == Backend::Cuda) {
    const ReservedReplay r = replay_reserved(g, allocator_settings(p));
    // Never under allocated: the replay's blocks include the simulation's rounded requests.
    pr.peak_reserved_bytes = std::max(r.peak_reserved, pr.peak_device_bytes);
    pr.reserved_peak_at = r.peak_op >= 0 ? format(g.op(r.peak_op).name) : "";
    reserved_fits = r.failed_requests == 0;
  } else {
    pr.peak_reserved_bytes = pr.peak_device_bytes;  // the counting allocator caches nothing
    pr.reserved_peak_at = pr.peak_at;
  }
  pr.peak_nvidia_smi_bytes = pr.peak_reserved_bytes + context;
  pr.breakdown["allocator"] = pr.peak_reserved_bytes - pr.peak_device_bytes;
  pr.breakdown["context"] = context;
  const bool device_ok = reserved_fits && pr.peak_nvidia_smi_bytes <= p.cluster.device_budget_bytes;
  const bool host_ok = pr.peak_host_bytes <= p.cluster.host_budget_bytes_per_node;
  pr.feasible = device_ok && host_ok;
  pr.binding = !device_ok ? device_binding(p) : !host_ok ? "host memory" : "";
  const StepTime t = estimate_step_time(p, g);
  pr.step_time_s = t.total_s;
  pr.tokens_per_s = t.tokens_per_s;
  pr.mfu = t.mfu;
  return pr;
}

}  // namespace

const char* device_binding(const Plan& p) {
  return p.cluster.hardware.backend == Backend::Cuda ? "device memory (nvidia-smi: reserved + context)" : "device memory";
}

std::int64_t plan_context_bytes(const Plan& p) {
  return device_context_bytes(p.cluster.hardware, p.cluster.shape.world(), p.cluster.shape.gpus_per_node);
}

AllocatorSettings allocator_settings(const Plan& p) {
  AllocatorSettings s;
  s.expandable_segments = p.cluster.expandable_segments;
  s.capacity = std::max<std::int64_t>(0, p.cluster.device_budget_bytes - plan_context_bytes(p));
  return s;
}

bool device_fits(const Plan& p, const StepGraph& g, std::int64_t allocated_peak) {
  const std::int64_t context = plan_context_bytes(p);
  if (allocated_peak + context > p.cluster.device_budget_bytes) return false;
  if (p.cluster.hardware.backend != Backend::Cuda) return true;
  const ReservedReplay r = replay_reserved(g, allocator_settings(p));
  return r.failed_requests == 0 && std::max(r.peak_reserved, allocated_peak) + context <= p.cluster.device_budget_bytes;
}

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
