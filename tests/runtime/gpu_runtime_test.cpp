// The runtime on CUDA (bf16), every item of docs/runtime.md's "CUDA assumptions":
//
//   one GPU   each technique's loss matches the CPU fp32 run of the same seed within bf16
//             tolerance; the caching allocator's allocated peak of each phase matches the
//             planner's; the persistent state is read from the allocator; pinned host
//             memory is counted as held.
//   two GPUs  each distributed technique over NCCL, through the launcher (`longctx run
//             --nproc 2 --device cuda`): every rank on its own GPU, losses equal to the
//             same plan's two-rank CPU run (Gloo) within bf16 tolerance.
//
// Skipped, with the reason, where fewer GPUs are visible than a test needs.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cuda_runtime_api.h>

#include "cli_fixture.h"
#include "longctx/runtime/attention.h"
#include "longctx/runtime/build_info.h"
#include "longctx/runtime/prediction.h"
#include "longctx/runtime/runner.h"
#include "reference_llama.h"

namespace longctx::runtime {
namespace {

struct GpuCase {
  std::string name, model;
  ParallelConfig p;
};
void PrintTo(const GpuCase& c, std::ostream* os) { *os << c.name; }

ParallelConfig with(std::function<void(ParallelConfig&)> f) {
  ParallelConfig p;
  f(p);
  return p;
}

std::vector<GpuCase> gpu_cases() {
  std::vector<GpuCase> c;
  // tiny-odd: head_dim 12, padded to 16 for the flash kernel; tied embeddings, qk norm.
  for (std::string m : {"tiny-gqa", "tiny-odd"}) {
    const std::string t = m == "tiny-gqa" ? "Gqa" : "Odd";
    c.push_back({t + "Plain", m, {}});
    c.push_back({t + "CheckpointFull", m, with([](auto& p) { p.checkpoint = CheckpointPolicy::full(); })});
    // The side stream, its events and pinned host memory.
    c.push_back({t + "OffloadCheckpoints", m, with([](auto& p) {
                   p.checkpoint = CheckpointPolicy::full();
                   p.offload_checkpoints = true;
                 })});
    c.push_back({t + "MlpTiles", m, with([](auto& p) { p.mlp_tiles = 4; })});
    c.push_back({t + "LossTiles", m, with([](auto& p) { p.loss_tiles = 4; })});
    // Micro-batch 2 with a chunk below the heads: each stage's log-sum-exp must be dense.
    c.push_back({t + "HeadChunk1", m, with([](auto& p) { p.head_chunk = 1; })});
    c.push_back({t + "OffloadOptimizer", m, with([](auto& p) { p.offload_optimizer = true; })});
    c.push_back({t + "OffloadParams", m, with([](auto& p) {
                   p.sharding = Sharding::Zero3;
                   p.offload_params = true;
                 })});
  }
  return c;
}

int visible_gpus() { return build_info().gpus_visible; }

class GpuRuntime : public ::testing::TestWithParam<GpuCase> {
 protected:
  void SetUp() override {
    const auto info = build_info();
    if (info.gpus_visible == 0) GTEST_SKIP() << "no GPU visible: " << info.gpu_absent_reason;
  }
};

constexpr double kBf16LossTolerance = 3e-2;  // relative, against the fp32 CPU run

TEST_P(GpuRuntime, LossMatchesTheCpuRun) {
  auto plan = testing::tiny_plan(GetParam().model, 256, 2, GetParam().p);
  RunOptions cpu;
  cpu.steps = 2;
  auto reference = run_plan(plan, cpu);
  ASSERT_TRUE(reference.ok()) << reference.error().what();

  plan.train.dtype = plan.train.grad_dtype = DType::BF16;
  RunOptions cuda = cpu;
  cuda.device = "cuda";
  auto r = run_plan(plan, cuda);
  ASSERT_TRUE(r.ok()) << r.error().what();
  EXPECT_EQ(r->device, "cuda:0");
  for (int i = 0; i < 2; ++i)
    EXPECT_NEAR(r->steps[i].loss, reference->steps[i].loss, kBf16LossTolerance * reference->steps[i].loss)
        << "step " << i;
  // Read from the caching allocator after setup, not left at its initial 0.
  EXPECT_GT(r->persistent_device, 0);
  EXPECT_GT(r->peak_device, r->persistent_device);
  EXPECT_GE(r->peak_device_reserved, r->peak_device);
  if (GetParam().p.offload_checkpoints || GetParam().p.offload_optimizer || GetParam().p.offload_params) {
    EXPECT_GT(r->peak_host, 0);
  }
}

// What the caching allocator holds beyond the planner's tensors, cuBLAS's workspaces being
// among them (Hardware::cublas_workspace_bytes): small blocks the inventory does not list,
// measured at 0.5 to 1 MiB on an H100 (docs/validation-gpu.md), and 1% for the kernels' index
// buffers rounded as the planner rounds them. A tolerance, not a fit: every entry of the
// inventory of these plans is 2 MiB or more.
constexpr std::int64_t kAllocatorScratch = 4LL << 20;
constexpr double kPhaseTolerance = 0.01;

TEST_P(GpuRuntime, EachPhasesAllocatedPeakMatchesThePrediction) {
  // Long enough that the plan's tensors dominate the allocator's fixed scratch.
  auto plan = testing::tiny_plan(GetParam().model, 32768, 2, GetParam().p, 60LL << 30, 60LL << 30);
  if (plan.model.head_dim % kCudaFlashHeadDimMultiple != 0)
    GTEST_SKIP() << "head_dim " << plan.model.head_dim << " is padded to a multiple of " << kCudaFlashHeadDimMultiple
                 << " for the CUDA flash kernels (attention.cpp, pad_head_dim); the planner does not model the padded "
                    "copies (docs/validation-gpu.md)";
  plan.train.dtype = plan.train.grad_dtype = DType::BF16;
  plan.cluster.hardware = load_hardware("h100-80gb").value();
  const PredictedStep predicted = predict_step(plan);
  RunOptions cuda;
  cuda.device = "cuda";
  cuda.steps = 2;
  auto r = run_plan(plan, cuda);
  ASSERT_TRUE(r.ok()) << r.error().what();
  int compared = 0;
  for (const auto& phase : r->steps.back().phases) {
    auto it = predicted.phases.find(phase.name);
    if (it == predicted.phases.end()) continue;
    const std::int64_t want = it->second.peak_device_bytes;
    EXPECT_NEAR(static_cast<double>(phase.peak_device), static_cast<double>(want),
                kPhaseTolerance * static_cast<double>(want) + static_cast<double>(kAllocatorScratch))
        << "phase " << phase.name;
    ++compared;
  }
  EXPECT_GT(compared, 4);
  // Pinned host memory is counted as the power-of-two block the caching host allocator
  // holds: never below the planner's requested bytes.
  if (GetParam().p.offload_checkpoints || GetParam().p.offload_optimizer || GetParam().p.offload_params) {
    EXPECT_GE(r->peak_host, predicted.totals.peak_host_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(Techniques, GpuRuntime, ::testing::ValuesIn(gpu_cases()),
                         [](const auto& info) { return info.param.name; });

// A real model's step: Llama-3.2-1B, its 128K vocabulary and tied embedding (the CUDA
// embedding backward's partial segments), at lengths where activations, gradients and the
// optimizer's state are gigabytes: the 16K step reserves 70 GiB on an H100.
class GpuRealModel : public testing::CliTest {
 protected:
  static constexpr std::size_t kFreeNeeded = 72ULL << 30;
  void SetUp() override {
    testing::CliTest::SetUp();
    if (visible_gpus() == 0) GTEST_SKIP() << "no GPU visible: " << build_info().gpu_absent_reason;
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess || free < kFreeNeeded)
      GTEST_SKIP() << "needs " << (kFreeNeeded >> 30) << " GiB free on the GPU, " << (free >> 30) << " GiB free";
  }
  void expect_every_phase_predicted(const std::string& plan_args) {
    const std::string plan = path("plan.json");
    auto p = run_cli("plan --model llama-3.2-1b --gpus 1 --no-search -o " + plan + " " + plan_args);
    ASSERT_EQ(p.status, 0) << p.out << p.err;
    auto o = run_cli("run --plan " + plan + " --steps 2 --json --device cuda");
    ASSERT_EQ(o.status, 0) << o.out << o.err;
    const auto r = nlohmann::json::parse(o.out);
    int compared = 0;
    for (const auto& phase : r["measured"]["phases"]) {
      if (!phase.contains("predicted_peak_device_bytes")) continue;
      const double want = phase["predicted_peak_device_bytes"].get<double>();
      EXPECT_NEAR(phase["peak_device_bytes"].get<double>(), want, 0.005 * want + double(kAllocatorScratch))
          << "phase " << phase["name"].get<std::string>();
      ++compared;
    }
    EXPECT_GT(compared, 30);
  }
};

TEST_F(GpuRealModel, Llama1bPlainStepAt16K) { expect_every_phase_predicted("--seq 16K"); }

TEST_F(GpuRealModel, Llama1bCheckpointedTiledHeadChunkedStepAt64K) {
  expect_every_phase_predicted("--seq 64K --checkpoint full --mlp-tiles 4 --loss-tiles 8 --head-chunk 8");
}

// ---- two GPUs over NCCL -----------------------------------------------------------------

std::vector<GpuCase> nccl_cases() {
  auto sp = [](std::function<void(ParallelConfig&)> f) {
    ParallelConfig p;
    p.ulysses = 2;
    if (f) f(p);
    return p;
  };
  return {
      {"Ulysses2", "tiny-gqa", sp({})},
      {"Ulysses2HeadChunk1", "tiny-gqa", sp([](auto& p) { p.head_chunk = 1; })},
      {"OddUlysses2HeadChunk1", "tiny-odd", sp([](auto& p) { p.head_chunk = 1; })},
      {"DataParallel2", "tiny-gqa", with([](auto& p) { p.ulysses = 1; })},
      // Ring attention over NCCL's coalesced send/recv (ring_attention.cpp, start_hop).
      {"Ring2", "tiny-gqa", with([](auto& p) {
         p.ulysses = 1;
         p.ring = 2;
       })},
      {"OddRing2Checkpointed", "tiny-odd", with([](auto& p) {
         p.ulysses = 1;
         p.ring = 2;
         p.checkpoint = CheckpointPolicy::full();
       })},
      {"Zero1", "tiny-gqa", with([](auto& p) { p.sharding = Sharding::Zero1; })},
      {"Zero2Ulysses2", "tiny-gqa", sp([](auto& p) { p.sharding = Sharding::Zero2; })},
      {"Zero3Ulysses2", "tiny-gqa", sp([](auto& p) { p.sharding = Sharding::Zero3; })},
      // Host shards, gradients from the reduce-scatter on the GPU, optimizer state there.
      {"Zero3OffloadParams", "tiny-gqa", sp([](auto& p) {
         p.sharding = Sharding::Zero3;
         p.offload_params = true;
       })},
      {"Zero3OffloadOptimizer", "tiny-gqa", sp([](auto& p) {
         p.sharding = Sharding::Zero3;
         p.offload_optimizer = true;
       })},
      {"Zero3OffloadEverything", "tiny-odd", sp([](auto& p) {
         p.sharding = Sharding::Zero3;
         p.offload_params = true;
         p.offload_optimizer = true;
         p.checkpoint = CheckpointPolicy::full();
         p.offload_checkpoints = true;
       })},
  };
}

class GpuNccl : public testing::CliTest, public ::testing::WithParamInterface<GpuCase> {
 protected:
  void SetUp() override {
    testing::CliTest::SetUp();
    const int gpus = visible_gpus();
    if (gpus < 2) GTEST_SKIP() << "two GPUs needed for NCCL, " << gpus << " visible";
  }
  nlohmann::json run_ranks(const Plan& plan, const std::string& name, const std::string& device) {
    const auto file = write(plan, name + ".json");
    auto o = run_cli("run --plan " + file + " --nproc 2 --steps 3 --json --device " + device);
    EXPECT_EQ(o.status, 0) << o.out << o.err;
    return o.status == 0 ? nlohmann::json::parse(o.out) : nlohmann::json();
  }
};

TEST_P(GpuNccl, EachRankOnItsOwnGpuTrainsAsTheCpuRanks) {
  auto plan = testing::tiny_plan(GetParam().model, 256, 2, GetParam().p);
  plan.cluster.shape = {1, 2};
  const auto cpu = run_ranks(plan, "cpu", "cpu");
  plan.train.dtype = plan.train.grad_dtype = DType::BF16;
  const auto gpu = run_ranks(plan, "gpu", "cuda");
  ASSERT_FALSE(cpu.is_null());
  ASSERT_FALSE(gpu.is_null());
  ASSERT_EQ(gpu["ranks"].size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const auto& rank = gpu["ranks"][static_cast<std::size_t>(r)];
    EXPECT_EQ(rank["device"].get<std::string>(), "cuda:" + std::to_string(r));  // LOCAL_RANK's GPU
    EXPECT_GT(rank["measured"]["persistent_device_bytes"].get<std::int64_t>(), 0);
  }
  ASSERT_EQ(gpu["steps"].size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const double want = cpu["steps"][i]["loss"].get<double>();
    EXPECT_NEAR(gpu["steps"][i]["loss"].get<double>(), want, kBf16LossTolerance * want) << "step " << i + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Techniques, GpuNccl, ::testing::ValuesIn(nccl_cases()),
                         [](const auto& info) { return info.param.name; });

// More ranks on a node than it has GPUs: the rank past them stops with a clean error.
class GpuLaunch : public testing::CliTest {};

TEST_F(GpuLaunch, MoreRanksThanGpusFailsNamingLocalRank) {
  const int gpus = visible_gpus();
  if (gpus == 0) GTEST_SKIP() << "no GPU visible: " << build_info().gpu_absent_reason;
  ParallelConfig p;
  p.ulysses = 1;
  auto plan = testing::tiny_plan("tiny-gqa", 64, 1, p);
  plan.cluster.shape = {1, gpus + 1};
  plan.train.dtype = plan.train.grad_dtype = DType::BF16;
  const auto file = write(plan, "over.json");
  auto o = run_cli("run --plan " + file + " --nproc " + std::to_string(gpus + 1) + " --steps 1 --device cuda");
  EXPECT_NE(o.status, 0);
  EXPECT_NE((o.out + o.err).find("LOCAL_RANK"), std::string::npos) << o.out << o.err;
}

}  // namespace
}  // namespace longctx::runtime
