// Ring attention as a layout the planner chooses (parallel_config.h, knobs.h): its rules,
// its plan-file key, the layouts the search weighs, and max-context past the cap the heads
// put on Ulysses.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "planner/core/knobs.h"
#include "planner/core/units.h"
#include "planner/search/memory_model.h"
#include "planner/core/plan.h"
#include "planner/search/request.h"
#include "planner/search/search.h"
#include "test_plans.h"

namespace longctx {
namespace {

ClusterRequest cluster(const std::string& model, std::int64_t gpus, const std::string& techniques = "all") {
  ClusterRequest c;
  c.model = model;
  c.gpus = gpus;
  c.gpu = "h100-80gb";
  c.techniques = techniques;
  return c;
}

TEST(RingLayout, RulesNameTheKnob) {
  Plan p = testing::cpu_plan("tiny-gqa", 4, 1000);
  p.parallel.ring = 3;
  EXPECT_EQ(validate(p.model, p.cluster.shape, p.train, p.parallel).error().field, "--ring");  // 3 does not divide 4
  p.parallel.ring = 2;
  p.parallel.ulysses = 4;
  EXPECT_EQ(validate(p.model, p.cluster.shape, p.train, p.parallel).error().field, "--ring");  // 2 x 4 > 4
  p.parallel.ulysses = 2;
  EXPECT_TRUE(validate(p.model, p.cluster.shape, p.train, p.parallel).ok());
  p.parallel.head_chunk = 1;  // untied stages inside the ring's steps
  EXPECT_TRUE(validate(p.model, p.cluster.shape, p.train, p.parallel).ok());
  p.parallel.head_chunk = 0;
  p.parallel.ring = 0;
  EXPECT_EQ(validate(p.model, p.cluster.shape, p.train, p.parallel).error().field, "--ring");
  // A stack without ring attention refuses it, naming the stack.
  Plan hf = testing::cpu_plan("tiny-gqa", 2, 1000);
  hf.cluster.hardware = load_hardware("h100-80gb").value();
  hf.train.stack.kind = StackKind::Arctic;
  hf.parallel.sharding = Sharding::Zero3;
  hf.parallel.ring = 2;
  hf.train.dtype = hf.train.grad_dtype = DType::BF16;
  const auto refused = validate(hf.model, hf.cluster.shape, hf.train, hf.parallel);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().field, "--ring");
  EXPECT_NE(refused.error().message.find("--stack arctic"), std::string::npos) << refused.error().message;
}

TEST(RingLayout, PadsToTwoChunksPerRingRankAndEachUlyssesPiece) {
  ParallelConfig p;
  p.ulysses = 2;
  p.ring = 3;
  EXPECT_EQ(sequence_multiple(p), 12);
  EXPECT_EQ(padded_seq(1001, p), 1008);
  TrainConfig t;
  t.seq = 1001;
  t.micro_batch = 2;
  EXPECT_EQ(tokens_per_rank(t, p), 2 * 1008 / 6);
}

TEST(RingLayout, PlanFileWritesTheRingOnlyAboveOne) {
  Plan p = testing::cpu_plan("tiny-gqa", 4, 1000);
  nlohmann::json j = plan_to_json(p);
  EXPECT_FALSE(j["parallel"].contains("ring"));  // files of plans without a ring read as before
  p.parallel.ring = 2;
  p.parallel.ulysses = 2;
  j = plan_to_json(p);
  EXPECT_EQ(j["parallel"]["ring"], 2);
  EXPECT_EQ(j["train"]["padded_seq"], 1000);  // 1000 is a multiple of 2 x 2 x 2
  auto back = plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().what();
  EXPECT_EQ(back->parallel.ring, 2);
  j["parallel"]["ring"] = 0;
  EXPECT_EQ(plan_from_json(j).error().field, "parallel.ring");
}

// The k/v exchange: a knob of the ring, refused without one, written only when not p2p, and
// searched beside the ring's degree.
TEST(RingLayout, ExchangeIsARingKnobWrittenOnlyWhenGathered) {
  Plan p = testing::cpu_plan("tiny-gqa", 4, 1000);
  p.parallel.ring_exchange = RingExchange::AllGather;
  EXPECT_EQ(validate(p.model, p.cluster.shape, p.train, p.parallel).error().field, "--ring-exchange");  // no ring
  p.parallel.ring = 2;
  ASSERT_TRUE(validate(p.model, p.cluster.shape, p.train, p.parallel).ok());
  nlohmann::json j = plan_to_json(p);
  EXPECT_EQ(j["parallel"]["ring_exchange"], "allgather");
  auto back = plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().what();
  EXPECT_EQ(back->parallel.ring_exchange, RingExchange::AllGather);
  j["parallel"]["ring_exchange"] = "rotate";
  EXPECT_EQ(plan_from_json(j).error().field, "parallel.ring_exchange");
  p.parallel.ring_exchange = RingExchange::P2p;
  EXPECT_FALSE(plan_to_json(p)["parallel"].contains("ring_exchange"));  // p2p plans' files read as before
  EXPECT_EQ(knob_candidates(KnobId::ring_exchange, p, all_techniques(), {}), (std::vector<KnobValue>{0, 1}));
  EXPECT_EQ(knob_candidates(KnobId::ring_exchange, p, *parse_techniques("ulysses"), {}), (std::vector<KnobValue>{0}));
  p.parallel.ring = 1;
  EXPECT_EQ(knob_candidates(KnobId::ring_exchange, p, all_techniques(), {}), (std::vector<KnobValue>{0}));
  // Fixed alone, it brings no ring with it (the degree is a choice the request did not make):
  // validate() names it, as it names checkpoint offload without checkpointing; parameter
  // offload, which runs under one sharding only, brings zero3.
  Knobs fixed;
  fixed.ring_exchange = RingExchange::AllGather;
  const Plan with = with_knobs(p, fixed);
  EXPECT_EQ(with.parallel.ring, 1);
  EXPECT_EQ(validate(with).error().field, "--ring-exchange");
  Knobs offloads;
  offloads.offload_checkpoints = true;
  offloads.offload_params = true;
  const Plan offloading = with_knobs(p, offloads);
  EXPECT_EQ(offloading.parallel.sharding, Sharding::Zero3);
  EXPECT_EQ(offloading.parallel.checkpoint, CheckpointPolicy::none());
  EXPECT_EQ(validate(offloading).error().field, "--offload-checkpoints");
}

// What the gathered exchange costs in memory: r pairs beside every block where hops keep one
// or two, every holder's accumulators in backward. At ring 4 on 4 GPUs of tiny-gqa (bf16)
// forward's attention op holds (4 - 2) more pairs, and backward more than (4 - 1) more
// accumulators' worth.
TEST(RingLayout, GatheredExchangeHoldsEveryRanksPairs) {
  Plan p = testing::cpu_plan("tiny-gqa", 4, 4096);
  p.parallel.ring = 4;
  p.train.dtype = p.train.grad_dtype = DType::BF16;
  auto op_workspace = [](const Plan& plan, const std::string& name) -> std::int64_t {
    const Evaluation e = evaluate(plan);
    for (const OpSpec& op : e.graph.ops())
      if (format(op.name) == name) return op.workspace_bytes;
    ADD_FAILURE() << "no op " << name;
    return 0;
  };
  const std::int64_t hops_f = op_workspace(p, "layer.0.attn.ring"), hops_b = op_workspace(p, "layer.0.attn.ring.bwd");
  p.parallel.ring_exchange = RingExchange::AllGather;
  const std::int64_t gathered_f = op_workspace(p, "layer.0.attn.ring"), gathered_b = op_workspace(p, "layer.0.attn.ring.bwd");
  const std::int64_t rows = 4096 / 4, P = 2 * rows * p.model.kv_heads * p.model.head_dim * 2, A = 2 * P;
  EXPECT_EQ(gathered_f - hops_f, 2 * P);
  EXPECT_GE(gathered_b - hops_b, 3 * A);
  // Never less memory than hops, so the longest-length search leaves it out (max_seq.cpp).
  for (int r : {2, 4}) {
    p.parallel.ring = r;
    p.parallel.ring_exchange = RingExchange::P2p;
    const std::int64_t hops = evaluate(p).sim.peak_device_bytes;
    p.parallel.ring_exchange = RingExchange::AllGather;
    EXPECT_GE(evaluate(p).sim.peak_device_bytes, hops) << "ring " << r;
  }
}

TEST(RingLayout, CandidatesAreTheDegreesThatDivideTheGpusBesideUlysses) {
  Plan p = testing::cpu_plan("tiny-gqa", 8, 4096);
  p.parallel.ulysses = 2;
  EXPECT_EQ(knob_candidates(KnobId::ring, p, all_techniques(), {}), (std::vector<KnobValue>{1, 2, 4}));
  EXPECT_EQ(knob_candidates(KnobId::ring, p, *parse_techniques("ulysses"), {}), (std::vector<KnobValue>{1}));
  // Head chunks inside a ring's steps: those of the Ulysses degree (tiny-gqa: 4 heads, 2 kv).
  p.parallel.ring = 2;
  EXPECT_EQ(knob_candidates(KnobId::head_chunk, p, all_techniques(), {}), (std::vector<KnobValue>{0, 2, 1}));
}

// The head count caps Ulysses: Llama-3.1-8B's 32 query heads allow no degree above 32 on 64
// GPUs. max-context then reaches further with a ring, and says which layout it chose.
TEST(RingLayout, MaxContextPastTheHeadCapChoosesARingAndSaysWhy) {
  const auto with = answer_max_context(cluster("llama-3.1-8b", 64), /*with_ladder=*/false);
  ASSERT_TRUE(with.ok()) << with.error().message;
  const auto without = answer_max_context(cluster("llama-3.1-8b", 64, "zero3,offload-optimizer,offload-params,ulysses,"
                                                                      "checkpoint,offload-checkpoints,tiled-mlp,tiled-loss"),
                                          false);
  ASSERT_TRUE(without.ok()) << without.error().message;
  EXPECT_GT(with->plan.parallel.ring, 1);
  EXPECT_GT(with->max_tokens, without->max_tokens);
  EXPECT_EQ(without->plan.parallel.ring, 1);
  EXPECT_LE(without->plan.parallel.ulysses, 32);
  EXPECT_NE(with->layout.find("ring"), std::string::npos) << with->layout;
  EXPECT_NE(with->layout.find(format_count(without->max_tokens)), std::string::npos) << with->layout;
  // The ladder's rungs leave bounds behind that only hold above their floors: the answer
  // and its layout line are the same with the ladder as without it.
  const auto laddered = answer_max_context(cluster("llama-3.1-8b", 64), /*with_ladder=*/true);
  ASSERT_TRUE(laddered.ok()) << laddered.error().message;
  EXPECT_EQ(laddered->max_tokens, with->max_tokens);
  EXPECT_EQ(laddered->layout, with->layout);
  // On one node Ulysses reaches every GPU, but its all-to-all holds NCCL's send/recv buffers
  // for each of its peers (footprint/communication.h: 384 MiB each on H100), where a ring's
  // rotation holds one peer's: a smaller Ulysses group with a ring may hold more, and the
  // layout then names what the longest plan without a ring reaches.
  const auto node = answer_max_context(cluster("llama-3.1-8b", 8, "zero3,ulysses,checkpoint,ring"), false);
  ASSERT_TRUE(node.ok()) << node.error().message;
  EXPECT_GT(node->plan.parallel.ring, 1) << node->layout;
  EXPECT_LT(node->plan.parallel.ulysses, 8) << node->layout;
  EXPECT_NE(node->layout.find("without a ring"), std::string::npos) << node->layout;
}

}  // namespace
}  // namespace longctx
