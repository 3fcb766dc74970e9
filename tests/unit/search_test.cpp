// The search against brute force, and the max-context query's guarantees.
#include <gtest/gtest.h>

#include "longctx/planner/memory_model.h"
#include "longctx/planner/search.h"
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

}  // namespace
}  // namespace longctx
