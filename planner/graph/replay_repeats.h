#pragma once
// When the reserved replay may skip a repeated stretch of its script (replay_script.h), and
// why that is exact.
//
// Let the script's items [s, e + p) repeat with period p (each of [s, e) alike the item p
// later), and let the allocators' states before items b and b + p (s <= b, both boundaries of
// the stretch) be equal: the same blocks at the same addresses, sizes, segments and flags, the
// same counters (allocated, reserved, segments, failures, the next address), and every block
// in use held alike, that is by a request made within the last period before the boundary
// and as many items before it in both, or by the same request made earlier. Then the items
// [b + p, b + 2p) do to the state before b + p what [b, b + p) did to the state before b:
// each allocation finds the same free blocks, in the same best-fit order, and takes the same
// one; each return frees a block requested as many items before, which is the same block
// (a request within the period at the same place; one before it held alike, or else one
// returned in [b, b + p) would still be held at b + p, and the states would differ). So the
// state before b + 2p equals the one before b + p in the same sense, and by induction so
// does every boundary up to e + p: the replay jumps there, each block held by a request of
// the last period now held by the one as many periods later. Reserved bytes follow the same
// path in every period, so no later note raises the peak, and there is no failure to count
// (the failures counter is part of the state). The test `ReservedReplay.SkippingRepeats...`
// compares the skipping replay with the whole one over many step graphs.
#include <cstdint>
#include <vector>

#include "planner/graph/allocator_model.h"

namespace longctx {

// The allocators' state before an item of the replay (CachingAllocatorModel::describe, one
// model a stream), the holders of blocks in use named by the items that requested them.
struct ReplayState {
  int at = -1;  // the item it precedes
  std::vector<std::int64_t> words;
  std::vector<std::size_t> offsets;  // where each stream's model starts in `words`
};

// REQUIRES: holders[s][h] is the item that made the request of model s's handle h.
void describe_replay_state(const std::vector<CachingAllocatorModel>& models, const std::vector<std::vector<int>>& holders,
                           int at, ReplayState& out);

// Whether `later` (period items after `earlier`) is the same state in the sense above.
bool same_replay_state(const ReplayState& earlier, const ReplayState& later, int period);

}  // namespace longctx
