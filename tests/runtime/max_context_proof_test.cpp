// The max-context answer, proven on the CPU virtual device: the planner's longest sequence S*
// runs within the device budget, and the next length, which the planner calls infeasible,
// fails with the virtual device's out-of-memory error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "planner/search/memory_model.h"
#include "planner/search/search.h"
#include "longctx/runtime/runner.h"

namespace longctx::runtime {
namespace {

// Every technique one rank can run (zero1 and zero2 shard over ranks; ulysses needs several).
TechniqueSet one_rank_techniques() {
  TechniqueSet s;
  for (Technique t : {Technique::Zero3, Technique::OffloadOptimizer, Technique::OffloadParams, Technique::Untied,
                      Technique::Checkpoint, Technique::OffloadCheckpoints, Technique::TiledMlp, Technique::TiledLoss})
    s.set(static_cast<std::size_t>(t));
  return s;
}

TEST(MaxContextProof, TheLongestPlanRunsWithinBudgetAndTheNextLengthRunsOutOfMemory) {
  Plan base;
  base.model = load_model("tiny-gqa").value();
  base.cluster.hardware = load_hardware("cpu").value();
  base.cluster.shape = {1, 1};
  base.cluster.device_budget_bytes = 8LL << 20;
  base.cluster.host_budget_bytes_per_node = 1LL << 30;
  base.train.dtype = DType::FP32;
  base.train.grad_dtype = DType::FP32;
  auto r = max_context(base, one_rank_techniques(), /*with_ladder=*/false);
  ASSERT_TRUE(r.ok()) << r.error().what();
  const Plan& at_max = r->plan;
  ASSERT_EQ(at_max.train.seq, r->max_tokens);
  ASSERT_TRUE(at_max.prediction.feasible);

  RunOptions o;
  o.steps = 2;
  o.enforce_budget = true;
  auto fits = run_plan(at_max, o);
  ASSERT_TRUE(fits.ok()) << r->max_tokens << " tokens: " << fits.error().what();
  EXPECT_LE(fits->peak_device, base.cluster.device_budget_bytes);
  EXPECT_LE(fits->peak_host, base.cluster.host_budget_bytes_per_node);

  // One granule more, with the same techniques at their most memory-saving: the thinnest tiles
  // the search uses (min(1024, hidden) tokens, rounded down to a power of two).
  Plan next = at_max;
  next.train.seq = r->max_tokens + r->granularity;
  std::int64_t tile = 1;
  while (tile * 2 <= std::min<std::int64_t>(1024, next.model.hidden)) tile *= 2;
  const std::int64_t n = next.train.micro_batch * next.train.seq;
  if (next.parallel.mlp_tiles > 1) next.parallel.mlp_tiles = static_cast<int>(n / tile);
  if (next.parallel.loss_tiles > 1) next.parallel.loss_tiles = static_cast<int>(n / tile);
  ASSERT_TRUE(validate(next.model, next.cluster.shape, next.train, next.parallel).ok());
  next.prediction = predict(next);
  ASSERT_FALSE(next.prediction.feasible) << next.train.seq << " tokens: the planner calls this plan feasible";

  auto fails = run_plan(next, o);
  ASSERT_FALSE(fails.ok()) << next.train.seq << " tokens ran within the budget: peak " << fails->peak_device;
  EXPECT_EQ(fails.error().kind, ErrorKind::Internal);
  EXPECT_NE(fails.error().message.find("out of memory on the CPU virtual device's device pool"), std::string::npos)
      << fails.error().what();
  std::printf("S* = %lld tokens ran with a peak of %lld bytes of %lld; %lld tokens: %s\n",
              static_cast<long long>(r->max_tokens), static_cast<long long>(fits->peak_device),
              static_cast<long long>(base.cluster.device_budget_bytes), static_cast<long long>(next.train.seq),
              fails.error().message.c_str());
}

}  // namespace
}  // namespace longctx::runtime
