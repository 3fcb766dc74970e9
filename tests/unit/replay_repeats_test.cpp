// The reserved replay skips repeated layers where the allocator's state repeats
// (replay_repeats.h), and takes a request returned right after it as a transient
// (CachingAllocatorModel::hold_transient): held here to replaying every request and return,
// figure for figure, over the step
// graphs of a grid of the answers' models, stacks and clusters with every configuration kind
// the search considers, at the device's capacity, with expandable segments, and at
// capacities tight enough that requests fail.
#include <gtest/gtest.h>

#include <random>
#include <tuple>

#include <fmt/format.h>

#include "planner/graph/replay_script.h"
#include "planner/graph/reserved_replay.h"
#include "planner/graph/simulator.h"
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

// The replay these tests hold the skipping one to: every request and return, one by one.
constexpr ReplayOptions kEveryItem{.skip_repeats = false, .skip_transients = false};
constexpr ReplayOptions kEveryItemToTheFirstFailure{.stop_at_failure = true, .skip_repeats = false, .skip_transients = false};

struct Totals {
  std::int64_t items = 0, skipped = 0, graphs = 0, transients = 0;
};

// The search's space for a preset model on `gpus` H100s under `stack` at `seq` tokens.
std::vector<Plan> space_at(const char* model, std::int64_t gpus, const char* stack, std::int64_t seq) {
  ClusterRequest request;
  request.model = model;
  request.gpus = gpus;
  request.stack = stack;
  Plan base = resolve_cluster(request).value();
  base.train.seq = seq;
  return search_space(base, all_techniques());
}

// About `count` configurations of the search's space at `seq` tokens, spread over it, replayed
// both ways under each allocator setting.
void hold_grid(const char* model, std::int64_t gpus, const char* stack, std::int64_t seq, std::size_t count,
               Totals& totals) {
  const std::vector<Plan> plans = space_at(model, gpus, stack, seq);
  const std::size_t stride = std::max<std::size_t>(1, plans.size() / count);
  for (std::size_t i = 0; i < plans.size(); i += stride) {
    const Plan& p = plans[i];
    const StepGraph g = build_step(step_inputs(p));
    AllocatorSettings settings = allocator_settings(p);
    const ReservedReplay whole = replay_reserved(g, settings, kEveryItem);
    const std::string what = fmt::format("{} {} GPUs {} at {}: {}", model, gpus, stack, seq, describe_knobs(p));
    ++totals.graphs;
    totals.items += whole.replayed_items;
    AllocatorSettings expandable = settings, tight = settings;
    expandable.expandable_segments = !settings.expandable_segments;
    tight.capacity = whole.peak_reserved * 9 / 10;
    for (const AllocatorSettings& s : {settings, expandable, tight}) {
      const ReservedReplay a = replay_reserved(g, s, kEveryItem), b = replay_reserved(g, s);
      expect_same(b, a, what);
      if (s.capacity == settings.capacity && s.expandable_segments == settings.expandable_segments) {
        totals.skipped += b.skipped_items;
        totals.transients += b.transient_requests;
      }
      EXPECT_EQ(a.transient_requests, 0) << what;
      // Stopping at the first failure stops at the same request either way.
      const ReservedReplay c = replay_reserved(g, s, kEveryItemToTheFirstFailure),
                           d = replay_reserved(g, s, {.stop_at_failure = true});
      expect_same(d, c, what + " (stopping at the first failure)");
      EXPECT_EQ(c.failed_requests, std::min(a.failed_requests, 1)) << what;
      EXPECT_EQ(c.first_failed_op, a.first_failed_op) << what;
      // Written from the allocated peak first, or from a third of the ops: the same figures.
      const int peak_op = simulate(g, p.cluster.hardware.backend, /*per_op=*/false).peak_op;
      for (const int first : {peak_op, static_cast<int>(g.ops().size()) / 3}) {
        const ReservedReplay e = replay_reserved(g, s, {.stop_at_failure = true, .allocated_peak_op = first});
        expect_same(e, c, what + fmt::format(" (stopping at the first failure, written to op {} first)", first));
      }
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
  EXPECT_GT(totals.transients, totals.graphs * 10) << totals.transients << " transients in " << totals.graphs << " graphs";
}

// Shapes drawn at random (a fixed seed): a preset model, a cluster, a stack, a length between
// 4K and 512K tokens, a configuration of the search's space there, and a capacity from a tenth
// of the whole replay's peak to past it; each replayed both ways, whole and stopping at the
// first failure.
TEST(ReservedReplay, SkippingRepeatsHoldsOverDrawnShapes) {
  const std::vector<const char*> models = {"llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "qwen3-8b", "mistral-7b",
                                           "qwen2.5-7b"};
  const std::vector<const char*> stacks = {"longctx", "hf", "arctic", "torchtitan"};
  const std::vector<std::int64_t> clusters = {1, 2, 4, 8, 16};
  std::mt19937_64 draw(20261129);
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(draw() % n); };
  int held = 0, skipped = 0;
  for (int i = 0; i < 200 && held < 40; ++i) {
    ClusterRequest request;
    request.model = models[pick(models.size())];
    request.gpus = clusters[pick(clusters.size())];
    request.stack = stacks[pick(stacks.size())];
    auto resolved = resolve_cluster(request);
    if (!resolved) continue;
    Plan base = *resolved;
    base.train.seq = std::int64_t{4096} << pick(8);
    const std::vector<Plan> plans = search_space(base, all_techniques());
    if (plans.empty()) continue;
    const Plan& p = plans[pick(plans.size())];
    const StepGraph g = build_step(step_inputs(p));
    AllocatorSettings s = allocator_settings(p);
    s.expandable_segments = pick(2) == 1;
    const ReservedReplay unbounded = replay_reserved(g, s, kEveryItem);
    s.capacity = std::max<std::int64_t>(1, unbounded.peak_reserved / 10 * static_cast<std::int64_t>(1 + pick(12)));
    const std::string what = fmt::format("draw {}: {} {} GPUs {} at {}, capacity {}{}: {}", i, request.model,
                                         request.gpus, request.stack, base.train.seq, s.capacity,
                                         s.expandable_segments ? " expandable" : "", describe_knobs(p));
    const ReservedReplay whole = replay_reserved(g, s, kEveryItem), skipping = replay_reserved(g, s);
    expect_same(skipping, whole, what);
    const ReservedReplay stopped = replay_reserved(g, s, kEveryItemToTheFirstFailure),
                         stopped_skipping = replay_reserved(g, s, {.stop_at_failure = true});
    expect_same(stopped_skipping, stopped, what + " (stopping at the first failure)");
    const int first = static_cast<int>(pick(g.ops().size() + 1));
    expect_same(replay_reserved(g, s, {.stop_at_failure = true, .allocated_peak_op = first}), stopped,
                what + fmt::format(" (stopping at the first failure, written to op {} first)", first));
    EXPECT_EQ(stopped.first_failed_op, whole.first_failed_op) << what;
    EXPECT_LE(stopped.peak_reserved, whole.peak_reserved) << what;
    ++held;
    skipped += skipping.skipped_items > 0 ? 1 : 0;
  }
  EXPECT_GE(held, 30);
  EXPECT_GE(skipped, held / 10);  // the draws exercise the skipping (short steps repeat too little to skip)
}

// The script written a stretch of ops at a time, cut anywhere, is the script written whole:
// the same items in the same order.
TEST(ReplayScript, WrittenInStretchesItIsTheWholeScript) {
  std::mt19937_64 draw(20261130);
  int graphs = 0;
  for (const auto& [model, gpus, stack, seq] :
       {std::tuple{"llama-3.1-8b", 8, "longctx", 1 << 20}, std::tuple{"qwen3-8b", 4, "hf", 1 << 15},
        std::tuple{"llama-3.1-8b", 8, "arctic", 1 << 18}, std::tuple{"llama-3.2-3b", 8, "torchtitan", 1 << 17}}) {
    const std::vector<Plan> plans = space_at(model, gpus, stack, seq);
    for (std::size_t i = 0; i < plans.size(); i += std::max<std::size_t>(1, plans.size() / 6)) {
      const StepGraph g = build_step(step_inputs(plans[i]));
      const ReplayScript whole = replay_script(g);
      ReplayScript cut;
      ReplayScriptWriter writer(g);
      const int ops = static_cast<int>(g.ops().size());
      // Cuts at random ops, at the first and the last, and none.
      while (writer.append(cut, static_cast<int>(draw() % static_cast<std::uint64_t>(ops + 2)))) {
      }
      const std::string what = fmt::format("{} {} GPUs {} at {}: {}", model, gpus, stack, seq, describe_knobs(plans[i]));
      ASSERT_EQ(cut.items.size(), whole.items.size()) << what;
      for (std::size_t k = 0; k < whole.items.size(); ++k) {
        const ScriptItem &a = cut.items[k], &b = whole.items[k];
        ASSERT_TRUE(a.kind == b.kind && a.stream == b.stream && a.op == b.op && a.block == b.block &&
                    a.bytes == b.bytes && a.request == b.request && a.step == b.step)
            << what << ": item " << k;
      }
      EXPECT_EQ(cut.blocks, whole.blocks) << what;
      EXPECT_EQ(cut.streams, whole.streams) << what;
      for (const Repeat& r : cut.repeats)  // each repeat found in a stretch repeats
        for (int k = r.start; k < r.end; ++k) ASSERT_TRUE(alike(cut, k, k + r.period)) << what << ": item " << k;
      ++graphs;
    }
  }
  EXPECT_GE(graphs, 20);
}

// The search's verdicts (predict_verdict) against predict(): the same verdict, speed and
// allocated figures on every configuration; the same reserved figure where it fits, and where
// it does not one that stops short, never over predict()'s and still over the budget.
TEST(ReservedReplay, VerdictsAgreeWithFullPredictions) {
  int short_figures = 0, plans_held = 0;
  for (const auto& [model, gpus, seq] : {std::tuple{"llama-3.1-8b", 8, 1 << 20}, std::tuple{"llama-3.1-8b", 1, 1 << 17},
                                         std::tuple{"qwen3-8b", 16, 1 << 21}}) {
    ClusterRequest request;
    request.model = model;
    request.gpus = gpus;
    Plan base = resolve_cluster(request).value();
    base.train.seq = seq;
    const std::vector<Plan> plans = search_space(base, all_techniques());
    for (std::size_t i = 0; i < plans.size(); i += std::max<std::size_t>(1, plans.size() / 40)) {
      const Prediction full = predict(plans[i]);
      const Verdict v = predict_verdict(plans[i]);
      const std::string what = fmt::format("{} {} GPUs at {}: {}", model, gpus, seq, describe_knobs(plans[i]));
      EXPECT_EQ(v.prediction.feasible, full.feasible) << what;
      EXPECT_EQ(v.prediction.binding, full.binding) << what;
      EXPECT_EQ(v.prediction.tokens_per_s, full.tokens_per_s) << what;
      EXPECT_EQ(v.prediction.peak_device_bytes, full.peak_device_bytes) << what;
      EXPECT_EQ(v.prediction.peak_host_bytes, full.peak_host_bytes) << what;
      EXPECT_TRUE(v.exact || !full.feasible) << what;
      if (v.exact) {
        EXPECT_EQ(v.prediction.peak_nvidia_smi_bytes, full.peak_nvidia_smi_bytes) << what;
      } else {
        ++short_figures;
        EXPECT_LE(v.prediction.peak_nvidia_smi_bytes, full.peak_nvidia_smi_bytes) << what;
        EXPECT_GT(v.prediction.peak_nvidia_smi_bytes, base.cluster.device_budget_bytes) << what;
      }
      ++plans_held;
    }
  }
  EXPECT_GT(plans_held, 60);
  EXPECT_GT(short_figures, 0);
}

}  // namespace
}  // namespace longctx
