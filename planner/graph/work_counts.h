#pragma once
// What the planner's queries cost in work, counted as they run on this thread: step graphs
// built, and of them those of a whole step (not a prefix or the model states alone), reserved
// replays run and the script items they replayed or skipped
// (reserved_replay.h), and the plan search's groups of equally fast candidates kept as they
// were searched out of order (search.cpp), of them those searched past a plan found. bench/planner_bench reports them beside its times
// (docs/performance.md); nothing in the planner reads them.
#include <cstdint>

namespace longctx {

struct WorkCounts {
  std::int64_t graphs = 0, whole_graphs = 0;
  std::int64_t replays = 0;
  std::int64_t replayed_items = 0, skipped_items = 0;
  std::int64_t groups_unordered = 0, groups_unordered_past_a_plan = 0;
};

// This thread's counts; reset by assigning {}.
WorkCounts& work_counts();

}  // namespace longctx
