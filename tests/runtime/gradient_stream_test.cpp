// An offloaded optimizer on one rank streams gradients: each parameter group's gradient is
// copied into the optimizer's persistent fp32 host buffers as soon as the group's backward
// ends (LlamaStep::stream_gradients_to, AdamW::gradient_to_host). Held here: the values are
// the plain step's, the device keeps none of them for the optimizer, and every phase
// measures what the planner's grad.to_host ops and grad.host buffers predict.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "longctx/runtime/adamw.h"
#include "longctx/runtime/llama_step.h"
#include "longctx/runtime/memory_meter.h"
#include "longctx/runtime/prediction.h"
#include "longctx/runtime/runner.h"
#include "reference_llama.h"

namespace longctx::runtime {
namespace {

using testing::with;

struct Case {
  std::string name, model;
  DType dtype;
  ParallelConfig parallel;  // offload_optimizer is set by the tests
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  const auto everything = with([](auto& p) {
    p.checkpoint = CheckpointPolicy::full();
    p.offload_checkpoints = true;
    p.sharding = Sharding::Zero3;
    p.offload_params = true;
    p.mlp_tiles = 4;
    p.loss_tiles = 4;
  });
  return {
      {"GqaPlainFp32", "tiny-gqa", DType::FP32, {}},
      {"GqaPlainBf16", "tiny-gqa", DType::BF16, {}},
      {"GqaEverythingBf16", "tiny-gqa", DType::BF16, everything},
      {"GqaOffloadedCheckpointsTilesBf16", "tiny-gqa", DType::BF16, with([](auto& p) {
         p.checkpoint = CheckpointPolicy::full();
         p.offload_checkpoints = true;
         p.mlp_tiles = 4;
         p.loss_tiles = 4;
       })},
      // Tied: the loss starts the embedding's gradient, its backward finishes it.
      {"OddTiedFp32", "tiny-odd", DType::FP32, with([](auto& p) { p.checkpoint = CheckpointPolicy::every_k(2); })},
      {"OddTiedLossTilesBf16", "tiny-odd", DType::BF16, with([](auto& p) { p.loss_tiles = 4; })},
      {"BiasEverythingFp32", "tiny-bias", DType::FP32, everything},
  };
}

Plan plan_of(const Case& c, bool offload_optimizer) {
  ParallelConfig p = c.parallel;
  p.offload_optimizer = offload_optimizer;
  Plan plan = testing::tiny_plan(c.model, /*seq=*/64, /*micro_batch=*/2, p);
  plan.train.dtype = c.dtype;
  plan.train.grad_dtype = c.dtype;
  return plan;
}

class GradientStream : public ::testing::TestWithParam<Case> {};

// The loss and every gradient equal the step that keeps its gradients on the device: the
// streamed gradient is the same gradient cast to fp32, bit for bit.
TEST_P(GradientStream, GivesThePlainStepsLossAndGradientsInTheHostPool) {
  const Case& c = GetParam();
  const Plan streamed_plan = plan_of(c, true), plain_plan = plan_of(c, false);
  ASSERT_TRUE(validate(streamed_plan.model, streamed_plan.cluster.shape, streamed_plan.train, streamed_plan.parallel).ok());
  auto meter = std::make_shared<MemoryMeter>(0, 0, torch::kCPU);
  MeterScope scope(meter);
  WeightPlacement where;
  where.dtype = c.dtype == DType::BF16 ? torch::kBFloat16 : torch::kFloat;
  where.layers_in_host_pool = c.parallel.offload_params;
  LlamaWeights w = init_weights(streamed_plan.model, /*seed=*/7, where);
  LlamaWeights ref = clone_weights(w);

  const auto [tokens, targets] = testing::random_batch(streamed_plan.model.vocab, 2, 64, /*seed=*/11);

  LlamaStep plain(plain_plan.model, plain_plan.parallel, 64, ref, torch::kCPU);
  const double want_loss = plain.forward_backward(tokens, targets);
  LlamaStep step(streamed_plan.model, streamed_plan.parallel, 64, w, torch::kCPU);
  AdamW optimizer(w.all(), AdamWOptions{}, /*offload=*/true, /*pinned=*/false);
  step.stream_gradients_to(&optimizer);
  ASSERT_TRUE(step.streams_gradients());
  ASSERT_FALSE(plain.streams_gradients());
  const std::int64_t device_before = meter->current(Pool::Device), host_before = meter->current(Pool::Host);
  const double loss = step.forward_backward(tokens, targets);
  EXPECT_EQ(loss, want_loss);

  const auto got = w.all(), want = ref.all();
  ASSERT_EQ(got.size(), want.size());
  std::int64_t elements = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].grad().defined()) << "parameter " << i;
    EXPECT_EQ(got[i].grad().scalar_type(), torch::kFloat) << "parameter " << i;
    EXPECT_TRUE(torch::equal(got[i].grad(), want[i].grad().to(torch::kFloat))) << "parameter " << i;
    elements += got[i].numel();
  }
  // Every gradient is in the optimizer's fp32 host buffers, allocated with it: the host pool
  // holds no more than before the step, nor does the device.
  EXPECT_GT(elements, 0);
  EXPECT_EQ(meter->current(Pool::Host), host_before);
  EXPECT_EQ(meter->current(Pool::Device), device_before);
  // The optimizer consumes them where they are and keeps its buffers for the next step.
  optimizer.step();
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_FALSE(got[i].grad().defined()) << "parameter " << i;
  EXPECT_EQ(meter->current(Pool::Host), host_before);
}

// A run measures the streaming the planner predicts: within 1% on every phase's device and
// host peak (the validation label's bound), and the optimizer phase starts with no gradient
// on the device.
TEST_P(GradientStream, EveryPhaseMeasuresThePlannersStreaming) {
  const Case& c = GetParam();
  // Parameter offload on one rank is a known gap of the validation grid on the device (the
  // copies of a streamed layer in backward); its host pool is held all the same.
  const bool device_held = !c.parallel.offload_params;
  const Plan plan = plan_of(c, true);
  const auto pred = predict_step(plan);
  auto run = run_plan(plan, {});
  ASSERT_TRUE(run.ok()) << run.error().what();
  std::map<std::string, const PhaseRecord*> measured;
  for (const auto& ph : run->steps[0].phases) measured[ph.name] = &ph;
  const auto within = [](std::int64_t got, std::int64_t want) {
    return std::abs(double(got - want)) <= 0.01 * double(std::max<std::int64_t>(want, 1));
  };
  int compared = 0;
  for (const auto& [name, predicted] : pred.phases) {
    const auto it = measured.find(name);
    ASSERT_NE(it, measured.end()) << name << ": predicted, never measured";
    const PhaseRecord& ph = *it->second;
    if (device_held) {
      EXPECT_TRUE(within(ph.peak_device, predicted.peak_device_bytes))
          << name << " device: measured " << ph.peak_device << ", predicted " << predicted.peak_device_bytes;
    }
    EXPECT_TRUE(within(ph.peak_host, predicted.peak_host_bytes))
        << name << " host: measured " << ph.peak_host << ", predicted " << predicted.peak_host_bytes;
    if (name == "optimizer") {
      EXPECT_EQ(ph.device_at_start, run->persistent_device);
    }
    ++compared;
  }
  EXPECT_GT(compared, 2 * plan.model.layers);
}

INSTANTIATE_TEST_SUITE_P(OneRank, GradientStream, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace longctx::runtime
