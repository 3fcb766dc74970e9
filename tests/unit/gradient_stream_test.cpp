// An offloaded optimizer on one rank: each parameter group's gradient leaves the device as
// soon as backward finishes it (grad.to_host among the group's backward ops), so the device
// never holds more gradient than the group being computed, plus a tied embedding's, which
// the loss starts and the embedding's backward finishes.
#include <gtest/gtest.h>

#include <algorithm>

#include "planner/search/memory_model.h"
#include "test_plans.h"

namespace longctx {
namespace {

using testing::cpu_plan;

struct GradFigures {
  std::int64_t device_max = 0;      // the most gradient bytes live on the device during any op
  std::int64_t host_total = 0;      // bytes of every grad.host tensor
  std::int64_t group_bound = 0;     // the largest group's gradient, plus a tied embedding's
  std::int64_t before_optimizer = 0;  // gradient bytes on the device while the first optimizer op runs
};

GradFigures grad_figures(const Plan& p) {
  const Evaluation e = evaluate(p);
  GradFigures f;
  const auto grads = static_cast<std::size_t>(Category::Grads);
  for (std::size_t i = 0; i < e.sim.per_op.size(); ++i) {
    const std::int64_t live = e.sim.per_op[i].device_by_category_during[grads];
    f.device_max = std::max(f.device_max, live);
    if (f.before_optimizer == 0 && e.graph.op(static_cast<int>(i)).phase == Phase::Optimizer)
      f.before_optimizer = live + 1;  // +1: found, even at zero
  }
  f.before_optimizer -= 1;
  for (const auto& t : e.graph.tensors())
    if (t.category == Category::Grads && t.place == Place::Host) f.host_total += t.bytes;
  // The groups (footprint::param_sizes): a layer, the embedding, the head (final norm and
  // an untied output projection).
  const ModelConfig& m = p.model;
  const std::int64_t g = bytes_of(p.train.grad_dtype);
  f.group_bound = g * std::max({m.params_per_layer(), m.embedding_params(), m.hidden + m.output_params()});
  if (m.tie_embeddings) f.group_bound += g * m.embedding_params();
  return f;
}

TEST(GradientStream, OneRankHoldsAtMostOneGroupsGradientOnTheDevice) {
  for (const char* model : {"tiny-gqa", "tiny-odd", "tiny-bias"})
    for (auto sharding : {Sharding::None, Sharding::Zero3})
      for (bool offload_params : {false, true}) {
        if (offload_params && sharding != Sharding::Zero3) continue;
        Plan p = cpu_plan(model, 1, 256);
        p.train.dtype = DType::BF16;
        p.train.grad_dtype = DType::BF16;  // as the virtual device computes them
        p.parallel.sharding = sharding;
        p.parallel.offload_params = offload_params;
        p.parallel.checkpoint = CheckpointPolicy::full();
        p.parallel.offload_optimizer = true;
        const std::string what = std::string(model) + " " + to_string(sharding) + (offload_params ? " +params" : "");
        const GradFigures streamed = grad_figures(p);
        EXPECT_LE(streamed.device_max, streamed.group_bound) << what;
        EXPECT_EQ(streamed.before_optimizer, 0) << what;
        // Every gradient reaches the host in fp32.
        EXPECT_EQ(streamed.host_total, 4 * p.model.total_params()) << what;
        // Not offloaded, every gradient is on the device when the optimizer starts: more than
        // one group's, so the bound above is one the step could break.
        p.parallel.offload_optimizer = false;
        const GradFigures kept = grad_figures(p);
        EXPECT_EQ(kept.before_optimizer, 2 * p.model.total_params()) << what;
        EXPECT_GT(kept.device_max, streamed.group_bound) << what;
      }
}

}  // namespace
}  // namespace longctx
