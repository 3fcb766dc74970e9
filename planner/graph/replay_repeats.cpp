#include "planner/graph/replay_repeats.h"

namespace longctx {

void describe_replay_state(const std::vector<CachingAllocatorModel>& models, const std::vector<std::vector<int>>& holders,
                           int at, ReplayState& out) {
  out.at = at;
  out.words.clear();
  out.offsets.clear();
  for (std::size_t s = 0; s < models.size(); ++s) {
    out.offsets.push_back(out.words.size());
    const std::vector<int>& holder = holders[s];
    models[s].describe(out.words, [&](int handle) { return std::int64_t{holder[static_cast<std::size_t>(handle)]}; });
  }
}

bool same_replay_state(const ReplayState& earlier, const ReplayState& later, int period) {
  if (earlier.words.size() != later.words.size() || earlier.offsets != later.offsets) return false;
  const std::size_t n = earlier.words.size();
  constexpr std::size_t counters = CachingAllocatorModel::kCounters, fields = CachingAllocatorModel::kBlockFields;
  for (std::size_t m = 0; m < earlier.offsets.size(); ++m) {
    const std::size_t from = earlier.offsets[m], to = m + 1 < earlier.offsets.size() ? earlier.offsets[m + 1] : n;
    for (std::size_t i = from; i < from + counters; ++i)
      if (earlier.words[i] != later.words[i]) return false;
    for (std::size_t b = from + counters; b < to; b += fields) {
      for (std::size_t i = b; i < b + fields - 1; ++i)
        if (earlier.words[i] != later.words[i]) return false;
      // The holder: -1 for a free block (the flags, compared above, say so too).
      const std::int64_t x = earlier.words[b + fields - 1], y = later.words[b + fields - 1];
      if (x < 0 || y < 0) {
        if (x != y) return false;
        continue;
      }
      const bool x_recent = x >= earlier.at - period, y_recent = y >= later.at - period;
      if (x_recent != y_recent) return false;
      if (x_recent ? x - earlier.at != y - later.at : x != y) return false;
    }
  }
  return true;
}

}  // namespace longctx
