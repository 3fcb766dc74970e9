#include "longctx/planner/reserved_replay.h"

#include <algorithm>
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

  int streams = 1;
  for (const OpSpec& o : ops) streams = std::max(streams, o.stream + 1);
  std::vector<CachingAllocatorModel> models(static_cast<std::size_t>(streams), CachingAllocatorModel(settings));
  auto total = [&](std::int64_t (CachingAllocatorModel::*figure)() const) {
    std::int64_t sum = 0;
    for (const auto& m : models) sum += (m.*figure)();
    return sum;
  };
  // A tensor's block and the stream whose pool it came from.
  std::vector<int> handle(tensors.size(), -1), stream_of(tensors.size(), 0);
  ReservedReplay r;
  auto note = [&](int op) {
    int failures = 0;
    for (const auto& m : models) failures += m.failures();
    if (failures > 0 && r.first_failed_op < 0) r.first_failed_op = op;
    const std::int64_t reserved = total(&CachingAllocatorModel::reserved);
    if (reserved > r.peak_reserved) {
      r.peak_reserved = reserved;
      r.allocated_at_peak = total(&CachingAllocatorModel::allocated);
      r.peak_op = op;
    }
  };
  // The stream's model, its capacity what the other streams leave.
  auto on = [&](int stream) -> CachingAllocatorModel& {
    auto& m = models[static_cast<std::size_t>(stream)];
    if (streams > 1) m.set_capacity(settings.capacity - (total(&CachingAllocatorModel::reserved) - m.reserved()));
    return m;
  };
  auto allocate = [&](int i, int stream) {
    const auto ii = static_cast<std::size_t>(i);
    if (handle[ii] >= 0) return;  // a persistent tensor born in the first step stays
    handle[ii] = on(stream).allocate(tensors[ii].bytes);
    stream_of[ii] = stream;
  };
  for (int step = 0; step < 2; ++step) {
    for (int i : before_step) allocate(i, 0);
    note(-1);
    for (int k = 0; k < static_cast<int>(ops.size()); ++k) {
      const auto kk = static_cast<std::size_t>(k);
      const int stream = ops[kk].stream;
      for (int i : born[kk]) allocate(i, stream);
      const std::int64_t workspace = ops[kk].workspace_bytes;
      const int scratch = workspace > 0 ? on(stream).allocate(workspace) : -1;
      note(k);
      if (scratch >= 0) models[static_cast<std::size_t>(stream)].free(scratch);
      for (int i : dying[kk]) {
        const auto ii = static_cast<std::size_t>(i);
        models[static_cast<std::size_t>(stream_of[ii])].free(handle[ii]);
        handle[ii] = -1;
      }
    }
  }
  for (const auto& m : models) r.failed_requests += m.failures();
  return r;
}

}  // namespace longctx
