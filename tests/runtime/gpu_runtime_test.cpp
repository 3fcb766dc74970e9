// The runtime on CUDA (bf16): each technique's loss matches the CPU fp32 run of the same
// seed within bf16 tolerance, and the caching allocator's peaks are measured. Skipped with
// the reason when no GPU is visible.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "longctx/runtime/build_info.h"
#include "longctx/runtime/runner.h"
#include "reference_llama.h"

namespace longctx::runtime {
namespace {

struct GpuCase {
  std::string name;
  ParallelConfig p;
};
void PrintTo(const GpuCase& c, std::ostream* os) { *os << c.name; }

std::vector<GpuCase> gpu_cases() {
  auto with = [](auto f) {
    ParallelConfig p;
    f(p);
    return p;
  };
  return {{"Plain", {}},
          {"CheckpointFull", with([](auto& p) { p.checkpoint = CheckpointPolicy::full(); })},
          {"OffloadCheckpoints", with([](auto& p) {
             p.checkpoint = CheckpointPolicy::full();
             p.offload_checkpoints = true;
           })},
          {"MlpTiles", with([](auto& p) { p.mlp_tiles = 4; })},
          {"LossTiles", with([](auto& p) { p.loss_tiles = 4; })},
          {"HeadChunk1", with([](auto& p) { p.head_chunk = 1; })},
          {"OffloadOptimizer", with([](auto& p) { p.offload_optimizer = true; })},
          {"OffloadParams", with([](auto& p) {
             p.sharding = Sharding::Zero3;
             p.offload_params = true;
           })}};
}

class GpuRuntime : public ::testing::TestWithParam<GpuCase> {
 protected:
  void SetUp() override {
    const auto info = build_info();
    if (info.gpus_visible == 0) GTEST_SKIP() << "no GPU visible: " << info.gpu_absent_reason;
  }
};

TEST_P(GpuRuntime, LossMatchesTheCpuRunAndPeaksAreMeasured) {
  auto plan = testing::tiny_plan("tiny-gqa", 256, 2, GetParam().p);
  RunOptions cpu;
  cpu.steps = 2;
  auto reference = run_plan(plan, cpu);
  ASSERT_TRUE(reference.ok()) << reference.error().what();

  plan.train.dtype = DType::BF16;
  RunOptions cuda = cpu;
  cuda.device = "cuda";
  auto r = run_plan(plan, cuda);
  ASSERT_TRUE(r.ok()) << r.error().what();
  for (int i = 0; i < 2; ++i)
    EXPECT_NEAR(r->steps[i].loss, reference->steps[i].loss, 3e-2 * reference->steps[i].loss) << "step " << i;
  EXPECT_GT(r->peak_device, 0);
  EXPECT_GE(r->peak_device_reserved, r->peak_device);
  if (GetParam().p.offload_checkpoints || GetParam().p.offload_optimizer || GetParam().p.offload_params) {
    EXPECT_GT(r->peak_host, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Techniques, GpuRuntime, ::testing::ValuesIn(gpu_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace longctx::runtime
