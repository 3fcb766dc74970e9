// Ring attention computes plain causal attention: ranks (threads here, over c10d Gloo on
// loopback) each hold their two mirrored chunks of q, k and v, and the output and the
// gradients of q, k and v, put back in sequence order, equal one process's attention over the
// whole sequence. At 1, 2, 3 and 4 ranks, with grouped kv heads, odd head counts and a head
// dimension unrelated to anything else, in fp32 and bf16.
//
// Tolerance: 2e-5 of the largest entry in fp32 (the merge by log-sum-exp reorders sums), 2e-2
// in bf16. A block attended twice, a causal mask on an off-diagonal block, a missing
// accumulator hop or a wrong chunk order change the result by far more.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "longctx/runtime/attention.h"
#include "longctx/runtime/process_group.h"
#include "longctx/runtime/ring_attention.h"
#include "loopback_port.h"

namespace longctx::runtime {
namespace {

struct Case {
  std::string name;
  int ranks;
  std::int64_t heads, kv_heads, head_dim, seq;
  torch::ScalarType dtype = torch::kFloat;
  RingExchange exchange = RingExchange::P2p;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

// This rank's chunks [b, n, ...] put back at their places in a [b, S, ...] tensor.
void scatter_back(torch::Tensor& seq_side, const torch::Tensor& local, std::int64_t rank, std::int64_t r) {
  const auto c = seq_side.size(1) / (2 * r);
  const auto [a, b] = ring_chunks(rank, r);
  seq_side.narrow(1, a * c, c).copy_(local.narrow(1, 0, c));
  seq_side.narrow(1, b * c, c).copy_(local.narrow(1, c, c));
}

class RingAttention : public ::testing::TestWithParam<Case> {};

TEST_P(RingAttention, EqualsPlainCausalAttention) {
  const Case& c = GetParam();
  torch::manual_seed(7);
  const auto opts = torch::TensorOptions().dtype(c.dtype);
  const auto q = torch::randn({1, c.seq, c.heads, c.head_dim}, opts);
  const auto k = torch::randn({1, c.seq, c.kv_heads, c.head_dim}, opts);
  const auto v = torch::randn({1, c.seq, c.kv_heads, c.head_dim}, opts);
  const auto dout = torch::randn({1, c.seq, c.heads, c.head_dim}, opts);

  // One process, the whole sequence.
  auto qr = q.clone().requires_grad_(), kr = k.clone().requires_grad_(), vr = v.clone().requires_grad_();
  const auto out_ref = attention(qr, kr, vr);
  out_ref.backward(dout);

  torch::Tensor out = torch::zeros_like(q), dq = torch::zeros_like(q), dk = torch::zeros_like(k), dv = torch::zeros_like(v);
  std::vector<std::string> errors(static_cast<std::size_t>(c.ranks));
  std::mutex put;
  const longctx::testing::LoopbackStore store(c.ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < c.ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        torch::set_num_threads(1);
        RingGroup ring{nullptr, r, c.ranks, {}, c.exchange};
        if (c.ranks > 1) {
          ProcessGroupOptions o;
          o.timeout = std::chrono::seconds(60);
          auto pg = connect_process_group(store.env(r, c.ranks), o);
          if (!pg) throw std::runtime_error(pg.error().what());
          ring.group = *pg;
        }
        auto ql = ring_shard(q, r, c.ranks).requires_grad_(), kl = ring_shard(k, r, c.ranks).requires_grad_(),
             vl = ring_shard(v, r, c.ranks).requires_grad_();
        auto o = ring_attention(ql, kl, vl, ring);
        o.backward(ring_shard(dout, r, c.ranks));
        std::lock_guard<std::mutex> lock(put);
        scatter_back(out, o.detach(), r, c.ranks);
        scatter_back(dq, ql.grad(), r, c.ranks);
        scatter_back(dk, kl.grad(), r, c.ranks);
        scatter_back(dv, vl.grad(), r, c.ranks);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) ASSERT_TRUE(e.empty()) << e;

  const double tol = c.dtype == torch::kFloat ? 2e-5 : 2e-2;
  for (const auto& [name, got, want] : {std::tuple{"out", out, out_ref.detach()}, std::tuple{"dq", dq, qr.grad()},
                                        std::tuple{"dk", dk, kr.grad()}, std::tuple{"dv", dv, vr.grad()}}) {
    const double err = max_abs((got - want).to(torch::kFloat)), scale = max_abs(want.to(torch::kFloat));
    EXPECT_LE(err, tol * scale) << name << ": " << err << " against a largest entry of " << scale;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, RingAttention,
                         ::testing::Values(Case{"OneRank", 1, 4, 2, 16, 32}, Case{"TwoRanksGqa", 2, 4, 2, 16, 64},
                                           Case{"ThreeRanksOddHeads", 3, 6, 3, 12, 72},
                                           Case{"FourRanksMha", 4, 3, 3, 20, 96},
                                           Case{"TwoRanksBf16", 2, 4, 1, 16, 64, torch::kBFloat16},
                                           // The all-gather exchange: k/v gathered, dk/dv reduce-scattered.
                                           Case{"TwoRanksGqaGathered", 2, 4, 2, 16, 64, torch::kFloat, RingExchange::AllGather},
                                           Case{"ThreeRanksOddHeadsGathered", 3, 6, 3, 12, 72, torch::kFloat,
                                                RingExchange::AllGather},
                                           Case{"FourRanksMhaGathered", 4, 3, 3, 20, 96, torch::kFloat, RingExchange::AllGather},
                                           Case{"TwoRanksBf16Gathered", 2, 4, 1, 16, 64, torch::kBFloat16,
                                                RingExchange::AllGather}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace longctx::runtime
