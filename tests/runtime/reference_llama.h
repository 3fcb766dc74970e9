#pragma once
// The plain computation the techniques must equal: the same Llama written with ordinary
// LibTorch ops and ordinary autograd (explicit softmax attention, no custom functions).
#include <cmath>
#include <functional>

#include <torch/torch.h>

#include "planner/core/model_config.h"
#include "planner/core/plan.h"
#include "planner/core/hardware.h"
#include "longctx/runtime/llama_weights.h"

namespace longctx::runtime::testing {

// One intra-op thread: the tests' tensors are small, and OpenMP workers spinning on a busy
// machine make a step hundreds of times slower.
inline const bool kOneThread = [] {
  torch::set_num_threads(1);
  return true;
}();

// A parallel configuration: the defaults, changed by f.
inline ParallelConfig with(const std::function<void(ParallelConfig&)>& f) {
  ParallelConfig p;
  f(p);
  return p;
}

// b samples of S seeded random tokens and their next tokens as targets: tokens, targets [b, S] int64.
struct TokenBatch {
  torch::Tensor tokens, targets;
};
inline TokenBatch random_batch(std::int64_t vocab, std::int64_t b, std::int64_t S, std::uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto all = at::randint(vocab, {b, S + 1}, gen, torch::TensorOptions().dtype(torch::kLong));
  return {all.narrow(1, 0, S).contiguous(), all.narrow(1, 1, S).contiguous()};
}

inline torch::Tensor ref_rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

inline torch::Tensor ref_rope(const torch::Tensor& x, const torch::Tensor& inv) {  // x [b,S,heads,d], inv [d/2]
  const auto S = x.size(1), d = x.size(3);
  auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  auto ang = torch::outer(torch::arange(S, f64), inv);
  auto emb = torch::cat({ang, ang}, -1).to(x.scalar_type()).view({1, S, 1, d});
  auto x1 = x.narrow(-1, 0, d / 2), x2 = x.narrow(-1, d / 2, d / 2);
  auto rot = torch::cat({-x2, x1}, -1);
  return x * emb.cos() + rot * emb.sin();
}

inline torch::Tensor ref_rope(const torch::Tensor& x, double theta) {
  const auto d = x.size(3);
  auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  return ref_rope(x, torch::pow(theta, -2.0 * torch::arange(d / 2, f64) / double(d)));
}

inline torch::Tensor ref_loss(const ModelConfig& m, const LlamaWeights& w, const torch::Tensor& tokens,
                              const torch::Tensor& targets) {
  const auto b = tokens.size(0), S = tokens.size(1), H = m.heads, K = m.kv_heads, d = m.head_dim;
  auto x = torch::embedding(w.embed, tokens);
  auto mask = torch::ones({S, S}, torch::kBool).triu(1);
  // RoPE's frequencies under the model's rope_scaling (transformers' rules, model_config.h).
  const auto inv = torch::tensor(rope_inverse_frequencies(m), torch::TensorOptions().dtype(torch::kDouble));
  for (const auto& l : w.layers) {
    auto xn = ref_rms_norm(x, l.attn_norm, m.rms_norm_eps);
    // Undefined biases (a model without them) are no bias to torch::linear.
    auto q = torch::linear(xn, l.wq, l.bq).view({b, S, H, d});
    auto k = torch::linear(xn, l.wk, l.bk).view({b, S, K, d});
    auto v = torch::linear(xn, l.wv, l.bv).view({b, S, K, d});
    if (m.qk_norm) {
      q = ref_rms_norm(q, l.q_norm, m.rms_norm_eps);
      k = ref_rms_norm(k, l.k_norm, m.rms_norm_eps);
    }
    q = ref_rope(q, inv).transpose(1, 2);
    k = ref_rope(k, inv).repeat_interleave(H / K, 2).transpose(1, 2);
    v = v.repeat_interleave(H / K, 2).transpose(1, 2);
    auto scores = torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(d));
    scores = scores.masked_fill(mask, -std::numeric_limits<double>::infinity());
    auto o = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({b, S, H * d});
    x = x + torch::linear(o, l.wo, l.bo);
    auto xn2 = ref_rms_norm(x, l.mlp_norm, m.rms_norm_eps);
    x = x + torch::linear(torch::silu(torch::linear(xn2, l.w_gate, l.b_gate)) * torch::linear(xn2, l.w_up, l.b_up),
                          l.w_down, l.b_down);
  }
  auto xf = ref_rms_norm(x, w.final_norm, m.rms_norm_eps);
  auto logits = torch::linear(xf, w.head()).view({-1, m.vocab});
  return torch::cross_entropy_loss(logits, targets.reshape({-1}));
}

// A one-rank plan on the CPU virtual device.
inline Plan tiny_plan(const std::string& model, std::int64_t seq, std::int64_t micro_batch, ParallelConfig p,
                      std::int64_t device_budget = 1LL << 30, std::int64_t host_budget = 4LL << 30) {
  Plan plan;
  plan.model = load_model(model).value();
  plan.cluster.shape = {1, 1};
  plan.cluster.hardware = load_hardware("cpu").value();
  plan.cluster.device_budget_bytes = device_budget;
  plan.cluster.host_budget_bytes_per_node = host_budget;
  plan.train.seq = seq;
  plan.train.micro_batch = micro_batch;
  plan.train.dtype = DType::FP32;
  plan.parallel = p;
  return plan;
}

}  // namespace longctx::runtime::testing
