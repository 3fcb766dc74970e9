#pragma once
// The bytes a CUDA device reserves over a run: a step graph's requests replayed, in order,
// through the caching-allocator model (allocator_model.h).
//
// The requests are the simulation's (simulator.h), one rank's: the tensors that exist before
// the step first, by index; then at each op its outputs by index and its workspace as one
// block, and at its end the workspace and each tensor it reads last, by index. Two steps are
// replayed, the second over the first one's cache (persistent tensors stay), because the
// figure users see is the largest over a run and the cache a first step leaves shapes the
// second. Each CUDA stream an op runs on (OpSpec::stream) has its own pools: a tensor's block
// belongs to the stream of the op that made it and returns there when freed, and the device
// reserves the sum of every stream's. Each stream may reserve what the others leave of the
// capacity; a stream that runs short releases its own cache only. (longctx's own runtime
// writes every op on stream 0: its offload streams' freed blocks are reused as if on it.)
#include <cstdint>
#include <functional>
#include <vector>

#include "planner/graph/allocator_model.h"
#include "planner/graph/step_graph.h"

namespace longctx {

struct ReservedReplay {
  std::int64_t peak_reserved = 0;      // bytes, max over the replayed steps
  std::int64_t allocated_at_peak = 0;  // allocated while reserved was at its peak
  int peak_op = -1;                    // the op during which reserved peaked first
  int failed_requests = 0;             // requests that did not fit the capacity even after releasing the cache
  int first_failed_op = -1;
};

// One request to the allocator, or one block returned to it, in the order the replay makes them.
struct AllocatorEvent {
  bool allocate = true;
  int block = 0;           // names the block: an allocation's, then the free that returns it
  std::int64_t bytes = 0;  // as requested
  int stream = 0;          // the pool: the stream of the op that made the block
  int op = -1;             // the op at which it happens; -1: before the step's first op
  int step = 0;            // 0 or 1
};

// The requests replay_reserved makes, for two steps, each handed to `visit` in order.
void for_each_allocator_event(const StepGraph& graph, const std::function<void(const AllocatorEvent&)>& visit);
// The same, collected (for a reader: bench/replay_allocation_log writes them as a log).
std::vector<AllocatorEvent> step_allocator_events(const StepGraph& graph);

// Every stream's reserved bytes as the replay notes them while op `op` (-1: before the first
// op) of step `step` runs: once its outputs and workspace are allocated, and again where it
// allocates after freeing (a workspace sequence). An op that asks nothing of the allocator is
// not noted: it runs with what the last noting saw, since only requests change what is reserved.
struct ReservedAtOp {
  int op = -1;
  int step = 0;
  std::int64_t reserved = 0;
};

// `at_op`, where given, sees each noting in order: the per-op picture `explain` draws.
ReservedReplay replay_reserved(const StepGraph& graph, const AllocatorSettings& settings,
                               const std::function<void(const ReservedAtOp&)>& at_op = {});

}  // namespace longctx
