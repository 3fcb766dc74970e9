// Runs on a GPU when one is visible; otherwise each test shows as skipped with the reason.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "longctx/runtime/build_info.h"
#include "longctx/runtime/cuda_smoke.h"

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

}  // namespace
}  // namespace longctx::runtime
