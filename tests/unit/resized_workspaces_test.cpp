// Graphs that differ only in workspace sizes (resized_workspaces.h), and what one reserved replay
// says of them (variants_alike, from its looks at the cache): a variant it calls alike has,
// replayed on its own, the same peak reserved, peak op, failed requests and first failed op. Held over plans
// drawn afresh each run at their search's MLP tile counts, under capacities from a tenth of the
// step's reserved peak to past it; and the family's refusals over graphs written by hand.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include <fmt/format.h>

#include "planner/graph/reserved_replay.h"
#include "planner/graph/resized_workspaces.h"
#include "planner/search/memory_model.h"
#include "planner/search/request.h"
#include "planner/search/search_space.h"

namespace longctx {
namespace {

constexpr std::int64_t MiB = 1024 * 1024;

// a (8 MiB) made by op0 and read by op1; op0 and op1 each with a workspace of their own.
StepGraph two_ops(std::int64_t workspace0, std::int64_t workspace1, std::int64_t a_bytes = 8 * MiB) {
  StepGraph g;
  const int a = g.add_tensor({{Name::kNone, "a"}, a_bytes, Category::Activations});
  OpSpec op0{{Name::kNone, "op0"}};
  op0.outputs = {a};
  op0.workspace_bytes = workspace0;
  g.add_op(op0);
  OpSpec op1{{Name::kNone, "op1"}};
  op1.inputs = {a};
  op1.workspace_bytes = workspace1;
  g.add_op(op1);
  g.finalize();
  return g;
}

TEST(WorkspaceFamily, ResizesWhatDiffersAndNothingElse) {
  const StepGraph base = two_ops(4 * MiB, 6 * MiB);
  WorkspaceFamily family(base);
  const StepGraph same = two_ops(4 * MiB, 6 * MiB), resized = two_ops(4 * MiB, 10 * MiB);
  const std::optional<int> s = family.add(same), r = family.add(resized);
  ASSERT_TRUE(s && r);
  EXPECT_TRUE(family.resized(WorkspaceFamily::kBase, *s)->sizes.empty());
  const std::optional<ResizedWorkspaces> to_r = family.resized(WorkspaceFamily::kBase, *r);
  ASSERT_TRUE(to_r);
  EXPECT_EQ(to_r->sizes, (std::vector<std::pair<std::int64_t, std::int64_t>>{{6 * MiB, 10 * MiB}}));
  EXPECT_EQ(to_r->resized(6 * MiB), 10 * MiB);
  EXPECT_FALSE(to_r->resized(4 * MiB));
  // Between members, read off their sizes.
  const std::optional<ResizedWorkspaces> back = family.resized(*r, *s);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->sizes, (std::vector<std::pair<std::int64_t, std::int64_t>>{{10 * MiB, 6 * MiB}}));
}

TEST(WorkspaceFamily, RefusesGraphsThatAskOtherwise) {
  const StepGraph base = two_ops(4 * MiB, 6 * MiB);
  WorkspaceFamily family(base);
  EXPECT_FALSE(family.add(two_ops(4 * MiB, 6 * MiB, 9 * MiB)));  // a tensor's bytes
  EXPECT_FALSE(family.add(two_ops(0, 6 * MiB)));                 // a workspace gone
  StepGraph sequenced = two_ops(4 * MiB, 6 * MiB);
  OpSpec op2{{Name::kNone, "op2"}};
  sequenced.add_op(op2);
  sequenced.finalize();
  EXPECT_FALSE(family.add(sequenced));  // an op more
}

TEST(WorkspaceFamily, RefusesSizesThatAreNoFunctionOfTheBases) {
  // Both workspaces 6 MiB in the base; one of them resized alone: not a function of the size.
  const StepGraph base = two_ops(6 * MiB, 6 * MiB);
  WorkspaceFamily family(base);
  EXPECT_FALSE(family.add(two_ops(6 * MiB, 10 * MiB)));
  // A resized size the base asks for as a tensor too.
  const StepGraph clash = two_ops(4 * MiB, 8 * MiB);
  WorkspaceFamily with_tensor(clash);
  const std::optional<int> m = with_tensor.add(two_ops(4 * MiB, 12 * MiB));
  ASSERT_TRUE(m);
  EXPECT_FALSE(with_tensor.resized(WorkspaceFamily::kBase, *m));
  // Members whose own sizes coincide where the base's differ: from one, no function.
  const StepGraph four_six = two_ops(4 * MiB, 6 * MiB);
  WorkspaceFamily merging(four_six);
  const std::optional<int> one = merging.add(two_ops(5 * MiB, 5 * MiB)), other = merging.add(two_ops(4 * MiB, 7 * MiB));
  ASSERT_TRUE(one && other);
  EXPECT_FALSE(merging.resized(*one, *other));
  EXPECT_TRUE(merging.resized(*other, *one));
}

// A fresh seed, or LONGCTX_PROPERTIES_SEED's, to replay a printed one.
std::uint64_t seed() {
  if (const char* given = std::getenv("LONGCTX_PROPERTIES_SEED"); given && *given) return std::strtoull(given, nullptr, 10);
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

void expect_alike(const ReservedReplay& looking, const ReservedReplay& own, const std::string& what) {
  EXPECT_EQ(own.peak_reserved, looking.peak_reserved) << what;
  EXPECT_EQ(own.peak_op, looking.peak_op) << what;
  EXPECT_EQ(own.failed_requests, looking.failed_requests) << what;
  EXPECT_EQ(own.first_failed_op, looking.first_failed_op) << what;
}

struct Counts {
  int replays = 0, alike = 0, apart = 0, alike_skipping = 0;
};

// Plan p built at every MLP tile count its knob offers, as max-context retries them; the
// count `from` (an index into them, taken modulo their number) replays under `settings`,
// keeping its looks at the cache, stopping at the first failure or not, skipping repeats or
// not, and each other count its looks call alike is replayed on its own. Returns false where p offers fewer
// than two counts the family takes.
bool hold_counts(const Plan& p, AllocatorSettings settings, std::size_t from, Counts& counts, const std::string& what) {
  std::vector<Plan> plans;
  std::vector<StepGraph> graphs;
  for (const KnobValue tiles : knob_candidates(KnobId::mlp_tiles, p, all_techniques(), {})) {
    Plan at = p;
    set_knob(at, KnobId::mlp_tiles, tiles);
    if (!valid(at) || !(allocator_settings(at) == allocator_settings(p))) continue;
    plans.push_back(at);
    graphs.push_back(build_step(step_inputs(at)));
  }
  if (graphs.size() < 2) return false;
  from %= graphs.size();
  WorkspaceFamily family(graphs[from]);
  std::vector<ResizedWorkspaces> variants;
  std::vector<std::size_t> of;  // variants[v] is graphs[of[v]]
  for (std::size_t g = 0; g < graphs.size(); ++g)
    if (g != from)
      if (const std::optional<int> member = family.add(graphs[g]))
        if (auto v = family.resized(WorkspaceFamily::kBase, *member)) {
          variants.push_back(std::move(*v));
          of.push_back(g);
        }
  if (variants.empty()) return false;
  for (const bool stop : {true, false})
    for (const bool skip : {true, false}) {
      const ReservedReplay r =
          replay_reserved(graphs[from], settings, {.stop_at_failure = stop, .skip_repeats = skip, .look_at_requests = true});
      ++counts.replays;
      const std::uint64_t alike = variants_alike(r.looks, variants, settings);
      for (std::size_t v = 0; v < variants.size(); ++v) {
        if ((alike >> v & 1) == 0) {
          ++counts.apart;
          continue;
        }
        ++counts.alike;
        if (skip && r.skipped_items > 0) ++counts.alike_skipping;
        expect_alike(r, replay_reserved(graphs[of[v]], settings, {.stop_at_failure = stop, .skip_repeats = skip}),
                     what + fmt::format(", capacity {}{}, {} tiles for {}{}{}", settings.capacity,
                                        settings.expandable_segments ? " expandable" : "",
                                        plans[from].parallel.mlp_tiles, plans[of[v]].parallel.mlp_tiles,
                                        stop ? ", stopping" : "", skip ? ", skipping" : ""));
      }
    }
  return true;
}

// Plans drawn from the search's space (the longctx stack on H100s, whose MLP tiles are one op
// with a tile's workspace), under capacities from a tenth of the step's reserved peak to past
// it, one count's replay judging the others.
TEST(ReservedReplay, AVariantCalledAlikeReplaysAlike) {
  const std::uint64_t s = seed();
  SCOPED_TRACE(fmt::format("LONGCTX_PROPERTIES_SEED={}", s));
  std::mt19937_64 draw(s);
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(draw() % n); };
  const std::vector<const char*> models = {"llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "qwen3-8b", "mistral-7b"};
  const std::vector<std::int64_t> clusters = {1, 2, 4, 8};
  Counts counts;
  int drawn = 0;
  for (int i = 0; i < 400 && drawn < 16; ++i) {
    ClusterRequest request;
    request.model = models[pick(models.size())];
    request.gpus = clusters[pick(clusters.size())];
    auto resolved = resolve_cluster(request);
    if (!resolved) continue;
    Plan base = *resolved;
    base.train.seq = std::int64_t{16384} << pick(5);
    std::vector<Plan> plans = search_space(base, all_techniques());
    std::erase_if(plans, [](const Plan& p) { return p.parallel.mlp_tiles < 2; });
    if (plans.empty()) continue;
    const Plan& p = plans[pick(plans.size())];
    AllocatorSettings settings = allocator_settings(p);
    settings.expandable_segments = pick(2) == 1;
    const ReservedReplay unbounded = replay_reserved(build_step(step_inputs(p)), settings, {.skip_repeats = false});
    settings.capacity = std::max<std::int64_t>(1, unbounded.peak_reserved / 10 * static_cast<std::int64_t>(1 + pick(12)));
    const std::string what = fmt::format("draw {}: {} on {} GPUs at {} tokens: {}", i, request.model, request.gpus,
                                         base.train.seq, describe_knobs(p));
    if (hold_counts(p, settings, pick(16), counts, what)) ++drawn;
  }
  EXPECT_GE(drawn, 12);
  // Both answers come up (a count's workspace too large for the cache it finds parts).
  EXPECT_GT(counts.alike, 0);
  EXPECT_GT(counts.apart, 0);
}

// Where max-context retries counts: Llama-3.1-8B on 8 H100s at 4M tokens, the finest count
// judging the coarser ones at the device's own capacity, over a spread of the configurations
// with tiles. Its replays skip the forward's repeated layers, and the counts it calls alike too.
TEST(ReservedReplay, AVariantCalledAlikeReplaysAlikeWhereMaxContextAsks) {
  ClusterRequest request;
  request.model = "llama-3.1-8b";
  request.gpus = 8;
  Plan base = resolve_cluster(request).value();
  base.train.seq = 4 * 1024 * 1024;
  std::vector<Plan> plans = search_space(base, all_techniques());
  std::erase_if(plans, [](const Plan& p) { return p.parallel.mlp_tiles < 2 || !p.parallel.checkpoint.any(); });
  ASSERT_FALSE(plans.empty());
  Counts counts;
  const std::size_t stride = std::max<std::size_t>(1, plans.size() / 6);
  for (std::size_t i = 0; i < plans.size(); i += stride) {
    const Plan& p = plans[i];
    // The finest count is the last its knob offers.
    hold_counts(p, allocator_settings(p), knob_candidates(KnobId::mlp_tiles, p, all_techniques(), {}).size() - 1, counts,
                "llama-3.1-8b on 8 GPUs at 4M tokens: " + describe_knobs(p));
  }
  EXPECT_GT(counts.alike_skipping, 0) << counts.alike << " alike, " << counts.apart << " apart";
}

}  // namespace
}  // namespace longctx
