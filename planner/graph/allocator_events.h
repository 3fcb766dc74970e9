#pragma once
// The requests a step graph makes of a CUDA device's caching allocator, one rank's, in the order
// the reserved replay (reserved_replay.h) makes them: the tensors that exist before the step
// first, by index; then at each op its outputs by index and its workspace as one block (or the
// blocks of its workspace_sequence), and at its end the workspace and each tensor it reads last,
// by index. Two steps, the second over the first one's cache (persistent tensors stay).
#include <functional>
#include <memory>
#include <vector>

#include "planner/graph/step_graph.h"

namespace longctx {

// One request to the allocator, or one block returned to it, in the order the replay makes them.
struct AllocatorEvent {
  bool allocate = true;
  int block = 0;           // names the block: an allocation's, then the free that returns it
  std::int64_t bytes = 0;  // as requested
  int stream = 0;          // the pool: the stream of the op that made the block
  int op = -1;             // the op at which it happens; -1: before the step's first op
  int step = 0;            // 0 or 1
};

// Writes the requests a stretch of ops at a time: step 0's, then step 1's over what step 0 left
// held, so that a reader that needs only the start of the first step never pays for the rest.
class AllocatorEventWriter {
 public:
  explicit AllocatorEventWriter(const StepGraph& graph);
  ~AllocatorEventWriter();
  AllocatorEventWriter(const AllocatorEventWriter&) = delete;
  AllocatorEventWriter& operator=(const AllocatorEventWriter&) = delete;
  // Appends to `out` the requests from where the writer stands (a step's start: the tensors
  // that exist before it first) up to op `end_op` of the current step, exclusive; at or past
  // its last op the step is finished and the next call begins the next one.
  // REQUIRES: steps_written() < 2.
  void append(std::vector<AllocatorEvent>& out, int end_op);
  int steps_written() const;  // steps finished

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// The requests for two steps, appended to `out` in order. Blocks are numbered from 0: a
// tensor's by its index, workspaces' past the tensors.
void append_allocator_events(const StepGraph& graph, std::vector<AllocatorEvent>& out);
// The same, each handed to `visit` in order.
void for_each_allocator_event(const StepGraph& graph, const std::function<void(const AllocatorEvent&)>& visit);
// The same, collected (for a reader: bench/replay_allocation_log writes them as a log).
std::vector<AllocatorEvent> step_allocator_events(const StepGraph& graph);

}  // namespace longctx
