// LibTorch is linked and its autograd works on the CPU: the ground every runtime test stands on.
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

TEST(AutogradSmoke, BackwardOfAQuadraticIsItsAnalyticGradient) {
  torch::manual_seed(0);
  auto w = torch::randn({8, 4}, torch::requires_grad());
  auto x = torch::randn({16, 8});
  auto loss = torch::matmul(x, w).pow(2).sum();
  loss.backward();
  // d/dw sum((xw)^2) = 2 x^T (x w)
  auto expected = 2 * torch::matmul(x.t(), torch::matmul(x, w.detach()));
  EXPECT_TRUE(torch::allclose(w.grad(), expected, 1e-5, 1e-5));
}

TEST(AutogradSmoke, ScaledDotProductAttentionHasGradients) {
  auto q = torch::randn({1, 2, 16, 8}, torch::requires_grad());
  auto k = torch::randn({1, 2, 16, 8}, torch::requires_grad());
  auto v = torch::randn({1, 2, 16, 8}, torch::requires_grad());
  auto out = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
  out.sum().backward();
  ASSERT_TRUE(q.grad().defined());
  // Causal: the first query attends only to the first key, so its output is v[0].
  EXPECT_TRUE(torch::allclose(out.index({0, 0, 0}), v.index({0, 0, 0}), 1e-5, 1e-5));
}

}  // namespace
