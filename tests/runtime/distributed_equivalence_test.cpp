// A distributed step computes the single-process step: ranks (threads here, over c10d Gloo
// on loopback) each run their padded_seq/(u*r) tokens of their sample (padding, where u, or
// 2*r*u with a ring, does not divide S, at the end with ignored targets; with a ring, each
// rank's piece of its ring rank's two chunks), and the loss and the summed gradients equal
// plain autograd over the whole unpadded batch on one process.
//
// Tolerances as in technique_equivalence_test: loss within 1e-5 relative, each gradient
// within 2e-4 of its largest entry. A wrong head routing, a kv replica not summed, or RoPE
// positions from 0 on every rank change the result by orders of magnitude more.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "longctx/runtime/adamw.h"
#include "longctx/runtime/communicator.h"
#include "longctx/runtime/llama_step.h"
#include "longctx/runtime/sharded_params.h"
#include "reference_llama.h"
#include "loopback_port.h"

namespace longctx::runtime {
namespace {

struct Case {
  std::string name, model;
  int world;
  ParallelConfig parallel;
  std::int64_t seq = 64;  // not a multiple of u: padded (parallel_config.h, padded_seq)
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

ParallelConfig sp(int u, std::function<void(ParallelConfig&)> f = {}) {
  ParallelConfig p;
  p.ulysses = u;
  if (f) f(p);
  return p;
}
// Ring attention of degree r beside Ulysses u.
ParallelConfig ring(int r, int u = 1, std::function<void(ParallelConfig&)> f = {}) {
  ParallelConfig p = sp(u, f);
  p.ring = r;
  return p;
}

std::vector<Case> cases() {
  return {
      {"GqaUlysses2", "tiny-gqa", 2, sp(2)},
      {"GqaUlysses4KvReplicated", "tiny-gqa", 4, sp(4)},
      {"OddUlysses2", "tiny-odd", 2, sp(2)},
      {"OddUlysses4KvReplicated", "tiny-odd", 4, sp(4)},
      {"GqaUntied2Chunk1", "tiny-gqa", 2, sp(2, [](auto& p) { p.head_chunk = 1; })},
      {"GqaUntied4Chunk1KvReplicated", "tiny-gqa", 4, sp(4, [](auto& p) { p.head_chunk = 1; })},
      {"OddUntied2Chunk2", "tiny-odd", 2, sp(2, [](auto& p) { p.head_chunk = 2; })},
      {"OddUntied4Chunk1", "tiny-odd", 4, sp(4, [](auto& p) { p.head_chunk = 1; })},
      {"GqaDataParallel2", "tiny-gqa", 2, sp(1)},
      {"GqaUlysses2TimesData2", "tiny-gqa", 4, sp(2)},
      {"GqaZero1", "tiny-gqa", 2, sp(1, [](auto& p) { p.sharding = Sharding::Zero1; })},
      // An offloaded optimizer: each group's gradient reduced and copied into the optimizer's
      // host buffers as its backward ends (all-reduced, zero1's slice, reduce-scattered).
      {"GqaDataParallel2OffloadOptimizer", "tiny-gqa", 2, sp(1, [](auto& p) { p.offload_optimizer = true; })},
      {"OddUlysses2OffloadOptimizer", "tiny-odd", 2, sp(2, [](auto& p) { p.offload_optimizer = true; })},
      {"GqaZero1OffloadOptimizer", "tiny-gqa", 2, sp(1, [](auto& p) {
         p.sharding = Sharding::Zero1;
         p.offload_optimizer = true;
       })},
      {"OddZero2Ulysses2OffloadOptimizer", "tiny-odd", 2, sp(2, [](auto& p) {
         p.sharding = Sharding::Zero2;
         p.offload_optimizer = true;
       })},
      {"GqaZero3BothOffloadsUlysses2TimesData2", "tiny-gqa", 4, sp(2, [](auto& p) {
         p.sharding = Sharding::Zero3;
         p.offload_params = true;
         p.offload_optimizer = true;
         p.checkpoint = CheckpointPolicy::full();
       })},
      {"GqaZero2Ulysses2", "tiny-gqa", 2, sp(2, [](auto& p) { p.sharding = Sharding::Zero2; })},
      {"GqaZero3", "tiny-gqa", 2, sp(1, [](auto& p) { p.sharding = Sharding::Zero3; })},
      {"OddZero3TiedUlysses4", "tiny-odd", 4, sp(4, [](auto& p) { p.sharding = Sharding::Zero3; })},
      {"GqaZero3CheckpointEvery2Ulysses2TimesData2", "tiny-gqa", 4, sp(2, [](auto& p) {
         p.sharding = Sharding::Zero3;
         p.checkpoint = CheckpointPolicy::every_k(2);
       })},
      {"OddEverythingUlysses2", "tiny-odd", 2, sp(2, [](auto& p) {
         p.head_chunk = 1;
         p.checkpoint = CheckpointPolicy::full();
         p.offload_checkpoints = true;
         p.mlp_tiles = 4;
         p.loss_tiles = 2;
         p.sharding = Sharding::Zero3;
         p.offload_params = true;
       })},
      {"OddUlysses2WithEveryTechnique", "tiny-odd", 2, sp(2, [](auto& p) {
         p.head_chunk = 1;
         p.checkpoint = CheckpointPolicy::full();
         p.offload_checkpoints = true;
         p.mlp_tiles = 4;
         p.loss_tiles = 2;
       })},
      // Lengths the degree does not divide: the last ranks hold padding (ignored targets),
      // and with 2 tokens on 4 ranks two ranks hold nothing else.
      {"GqaUlysses4Padded61", "tiny-gqa", 4, sp(4), 61},
      {"GqaUlysses4Padded2", "tiny-gqa", 4, sp(4), 2},
      {"GqaUlysses2TimesData2Padded63", "tiny-gqa", 4, sp(2), 63},
      {"OddUlysses2Padded63UnevenTiles", "tiny-odd", 2, sp(2, [](auto& p) {
         p.mlp_tiles = 3;
         p.loss_tiles = 5;
       }), 63},
      {"OddZero3Ulysses4Padded61Untied", "tiny-odd", 4, sp(4, [](auto& p) {
         p.sharding = Sharding::Zero3;
         p.head_chunk = 1;
         p.checkpoint = CheckpointPolicy::full();
       }), 61},
      // Ring attention: alone at 2, 3 and 4 ranks, the hybrid Ulysses 2 x ring 2, beside data
      // parallelism, with checkpointing, ZeRO-3 and odd head shapes; lengths padded to 2*r*u.
      {"GqaRing2", "tiny-gqa", 2, ring(2)},
      {"OddRing3", "tiny-odd", 3, ring(3), 66},
      {"GqaRing4", "tiny-gqa", 4, ring(4)},
      {"GqaRing2TimesUlysses2", "tiny-gqa", 4, ring(2, 2)},
      {"OddRing2TimesUlysses2Padded61", "tiny-odd", 4, ring(2, 2), 61},
      {"GqaRing3Padded61Checkpointed", "tiny-gqa", 3, ring(3, 1, [](auto& p) {
         p.checkpoint = CheckpointPolicy::full();
         p.offload_checkpoints = true;
       }), 61},
      // Untied stages inside the ring's steps, alone and in the hybrid.
      {"OddRing2HeadChunk1", "tiny-odd", 2, ring(2, 1, [](auto& p) { p.head_chunk = 1; })},
      {"GqaRing3HeadChunk2Padded61", "tiny-gqa", 3, ring(3, 1, [](auto& p) { p.head_chunk = 2; }), 61},
      {"OddRing2TimesUlysses2HeadChunk2Checkpointed", "tiny-odd", 4, ring(2, 2, [](auto& p) {
         p.head_chunk = 2;
         p.checkpoint = CheckpointPolicy::full();
       })},
      {"OddRing2TimesData2Zero3", "tiny-odd", 4, ring(2, 1, [](auto& p) {
         p.sharding = Sharding::Zero3;
         p.mlp_tiles = 3;
         p.loss_tiles = 2;
       })},
      // The all-gather exchange: alone at 2 and 3 ranks, in the hybrid, and inside untied
      // stages with checkpointing.
      {"GqaRing2Gathered", "tiny-gqa", 2, ring(2, 1, [](auto& p) { p.ring_exchange = RingExchange::AllGather; })},
      {"OddRing3GatheredPadded61", "tiny-odd", 3, ring(3, 1, [](auto& p) { p.ring_exchange = RingExchange::AllGather; }),
       61},
      {"GqaRing2TimesUlysses2Gathered", "tiny-gqa", 4,
       ring(2, 2, [](auto& p) { p.ring_exchange = RingExchange::AllGather; })},
      {"OddRing2HeadChunk1GatheredCheckpointed", "tiny-odd", 2, ring(2, 1, [](auto& p) {
         p.ring_exchange = RingExchange::AllGather;
         p.head_chunk = 1;
         p.checkpoint = CheckpointPolicy::full();
       })},
  };
}

class DistributedEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(DistributedEquivalence, LossAndSummedGradientsEqualOneProcess) {
  const Case& c = GetParam();
  const std::int64_t S = c.seq, b = 1;
  auto plan = testing::tiny_plan(c.model, S, b, c.parallel);
  plan.cluster.shape = {1, c.world};
  auto valid = validate(plan.model, plan.cluster.shape, plan.train, plan.parallel);
  ASSERT_TRUE(valid.ok()) << valid.error().what();
  const int u = c.parallel.ulysses, ring_degree = c.parallel.ring, dp = c.world / (u * ring_degree);

  // The whole batch: dp samples.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  auto all = at::randint(plan.model.vocab, {dp * b, S + 1}, gen, torch::TensorOptions().dtype(torch::kLong));
  auto tokens = all.narrow(1, 0, S).contiguous(), targets = all.narrow(1, 1, S).contiguous();

  LlamaWeights ref = init_weights(plan.model, /*seed=*/7, {});
  auto ref_loss = testing::ref_loss(plan.model, ref, tokens, targets);
  ref_loss.backward();

  const longctx::testing::LoopbackStore store(c.world);
  std::vector<double> losses(c.world);
  std::vector<std::vector<torch::Tensor>> grads(c.world);
  std::vector<std::string> errors(c.world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < c.world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        ProcessGroupOptions o;
        o.timeout = std::chrono::seconds(60);
        auto comm = Communicator::connect(store.env(rank, c.world), u, ring_degree, o);
        if (!comm) throw std::runtime_error(comm.error().what());
        auto& cm = **comm;
        LlamaWeights w = init_weights(plan.model, /*seed=*/7, {});
        LlamaStep step(plan.model, plan.parallel, S, w, torch::kCPU, &cm);
        std::unique_ptr<ShardedParams> shards;
        if (c.parallel.sharding != Sharding::None) {
          shards = std::make_unique<ShardedParams>(w, c.parallel.sharding, c.parallel.offload_params, cm, false);
          step.use_shards(shards.get());
        }
        // Offloaded: the gradients end in the optimizer's fp32 host buffers, reduced.
        std::unique_ptr<AdamW> optimizer;
        if (c.parallel.offload_optimizer) {
          optimizer = std::make_unique<AdamW>(shards ? shards->shards() : w.all(), AdamWOptions{}, true, false);
          if (shards) shards->gradients_to_host(optimizer.get());
          step.stream_gradients_to(optimizer.get());
        }
        // This rank's padded columns, as the runner cuts them.
        auto mine = shard_batch(all.narrow(0, cm.dp_rank() * b, b),
                                sequence_shard(S, c.parallel, cm.ring_rank(), cm.sp_rank()), torch::kCPU);
        losses[rank] = step.forward_backward(mine.tokens, mine.targets);
        if (!shards) {
          for (auto& p : w.all()) {
            torch::Tensor g = p.grad();
            if (optimizer) {
              if (g.scalar_type() != torch::kFloat) throw std::runtime_error("a gradient is not in its fp32 host buffer");
            } else {
              cm.all_reduce_sum(g);
            }
            grads[rank].push_back(g);
          }
          return;
        }
        // Sharded: the shards' gradients, gathered and cut back into parameters.
        shards->prepare_step();
        std::vector<torch::Tensor> flat;
        for (int g = 0; g < shards->groups(); ++g) {
          const torch::Tensor& shard = shards->shards()[static_cast<std::size_t>(g)];
          if (!shard.grad().defined()) throw std::runtime_error("group " + std::to_string(g) + " has no gradient");
          torch::Tensor full = torch::empty({cm.world() * shard.numel()});
          cm.all_gather(full, shard.grad());
          flat.push_back(full.narrow(0, 0, shards->group_numel(g)));
        }
        torch::Tensor all_grads = torch::cat(flat);
        std::int64_t off = 0;
        for (auto& p : ref.all()) {
          grads[rank].push_back(all_grads.narrow(0, off, p.numel()).view(p.sizes()));
          off += p.numel();
        }
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < c.world; ++r) ASSERT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];

  const auto want = ref.all();
  for (int r = 0; r < c.world; ++r) {
    EXPECT_NEAR(losses[r], ref_loss.item<double>(), 1e-5 * std::abs(ref_loss.item<double>())) << "rank " << r;
    ASSERT_EQ(grads[r].size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double scale = want[i].grad().abs().max().item<double>();
      const double err = (grads[r][i] - want[i].grad()).abs().max().item<double>();
      EXPECT_LE(err, 2e-4 * scale + 1e-9) << "rank " << r << " parameter " << i << ": max error " << err;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Configurations, DistributedEquivalence, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace longctx::runtime

namespace longctx::runtime {
namespace {

// A rank that leaves (its process died: its connections close) makes the others' next
// collective fail with an error naming it, instead of hanging; the group timeout bounds
// the wait when a peer stalls without closing.
TEST(DeadRank, TheSurvivorsCollectiveFailsWithAClearError) {
  const longctx::testing::LoopbackStore store(2);
  std::string error;
  std::thread dead([&] {
    ProcessGroupOptions o;
    o.timeout = std::chrono::seconds(5);
    auto comm = Communicator::connect(store.env(1, 2), 2, o);
    // Leaves at once: the communicator is destroyed without a collective.
  });
  ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(5);
  auto comm = Communicator::connect(store.env(0, 2), 2, o);
  ASSERT_TRUE(comm.ok()) << comm.error().what();
  dead.join();
  try {
    (*comm)->all_to_all(torch::ones({2, 8}));
  } catch (const CommError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("Ulysses all-to-all failed on rank 0 of 2"), std::string::npos) << error;
  EXPECT_NE(error.find("a peer rank died or stalled"), std::string::npos) << error;
}

}  // namespace
}  // namespace longctx::runtime
