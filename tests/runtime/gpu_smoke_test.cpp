// Runs on a GPU when one is visible; otherwise each test shows as skipped with the reason.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/cuda/CUDAFunctions.h>

#include <cstdlib>

#include "longctx/runtime/build_info.h"
#include "longctx/runtime/cuda_smoke.h"
#include "longctx/runtime/memory_meter.h"
#include "longctx/runtime/runner.h"
#include "reference_llama.h"

namespace longctx::runtime {
namespace {

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto info = build_info();
    if (info.gpus_visible == 0) GTEST_SKIP() << "no GPU visible: " << info.gpu_absent_reason;
  }
};

TEST_F(Gpu, OurSm90KernelRunsAndComputesAxpy) {
  EXPECT_EQ(run_cuda_smoke_kernel(), "");
}

TEST_F(Gpu, LibTorchBackwardOnCuda) {
  auto w = torch::randn({64, 64}, torch::TensorOptions().device(torch::kCUDA).requires_grad(true));
  auto loss = torch::matmul(w, w).sum();
  loss.backward();
  auto expected = torch::ones({64, 64}, w.options().requires_grad(false)).matmul(w.detach().t()) +
                  w.detach().t().matmul(torch::ones({64, 64}, w.options().requires_grad(false)));
  EXPECT_TRUE(torch::allclose(w.grad(), expected, 1e-3, 1e-3));
}

// ctest runs each test in its own process: here the meter is the first thing to touch the
// caching allocator, as in a run (its statistics need CUDA initialized first).
TEST_F(Gpu, TheMeterCanBeTheProcesssFirstCudaUseAndReadsTheAllocatorNow) {
  auto meter = std::make_shared<MemoryMeter>(0, 0, c10::Device(c10::kCUDA, 0));
  const auto before = meter->current(Pool::Device);
  auto t = torch::empty({1 << 20}, torch::TensorOptions().dtype(torch::kByte).device(torch::kCUDA));
  EXPECT_GE(meter->current(Pool::Device) - before, 1 << 20);  // no phase boundary in between
}

TEST_F(Gpu, HostMemoryIsCountedAsHeld) {
  auto meter = std::make_shared<MemoryMeter>(0, 0, c10::Device(c10::kCUDA, 0));
  MeterScope scope(meter);
  {
    auto pinned = host_empty({1000}, torch::kByte, /*pinned=*/true);
    EXPECT_EQ(meter->current(Pool::Host), 1000);  // exactly what was asked: no power-of-two block
    EXPECT_TRUE(pinned.is_pinned());
    auto scratch = torch::empty({100}, torch::kByte);  // the CPU allocator: host memory on CUDA
    EXPECT_EQ(meter->current(Pool::Host), 1100);
  }
  EXPECT_EQ(meter->current(Pool::Host), 0);
}

// A pinned buffer of 3 MiB + 1 byte holds that, not 4 MiB; freed while a non_blocking copy
// from it may still run, the copy still lands whole (cudaFreeHost waits for the device).
TEST_F(Gpu, PinnedHostMemoryIsExactAndOutlivesItsAsynchronousCopy) {
  auto meter = std::make_shared<MemoryMeter>(0, 0, c10::Device(c10::kCUDA, 0));
  MeterScope scope(meter);
  const std::int64_t n = (3 << 20) + 1;
  torch::Tensor device;
  {
    auto pinned = host_empty({n}, torch::kByte, /*pinned=*/true);
    EXPECT_EQ(meter->current(Pool::Host), n);
    pinned.fill_(7);
    device = torch::empty({n}, torch::TensorOptions().dtype(torch::kByte).device(torch::kCUDA));
    device.copy_(pinned, /*non_blocking=*/true);
  }
  EXPECT_EQ(meter->current(Pool::Host), 0);
  EXPECT_EQ(device.sum().item<std::int64_t>(), 7 * n);
}

TEST_F(Gpu, ARunOnLocalRankOneUsesAndMakesCurrentTheSecondGpu) {
  if (build_info().gpus_visible < 2) GTEST_SKIP() << "two GPUs needed, " << build_info().gpus_visible << " visible";
  ::setenv("LOCAL_RANK", "1", 1);
  auto plan = testing::tiny_plan("tiny-gqa", 64, 1, {});
  plan.train.dtype = plan.train.grad_dtype = DType::BF16;
  RunOptions o;
  o.device = "cuda";
  auto r = run_plan(plan, o);
  ::unsetenv("LOCAL_RANK");
  ASSERT_TRUE(r.ok()) << r.error().what();
  EXPECT_EQ(r->device, "cuda:1");
  EXPECT_EQ(c10::cuda::current_device(), 1);
  EXPECT_GT(r->persistent_device, 0);
}

}  // namespace
}  // namespace longctx::runtime
