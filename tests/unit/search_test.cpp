// The search against brute force, and the max-context query's guarantees.
#include <gtest/gtest.h>

#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "planner/core/units.h"
#include "planner/search/max_seq.h"
#include "planner/search/memory_model.h"
#include "planner/search/request.h"
#include "planner/search/search.h"
#include "planner/search/search_order.h"
#include "planner/graph/work_counts.h"
#include "test_plans.h"

namespace longctx {
namespace {

using testing::cpu_plan;

std::optional<Plan> brute_force(const Plan& base, const TechniqueSet& allowed) {
  std::optional<Plan> best;
  for (Plan p : search_space(base, allowed)) {
    p.prediction = predict(p);
    if (p.prediction.feasible && (!best || faster(p, *best))) best = p;
  }
  return best;
}

TEST(Search, FindsTheBruteForceOptimum) {
  int compared = 0;
  struct Space { const char* model; std::int64_t gpus, seq; };
  for (const Space& sp : {Space{"tiny-gqa", 2, 512}, Space{"tiny-odd", 4, 2048}, Space{"tiny-odd", 2, 512}, Space{"tiny-gqa", 4, 1024}})
        for (std::int64_t budget : {3LL << 20, 12LL << 20}) {
          const char* model = sp.model;
          const std::int64_t gpus = sp.gpus, seq = sp.seq;
          Plan base = cpu_plan(model, gpus, seq);
          base.cluster.device_budget_bytes = budget;
          base.cluster.host_budget_bytes_per_node = 64LL << 20;
          const auto expected = brute_force(base, all_techniques());
          const auto found = best_plan(base, all_techniques());
          ASSERT_EQ(expected.has_value(), found.ok()) << model << " " << gpus << " " << seq << " " << budget;
          if (!expected) continue;
          // Neither beats the other: equal speed (to the precision plans are ranked by) and memory.
          EXPECT_FALSE(faster(*expected, found->best)) << model << " gpus=" << gpus << " seq=" << seq << " budget=" << budget;
          EXPECT_FALSE(faster(found->best, *expected)) << model << " gpus=" << gpus << " seq=" << seq << " budget=" << budget;
          ++compared;
        }
  EXPECT_GE(compared, 6);
}

TEST(Search, ReturnedPlansReevaluateAsFeasible) {
  Plan base = cpu_plan("tiny-odd", 4, 4096);
  base.cluster.device_budget_bytes = 6LL << 20;
  auto r = best_plan(base, all_techniques());
  ASSERT_TRUE(r.ok()) << r.error().what();
  for (const Plan& p : std::vector<Plan>{r->best}) EXPECT_TRUE(predict(p).feasible);
  for (const Plan& p : r->runners_up) EXPECT_TRUE(predict(p).feasible);
  for (const Plan& p : r->pareto) EXPECT_TRUE(predict(p).feasible);
  // The Pareto front: each plan needs less memory than every faster one.
  for (std::size_t i = 1; i < r->pareto.size(); ++i)
    EXPECT_LT(r->pareto[i].prediction.peak_device_bytes, r->pareto[i - 1].prediction.peak_device_bytes);
}

// The runners-up are other plans than the best and each is listed once, also where many
// plans tie on speed (tile counts that cost the same) and the search evaluated some twice.
TEST(Search, RunnersUpAreDistinctAndNeverFasterThanTheBest) {
  int listed = 0;
  for (const bool measured : {false, true})
    for (const auto& [model, gpus, seq, budget] : {std::tuple{"tiny-bias", 2, 8192, 48LL << 20}, std::tuple{"tiny-gqa", 1, 8192, 64LL << 20},
                                                   std::tuple{"tiny-odd", 2, 4096, 24LL << 20}}) {
      Plan base = cpu_plan(model, gpus, seq);
      base.cluster.device_budget_bytes = budget;
      if (measured) {
        // Rates of the kind calibrate writes for two ranks of the development machine.
        MeasuredRates& m = base.cluster.hardware.measured;
        m.present = true;
        m.ranks = 2;
        m.matmul_fp32_flops = 9.4e10, m.matmul_bf16_flops = 2.1e11;
        m.attention_forward.points = {{8, 2e9}, {64, 1.5e10}};
        m.attention_backward.points = {{8, 2e9}, {64, 1.2e10}};
        m.memory_bytes_per_s = 8.9e10, m.op_overhead_s = 4.4e-6, m.copy_bytes_per_s = 4.6e10;
        m.collective_bytes_per_s = 5e8, m.collective_latency_s = 2e-4;
      }
      auto r = best_plan(base, all_techniques());
      ASSERT_TRUE(r.ok()) << model << ": " << r.error().what();
      for (std::size_t i = 0; i < r->runners_up.size(); ++i) {
        const Plan& a = r->runners_up[i];
        EXPECT_FALSE(a.parallel == r->best.parallel && a.train.micro_batch == r->best.train.micro_batch)
            << model << ": the best is among its runners-up";
        for (std::size_t j = i + 1; j < r->runners_up.size(); ++j)
          EXPECT_FALSE(a.parallel == r->runners_up[j].parallel && a.train.micro_batch == r->runners_up[j].train.micro_batch)
              << model << ": runner-up " << i << " listed again at " << j;
        // None faster to three digits. One as fast may need less memory: among equally fast
        // plans the search keeps the fewest tiles that fit, where faster() would take the
        // smaller (the 8-GPU answer for Llama-3.1-8B would go from 16 MLP tiles to 964, each a
        // launch the rounding hides); the user sees both.
        EXPECT_LE(rounded_speed(a.prediction.tokens_per_s), rounded_speed(r->best.prediction.tokens_per_s))
            << model << ": runner-up " << i << " is faster than the best";
        ++listed;
      }
    }
  EXPECT_GE(listed, 10);
}

// What a search answers, whole: its best plan, counts, runners-up and Pareto front, or the
// error it names.
std::string search_answer(const Plan& base) {
  const auto r = best_plan(base, all_techniques());
  if (!r.ok()) return r.error().message;
  return plan_to_json(r->best).dump() + search_summary_json(*r).dump();
}

// search_answer with this thread's search switch `allowed` set to `on`; `graphs`: the graphs
// of a whole step it built (a plan run, not judged).
std::string search_answer_with(bool& allowed, bool on, const Plan& base, std::int64_t& graphs) {
  allowed = on;
  const std::int64_t before = work_counts().whole_graphs;
  std::string a = search_answer(base);
  graphs = work_counts().whole_graphs - before;
  allowed = true;
  return a;
}

// A group of equally fast candidates searched as it lies, where the search finds its order
// cannot change the result, gives what faster()'s order gives: the same evaluations (their
// count), the same best plan, runners-up and front, and the same smallest peak where nothing
// fits. On CUDA, where a plan that does not fit has a peak that stops short, over budgets from
// nothing fitting to most plans fitting.
TEST(Search, GroupsSearchedInAnyOrderAnswerAsInOrder) {
  int compared = 0, fitted = 0, searched_otherwise = 0;
  for (const auto& [model, gpus, seq] : {std::tuple{"tiny-gqa", 2, 1024 * 1024}, std::tuple{"tiny-odd", 4, 2048 * 1024}})
    for (const double share : {0.01, 0.05, 0.2}) {
      Plan base = testing::gpu_plan(model, "h100-80gb", gpus, seq);
      base.cluster.device_budget_bytes = static_cast<std::int64_t>(share * double(base.cluster.device_budget_bytes));
      std::int64_t in_order_graphs = 0, any_order_graphs = 0;
      const std::string in_order = search_answer_with(search_detail::any_order_allowed(), false, base, in_order_graphs);
      const std::string any_order = search_answer_with(search_detail::any_order_allowed(), true, base, any_order_graphs);
      EXPECT_EQ(in_order, any_order) << model << " gpus=" << gpus << " seq=" << seq << " share=" << share;
      fitted += in_order.starts_with("{");
      searched_otherwise += any_order_graphs != in_order_graphs;
      ++compared;
    }
  EXPECT_GE(fitted, 2);
  EXPECT_LT(fitted, compared);
  EXPECT_GE(searched_otherwise, 1);  // some group was searched as it lies: other work, same answer
}

// Past a plan found, a group faster than it is searched as it lies too, where that cannot change
// the result: the same answer as faster()'s order on the stacks whose search space has such
// groups (longctx's own, ArcticTraining's tile counts, torchtitan's), and groups kept so on each.
TEST(Search, GroupsFasterThanThePlanFoundAnswerAsInOrder) {
  struct Case {
    StackKind stack;
    const char* model;
    std::int64_t seq;
    std::int64_t budget_gib;
  };
  const Case cases[] = {
      {StackKind::Longctx, "tiny-gqa", 256 * 1024, 2},       {StackKind::Longctx, "llama-3.2-1b", 256 * 1024, 12},
      {StackKind::Arctic, "tiny-odd", 1024 * 1024, 6},       {StackKind::Arctic, "tiny-gqa", 256 * 1024, 6},
      {StackKind::Torchtitan, "tiny-gqa", 256 * 1024, 6},
  };
  for (const Case& c : cases) {
    Plan base = testing::gpu_plan(c.model, "h100-80gb", 4, c.seq);
    base.train.stack = default_stack(c.stack);
    if (c.stack == StackKind::Arctic) base.train.grad_dtype = DType::BF16;  // DeepSpeed reduces in the parameters' dtype
    base.cluster.device_budget_bytes = c.budget_gib << 30;
    std::int64_t in_order_graphs = 0, any_order_graphs = 0;
    const std::string in_order = search_answer_with(search_detail::any_order_allowed(), false, base, in_order_graphs);
    const std::int64_t kept_before = work_counts().groups_unordered_past_a_plan;
    const std::string any_order = search_answer_with(search_detail::any_order_allowed(), true, base, any_order_graphs);
    const std::string what = fmt::format("{} {} seq={} budget={} GiB", to_string(c.stack), c.model, c.seq, c.budget_gib);
    EXPECT_TRUE(in_order.starts_with("{")) << what << ": " << in_order;
    EXPECT_EQ(in_order, any_order) << what;
    EXPECT_GE(work_counts().groups_unordered_past_a_plan - kept_before, 1) << what;
  }
}

// A choice whose most saving plans are judged by dominance (a smaller micro-batch of it did not
// fit: Evaluator::known_not_to_fit) or by their model states alone (states_bytes: unsharded
// Qwen3-8B over a share of an H100), and tile counts judged by their step's prefix
// (Evaluator::fits_as_allocated_when_run), give what running them gives: the same count, best plan,
// runners-up and front, and the same smallest peak where nothing fits; on every stack, over
// budgets (a share of an H100's) where nothing fits and where plans do.
TEST(Search, ChoicesJudgedByDominanceAnswerAsRun) {
  struct Case {
    StackKind stack;
    const char* model;
    std::int64_t seq;
    double share;
  };
  const Case cases[] = {
      {StackKind::Longctx, "qwen3-8b", 256 * 1024, 1.0},     {StackKind::Longctx, "qwen3-8b", 256 * 1024, 0.3},
      {StackKind::Longctx, "tiny-gqa", 4096 * 1024, 0.05},
      {StackKind::Arctic, "qwen3-8b", 256 * 1024, 0.3},      {StackKind::Arctic, "qwen3-8b", 256 * 1024, 0.05},
      {StackKind::Arctic, "tiny-gqa", 16384 * 1024, 0.3},    {StackKind::HF, "tiny-gqa", 4096 * 1024, 0.3},
      {StackKind::HF, "tiny-gqa", 4096 * 1024, 0.05},        {StackKind::Torchtitan, "tiny-gqa", 4096 * 1024, 0.3},
      {StackKind::Torchtitan, "tiny-gqa", 4096 * 1024, 0.05},
  };
  int fitted = 0, saved = 0;
  for (const Case& c : cases) {
    Plan base = testing::gpu_plan(c.model, "h100-80gb", 8, c.seq);
    base.train.stack = default_stack(c.stack);
    if (c.stack == StackKind::Arctic) base.train.grad_dtype = DType::BF16;  // DeepSpeed reduces in the parameters' dtype
    base.cluster.device_budget_bytes = static_cast<std::int64_t>(c.share * double(base.cluster.device_budget_bytes));
    std::int64_t run_graphs = 0, judged_graphs = 0;
    const std::string run = search_answer_with(search_detail::dominance_allowed(), false, base, run_graphs);
    const std::string judged = search_answer_with(search_detail::dominance_allowed(), true, base, judged_graphs);
    EXPECT_EQ(run, judged) << to_string(c.stack) << " " << c.model << " seq=" << c.seq << " share=" << c.share;
    fitted += run.starts_with("{");
    saved += judged_graphs < run_graphs;
  }
  EXPECT_EQ(fitted, 7);
  EXPECT_GE(saved, 2);
}

// Where no plan fits, the smallest peak named is the same whether the verdicts skip the replay
// of steps over the host's budget and the bounded plans are settled least bound first (stopping
// where no bound left can win), or every replay is run and every bound settled: the same
// message, over device-bound and host-bound searches on every stack, with fewer whole graphs.
TEST(Search, TheSmallestPeakOfANoFitIsSettledLeastBoundFirst) {
  struct Case {
    StackKind stack;
    const char* model;
    int gpus;
    std::int64_t seq;
    std::int64_t device_gib, host_gib;  // 0: the preset's
  };
  const Case cases[] = {
      {StackKind::Longctx, "llama-3.2-1b", 2, 64 * 1024, 8, 10},   // host-bound
      {StackKind::Longctx, "llama-3.2-1b", 2, 128 * 1024, 4, 0},   // device-bound
      {StackKind::Longctx, "llama-3.2-1b", 4, 256 * 1024, 5, 0},   // the smallest is the 23rd bound settled
      {StackKind::Arctic, "llama-3.2-1b", 2, 64 * 1024, 8, 10},    {StackKind::Arctic, "llama-3.2-1b", 2, 256 * 1024, 4, 0},
      {StackKind::HF, "llama-3.2-1b", 2, 128 * 1024, 4, 0},        {StackKind::Torchtitan, "tiny-gqa", 8, 8192 * 1024, 2, 0},
      {StackKind::Torchtitan, "llama-3.1-8b", 8, 64 * 1024, 12, 10},
  };
  int saved = 0, host_bound = 0;
  for (const Case& c : cases) {
    Plan base = testing::gpu_plan(c.model, "h100-80gb", c.gpus, c.seq);
    base.train.stack = default_stack(c.stack);
    if (c.stack == StackKind::Arctic) base.train.grad_dtype = DType::BF16;
    if (c.stack == StackKind::Torchtitan) base.train.grad_dtype = DType::FP32;
    base.cluster.device_budget_bytes = c.device_gib << 30;
    if (c.host_gib > 0) base.cluster.host_budget_bytes_per_node = c.host_gib << 30;
    const auto answer = [&](bool lazy, std::int64_t& graphs) {
      verdict_skips_host_over() = lazy;
      search_detail::least_bound_first() = lazy;
      const std::int64_t before = work_counts().whole_graphs;
      std::string a = search_answer(base);
      graphs = work_counts().whole_graphs - before;
      verdict_skips_host_over() = true;
      search_detail::least_bound_first() = true;
      return a;
    };
    std::int64_t every_graphs = 0, lazy_graphs = 0;
    const std::string every = answer(false, every_graphs);
    const std::string lazy = answer(true, lazy_graphs);
    const std::string what = fmt::format("{} {} on {} seq={}", to_string(c.stack), c.model, c.gpus, c.seq);
    EXPECT_NE(every.find("no plan fits"), std::string::npos) << what << ": the case must find no plan: " << every;
    EXPECT_EQ(every, lazy) << what;
    host_bound += every.find("host memory") != std::string::npos;
    saved += lazy_graphs < every_graphs;
  }
  EXPECT_GE(host_bound, 1);
  EXPECT_GE(saved, 2);
}

TEST(Search, NoFitNamesTheSmallestPeak) {
  Plan base = cpu_plan("tiny-gqa", 1, 4096);
  base.cluster.device_budget_bytes = 64 << 10;
  auto r = best_plan(base, all_techniques());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::NoFit);
  EXPECT_NE(r.error().message.find("smallest peak"), std::string::npos) << r.error().message;
}

TEST(Search, FixedKnobsOutsideTheAllowedTechniquesAreBadInput) {
  Plan base = cpu_plan("tiny-gqa", 2, 1024);
  Knobs k;
  k.ulysses = 2;
  auto r = best_plan(base, *parse_techniques("zero3"), k);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::BadInput);
  k.ulysses = 3;
  r = best_plan(base, all_techniques(), k);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "--ulysses");
}

// Any length plans: the layout pads it to a multiple of the Ulysses degree (of 2 x ring x
// Ulysses with a ring), the padding is in the step's shapes (so its bytes are counted) and in
// the plan file.
TEST(Search, AnyLengthIsPaddedToTheLayout) {
  for (std::int64_t seq : {1001, 1023, 4097}) {
    Plan base = cpu_plan("tiny-odd", 4, seq);
    base.cluster.device_budget_bytes = 8LL << 20;
    base.cluster.host_budget_bytes_per_node = 64LL << 20;
    auto r = best_plan(base, all_techniques());
    ASSERT_TRUE(r.ok()) << seq << ": " << r.error().what();
    const ParallelConfig& q = r->best.parallel;
    const std::int64_t u = q.ulysses, multiple = q.ring > 1 ? 2 * q.ring * u : u;
    EXPECT_EQ(r->best.train.seq, seq);
    EXPECT_EQ(padded_seq(seq, q) % multiple, 0);
    EXPECT_LT(padded_seq(seq, q) - seq, multiple);
    const nlohmann::json j = plan_to_json(r->best);
    EXPECT_EQ(j["train"]["padded_seq"], padded_seq(seq, q));
    EXPECT_EQ(j["train"]["padding_tokens"], padding_tokens(seq, q));
    // The padded tokens cost memory: the padded length's peak, not the unpadded one's.
    Plan padded = r->best;
    padded.train.seq = padded_seq(seq, q);
    EXPECT_EQ(predict(padded).peak_device_bytes, r->best.prediction.peak_device_bytes);
    auto back = plan_from_json(j);
    ASSERT_TRUE(back.ok()) << back.error().what();
    EXPECT_EQ(back->train.seq, seq);
  }
  // A written padding that is not the rule's is a stale or edited file.
  Plan p = cpu_plan("tiny-gqa", 2, 1001);
  p.parallel.ulysses = 2;
  nlohmann::json j = plan_to_json(p);
  EXPECT_EQ(j["train"]["padded_seq"], 1002);
  j["train"]["padded_seq"] = 1004;
  EXPECT_EQ(plan_from_json(j).error().field, "train.padded_seq");
}

// Tiles need not divide the tokens: ceil-sized, the last shorter; the footprint is the
// largest tile's, so uneven counts sit between their even neighbours.
TEST(Search, UnevenTilesAreValidAndPricedByTheLargestTile) {
  Plan p = cpu_plan("tiny-gqa", 1, 7168);
  for (int tiles : {3, 5, 7}) {
    p.parallel.mlp_tiles = tiles;
    p.parallel.loss_tiles = tiles;
    EXPECT_TRUE(validate(p.model, p.cluster.shape, p.train, p.parallel).ok()) << tiles;
  }
  const TileSplit three = tile_split(7168, 3);
  EXPECT_EQ(three.rows, 2390);
  EXPECT_EQ(three.count, 3);
  EXPECT_EQ(three.last, 7168 - 2 * 2390);
  const TileSplit six_of_ten = tile_split(10, 6);  // torch.chunk's rule: 5 tiles of 2
  EXPECT_EQ(six_of_ten.rows, 2);
  EXPECT_EQ(six_of_ten.count, 5);
  auto peak_at = [&](int mlp, int loss) {
    Plan q = p;
    q.parallel.mlp_tiles = mlp;
    q.parallel.loss_tiles = loss;
    return predict(q).peak_device_bytes;
  };
  EXPECT_LE(peak_at(4, 4), peak_at(3, 3));
  EXPECT_LE(peak_at(3, 3), peak_at(2, 2));
  EXPECT_LE(peak_at(8, 8), peak_at(5, 5));
  EXPECT_LE(peak_at(5, 5), peak_at(4, 4));
  p.parallel.mlp_tiles = 7169;  // more tiles than tokens: an empty tile
  EXPECT_EQ(validate(p.model, p.cluster.shape, p.train, p.parallel).error().field, "--mlp-tiles");
}

TEST(Search, TheJsonSaysWhenNoSearchRan) {
  EXPECT_EQ(no_search_json()["ran"], false);
  EXPECT_FALSE(no_search_json().contains("evaluated"));
  Plan base = cpu_plan("tiny-gqa", 2, 1024);
  auto r = best_plan(base, all_techniques());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(search_summary_json(*r)["ran"], true);
  EXPECT_GE(search_summary_json(*r)["evaluated"].get<int>(), 1);
}

std::int64_t max_tokens(Plan base, const TechniqueSet& t) {
  auto r = max_context(base, t, /*with_ladder=*/false);
  return r.ok() ? r->max_tokens : 0;
}

TEST(MaxContext, ItsPlanFitsAndTheNextLengthDoesNot) {
  for (const char* model : {"tiny-gqa", "tiny-odd"}) {
    Plan base = cpu_plan(model, 2, 0);
    base.cluster.device_budget_bytes = 8LL << 20;
    base.cluster.host_budget_bytes_per_node = 32LL << 20;
    auto r = max_context(base, all_techniques());
    ASSERT_TRUE(r.ok()) << r.error().what();
    EXPECT_TRUE(predict(r->plan).feasible);
    EXPECT_EQ(r->plan.train.seq, r->max_tokens);
    // One granule more: no configuration of the whole search space fits.
    Plan next = base;
    next.train.seq = r->max_tokens + r->granularity;
    int fits = 0;
    for (Plan p : search_space(next, all_techniques())) fits += predict(p).feasible;
    EXPECT_EQ(fits, 0) << model << ": " << next.train.seq << " tokens";
    // The ladder ends at the answer and never falls.
    ASSERT_FALSE(r->ladder.empty());
    EXPECT_EQ(r->ladder.back().max_tokens, r->max_tokens);
    for (std::size_t i = 1; i < r->ladder.size(); ++i) EXPECT_GE(r->ladder[i].max_tokens, r->ladder[i - 1].max_tokens);
  }
}

// Each rung of the ladder is what max-context answers with the rung's techniques, to the
// rung's granularity: that answer is no shorter, and shorter than one granule more (the
// headline refines below the grid where nothing is tiled; the rung says its grid). The last
// rung is the headline. On an H100, where the untiled rungs refine to the token.
TEST(MaxContext, EachRungIsTheAnswerWithItsTechniquesToItsGranularity) {
  int refined_past_the_grid = 0, last_refined = 0;
  for (const char* techniques : {"all", "zero3,ulysses,checkpoint"}) {
    ClusterRequest r;
    r.model = "llama-3.2-1b";
    r.gpus = 4;
    r.techniques = techniques;
    const auto whole = answer_max_context(r, /*with_ladder=*/true);
    ASSERT_TRUE(whole) << whole.error().what();
    ASSERT_GE(whole->ladder.size(), 3u);
    EXPECT_EQ(whole->ladder.back().max_tokens, whole->max_tokens) << techniques;
    EXPECT_EQ(whole->ladder.back().granularity, whole->granularity) << techniques;
    last_refined += whole->granularity == 1;
    for (const LadderRung& rung : whole->ladder) {
      ClusterRequest alone = r;
      alone.techniques = fmt::format("{}", fmt::join(rung.techniques, ","));
      const auto a = answer_max_context(alone, /*with_ladder=*/false);
      ASSERT_TRUE(a) << alone.techniques << ": " << a.error().what();
      ASSERT_GE(rung.granularity, 1) << alone.techniques;
      EXPECT_GE(a->max_tokens, rung.max_tokens) << alone.techniques;
      EXPECT_LT(a->max_tokens, rung.max_tokens + rung.granularity) << alone.techniques;
      refined_past_the_grid += a->max_tokens > rung.max_tokens;
    }
  }
  EXPECT_GE(refined_past_the_grid, 1);  // a rung said to its grid, which the answer alone refines
  EXPECT_EQ(last_refined, 1);           // the untiled ladder ends at the headline refined to the token
}

TEST(MaxContext, MonotoneInGpusBudgetAndTechniques) {
  Plan base = cpu_plan("tiny-odd", 1, 0);
  base.cluster.device_budget_bytes = 8LL << 20;
  base.cluster.host_budget_bytes_per_node = 1LL << 30;
  std::int64_t prev = 0;
  for (std::int64_t gpus : {1, 2, 4, 8}) {
    Plan p = base;
    p.cluster.shape = {1, gpus};
    const std::int64_t m = max_tokens(p, all_techniques());
    EXPECT_GE(m, prev) << gpus << " GPUs";
    prev = m;
  }
  prev = 0;
  for (std::int64_t mib : {4, 8, 16, 32}) {
    Plan p = base;
    p.cluster.device_budget_bytes = mib << 20;
    const std::int64_t m = max_tokens(p, all_techniques());
    EXPECT_GE(m, prev) << mib << " MiB";
    prev = m;
  }
  const std::int64_t all = max_tokens(base, all_techniques());
  for (const char* subset : {"zero3", "zero3,checkpoint", "checkpoint,tiled-mlp,tiled-loss", "ulysses,untied", "none"})
    EXPECT_LE(max_tokens(base, *parse_techniques(subset)), all) << subset;
}

// max-context's answer, whole (ladder, plan, runners-up, reasons), or the error it names;
// `graphs`: the whole step graphs it built.
std::string max_context_answer(const ClusterRequest& r, bool cut, std::int64_t& graphs) {
  floor_cuts().allowed = cut;
  const std::int64_t before = work_counts().whole_graphs;
  const auto a = answer_max_context(r, /*with_ladder=*/true);
  graphs = work_counts().whole_graphs - before;
  floor_cuts().allowed = true;
  return a.ok() ? max_context_json(*a).dump() : a.error().message;
}

// A configuration whose confirmation stops once its length is known to fall under the floor
// gives what confirming it to its length gives: the same ladder, answer, plan and reasons, on
// every stack, on CUDA (with and without expandable segments) and on the CPU.
TEST(MaxContext, ConfigurationsCutUnderTheFloorAnswerAsConfirmed) {
  struct Case {
    const char* stack;
    const char* model;
    const char* gpu;
    std::int64_t gpus;
    const char* budget;
    bool expandable;
  };
  const Case cases[] = {
      {"longctx", "tiny-gqa", "h100-80gb", 8, "1600MiB", false}, {"longctx", "tiny-odd", "h100-80gb", 4, "4GiB", false},
      {"longctx", "tiny-gqa", "h100-80gb", 2, "3GiB", true},     {"longctx", "tiny-gqa", "cpu", 2, "8MiB", false},
      {"arctic", "tiny-gqa", "h100-80gb", 8, "4GiB", false},     {"hf", "llama-3.2-1b", "h100-80gb", 2, "16GiB", false},
      {"torchtitan", "llama-3.1-8b", "h100-80gb", 8, "40GiB", false},
  };
  int fitted = 0, saved = 0;
  for (const Case& c : cases) {
    ClusterRequest r;
    r.stack = c.stack;
    r.model = c.model;
    r.gpu = c.gpu;
    r.gpus = c.gpus;
    r.budget = c.budget;
    if (std::string(c.gpu) == "cpu") r.host_mem = "32MiB";
    r.expandable_segments = c.expandable;
    std::int64_t confirmed_graphs = 0, cut_graphs = 0;
    const std::string confirmed = max_context_answer(r, false, confirmed_graphs);
    const std::string cut = max_context_answer(r, true, cut_graphs);
    EXPECT_EQ(confirmed, cut) << c.stack << " " << c.model << " on " << c.gpus << " " << c.gpu;
    fitted += confirmed.starts_with("{");
    saved += cut_graphs < confirmed_graphs;
  }
  EXPECT_EQ(fitted, 7);
  EXPECT_GE(saved, 3);
}

// The answer's configuration fits at no step of its grid between the answer and its longest
// length as allocated: the reserved walk down the grid galloped from 294,912 tokens over
// 229,376 (over) to 163,840 and bisected to 212,992, stepping over 245,760, which fits
// (torchtitan has no tiles, so the answer's plan is the configuration's at every length).
ClusterRequest on_8_h100s(const char* stack, const char* model) {
  ClusterRequest r;
  r.stack = stack;
  r.model = model;
  r.gpu = "h100-80gb";
  r.gpus = 8;
  return r;
}

TEST(MaxContext, TheAnswersConfigurationFitsAtNoLongerStepOfItsGrid) {
  const auto a = answer_max_context(on_8_h100s("torchtitan", "llama-3.1-8b"), /*with_ladder=*/false);
  ASSERT_TRUE(a.ok()) << a.error().message;
  const std::int64_t grid = 16384;  // the ring's 2 x 8 ranks x its padding, times the smallest tile
  EXPECT_GE(a->max_tokens, 245760);
  int over_as_reserved = 0;
  for (std::int64_t seq = (a->max_tokens / grid + 1) * grid;; seq += grid) {
    Plan p = a->plan;
    p.train.seq = seq;
    const Plan at = evaluate(p).plan;
    if (!fits_as_allocated(at)) break;
    EXPECT_FALSE(at.prediction.feasible) << seq << " tokens fit beyond the answer " << a->max_tokens;
    ++over_as_reserved;
  }
  EXPECT_GE(over_as_reserved, 1);  // a step the walk had to settle by the replay
}

// An answer without a ring is itself the longest without one: the layout line said 39,936 (the
// ringless search's grid answer) beside an answer of 40,216 without a ring.
TEST(MaxContext, ALayoutWithoutARingNamesTheAnswerAsTheLongestWithoutOne) {
  const auto a = answer_max_context(on_8_h100s("hf", "llama-3.1-8b"), /*with_ladder=*/false);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_EQ(a->plan.parallel.ring, 1);
  EXPECT_NE(a->layout.find(fmt::format("a ring reaches no further ({} tokens without one", format_count(a->max_tokens))),
            std::string::npos)
      << a->layout << " beside " << a->max_tokens;
}

// One search's answer, whole: its length, grid, binding and every configuration reaching it.
std::string max_seq_answer(const Plan& base, std::int64_t floor, bool cut) {
  floor_cuts().allowed = cut;
  BoundCache cache;
  const MaxSeq m = max_seq(base, all_techniques(), cache, floor);
  floor_cuts().allowed = true;
  nlohmann::json j = {{"tokens", m.tokens}, {"grid", m.grid}, {"binding", m.binding}};
  for (const MaxSeqCandidate& c : m.reaching)
    j["reaching"].push_back({{"tokens", c.tokens}, {"chunk", c.chunk}, {"plan", plan_to_json(c.coarse)}});
  return j.dump();
}

// A search whose floor is past every configuration's length (a rung that loses to the one
// before it) cuts those whose bound reaches the floor, finds nothing there, and passes again
// with their lengths confirmed: the answer of a search that confirms them at once.
TEST(MaxContext, ASearchShortOfItsFloorAnswersAsConfirmed) {
  int second_passes = 0;
  for (const auto& [model, gpus, share] : {std::tuple{"tiny-gqa", 8, 0.02}, std::tuple{"tiny-odd", 4, 0.05}}) {
    Plan base = testing::gpu_plan(model, "h100-80gb", gpus, 0);
    base.cluster.device_budget_bytes = static_cast<std::int64_t>(share * double(base.cluster.device_budget_bytes));
    const std::int64_t reached = nlohmann::json::parse(max_seq_answer(base, 0, true))["tokens"].get<std::int64_t>();
    ASSERT_GT(reached, 0) << model;
    for (const double past : {1.001, 1.01, 1.05}) {
      const auto floor = static_cast<std::int64_t>(past * double(reached));
      const std::int64_t before = floor_cuts().second_passes;
      const std::string cut = max_seq_answer(base, floor, true);
      second_passes += floor_cuts().second_passes > before;
      EXPECT_EQ(max_seq_answer(base, floor, false), cut) << model << " floor " << floor;
    }
  }
  EXPECT_GE(second_passes, 1);
}

}  // namespace
}  // namespace longctx
