#pragma once
// The longest sequence one set of techniques reaches (internal to the planner library): every
// coarse configuration's affine bound from two simulations, the most promising confirmed by
// a full simulation (and on CUDA by the caching allocator's replay), the best kept.
// max_context.cpp builds the ladder and the answer on it.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "planner/search/search.h"

namespace longctx {

struct MaxSeqCandidate {
  std::int64_t tokens = 0;   // from the affine bound, before confirmation
  std::int64_t grid = 0;
  std::string binding;
  Plan coarse;
  KnobValue chunk = 0;
};

struct MaxSeq {
  std::int64_t tokens = 0;
  std::int64_t grid = 0;
  std::string binding;
  std::vector<MaxSeqCandidate> reaching;  // every candidate whose bound reaches `tokens`
};

// Affine bounds already computed, keyed by everything they depend on (the coarse knobs, the
// chunk, and whether tiles are allowed): the ladder's rungs share most of their configurations.
using BoundKey = std::vector<KnobValue>;
struct Bound {
  std::int64_t tokens = 0;  // the longest sequence: a bound, or confirmed by a full simulation
  std::string binding;
  bool confirmed = false;
  // > 0: the configuration was found not to fit at this many tokens and its own bound was not
  // computed; it holds for searches whose floor is at least this (a ladder's later rungs),
  // not for one that starts lower (max-context's longest length without a ring, asked without
  // the ladder).
  std::int64_t out_of_reach_at = 0;
  bool device_over = false;  // out of reach: over the device's budget there (the host's aside)
  // > 0: confirmation found the configuration's length under this many tokens (the floor of
  // the search that confirmed it) and stopped there; `tokens` and `binding` are still its
  // unconfirmed bound's, from which a search that needs the length confirms it.
  std::int64_t under = 0;
  // > 0: the reserved walk down the grid (on CUDA) did not probe this length nor some below it,
  // down to `tokens`: a longer fit than `tokens` may lie there (max_seq.cpp,
  // walk_unprobed_steps).
  std::int64_t unprobed_top = 0;
};
using BoundCache = std::map<BoundKey, Bound>;

// The longest length `a` reaches from `base`'s model and cluster, to its grid. `floor`: a
// length known to fit with fewer techniques (configurations short of it are dropped early).
MaxSeq max_seq(const Plan& base, const TechniqueSet& a, BoundCache& cache, std::int64_t floor = 0);

// This thread's switch: whether max_seq may stop confirming a configuration once its length is
// known to fall under the search's floor (on by default; tests turn it off to hold answers to
// those of searches that confirm every configuration they reach), and how many of its searches
// passed over their configurations a second time for want of a cut one's length (max_seq.cpp).
struct FloorCuts {
  bool allowed = true;
  std::int64_t second_passes = 0;
};
FloorCuts& floor_cuts();

// The coarse knobs of a plan fixed, its fine ones (tiles, head chunk) left to the search.
Knobs coarse_knobs(const Plan& coarse);

// Without tiles, the answer refined from the grid to the padding step (see max_seq.cpp).
void refine_to_padding(MaxSeq& top, const TechniqueSet& a);

}  // namespace longctx
