#pragma once
// Walks a step graph in schedule order and accounts for every byte.
//
// At op i: the live set is every tensor produced before i and read at or after i, plus the
// persistent ones. The op's outputs and its workspace are allocated at its start; its
// workspace and every tensor whose last reader is i are freed at its end. The device figure
// at op i is what is live while it runs; "after" is what is live once it has finished.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "planner/core/hardware.h"
#include "planner/graph/step_graph.h"

namespace longctx {

using CategoryBytes = std::array<std::int64_t, kCategories>;

struct OpMemory {
  std::int64_t device_during = 0;  // allocated while the op runs (allocator-rounded)
  std::int64_t device_after = 0;
  std::int64_t host_during = 0;    // per rank
  CategoryBytes device_by_category_during{};
};

struct SimResult {
  std::int64_t peak_device_bytes = 0;  // per rank, allocated
  int peak_op = -1;
  std::vector<int> live_at_peak;       // tensors live during the peak op, largest first
  CategoryBytes breakdown{};           // at the peak, by category (workspace included)
  std::int64_t peak_host_bytes_per_rank = 0;
  int peak_host_op = -1;
  std::vector<OpMemory> per_op;        // one entry per op, in schedule order
};

// `per_op` false: the peaks and the breakdown at the device peak only (per_op and
// live_at_peak left empty), the same figures: what a prediction reads.
SimResult simulate(const StepGraph& graph, Backend backend, bool per_op = true);

// Only the totals while each op runs (device, and host per rank): the search's inner loop.
struct OpTotals {
  std::vector<std::int64_t> device_during, host_during;
};
OpTotals simulate_totals(const StepGraph& graph, Backend backend);
// simulate_totals of `variant`, a graph that is `base` with some ops' workspace_bytes changed
// and nothing else (a stack's retile_mlp, profile.h), from `base_totals`, base's: an op's
// workspace counts while that op runs, and only then. REQUIRES: variant is such a graph.
OpTotals totals_with_workspaces_of(const StepGraph& variant, const StepGraph& base, const OpTotals& base_totals,
                                   Backend backend);

// What every op of a step holds at least: the tensors made before it and never freed
// (persistent, without a producer), on the device as allocated and on the host per rank. Of
// a graph built with StepInputs::states_only (the model states, no op), a floor of the whole
// step's OpTotals at every op.
struct StandingBytes {
  std::int64_t device = 0, host = 0;
};
StandingBytes standing_bytes(const StepGraph& graph, Backend backend);

}  // namespace longctx
