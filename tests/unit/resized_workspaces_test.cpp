// Graphs that differ only in workspace sizes (resized_workspaces.h), and what one reserved replay
// says of them (variants_alike, from its looks at the cache): a variant it calls alike has,
// replayed on its own, the same peak reserved, peak op, failed requests and first failed op. Held over plans
// drawn afresh each run at their search's MLP tile counts, under capacities from a tenth of the
// step's reserved peak to past it, as is a variant's replay from the script of the graph it
// resizes (SharedScript, replay_script.h); and the family's refusals over graphs written by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <random>

#include <fmt/format.h>

#include "planner/graph/replay_script.h"
#include "planner/graph/reserved_replay.h"
#include "planner/graph/resized_workspaces.h"
#include "planner/search/memory_model.h"
#include "planner/search/request.h"
#include "planner/search/search_space.h"

namespace longctx {
namespace {

constexpr std::int64_t MiB = 1024 * 1024;

// a (8 MiB) made by op0 and read by op1; op0 and op1 each with a workspace of their own.
// `change`: applied to each op (by index) before it is added.
StepGraph two_ops(std::int64_t workspace0, std::int64_t workspace1, std::int64_t a_bytes = 8 * MiB,
                  const std::function<void(int, OpSpec&)>& change = {}) {
  StepGraph g;
  const int a = g.add_tensor({{Name::kNone, "a"}, a_bytes, Category::Activations});
  OpSpec op0{{Name::kNone, "op0"}};
  op0.outputs = {a};
  op0.workspace_bytes = workspace0;
  if (change) change(0, op0);
  g.add_op(op0);
  OpSpec op1{{Name::kNone, "op1"}};
  op1.inputs = {a};
  op1.workspace_bytes = workspace1;
  if (change) change(1, op1);
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
  const std::optional<ResizedWorkspaces> to_s = family.resized(WorkspaceFamily::kBase, *s);
  ASSERT_TRUE(to_s);
  EXPECT_TRUE(to_s->sizes.empty());
  const std::optional<ResizedWorkspaces> to_r = family.resized(WorkspaceFamily::kBase, *r);
  ASSERT_TRUE(to_r);
  EXPECT_EQ(to_r->sizes, (std::vector<std::pair<std::int64_t, std::int64_t>>{{6 * MiB, 10 * MiB}}));
  EXPECT_EQ(to_r->resized(6 * MiB), 10 * MiB);
  EXPECT_FALSE(to_r->resized(4 * MiB));
  // Between members, read off their sizes.
  const std::optional<ResizedWorkspaces> back = family.resized(*r, *s);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->sizes, (std::vector<std::pair<std::int64_t, std::int64_t>>{{10 * MiB, 6 * MiB}}));
  const std::optional<ResizedWorkspaces> to_base = family.resized(*r, WorkspaceFamily::kBase);
  ASSERT_TRUE(to_base);
  EXPECT_EQ(to_base->sizes, back->sizes);
}

TEST(WorkspaceFamily, RefusesGraphsThatAskOtherwise) {
  const StepGraph base = two_ops(4 * MiB, 6 * MiB);
  WorkspaceFamily family(base);
  EXPECT_FALSE(family.add(two_ops(4 * MiB, 6 * MiB, 9 * MiB)));  // a tensor's bytes
  EXPECT_FALSE(family.add(two_ops(0, 6 * MiB)));                 // a workspace gone
  StepGraph longer = two_ops(4 * MiB, 6 * MiB);
  OpSpec op2{{Name::kNone, "op2"}};
  longer.add_op(op2);
  longer.finalize();
  EXPECT_FALSE(family.add(longer));  // an op more
  // Each thing the allocator's requests read of an op or a tensor (allocator_events.cpp),
  // changed alone.
  const std::vector<std::pair<const char*, std::function<void(int, OpSpec&)>>> op_changes = {
      {"an op's stream", [](int k, OpSpec& op) { op.stream = k; }},
      {"an op's workspace sequence", [](int k, OpSpec& op) { if (k == 1) op.workspace_sequence = {6 * MiB, -1}; }},
      {"an op's inputs", [](int k, OpSpec& op) { if (k == 1) op.inputs = {0, 0}; }},
  };
  for (const auto& [what, change] : op_changes) EXPECT_FALSE(family.add(two_ops(4 * MiB, 6 * MiB, 8 * MiB, change))) << what;
  const std::vector<std::pair<const char*, std::function<void(TensorSpec&)>>> tensor_changes = {
      {"a tensor's place", [](TensorSpec& t) { t.place = Place::Host; }},
      {"a tensor's persistence", [](TensorSpec& t) { t.persistent = true; }},
      {"a tensor's first step op", [](TensorSpec& t) { t.first_step_op = 1; }},
      {"a tensor's last reader", [](TensorSpec& t) { t.last_reader = 0; }},
  };
  for (const auto& [what, change] : tensor_changes) {
    StepGraph changed = two_ops(4 * MiB, 6 * MiB);
    change(changed.tensor(0));
    EXPECT_FALSE(family.add(changed)) << what;
  }
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

// The looks of a replay of two_ops: op1's 6 MiB workspace finds the 12 MiB left of a's 20 MiB
// segment in both steps, so a variant asking 5 MiB there goes alike and one asking 13 MiB (14
// rounded) does not. Where best fit may refuse a block (max_split_size set) a look tells
// nothing: no variant is called alike.
TEST(ReservedReplay, LooksCallAlikeWhatTheCacheServesAtBothSizes) {
  const StepGraph base = two_ops(4 * MiB, 6 * MiB);
  AllocatorSettings settings;
  const ReservedReplay r = replay_reserved(base, settings, {.look_at_requests = true});
  const ResizedWorkspaces smaller{{{6 * MiB, 5 * MiB}}}, larger{{{6 * MiB, 13 * MiB}}};
  EXPECT_EQ(variants_alike(r.looks, std::span(&smaller, 1), settings), 1u);
  EXPECT_EQ(variants_alike(r.looks, std::span(&larger, 1), settings), 0u);
  const std::vector<ResizedWorkspaces> both = {larger, smaller};
  EXPECT_EQ(variants_alike(r.looks, both, settings), 2u);
  settings.max_split_size = 20 * MiB;
  EXPECT_EQ(variants_alike(r.looks, std::span(&smaller, 1), settings), 0u);
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
  int replays = 0, alike = 0, apart = 0, alike_skipping = 0, shared = 0;
};

// Plan p built at every MLP tile count its knob offers, as max-context retries them, those
// whose steps differ from the finest count's only in workspace sizes (the family kept on the
// finest, as max-context keeps it; an untiled MLP is no member). The count `from` (an index
// into those, taken modulo their number) replays under `settings`, keeping its looks at the
// cache, stopping at the first failure or not, skipping repeats or not, and each other count
// its looks call alike (member to member where `from` is not the finest) is replayed on its
// own. Returns false where there are fewer than two such counts.
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
  const std::size_t finest = graphs.size() - 1;
  WorkspaceFamily family(graphs[finest]);
  std::vector<int> member(graphs.size(), WorkspaceFamily::kBase);
  std::vector<std::size_t> in_family = {finest};
  for (std::size_t g = 0; g < finest; ++g)
    if (const std::optional<int> m = family.add(graphs[g])) {
      member[g] = *m;
      in_family.push_back(g);
    }
  if (in_family.size() < 2) return false;
  from = in_family[from % in_family.size()];
  std::vector<ResizedWorkspaces> variants;
  std::vector<std::size_t> of;  // variants[v] is graphs[of[v]]
  for (const std::size_t g : in_family)
    if (g != from)
      if (auto v = family.resized(member[from], member[g])) {
        variants.push_back(std::move(*v));
        of.push_back(g);
      }
  if (variants.empty()) return false;
  // Every count of the family replayed from one script written for the finest (SharedScript),
  // the finest first as max-context replays them, each stretch cut where the count's own
  // allocated peak would be (a count's replay may read items another wrote past its own cuts),
  // held to its replay from a script of its own: the same figures, and without skipping, the
  // same looks at the cache before every request.
  for (const bool skip : {true, false}) {
    SharedScript shared(graphs[finest]);
    for (const std::size_t g : in_family) {
      const std::optional<ResizedWorkspaces> v = family.resized(WorkspaceFamily::kBase, member[g]);
      if (!v) continue;
      const ReplayOptions::ScriptFrom script{&shared, *v};
      const int peak_op = static_cast<int>((from * 7919 + g * 104729) % graphs[g].ops().size());
      const ReplayOptions own{.stop_at_failure = skip, .skip_repeats = skip, .allocated_peak_op = peak_op, .look_at_requests = true};
      ReplayOptions read = own;
      read.script_from = &script;
      const ReservedReplay a = replay_reserved(graphs[g], settings, read), b = replay_reserved(graphs[g], settings, own);
      const std::string at = what + fmt::format(", capacity {}{}, {} tiles from the {}'s script{}", settings.capacity,
                                                settings.expandable_segments ? " expandable" : "",
                                                plans[g].parallel.mlp_tiles, plans[finest].parallel.mlp_tiles,
                                                skip ? ", stopping and skipping" : "");
      expect_alike(a, b, at);
      EXPECT_EQ(a.peak_reserved, b.peak_reserved) << at;
      if (!skip) {
        EXPECT_EQ(a.looks.size(), b.looks.size()) << at;
        std::size_t k = 0;
        while (k < std::min(a.looks.size(), b.looks.size()) && a.looks[k].bytes == b.looks[k].bytes &&
               a.looks[k].cache.largest_small == b.looks[k].cache.largest_small &&
               a.looks[k].cache.largest_large == b.looks[k].cache.largest_large)
          ++k;
        EXPECT_EQ(k, std::min(a.looks.size(), b.looks.size())) << at << ": the first look that differs";
      }
      ++counts.shared;
    }
  }
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
  EXPECT_GE(counts.shared, 2 * 2 * drawn);  // every count at least twice: the finest and one other
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
    EXPECT_TRUE(hold_counts(p, allocator_settings(p), knob_candidates(KnobId::mlp_tiles, p, all_techniques(), {}).size() - 1,
                            counts, "llama-3.1-8b on 8 GPUs at 4M tokens: " + describe_knobs(p)));
  }
  EXPECT_GT(counts.alike_skipping, 0) << counts.alike << " alike, " << counts.apart << " apart";
}

}  // namespace
}  // namespace longctx
