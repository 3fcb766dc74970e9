#pragma once
// The bytes a CUDA device reserves over a run: a step graph's requests (allocator_events.h)
// replayed, in order, through the caching-allocator model (allocator_model.h).
//
// The requests are the simulation's (simulator.h), one rank's. Two steps are replayed, the
// second over the first one's cache (persistent tensors stay), because the figure users see
// is the largest over a run and the cache a first step leaves shapes the second. Each CUDA
// stream an op runs on (OpSpec::stream) has its own pools: a tensor's block belongs to the
// stream of the op that made it and returns there when freed, and the device reserves the sum
// of every stream's. Each stream may reserve what the others leave of the capacity; a stream
// that runs short releases its own cache only. (longctx's own runtime writes every op on
// stream 0: its offload streams' freed blocks are reused as if on it.)
//
// Layers repeat their requests, and after a layer or two the allocator's state repeats with
// them: the replay skips ahead where it finds it does (replay_repeats.h says why that is
// exact), so a replay costs about as much for 80 layers as for 8.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "planner/graph/allocator_events.h"
#include "planner/graph/allocator_model.h"
#include "planner/graph/resized_workspaces.h"
#include "planner/graph/step_graph.h"

namespace longctx {

class SharedScript;  // replay_script.h

// The cache as a request found it (ReplayOptions::look_at_requests).
struct RequestLook {
  std::int64_t bytes = 0;
  CachingAllocatorModel::CacheLook cache;
};

struct ReservedReplay {
  std::int64_t peak_reserved = 0;      // bytes, max over the replayed steps
  std::int64_t allocated_at_peak = 0;  // allocated while reserved was at its peak
  int peak_op = -1;                    // the op during which reserved peaked first
  int failed_requests = 0;             // requests that did not fit the capacity even after releasing the cache
  int first_failed_op = -1;
  // The replay's own work: script items replayed (one by one, or a request, its notes and its
  // return together as a transient: ReplayOptions::skip_transients) and skipped as repeats; of
  // the requests replayed, those taken as transients.
  int replayed_items = 0, skipped_items = 0, transient_requests = 0;
  // With ReplayOptions::look_at_requests: each request replayed, in order, with the cache it
  // found (a request may appear twice, with the same look).
  std::vector<RequestLook> looks;
};

struct ReplayOptions {
  // Stop at the first request that fails: enough to know the step does not fit. The figures
  // are then those up to that request (peak_reserved a lower bound, failed_requests 1).
  bool stop_at_failure = false;
  // Skip repeated stretches where the allocator's state repeats (off: every item replayed,
  // which tests compare with).
  bool skip_repeats = true;
  // Replay a request returned by the next item but notes (an op's workspace of one block) as
  // a look for the cached block that serves it, without taking it
  // (CachingAllocatorModel::hold_transient); the figures are the same (off: every request and
  // return replayed, which tests compare with).
  bool skip_transients = true;
  // The op at which the step peaks as allocated, where the caller knows it (-1: not known).
  // A replay that stops at its first failure writes its script up to there first: a request
  // that fails is mostly there or before it, and the rest of the script is then never
  // written. Nothing the replay reports depends on it.
  int allocated_peak_op = -1;
  // Keep a look at the cache before each request (ReservedReplay::looks), to judge variants of
  // the graph after the replay (variants_alike below).
  bool look_at_requests = false;
  // Where the script comes from: read from `shared`, written for a graph this one resizes the
  // workspaces of as `resized` says (WorkspaceFamily::resized; empty for that graph itself),
  // instead of written for this one. Null: written for this one. The figures are the same
  // (SharedScript). REQUIRES: the replayed graph is that graph so resized.
  struct ScriptFrom {
    SharedScript* shared = nullptr;
    ResizedWorkspaces resized;
  };
  const ScriptFrom* script_from = nullptr;
};

ReservedReplay replay_reserved(const StepGraph& graph, const AllocatorSettings& settings, const ReplayOptions& options = {});

// Of plans whose graphs resize the workspaces of a graph so (resized_workspaces.h: the same step
// at other MLP tile counts), those whose replay under `settings` goes request for request as
// the graph's did, read off the looks at the cache that replay kept: bit v for variants[v]
// (at most 64), whose peak_reserved, peak_op, failed_requests and first_failed_op (under the
// same options) are then that replay's. A variant is alike where each request it resizes found
// a cache that serves it at both sizes: taking and returning such a block leaves every block as
// it was (CachingAllocatorModel::hold_transient), so the two replays' states stay equal request
// for request. The requests a skipped repeat would make are those of the period replayed
// before it, from the same states; a variant resizes alike requests alike (its sizes are a
// function of the graph's), so what held in that period holds in the skipped ones. 0 where
// max_split_size is set (best fit may refuse a block then, which a look does not tell).
std::uint64_t variants_alike(const std::vector<RequestLook>& looks, std::span<const ResizedWorkspaces> variants,
                             const AllocatorSettings& settings);

// Every stream's reserved bytes as the replay notes them while op `op` (-1: before the first
// op) of step `step` runs: once its outputs and workspace are allocated, and again where it
// allocates after freeing (a workspace sequence). An op that asks nothing of the allocator is
// not noted: it runs with what the last noting saw, since only requests change what is reserved.
struct ReservedAtOp {
  int op = -1;
  int step = 0;
  std::int64_t reserved = 0;
};

// The whole replay (nothing skipped), `at_op` seeing each noting in order: the per-op picture
// `explain` draws.
ReservedReplay replay_reserved(const StepGraph& graph, const AllocatorSettings& settings,
                               const std::function<void(const ReservedAtOp&)>& at_op);

}  // namespace longctx
