#include "cli/report/memory_timeline.h"

#include <algorithm>

#include "planner/graph/allocator_model.h"
#include "planner/graph/reserved_replay.h"

namespace longctx::cli {
namespace {

// Reserved bytes per op in the replayed step where reserved peaks (reserved_replay.h notes
// each op of two steps): the first step fills the cache from empty, the second runs on what
// the first left and reserves more only where that does not serve it. Later steps hold the
// peak throughout; the step that reaches it shows where it builds up. An op not noted runs
// with what the last noting of its step saw.
std::vector<std::int64_t> replayed_reserved(const Evaluation& e) {
  const int n = static_cast<int>(e.graph.ops().size());
  std::vector<std::vector<std::int64_t>> steps(1, std::vector<std::int64_t>(static_cast<std::size_t>(n), 0));
  int step = 0, last = -1, peak_step = 0;  // the step being noted and its last op noted
  std::int64_t current = 0, peak = -1;
  auto carry_to = [&](int end) {  // ops after `last` and before `end` saw `current`
    auto& per_op = steps[static_cast<std::size_t>(step)];
    for (int k = last + 1; k < end; ++k) per_op[static_cast<std::size_t>(k)] = std::max(per_op[static_cast<std::size_t>(k)], current);
  };
  replay_reserved(e.graph, allocator_settings(e.plan), [&](const ReservedAtOp& at) {
    if (at.step != step) {
      carry_to(n);
      step = at.step;
      last = -1;
      steps.resize(std::max(steps.size(), static_cast<std::size_t>(step) + 1), std::vector<std::int64_t>(static_cast<std::size_t>(n), 0));
    }
    carry_to(at.op);
    auto& per_op = steps[static_cast<std::size_t>(step)];
    if (at.op >= 0) per_op[static_cast<std::size_t>(at.op)] = std::max(per_op[static_cast<std::size_t>(at.op)], at.reserved);
    if (at.reserved > peak) {
      peak = at.reserved;
      peak_step = step;
    }
    current = at.reserved;
    last = std::max(last, at.op);
  });
  carry_to(n);
  return steps[static_cast<std::size_t>(peak_step)];
}

}  // namespace

std::int64_t MemoryTimeline::allocated_total(std::size_t op) const {
  std::int64_t sum = 0;
  for (const std::int64_t b : allocated[op]) sum += b;
  return sum;
}

MemoryTimeline memory_timeline(const Evaluation& e) {
  MemoryTimeline t;
  const std::size_t n = e.sim.per_op.size();
  const auto gpus_per_node = static_cast<std::int64_t>(e.plan.cluster.shape.gpus_per_node);
  t.context = plan_context_bytes(e.plan);
  for (const OpMemory& m : e.sim.per_op) {
    t.allocated.push_back(m.device_by_category_during);
    t.host_per_node.push_back(m.host_during * gpus_per_node);
  }
  t.reserved = e.plan.cluster.hardware.backend == Backend::Cuda ? replayed_reserved(e) : std::vector<std::int64_t>(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    // Never under allocated (as memory_model.cpp's reserved figure): the replay's blocks hold
    // at least the simulation's rounded requests.
    t.reserved[i] = std::max(t.reserved[i], t.allocated_total(i));
    if (t.peak_op < 0 || t.binding(i) > t.peak_bytes) {
      t.peak_op = static_cast<int>(i);
      t.peak_bytes = t.binding(i);
    }
  }
  return t;
}

std::vector<TensorLife> device_tensor_lives(const Evaluation& e) {
  // Lifetimes as the simulation books them (simulator.cpp): allocated at the producer's start
  // (before the step when none), freed at the last reader's end unless persistent.
  const Backend backend = e.plan.cluster.hardware.backend;
  const int last_op = static_cast<int>(e.graph.ops().size()) - 1;
  std::vector<TensorLife> out;
  const auto& tensors = e.graph.tensors();
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
    const TensorSpec& t = tensors[static_cast<std::size_t>(i)];
    if (t.place != Place::Device || t.bytes <= 0) continue;
    const bool freed = !t.persistent && t.last_reader >= 0;
    out.push_back({i, allocated_bytes(backend, t.bytes), std::max(t.producer, 0), freed ? t.last_reader : last_op});
  }
  return out;
}

const char* binding_figure_name(const Plan& p) {
  return p.cluster.hardware.backend == Backend::Cuda ? "nvidia-smi" : "allocated";
}

}  // namespace longctx::cli
