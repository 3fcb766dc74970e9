// The arctic stack's contract (stack.h): it answers plan and max-context for the presets on
// GPUs, refuses what ArcticTraining cannot express naming the option, takes the tile counts
// DeepSpeed and Liger pick, keeps what Liger's kernels keep (less than transformers' modules),
// and routes gradients and gathers through DeepSpeed's bucket and side streams.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "planner/search/memory_model.h"
#include "planner/core/plan.h"
#include "planner/core/presets.h"
#include "planner/search/request.h"
#include "planner/stacks/arctic/tiles.h"
#include "planner/stacks/stack_tiles.h"
#include "planner/stacks/step_builder.h"
#include "graph_names.h"

namespace longctx {
namespace {

PlanRequest arctic_request(const std::string& model, std::int64_t gpus, const std::string& seq) {
  PlanRequest r;
  r.cluster.model = model;
  r.cluster.gpus = gpus;
  r.cluster.gpu = "h100-80gb";
  r.cluster.stack = "arctic";
  r.seq = seq;
  return r;
}

TEST(ArcticStack, PlansEveryPresetOnGpus) {
  for (const std::string& model : presets::model_names()) {
    PlanRequest r = arctic_request(model, 8, "16K");
    const auto a = answer_plan(r);
    ASSERT_TRUE(a.ok()) << model << ": " << a.error().message;
    const Plan& p = a.value().recorded;
    EXPECT_EQ(p.train.stack.kind, StackKind::Arctic) << model;
    EXPECT_EQ(p.parallel.sharding, Sharding::Zero3) << model;
    EXPECT_EQ(p.parallel.head_chunk, 0) << model;
    // The liger model's loss is Liger's chunks, whatever the search chose besides.
    EXPECT_EQ(p.parallel.loss_tiles, *stack_tile_count(p.model, p.train, p.parallel.ulysses, true)) << model;
  }
}

TEST(ArcticStack, MaxContextWithTheFullStackAnswersAndEachRungAdds) {
  ClusterRequest r;
  r.model = "llama-3.1-8b";
  r.gpus = 8;
  r.stack = "arctic";
  r.techniques = "zero3,offload-optimizer,checkpoint,offload-checkpoints,tiled-mlp,tiled-loss,ulysses";
  const auto a = answer_max_context(r, /*with_ladder=*/true);
  ASSERT_TRUE(a.ok()) << a.error().message;
  const MaxContextResult& m = a.value();
  EXPECT_GT(m.max_tokens, 1'000'000);
  const Plan& p = m.plan;
  EXPECT_EQ(p.train.stack.kind, StackKind::Arctic);
  EXPECT_GT(p.parallel.ulysses, 1);
  EXPECT_TRUE(p.parallel.offload_checkpoints);
  // TiledMLP's own shard count, ceil(tokens per rank / hidden).
  EXPECT_EQ(p.parallel.mlp_tiles, arctic_mlp_shards(tokens_per_rank(p.train, p.parallel.ulysses), p.model.hidden));
  ASSERT_GE(m.ladder.size(), 3u);
  for (std::size_t i = 1; i < m.ladder.size(); ++i) EXPECT_GE(m.ladder[i].max_tokens, m.ladder[i - 1].max_tokens);
  EXPECT_EQ(m.ladder.back().max_tokens, m.max_tokens);
}

// TiledMLP runs one shard per `hidden` tokens of a rank, so at the shortest lengths max-context
// takes its bounds at (two and four grids) Llama-3.2-1B's ranks run their MLP whole, and the
// two lengths' steps differ in ops. Without the ladder's floor every configuration then had no
// bound, and max-context answered that nothing fits at 8,192 tokens, where plans fit at 9.9M.
TEST(ArcticStack, MaxContextWithoutTheLadderReachesTheLaddersAnswer) {
  ClusterRequest r;
  r.model = "llama-3.2-1b";
  r.gpus = 8;
  r.stack = "arctic";
  const auto with = answer_max_context(r, /*with_ladder=*/true);
  const auto without = answer_max_context(r, /*with_ladder=*/false);
  ASSERT_TRUE(with.ok()) << with.error().message;
  ASSERT_TRUE(without.ok()) << without.error().message;
  EXPECT_GT(without.value().max_tokens, 1'000'000);
  EXPECT_EQ(without.value().max_tokens, with.value().max_tokens);
  // Tiled MLP alone beside ZeRO-3: its answer is a length plan fits.
  r.techniques = "zero3,tiled-mlp";
  const auto tiled = answer_max_context(r, /*with_ladder=*/false);
  ASSERT_TRUE(tiled.ok()) << tiled.error().message;
  PlanRequest at = arctic_request("llama-3.2-1b", 8, std::to_string(tiled.value().max_tokens));
  at.cluster.techniques = r.techniques;
  const auto plan = answer_plan(at);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_TRUE(plan.value().recorded.prediction.feasible);
}

TEST(ArcticStack, RefusesWhatItCannotExpressNamingTheOption) {
  const std::pair<const char*, void (*)(PlanRequest&)> cases[] = {
      {"--sharding", [](PlanRequest& r) { r.knobs.sharding = Sharding::None; }},
      {"--head-chunk", [](PlanRequest& r) { r.knobs.ulysses = 8; r.knobs.head_chunk = 2; }},
      {"--mlp-tiles", [](PlanRequest& r) { r.knobs.mlp_tiles = 3; }},
      {"--loss-tiles", [](PlanRequest& r) { r.knobs.loss_tiles = 1; }},
      {"--checkpoint", [](PlanRequest& r) { r.knobs.checkpoint = CheckpointPolicy::every_k(2); }},
      {"--dtype", [](PlanRequest& r) { r.cluster.dtype = "fp32"; }},
  };
  for (const auto& [field, edit] : cases) {
    PlanRequest r = arctic_request("llama-3.1-8b", 8, "64K");
    r.no_search = true;
    edit(r);
    const auto a = answer_plan(r);
    ASSERT_FALSE(a.ok()) << field;
    EXPECT_EQ(a.error().field, field);
    EXPECT_NE(a.error().message.find("--stack arctic"), std::string::npos) << a.error().message;
  }
  PlanRequest cpu = arctic_request("tiny-gqa", 1, "1K");
  cpu.cluster.gpu = "cpu";
  EXPECT_EQ(answer_plan(cpu).error().field, "--gpu");
  PlanRequest sdpa = arctic_request("llama-3.1-8b", 8, "64K");
  sdpa.cluster.attention = "sdpa";
  EXPECT_EQ(answer_plan(sdpa).error().field, "--attention");
  PlanRequest other = arctic_request("llama-3.1-8b", 8, "64K");
  other.cluster.stack = "hf";
  other.cluster.gpus = 1;
  other.cluster.arctic_model = "liger";
  EXPECT_EQ(answer_plan(other).error().field, "--arctic-model");
  // The huggingface model computes its loss over the full logits: one rank of the sequence.
  PlanRequest hf_model = arctic_request("llama-3.1-8b", 8, "64K");
  hf_model.cluster.arctic_model = "huggingface";
  hf_model.no_search = true;
  hf_model.knobs.ulysses = 8;
  EXPECT_EQ(answer_plan(hf_model).error().field, "--ulysses");
}

TEST(ArcticStack, APlanFileKeepsItsStack) {
  PlanRequest r = arctic_request("llama-3.1-8b", 8, "64K");
  r.cluster.attention = "flash_attention_3";
  r.cluster.arctic_model = "huggingface";
  r.knobs.checkpoint = CheckpointPolicy::full();
  r.no_search = true;
  const Plan p = answer_plan(r).value().recorded;
  const Plan back = plan_from_json(plan_to_json(p)).value();
  EXPECT_EQ(back.train.stack, p.train.stack);
  EXPECT_EQ(back.train.stack.arctic_model, ArcticModel::HuggingFace);
  EXPECT_EQ(back.train.stack.attention, HfAttention::FlashAttention3);
  // It holds the arctic stack's options only, and an attention the stack cannot run is refused
  // as on the command line, naming the plan's field.
  nlohmann::json j = plan_to_json(p);
  EXPECT_FALSE(j["train"]["stack"].contains("optimizer"));
  j["train"]["stack"]["attention"] = "sdpa";
  const auto bad = plan_from_json(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().field, "train.stack.attention");
  EXPECT_NE(bad.error().message.find("--stack arctic"), std::string::npos) << bad.error().message;
}

// Liger's SwiGLU saves gate and up beside the product down_proj keeps (transformers' MLP four
// [n, I]), and its RMSNorm saves the input and rstd only (transformers' the fp32 input and the
// normalized input too).
TEST(ArcticStack, LigerKeepsLessThanTransformersModules) {
  auto graph = [](const char* model) {
    PlanRequest r = arctic_request("llama-3.1-8b", 8, "16K");
    r.cluster.arctic_model = model;
    r.no_search = true;
    return build_step(step_inputs(answer_plan(r).value().recorded));
  };
  auto saved = [](const StepGraph& g, const std::string& prefix) {
    int count = 0;
    for (const auto& t : g.tensors())
      if (t.category == Category::Activations && format(t.name).rfind(prefix, 0) == 0) ++count;
    return count;
  };
  const StepGraph liger = graph("liger"), hf = graph("huggingface");
  EXPECT_EQ(saved(liger, "layer.0.mlp."), 3);
  EXPECT_EQ(saved(hf, "layer.0.mlp."), 4);
  EXPECT_EQ(saved(liger, "layer.0.attn_norm."), 2);  // rstd and the output
  EXPECT_EQ(saved(hf, "layer.0.attn_norm."), 5);     // fp32 input, rstd, normalized fp32 and bf16, output
}

// A tied table under Liger's loss: the gradient Liger made in forward is the table's, kept
// through the backward until the embedding's is added into it in place, and handed to
// DeepSpeed's hook once, summed: one [V, h] gradient for the table, none for lm_head apart.
TEST(ArcticStack, ATiedTablesGradientWaitsForTheEmbeddingsAndReachesTheHookOnce) {
  PlanRequest r = arctic_request("llama-3.2-1b", 2, "16K");
  r.no_search = true;
  const Plan p = answer_plan(r).value().recorded;
  ASSERT_TRUE(p.model.tie_embeddings);
  const StepGraph g = build_step(step_inputs(p));
  int table_grads = 0, head_grads = 0;
  for (const auto& t : g.tensors()) {
    table_grads += format(t.name) == "embed.grad";
    head_grads += format(t.name) == "head.grad.output";
  }
  const int accumulate = testing::op_index(g, "embed.grad.accumulate"), flce = testing::op_index(g, "loss.flce");
  EXPECT_EQ(table_grads, 1);
  EXPECT_EQ(head_grads, 0);
  ASSERT_GE(accumulate, 0);
  ASSERT_GE(flce, 0);
  const OpSpec& add = g.ops()[static_cast<std::size_t>(accumulate)];
  EXPECT_EQ(add.outputs.size(), 0);  // in place
  // Made by Liger's forward, read until the hook takes it, after the embedding's is added.
  bool made_by_flce = false;
  for (const int t : g.ops()[static_cast<std::size_t>(flce)].outputs)
    if (format(g.tensor(t).name) == "embed.grad") {
      made_by_flce = true;
      EXPECT_GT(g.tensor(t).last_reader, accumulate);
    }
  EXPECT_TRUE(made_by_flce);
  // Into the bucket right after the sum, once.
  int to_bucket_after = 0;
  for (std::size_t i = static_cast<std::size_t>(accumulate) + 1; i < g.ops().size(); ++i)
    to_bucket_after += format(g.ops()[i].name) == "zero.grad_to_bucket";
  EXPECT_GE(to_bucket_after, 1);
}

// DeepSpeed's bucket is held for the run, its reductions run on their own stream, and across
// ranks each module's parameters are gathered on the allgather stream.
TEST(ArcticStack, GradientsAndGathersGoThroughDeepSpeed) {
  PlanRequest r = arctic_request("llama-3.1-8b", 8, "16K");
  r.no_search = true;
  r.knobs.checkpoint = CheckpointPolicy::full();
  const StepGraph g = build_step(step_inputs(answer_plan(r).value().recorded));
  int reductions = 0, gathers = 0;
  for (const auto& o : g.ops()) {
    const std::string name = format(o.name);
    if (name == "zero.reduce_scatter") {
      ++reductions;
      EXPECT_EQ(o.stream, 2);
    }
    if (name.find("params.full") != std::string::npos && o.comm == CommKind::AllGather) {
      ++gathers;
      // Liger reads lm_head's weight without calling the module: an external parameter,
      // gathered synchronously on the default stream.
      EXPECT_EQ(o.stream, name == "head.params.full" ? 0 : 1) << name;
    }
  }
  // 8B parameters through a bucket of 5e8 elements: at least 16 reductions; every layer
  // gathered twice in forward (attention, MLP) and once for its recompute and backward.
  EXPECT_GE(reductions, 16);
  EXPECT_GE(gathers, 3 * 32);
  bool bucket = false;
  for (const auto& t : g.tensors())
    if (format(t.name) == "zero.ipg_bucket") bucket = t.persistent && t.bytes == 500'000'000LL * 2;
  EXPECT_TRUE(bucket);
}

}  // namespace
}  // namespace longctx
