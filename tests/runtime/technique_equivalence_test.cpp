// Every technique, alone and combined, computes the plain step: the same loss and the same
// gradient of every parameter as ordinary autograd over the same weights (fp32, CPU).
//
// Tolerances: loss within 1e-5 relative; each gradient within 2e-4 of its largest entry
// (max |g - g_ref| <= 2e-4 * max |g_ref|). The flash kernel and the tiled paths sum in other
// orders than the reference, so bit equality is not expected; a wrong recompute, a missed
// kv group or a dropped tile changes gradients by orders of magnitude more.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "longctx/runtime/attention.h"
#include "longctx/runtime/llama_step.h"
#include "longctx/runtime/mlp.h"
#include "longctx/runtime/norm_rope.h"
#include "reference_llama.h"

namespace longctx::runtime {
namespace {

struct Case {
  std::string name;
  std::string model;
  ParallelConfig parallel;
};

ParallelConfig knobs(std::function<void(ParallelConfig&)> f) {
  ParallelConfig p;
  f(p);
  return p;
}

std::vector<Case> cases() {
  std::vector<Case> c;
  for (std::string m : {"tiny-gqa", "tiny-odd"}) {
    const std::string t = m == "tiny-gqa" ? "Gqa" : "Odd";
    c.push_back({t + "Plain", m, {}});
    c.push_back({t + "CheckpointFull", m, knobs([](auto& p) { p.checkpoint = CheckpointPolicy::full(); })});
    c.push_back({t + "CheckpointEvery2", m, knobs([](auto& p) { p.checkpoint = CheckpointPolicy::every_k(2); })});
    c.push_back({t + "OffloadCheckpoints", m, knobs([](auto& p) {
                   p.checkpoint = CheckpointPolicy::full();
                   p.offload_checkpoints = true;
                 })});
    c.push_back({t + "MlpTiles4", m, knobs([](auto& p) { p.mlp_tiles = 4; })});
    c.push_back({t + "LossTiles4", m, knobs([](auto& p) { p.loss_tiles = 4; })});
    // Uneven: 128 tokens in tiles of 43 (the last 42) and of 26 (the last 24).
    c.push_back({t + "MlpTiles3Uneven", m, knobs([](auto& p) { p.mlp_tiles = 3; })});
    c.push_back({t + "LossTiles5Uneven", m, knobs([](auto& p) { p.loss_tiles = 5; })});
    for (int chunk : {1, 2, 4})
      c.push_back({t + "HeadChunk" + std::to_string(chunk), m, knobs([chunk](auto& p) { p.head_chunk = chunk; })});
    c.push_back({t + "OffloadParams", m, knobs([](auto& p) {
                   p.sharding = Sharding::Zero3;
                   p.offload_params = true;
                 })});
    c.push_back({t + "Everything", m, knobs([](auto& p) {
                   p.checkpoint = CheckpointPolicy::every_k(2);
                   p.offload_checkpoints = true;
                   p.head_chunk = 1;
                   p.mlp_tiles = 8;
                   p.loss_tiles = 2;
                   p.sharding = Sharding::Zero3;
                   p.offload_params = true;
                 })});
  }
  c.push_back({"OddHeadChunk8", "tiny-odd", knobs([](auto& p) { p.head_chunk = 8; })});
  // Biased models (tiny-bias: Llama's attention_bias and mlp_bias, with llama3 RoPE scaling;
  // tiny-qwen2: q/k/v biases only) through every technique that takes them (head chunking
  // has no bias: validate() refuses it).
  for (std::string m : {"tiny-bias", "tiny-qwen2"}) {
    const std::string t = m == "tiny-bias" ? "Bias" : "Qwen2";
    c.push_back({t + "Plain", m, {}});
    c.push_back({t + "CheckpointFull", m, knobs([](auto& p) { p.checkpoint = CheckpointPolicy::full(); })});
    c.push_back({t + "MlpTiles4", m, knobs([](auto& p) { p.mlp_tiles = 4; })});
    c.push_back({t + "Everything", m, knobs([](auto& p) {
                   p.checkpoint = CheckpointPolicy::every_k(2);
                   p.offload_checkpoints = true;
                   p.mlp_tiles = 8;
                   p.loss_tiles = 2;
                   p.sharding = Sharding::Zero3;
                   p.offload_params = true;
                 })});
  }
  return c;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class TechniqueEquivalence : public ::testing::TestWithParam<Case> {};

void expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << " has no gradient";
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double scale = want.abs().max().item<double>();
  const double err = (got - want).abs().max().item<double>();
  EXPECT_LE(err, 2e-4 * scale + 1e-9) << what << ": max error " << err << " against max " << scale;
}

TEST_P(TechniqueEquivalence, LossAndEveryGradientEqualThePlainComputation) {
  const Case& c = GetParam();
  const auto plan = testing::tiny_plan(c.model, /*seq=*/64, /*micro_batch=*/2, c.parallel);
  ASSERT_TRUE(validate(plan.model, plan.cluster.shape, plan.train, plan.parallel).ok());
  WeightPlacement where;
  where.layers_in_host_pool = c.parallel.offload_params;
  LlamaWeights w = init_weights(plan.model, /*seed=*/7, where);
  LlamaWeights ref = clone_weights(w);

  const auto [tokens, targets] = testing::random_batch(plan.model.vocab, 2, 64, /*seed=*/11);

  LlamaStep step(plan.model, plan.parallel, plan.train.seq, w, torch::kCPU);
  const double loss = step.forward_backward(tokens, targets);
  auto ref_loss = testing::ref_loss(plan.model, ref, tokens, targets);
  ref_loss.backward();
  EXPECT_NEAR(loss, ref_loss.item<double>(), 1e-5 * std::abs(ref_loss.item<double>()));

  const auto got = w.all(), want = ref.all();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) expect_close(got[i].grad(), want[i].grad(), "parameter " + std::to_string(i));
}

INSTANTIATE_TEST_SUITE_P(Techniques, TechniqueEquivalence, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// The lean kernels one at a time, in fp32 and bf16, against autograd over the plain formulas in
// fp64: the row-chunked norm and SwiGLU backward at several chunk sizes (the norm's rows are
// independent, so every chunking gives the same bits but for the weight's gradient, summed
// over chunks in fp32), and attention with grouped k/v handed to the kernel as they are.
double tolerance(torch::ScalarType dt) { return dt == torch::kFloat ? 2e-5 : 2e-2; }

void expect_near_ref(const torch::Tensor& got, const torch::Tensor& ref, torch::ScalarType dt, const std::string& what) {
  const double scale = ref.abs().max().item<double>();
  const double err = (got.to(torch::kDouble) - ref).abs().max().item<double>();
  EXPECT_LE(err, tolerance(dt) * scale) << what << " (" << dt << "): max error " << err << " against max " << scale;
}

TEST(LeanKernels, RowChunkedRmsNormEqualsThePlainFormulaAtEveryChunk) {
  const double eps = 1e-6;
  for (auto dt : {torch::kFloat, torch::kBFloat16}) {
    torch::manual_seed(3);
    const auto x = torch::randn({3, 37, 24}).to(dt), w = (1 + 0.1 * torch::randn({24})).to(dt),
               dy = torch::randn({3, 37, 24}).to(dt);
    auto xr = x.to(torch::kDouble).requires_grad_(true), wr = w.to(torch::kDouble).requires_grad_(true);
    auto yr = xr * (xr.pow(2).mean(-1, true) + eps).rsqrt() * wr;
    yr.backward(dy.to(torch::kDouble));
    const auto whole = rms_norm_forward(x, w, eps);  // 111 rows: one chunk
    const auto whole_grads = rms_norm_backward(dy, x, w, whole.rstd);
    expect_near_ref(whole.y, yr.detach(), dt, "norm output");
    expect_near_ref(whole_grads.dx, xr.grad(), dt, "norm input gradient");
    expect_near_ref(whole_grads.dw, wr.grad(), dt, "norm weight gradient");
    for (std::int64_t chunk : {1, 7, 50, 111}) {
      const auto f = rms_norm_forward(x, w, eps, chunk);
      EXPECT_TRUE(torch::equal(f.y, whole.y)) << "chunk " << chunk;
      EXPECT_TRUE(torch::equal(f.rstd, whole.rstd)) << "chunk " << chunk;
      const auto g = rms_norm_backward(dy, x, w, f.rstd, chunk);
      EXPECT_TRUE(torch::equal(g.dx, whole_grads.dx)) << "chunk " << chunk;
      EXPECT_EQ(g.dw.scalar_type(), torch::kFloat);
      EXPECT_TRUE(torch::allclose(g.dw, whole_grads.dw, 1e-5, 1e-5)) << "chunk " << chunk;
    }
  }
}

TEST(LeanKernels, SwigluBackwardWritesThePlainGradientsIntoGateAndUp) {
  for (auto dt : {torch::kFloat, torch::kBFloat16}) {
    torch::manual_seed(5);
    const auto g = torch::randn({50, 33}).to(dt), u = torch::randn({50, 33}).to(dt), da = torch::randn({50, 33}).to(dt);
    auto gr = g.to(torch::kDouble).requires_grad_(true), ur = u.to(torch::kDouble).requires_grad_(true);
    (torch::silu(gr) * ur).backward(da.to(torch::kDouble));
    torch::Tensor first_dg, first_du;
    for (std::int64_t chunk : {0, 1, 7, 50}) {
      auto gc = g.clone(), uc = u.clone();
      auto [dg, du] = swiglu_backward_in_place(da, gc, uc, chunk);
      EXPECT_EQ(dg.data_ptr(), uc.data_ptr()) << "d_gate is written into up's buffer";
      EXPECT_EQ(du.data_ptr(), gc.data_ptr()) << "d_up is written into gate's buffer";
      expect_near_ref(dg, gr.grad(), dt, "d_gate");
      expect_near_ref(du, ur.grad(), dt, "d_up");
      if (!first_dg.defined()) {
        first_dg = dg;
        first_du = du;
      }
      // Not bit-equal: LibTorch's vectorized silu and sigmoid differ from their scalar tails in
      // the last bit, and a chunk moves elements between the two.
      const double tol = dt == torch::kFloat ? 1e-5 : 1e-2;
      EXPECT_TRUE(torch::allclose(dg, first_dg, tol, tol) && torch::allclose(du, first_du, tol, tol)) << "chunk " << chunk;
    }
    // Through autograd: gate and up made by an op (not leaves) are overwritten; leaves are not.
    auto gl = g.clone().requires_grad_(true), ul = u.clone().requires_grad_(true);
    auto gate = gl * 1.0, up = ul * 1.0;
    swiglu(gate, up).backward(da);
    expect_near_ref(gl.grad(), gr.grad(), dt, "autograd d_gate");
    expect_near_ref(ul.grad(), ur.grad(), dt, "autograd d_up");
    auto gl2 = g.clone().requires_grad_(true), ul2 = u.clone().requires_grad_(true);
    swiglu(gl2, ul2).backward(da);
    EXPECT_TRUE(torch::equal(gl2.detach(), g) && torch::equal(ul2.detach(), u)) << "a leaf is left as it was";
    expect_near_ref(gl2.grad(), gr.grad(), dt, "leaf d_gate");
  }
}

TEST(LeanKernels, GroupedAttentionEqualsTheMathReference) {
  for (auto dt : {torch::kFloat, torch::kBFloat16}) {
    torch::manual_seed(9);
    const std::int64_t b = 2, S = 70, H = 6, K = 2, d = 8;
    auto q = torch::randn({b, S, H, d}).to(dt).requires_grad_(true);
    auto k = torch::randn({b, S, K, d}).to(dt).requires_grad_(true);
    auto v = torch::randn({b, S, K, d}).to(dt).requires_grad_(true);
    const auto dout = torch::randn({b, S, H, d}).to(dt);
    attention(q, k, v).backward(dout);
    // Reference: k and v repeated to the query heads, causal softmax, in fp64.
    auto qr = q.detach().to(torch::kDouble).requires_grad_(true), kr = k.detach().to(torch::kDouble).requires_grad_(true),
         vr = v.detach().to(torch::kDouble).requires_grad_(true);
    auto ke = kr.repeat_interleave(H / K, 2).transpose(1, 2), ve = vr.repeat_interleave(H / K, 2).transpose(1, 2);
    auto scores = torch::matmul(qr.transpose(1, 2), ke.transpose(-1, -2)) / std::sqrt(double(d));
    scores = scores.masked_fill(torch::ones({S, S}, torch::kBool).triu(1), -INFINITY);
    auto out = torch::matmul(torch::softmax(scores, -1), ve).transpose(1, 2);
    out.backward(dout.to(torch::kDouble));
    expect_near_ref(q.grad(), qr.grad(), dt, "dq");
    expect_near_ref(k.grad(), kr.grad(), dt, "dk");
    expect_near_ref(v.grad(), vr.grad(), dt, "dv");
  }
}

}  // namespace
}  // namespace longctx::runtime
