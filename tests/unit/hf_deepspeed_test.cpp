// The hf stack under DeepSpeed ZeRO-3 (planner/stacks/hf/deepspeed.cpp): DeepSpeed's Ulysses
// and ZeRO-3 blocks shared with the arctic stack, the batch as UlyssesSPDataLoaderAdapter
// hands it over, the Trainer's loss on its shift_labels, a tied table's gradient handed to
// ZeRO's hook once, what it refuses naming the option, and the files it exports.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "planner/footprint/deepspeed.h"
#include "planner/io/export.h"
#include "planner/search/request.h"
#include "planner/stacks/hf/export.h"
#include "planner/stacks/step_builder.h"
#include "graph_names.h"
#include "refusal_cases.h"

namespace longctx {
namespace {

PlanRequest deepspeed_request(const std::string& model, std::int64_t gpus, int ulysses, const std::string& seq) {
  PlanRequest r;
  r.cluster.model = model;
  r.cluster.gpus = gpus;
  r.cluster.gpu = "h100-80gb";
  r.cluster.stack = "hf";
  r.cluster.attention = "flash_attention_2";
  r.seq = seq;
  r.no_search = true;
  r.knobs.sharding = Sharding::Zero3;
  r.knobs.ulysses = ulysses;
  r.knobs.offload_optimizer = true;
  r.knobs.checkpoint = CheckpointPolicy::full();
  return r;
}

Plan planned(const PlanRequest& r) {
  const auto a = answer_plan(r);
  EXPECT_TRUE(a.ok()) << a.error().message;
  return a.value().recorded;
}

using testing::tensor_bytes;

bool has_op(const StepGraph& g, const std::string& name) {
  for (const auto& o : g.ops())
    if (format(o.name) == name) return true;
  return false;
}

// Ulysses 4 over 4 GPUs: the rank's four [b, S/u] int64 keys, q/k/v exchanged to every token
// of the rank's heads, ZeRO-3's gathers and bucket, bf16 gradients, and transformers' loss
// over the rank's logits on the adapter's shift_labels (no pad of its own).
TEST(HfDeepSpeed, UlyssesRanksHoldTheirSliceAndLossTheirLogits) {
  const Plan p = planned(deepspeed_request("qwen3-8b", 4, 4, "32K"));
  EXPECT_EQ(p.train.grad_dtype, DType::BF16) << "DeepSpeed reduces the parameters' dtype";
  const StepGraph g = build_step(step_inputs(p));
  const auto bytes = tensor_bytes(g);
  const std::int64_t S = p.train.seq, n = S / 4, V = p.model.vocab, h = p.model.hidden;
  for (const char* key : {"batch.tokens", "batch.targets", "batch.attention_mask", "batch.position_ids"})
    EXPECT_EQ(bytes.at(key), n * 8) << key;
  EXPECT_EQ(bytes.at("layer.0.attn.q_sp"), S * (p.model.heads / 4) * p.model.head_dim * 2);
  EXPECT_EQ(bytes.at("loss.logits"), n * V * 2);
  EXPECT_EQ(bytes.at("loss.logits.fp32"), n * V * 4);
  EXPECT_EQ(bytes.count("loss.shift_labels"), 0u) << "the adapter shifted the labels";
  EXPECT_EQ(bytes.at("zero.ipg_bucket"), footprint::deepspeed::kReduceBucketElems * 2);
  EXPECT_EQ(bytes.at("head.params.full"), V * h * 2) << "lm_head gathered over 4 ranks";
  EXPECT_TRUE(has_op(g, "layer.0.attn.a2a_q") && has_op(g, "layer.0.attn.params.full"));
  EXPECT_TRUE(has_op(g, "batch.ulysses_refill"));
}

// The arctic stack's Ulysses attention is the same block: the same exchanges, the same sizes.
TEST(HfDeepSpeed, SharesUlyssesAttentionWithTheArcticStack) {
  const Plan hf = planned(deepspeed_request("llama-3.1-8b", 8, 8, "64K"));
  PlanRequest r = deepspeed_request("llama-3.1-8b", 8, 8, "64K");
  r.cluster.stack = "arctic";
  r.cluster.attention = "flash_attention_2";
  r.cluster.arctic_model = "liger";  // its huggingface model refuses Ulysses
  r.no_search = false;  // the arctic stack decides its own tiles
  r.knobs = Knobs{};
  r.knobs.ulysses = 8;
  r.knobs.micro_batch = 1;
  r.knobs.checkpoint = CheckpointPolicy::full();
  r.knobs.offload_optimizer = true;
  const auto arctic_answer = answer_plan(r);
  ASSERT_TRUE(arctic_answer.ok()) << arctic_answer.error().message;
  const auto a = tensor_bytes(build_step(step_inputs(hf)));
  const auto b = tensor_bytes(build_step(step_inputs(arctic_answer.value().recorded)));
  for (const char* t : {"layer.0.attn.q_sp", "layer.0.attn.k_sp", "layer.0.attn.o_sp", "layer.0.attn.out"})
    EXPECT_EQ(a.at(t), b.at(t)) << t;
}

// One GPU with ZeRO-3 (the HF guide's baseline): DeepSpeed, not FSDP2; ForCausalLMLoss pads
// and shifts the batch's labels itself; no exchanges; the partitions alias the parameters.
TEST(HfDeepSpeed, OneGpuRunsDeepSpeedWithTheModelsOwnShift) {
  const Plan p = planned(deepspeed_request("qwen3-8b", 1, 1, "8K"));
  const StepGraph g = build_step(step_inputs(p));
  const auto bytes = tensor_bytes(g);
  EXPECT_EQ(bytes.count("loss.shift_labels"), 1u);
  EXPECT_EQ(bytes.count("layer.0.attn.q_sp"), 0u);
  EXPECT_EQ(bytes.count("head.params.full"), 0u) << "one rank: nothing gathered";
  EXPECT_EQ(bytes.count("zero.ipg_bucket"), 1u);
  EXPECT_EQ(bytes.count("layer.0.fsdp.reduce_scatter_input"), 0u);
}

// A tied table (Llama-3.2-1B): autograd sums lm_head's and the embedding's gradients into
// the one parameter's, which reaches ZeRO's hook once, after the embedding's backward.
TEST(HfDeepSpeed, ATiedTableReachesTheHookOnce) {
  const Plan p = planned(deepspeed_request("llama-3.2-1b", 2, 2, "16K"));
  const StepGraph g = build_step(step_inputs(p));
  int tied = -1;
  for (std::size_t i = 0; i < g.tensors().size(); ++i)
    if (format(g.tensors()[i].name) == "embed.grad") tied = static_cast<int>(i);
  ASSERT_GE(tied, 0);
  int handed = 0, accumulate = -1, first_hand = -1;
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    const auto& o = g.ops()[i];
    const std::string name = format(o.name);
    if (name == "embed.grad.accumulate") accumulate = static_cast<int>(i);
    const bool reads = std::find(o.inputs.begin(), o.inputs.end(), tied) != o.inputs.end();
    if (reads && (name == "zero.grad_to_bucket" || name == "zero.reduce_scatter")) {
      ++handed;
      if (first_hand < 0) first_hand = static_cast<int>(i);
    }
  }
  EXPECT_EQ(handed, 1);
  EXPECT_GT(first_hand, accumulate);
}

TEST(HfDeepSpeed, RefusesWhatItDoesNotModelNamingTheOption) {
  testing::expect_refused_naming_the_option(
      [] { return deepspeed_request("llama-3.2-1b", 4, 2, "8K"); },
      {
          {"--attention", [](PlanRequest& r) { r.cluster.attention = "sdpa"; }},
          {"--hf-loss", [](PlanRequest& r) { r.cluster.hf_loss = "trl-chunked-nll"; }},
          {"--checkpoint", [](PlanRequest& r) { r.knobs.checkpoint = CheckpointPolicy::none(); }},
          {"--ulysses", [](PlanRequest& r) { r.knobs.ring = 2; }},
          {"--sharding", [](PlanRequest& r) { r.cluster.gpu = "cpu"; r.cluster.attention = ""; }},
          // The offloads are DeepSpeed's: one GPU without ZeRO-3 runs none.
          {"--sharding", [](PlanRequest& r) { r.cluster.gpus = 1; r.knobs.ulysses = 1; r.knobs.sharding = Sharding::None; }},
      });
}

// accelerate's config as the HF Ulysses guide writes it (distributed_type DEEPSPEED, the
// DeepSpeed config file, parallelism_config sp over DeepSpeed's backend, the plan's flash
// attention), ds_config.json (ZeRO-3, the optimizer offloaded) and the launcher naming it.
TEST(HfDeepSpeed, ExportsAccelerateDeepSpeedWithUlysses) {
  const Plan p = planned(deepspeed_request("qwen3-8b", 4, 4, "32K"));
  const auto files = export_plan(p, kHfExporter);
  ASSERT_TRUE(files.ok()) << files.error().message;
  const auto& f = files.value().files;
  const std::string& yaml = f.at(kAccelerateConfigFile);
  for (const char* want : {"distributed_type: \"DEEPSPEED\"", "parallelism_config_sp_size: 4",
                           "parallelism_config_sp_backend: \"deepspeed\"",
                           "parallelism_config_sp_attn_implementation: \"flash_attention_2\"", "deepspeed_config_file"})
    EXPECT_NE(yaml.find(want), std::string::npos) << want << "\n" << yaml;
  const std::string& ds = f.at("ds_config.json");
  EXPECT_NE(ds.find("\"stage\": 3"), std::string::npos) << ds;
  EXPECT_NE(ds.find("\"offload_optimizer\""), std::string::npos) << ds;
  EXPECT_EQ(ds.find("reduce_bucket_size"), std::string::npos) << "DeepSpeed's defaults, as the plan predicts";
  EXPECT_NE(f.at("launch.sh").find("--deepspeed_config_file"), std::string::npos);
  // One GPU under DeepSpeed is still DeepSpeed, not a bare process.
  const auto one = export_plan(planned(deepspeed_request("qwen3-8b", 1, 1, "8K")), kHfExporter);
  ASSERT_TRUE(one.ok()) << one.error().message;
  EXPECT_NE(one.value().files.at(kAccelerateConfigFile).find("DEEPSPEED"), std::string::npos);
  EXPECT_EQ(one.value().files.count("ds_config.json"), 1u);
}

}  // namespace
}  // namespace longctx
