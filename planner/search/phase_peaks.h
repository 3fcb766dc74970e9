#pragma once
// A step's memory by phase, under the names the runtime measures: forward.embed,
// forward.layer.L, loss, backward.loss, backward.layer.L, backward.embed, optimizer. The
// common ground on which predicted and measured runs are compared.
#include <cstdint>
#include <map>
#include <string>

#include "planner/search/memory_model.h"

namespace longctx {

struct PhasePeak {
  std::int64_t device_bytes = 0;  // per rank
  std::int64_t host_bytes = 0;    // per rank
  int order = 0;                  // first appearance in the schedule, for display
};

// Peaks of allocated bytes per phase (without the context outside the allocator).
std::map<std::string, PhasePeak> phase_peaks(const Evaluation& e);

// The evaluated plan with its prediction's phases filled, in schedule order: what
// `plan -o` records.
Plan with_phase_predictions(const Evaluation& e);

}  // namespace longctx
