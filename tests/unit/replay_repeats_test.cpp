// The reserved replay skips repeated layers where the allocator's state repeats
// (replay_repeats.h): held here to replaying every request, figure for figure, over the step
// graphs of a grid of the answers' models, stacks and clusters with every configuration kind
// the search considers, at the device's capacity, with expandable segments, and at
// capacities tight enough that requests fail.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "planner/graph/reserved_replay.h"
#include "planner/search/memory_model.h"
#include "planner/search/request.h"
#include "planner/search/search_space.h"

namespace longctx {
namespace {

void expect_same(const ReservedReplay& skipping, const ReservedReplay& whole, const std::string& what) {
  EXPECT_EQ(skipping.peak_reserved, whole.peak_reserved) << what;
  EXPECT_EQ(skipping.allocated_at_peak, whole.allocated_at_peak) << what;
  EXPECT_EQ(skipping.peak_op, whole.peak_op) << what;
  EXPECT_EQ(skipping.failed_requests, whole.failed_requests) << what;
  EXPECT_EQ(skipping.first_failed_op, whole.first_failed_op) << what;
  EXPECT_EQ(skipping.replayed_items + skipping.skipped_items, whole.replayed_items) << what;
}

struct Totals {
  std::int64_t items = 0, skipped = 0, graphs = 0;
};

// About `count` configurations of the search's space at `seq` tokens, spread over it, replayed
// both ways under each allocator setting.
void hold_grid(const char* model, std::int64_t gpus, const char* stack, std::int64_t seq, std::size_t count,
               Totals& totals) {
  ClusterRequest request;
  request.model = model;
  request.gpus = gpus;
  request.stack = stack;
  Plan base = resolve_cluster(request).value();
  base.train.seq = seq;
  const std::vector<Plan> plans = search_space(base, all_techniques());
  const std::size_t stride = std::max<std::size_t>(1, plans.size() / count);
  for (std::size_t i = 0; i < plans.size(); i += stride) {
    const Plan& p = plans[i];
    const StepGraph g = build_step(step_inputs(p));
    AllocatorSettings settings = allocator_settings(p);
    const ReservedReplay whole = replay_reserved(g, settings, {.skip_repeats = false});
    const std::string what = fmt::format("{} {} GPUs {} at {}: {}", model, gpus, stack, seq, describe_knobs(p));
    ++totals.graphs;
    totals.items += whole.replayed_items;
    AllocatorSettings expandable = settings, tight = settings;
    expandable.expandable_segments = !settings.expandable_segments;
    tight.capacity = whole.peak_reserved * 9 / 10;
    for (const AllocatorSettings& s : {settings, expandable, tight}) {
      const ReservedReplay a = replay_reserved(g, s, {.skip_repeats = false}), b = replay_reserved(g, s);
      expect_same(b, a, what);
      if (s.capacity == settings.capacity && s.expandable_segments == settings.expandable_segments)
        totals.skipped += b.skipped_items;
      // Stopping at the first failure stops at the same request either way.
      const ReservedReplay c = replay_reserved(g, s, {.stop_at_failure = true, .skip_repeats = false}),
                           d = replay_reserved(g, s, {.stop_at_failure = true});
      expect_same(d, c, what + " (stopping at the first failure)");
      EXPECT_EQ(c.failed_requests, std::min(a.failed_requests, 1)) << what;
      EXPECT_EQ(c.first_failed_op, a.first_failed_op) << what;
    }
  }
}

TEST(ReservedReplay, SkippingRepeatsGivesTheWholeReplaysFigures) {
  Totals totals;
  hold_grid("llama-3.1-8b", 1, "longctx", 256 * 1024, 16, totals);
  hold_grid("llama-3.1-8b", 8, "longctx", 1024 * 1024, 16, totals);
  hold_grid("llama-3.2-3b", 2, "longctx", 128 * 1024, 12, totals);
  hold_grid("qwen3-8b", 16, "longctx", 2048 * 1024, 12, totals);
  hold_grid("llama-3.2-1b", 1, "hf", 32 * 1024, 12, totals);
  hold_grid("llama-3.1-8b", 8, "arctic", 256 * 1024, 12, totals);
  hold_grid("llama-3.1-8b", 8, "torchtitan", 128 * 1024, 12, totals);
  hold_grid("qwen3-8b", 8, "torchtitan", 64 * 1024, 12, totals);
  // The grid exercises the skipping.
  EXPECT_GT(totals.graphs, 100);
  EXPECT_GT(totals.skipped, totals.items / 20) << totals.skipped << " of " << totals.items;
}

}  // namespace
}  // namespace longctx
