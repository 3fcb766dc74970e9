#include "planner/graph/reserved_replay.h"

#include <algorithm>
#include <functional>
#include <vector>

namespace longctx {

void for_each_allocator_event(const StepGraph& graph, const std::function<void(const AllocatorEvent&)>& visit) {
  const auto& tensors = graph.tensors();
  const auto& ops = graph.ops();
  // Each op's device tensors to allocate at its start and to free at its end, by index.
  // Tensors made before the step that the first step makes at an op instead (first_step_op).
  std::vector<std::vector<int>> born(ops.size()), dying(ops.size()), first_step_born(ops.size());
  std::vector<int> before_step;
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
    const TensorSpec& t = tensors[static_cast<std::size_t>(i)];
    if (t.place != Place::Device || t.bytes <= 0) continue;
    if (t.producer >= 0) born[static_cast<std::size_t>(t.producer)].push_back(i);
    else if (t.first_step_op >= 0) first_step_born[static_cast<std::size_t>(t.first_step_op)].push_back(i);
    else before_step.push_back(i);
    if (!t.persistent && t.last_reader >= 0) dying[static_cast<std::size_t>(t.last_reader)].push_back(i);
  }
  // A tensor's live block and the stream whose pool it came from; blocks past the tensors'
  // indices are workspaces.
  std::vector<int> block_of(tensors.size(), -1), stream_of(tensors.size(), 0);
  int next_block = static_cast<int>(tensors.size());
  auto allocate = [&](int i, int stream, int op, int step) {
    const auto ii = static_cast<std::size_t>(i);
    if (block_of[ii] >= 0) return;  // a persistent tensor born in the first step stays
    block_of[ii] = i;
    stream_of[ii] = stream;
    visit(AllocatorEvent{true, i, tensors[ii].bytes, stream, op, step});
  };
  for (int step = 0; step < 2; ++step) {
    for (int i : before_step) allocate(i, 0, -1, step);
    for (int k = 0; k < static_cast<int>(ops.size()); ++k) {
      const auto kk = static_cast<std::size_t>(k);
      const int stream = ops[kk].stream;
      // The op's outputs, with what the first step makes just after the first of them.
      auto allocate_outputs = [&] {
        for (std::size_t j = 0; j < born[kk].size(); ++j) {
          allocate(born[kk][j], stream, k, step);
          if (j == 0)
            for (int i : first_step_born[kk]) allocate(i, stream, k, step);
        }
        if (born[kk].empty())
          for (int i : first_step_born[kk]) allocate(i, stream, k, step);
      };
      const std::int64_t workspace = ops[kk].workspace_bytes;
      const auto& sequence = ops[kk].workspace_sequence;
      const bool outputs_inside = std::find(sequence.begin(), sequence.end(), 0) != sequence.end();
      if (!outputs_inside) allocate_outputs();
      if (!sequence.empty()) {
        // Block b of the sequence is first + b; each returns once.
        const int first = next_block;
        std::vector<std::int64_t> held;
        for (const std::int64_t entry : sequence) {
          if (entry == 0) {
            allocate_outputs();
          } else if (entry > 0) {
            visit(AllocatorEvent{true, next_block++, entry, stream, k, step});
            held.push_back(entry);
          } else {
            const auto b = static_cast<std::size_t>(-entry - 1);
            visit(AllocatorEvent{false, first + static_cast<int>(b), held[b], stream, k, step});
            held[b] = 0;
          }
        }
        for (std::size_t b = 0; b < held.size(); ++b)
          if (held[b] > 0) visit(AllocatorEvent{false, first + static_cast<int>(b), held[b], stream, k, step});
      } else if (workspace > 0) {
        const int scratch = next_block++;
        visit(AllocatorEvent{true, scratch, workspace, stream, k, step});
        visit(AllocatorEvent{false, scratch, workspace, stream, k, step});
      }
      for (int i : dying[kk]) {
        const auto ii = static_cast<std::size_t>(i);
        visit(AllocatorEvent{false, i, tensors[ii].bytes, stream_of[ii], k, step});
        block_of[ii] = -1;
      }
    }
  }
}

std::vector<AllocatorEvent> step_allocator_events(const StepGraph& graph) {
  std::vector<AllocatorEvent> events;
  for_each_allocator_event(graph, [&](const AllocatorEvent& e) { events.push_back(e); });
  return events;
}

ReservedReplay replay_reserved(const StepGraph& graph, const AllocatorSettings& settings,
                               const std::function<void(const ReservedAtOp&)>& at_op) {
  const auto& ops = graph.ops();
  int streams = 1;
  for (const OpSpec& o : ops) streams = std::max(streams, o.stream + 1);
  std::vector<CachingAllocatorModel> models(static_cast<std::size_t>(streams), CachingAllocatorModel(settings));
  auto total = [&](std::int64_t (CachingAllocatorModel::*figure)() const) {
    std::int64_t sum = 0;
    for (const auto& m : models) sum += (m.*figure)();
    return sum;
  };
  ReservedReplay r;
  // Reserved bytes are noted once an op's outputs and workspace are allocated, before it frees.
  int step = 0;  // of the op being noted
  auto note = [&](int op) {
    int failures = 0;
    for (const auto& m : models) failures += m.failures();
    if (failures > 0 && r.first_failed_op < 0) r.first_failed_op = op;
    const std::int64_t reserved = total(&CachingAllocatorModel::reserved);
    if (at_op) at_op(ReservedAtOp{op, step, reserved});
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
  std::vector<int> handle;
  bool freeing = false;
  int op = -2;
  // Visited as they are made: the search replays every plan it confirms, and a vector of a
  // step's events would be allocated and filled for each.
  for_each_allocator_event(graph, [&](const AllocatorEvent& e) {
    if (e.op != op || (e.allocate && freeing)) {
      if (op != -2 && !freeing) note(op);
      op = e.op;
      step = e.step;
      freeing = false;
    }
    const auto b = static_cast<std::size_t>(e.block);
    if (b >= handle.size()) handle.resize(b + 1, -1);
    if (e.allocate) {
      handle[b] = on(e.stream).allocate(e.bytes);
    } else {
      if (!freeing) note(op);
      freeing = true;
      models[static_cast<std::size_t>(e.stream)].free(handle[b]);
      handle[b] = -1;
    }
  });
  if (!freeing) note(op);
  for (const auto& m : models) r.failed_requests += m.failures();
  return r;
}

}  // namespace longctx
