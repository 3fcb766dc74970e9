#include "longctx/planner/reserved_replay.h"

#include <vector>

namespace longctx {

ReservedReplay replay_reserved(const StepGraph& graph, const AllocatorSettings& settings) {
  const auto& tensors = graph.tensors();
  const auto& ops = graph.ops();
  // Each op's device tensors to allocate at its start and to free at its end, by index.
  std::vector<std::vector<int>> born(ops.size()), dying(ops.size());
  std::vector<int> before_step;
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
    const TensorSpec& t = tensors[static_cast<std::size_t>(i)];
    if (t.place != Place::Device || t.bytes <= 0) continue;
    if (t.producer < 0) before_step.push_back(i);
    else born[static_cast<std::size_t>(t.producer)].push_back(i);
    if (!t.persistent && t.last_reader >= 0) dying[static_cast<std::size_t>(t.last_reader)].push_back(i);
  }

  CachingAllocatorModel model(settings);
  std::vector<int> handle(tensors.size(), -1);
  ReservedReplay r;
  auto note = [&](int op) {
    if (model.failures() > 0 && r.first_failed_op < 0) r.first_failed_op = op;
    if (model.reserved() > r.peak_reserved) {
      r.peak_reserved = model.reserved();
      r.allocated_at_peak = model.allocated();
      r.peak_op = op;
    }
  };
  auto allocate = [&](int i) {
    if (handle[static_cast<std::size_t>(i)] < 0)  // a persistent tensor born in the first step stays
      handle[static_cast<std::size_t>(i)] = model.allocate(tensors[static_cast<std::size_t>(i)].bytes);
  };
  for (int step = 0; step < 2; ++step) {
    for (int i : before_step) allocate(i);
    note(-1);
    for (int k = 0; k < static_cast<int>(ops.size()); ++k) {
      const auto kk = static_cast<std::size_t>(k);
      for (int i : born[kk]) allocate(i);
      const std::int64_t workspace = ops[kk].workspace_bytes;
      const int scratch = workspace > 0 ? model.allocate(workspace) : -1;
      note(k);
      if (scratch >= 0) model.free(scratch);
      for (int i : dying[kk]) {
        model.free(handle[static_cast<std::size_t>(i)]);
        handle[static_cast<std::size_t>(i)] = -1;
      }
    }
  }
  r.failed_requests = model.failures();
  return r;
}

}  // namespace longctx
