#pragma once
// A CUDA run's own allocator requests replayed through the caching-allocator model.
//
// `longctx run --device cuda --allocation-log FILE` writes what PyTorch's caching allocator
// did, one line per event (docs/cli.md):
//   PHASE device +BYTES -> IN_USE stream S addr A     a request (its size as asked, unrounded)
//   PHASE device -BYTES -> IN_USE stream S addr A     the block freed by its tensor
//   PHASE returned -BYTES stream S addr A             the block back in its stream's pool
//   PHASE segment +BYTES -> RESERVED stream S addr A  memory taken from the driver (cudaMalloc,
//                                                     or pages mapped with expandable segments)
//   PHASE segment -BYTES -> RESERVED stream S addr A  memory given back
// (and `PHASE host ...` lines for pinned host memory, which the replay skips).
//
// Replaying the requests in the log's order through CachingAllocatorModel, one pool per
// stream as the allocator keeps them, separates two sources of error in the predicted
// reserved figure: the model's rules (if this replay differs from the log's own segments)
// and the step graph's requests (if this replay agrees but the plan's replay of the graph,
// reserved_replay.h, does not).
#include <cstdint>
#include <string>
#include <vector>

#include "planner/graph/allocator_model.h"
#include "common/result.h"

namespace longctx {

struct ReservedByPhase {
  std::string phase;
  std::int64_t measured_peak = 0;  // the log's segments, bytes
  std::int64_t modelled_peak = 0;  // the replay's
  std::int64_t largest_free_at_start = 0;  // the replay's largest cached free block (any stream) as the phase begins
};

struct AllocationLogReplay {
  std::int64_t requests = 0;
  int streams = 0;
  std::int64_t measured_peak_reserved = 0;
  std::int64_t modelled_peak_reserved = 0;
  std::int64_t largest_difference = 0;  // max over requests of |modelled - measured| reserved after it
  // The first request after which the model reserves other than the log says; 0 when none.
  std::int64_t first_divergent_line = 0;
  std::string first_divergent_phase;
  std::int64_t measured_at_divergence = 0, modelled_at_divergence = 0;
  // One row per stretch of the log under one phase name, in order (a phase of each step).
  std::vector<ReservedByPhase> phases;
};

// BadInput naming `field` when a line is not one of the forms above or frees a block the log
// never handed out. Blocks handed out before the log began are never freed by a line it can
// read, so a log must start with the process's first CUDA allocation (as `run` writes it).
Result<AllocationLogReplay> replay_allocation_log(const std::string& text, const AllocatorSettings& settings,
                                                  const std::string& field);

}  // namespace longctx
