// The hf stack across GPUs (planner/stacks/hf/distributed.cpp): accelerate's FSDP2 reducing in
// bf16 into fp32 shards, torch's context parallel as the Trainer hands it the batch (the
// buffers resized in place keep their storage), TRL's chunked loss over the rank's rows, what
// it refuses naming the option, and the accelerate and TRL files it exports.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "planner/footprint/fsdp2.h"
#include "planner/footprint/step_shapes.h"
#include "planner/footprint/zero.h"
#include "planner/io/export.h"
#include "planner/search/memory_model.h"
#include "planner/search/request.h"
#include "planner/search/stack_answers.h"
#include "planner/stacks/hf/export.h"
#include "planner/stacks/step_builder.h"
#include "graph_names.h"
#include "refusal_cases.h"

namespace longctx {
namespace {

PlanRequest hf_request(const std::string& model, std::int64_t gpus, int ring, const std::string& seq) {
  PlanRequest r;
  r.cluster.model = model;
  r.cluster.gpus = gpus;
  r.cluster.gpu = "h100-80gb";
  r.cluster.stack = "hf";
  r.cluster.hf_loss = "trl-chunked-nll";
  r.seq = seq;
  r.no_search = true;
  r.knobs.sharding = gpus > 1 ? Sharding::Zero3 : Sharding::None;
  r.knobs.ring = ring;
  r.knobs.checkpoint = CheckpointPolicy::full();
  return r;
}

using testing::op_index;
using testing::tensor_bytes;

// set_mixed_precision("bf16"): reduce_dtype bf16, so the reduce-scatter input is [world *
// shard] bf16 and its output [shard] bf16 before the fp32 shard kept (foreach_reduce).
// max-context --stack all with an hf option (--hf-loss trl-chunked-nll, which docs/cli.md
// names for the hf row's rings): the hf row runs it, and the rows of stacks that do not take
// it answer as without it (the longctx row refused it, and with it the whole answer).
TEST(HfDistributed, AnHfOptionGivenToEveryStackIsTheHfRowsAlone) {
  ClusterRequest r;
  r.model = "llama-3.2-1b";
  r.gpus = 8;
  r.hf_loss = "trl-chunked-nll";
  const auto all = answer_max_context_per_stack(r, /*with_ladder=*/false);
  ASSERT_FALSE(all.empty());
  ASSERT_TRUE(all.front().answer) << all.front().refusal->what();
  bool hf_seen = false;
  for (const StackAnswer& a : all) {
    if (a.stack != std::string("hf")) continue;
    hf_seen = true;
    ASSERT_TRUE(a.answer) << a.refusal->what();
    EXPECT_EQ(a.answer->plan.train.stack.loss, HfLoss::TrlChunkedNll);
  }
  EXPECT_TRUE(hf_seen);
  ClusterRequest longctx_alone = r;
  longctx_alone.hf_loss = "";
  longctx_alone.stack = "longctx";
  const auto plain = answer_max_context(longctx_alone, /*with_ladder=*/false);
  ASSERT_TRUE(plain) << plain.error().what();
  EXPECT_EQ(all.front().answer->max_tokens, plain->max_tokens);
}

TEST(HfDistributed, AccelerateReducesInBf16IntoFp32Shards) {
  const Plan p = answer_plan(hf_request("llama-3.2-1b", 8, 1, "8K")).value().recorded;
  const StepGraph g = build_step(step_inputs(p));
  const footprint::StepShapes s = footprint::step_shapes(step_inputs(p));
  const std::int64_t shard = footprint::fsdp2::padded_shard_elems(s, 0);
  bool input = false, output = false, kept = false;
  for (const auto& t : g.tensors()) {
    const std::string n = format(t.name);
    if (n == "layer.0.fsdp.reduce_scatter_input") input = t.bytes == 8 * shard * 2;
    if (n == "layer.0.fsdp.reduce_output") output = t.bytes == shard * 2;
    if (n == "layer.0.grad.shard") kept = t.bytes == shard * 4;
  }
  EXPECT_TRUE(input && output && kept);
}

// The Trainer's context-parallel batch: input_ids, labels and the attention_mask keep their
// [b, S] int64 storage after resize_, shift_labels is the [b, S+1] pad for one sample,
// position_ids the [S] arange; TRL's loss sees the rank's b*Sl rows, unshifted.
TEST(HfDistributed, ContextParallelKeepsTheBatchStorageAndLossesTheRanksRows) {
  const Plan p = answer_plan(hf_request("qwen3-8b", 8, 8, "64K")).value().recorded;
  const StepGraph g = build_step(step_inputs(p));
  const auto bytes = tensor_bytes(g);
  const std::int64_t S = p.train.seq, n = S / 8;
  EXPECT_EQ(bytes.at("batch.tokens"), S * 8);
  EXPECT_EQ(bytes.at("batch.attention_mask"), S * 8);
  EXPECT_EQ(bytes.at("cp.shift_labels"), (S + 1) * 8);
  EXPECT_EQ(bytes.at("cp.position_ids"), S * 8);
  EXPECT_EQ(bytes.at("loss.trl.order"), n * 8);
  EXPECT_EQ(bytes.count("loss.final_norm.out.grad"), 0u) << "no shift's slice to pad back";
  EXPECT_EQ(bytes.at("model.rope.cos"), n * p.model.head_dim * 2) << "per token from the rank's position_ids";
  bool ring = false;
  for (const auto& o : g.ops()) ring = ring || format(o.name) == "layer.0.attn.ring";
  EXPECT_TRUE(ring);
}

// The name of the last op reading the first tensor named `name`.
std::string last_reader(const StepGraph& g, const std::string& name) {
  for (const auto& t : g.tensors())
    if (format(t.name) == name) return t.last_reader >= 0 ? format(g.ops()[static_cast<std::size_t>(t.last_reader)].name) : "";
  return "(no tensor)";
}

// accelerate's tied wrapping (fully_shard([norm, embed_tokens, lm_head])): the final norm is
// gathered with the table, so its forward gathers nothing and the last layer's gathered
// buffer lives until the root's post-forward, after the loss; one reduce for both at the end.
TEST(HfDistributed, ATiedTableIsOneGroupWithTheFinalNorm) {
  const Plan p = answer_plan(hf_request("llama-3.2-1b", 8, 2, "8K")).value().recorded;
  ASSERT_TRUE(p.model.tie_embeddings);
  const StepGraph g = build_step(step_inputs(p));
  EXPECT_EQ(op_index(g, "head.fsdp.all_gather"), -1);
  EXPECT_EQ(op_index(g, "head.fsdp.reduce_scatter"), -1);
  EXPECT_GE(op_index(g, "embed.fsdp.reduce_scatter"), 0);
  const std::string last_layer = fmt::format("layer.{}.fsdp.all_gather_output", p.model.layers - 1);
  EXPECT_EQ(last_reader(g, last_layer), "fsdp.root_post_forward");
}

// A reentrant checkpoint reruns the layer under its FSDP forward hooks: the copy-out keeps
// the gathered buffer until the recompute's post-forward, and the next layer's gather comes
// after the recompute.
TEST(HfDistributed, AReentrantRecomputeHoldsItsGatherUntilItsPostForward) {
  PlanRequest r = hf_request("qwen3-8b", 8, 2, "8K");
  r.cluster.hf_checkpointing = "reentrant";
  const Plan p = answer_plan(r).value().recorded;
  const StepGraph g = build_step(step_inputs(p));
  const int post_forward = op_index(g, "layer.3.fsdp.recompute_post_forward");
  ASSERT_GE(post_forward, 0);
  int gather = -1;
  for (std::size_t i = 0; i < g.ops().size(); ++i)
    if (format(g.ops()[i].name) == "layer.2.fsdp.all_gather" && g.ops()[i].phase == Phase::Backward)
      gather = static_cast<int>(i);
  EXPECT_GT(gather, post_forward);
}

// Reentrant checkpointing's RNG state is an attribute of its CheckpointFunction node, which
// lives as long as the loss's graph (CPU profile: every layer's 5,056 B freed together after the
// last layer's backward); non-reentrant's frame goes with its layer's backward.
TEST(HfDistributed, AReentrantCheckpointsRngStateLivesAsLongAsTheGraph) {
  for (const char* checkpointing : {"reentrant", "non-reentrant"}) {
    PlanRequest r = hf_request("llama-3.2-1b", 2, 2, "8K");
    r.cluster.gpu = "cpu";
    r.cluster.hf_checkpointing = checkpointing;
    const StepGraph g = build_step(step_inputs(answer_plan(r).value().recorded));
    SCOPED_TRACE(checkpointing);
    const std::string reader = last_reader(g, "layer.1.checkpoint.rng_state");
    if (std::string(checkpointing) == "reentrant") {
      EXPECT_EQ(reader, "autograd.graph_freed");
      EXPECT_GT(op_index(g, "autograd.graph_freed"), op_index(g, "cp.context_exit"));
    } else {
      EXPECT_EQ(reader.rfind("layer.1.", 0), 0u) << reader;
      EXPECT_EQ(op_index(g, "autograd.graph_freed"), -1);
    }
  }
}

// context_parallel's generator frame holds the shards and the last clone until backward ends.
TEST(HfDistributed, ContextParallelsFrameHoldsItsShardsThroughBackward) {
  const Plan p = answer_plan(hf_request("qwen3-8b", 8, 8, "64K")).value().recorded;
  const StepGraph g = build_step(step_inputs(p));
  EXPECT_EQ(tensor_bytes(g).at("cp.shard.clone"), p.train.seq / 8 * 8);
  EXPECT_EQ(last_reader(g, "cp.shard.input_ids.local"), "cp.context_exit");
  EXPECT_EQ(last_reader(g, "cp.shard.clone"), "cp.context_exit");
}

// Rows that do not divide by the ranks (tiny-odd's table of 331 rows and its 136-row gate and
// up projections, over 3): FSDPParam.init_all_gather_outputs makes each parameter's buffer
// its padded shard times the world, on any device; on the CPU only, chunk_cat pads each such
// gradient into a copy held until the reduce's copy-in ends (CUDA's kernel writes them as
// they are).
TEST(HfDistributed, PaddedRowsFillTheGatherBufferAndOnTheCpuThePaddedCopiesOfTheReduce) {
  for (const char* gpu : {"h100-80gb", "cpu"}) {
    PlanRequest r = hf_request("tiny-odd", 3, 3, "96");
    r.cluster.gpu = gpu;
    const Plan p = answer_plan(r).value().recorded;
    const StepInputs in = step_inputs(p);
    const StepGraph g = build_step(in);
    const footprint::StepShapes s = footprint::step_shapes(in);
    const int embed = footprint::embed_group(s);
    SCOPED_TRACE(gpu);
    EXPECT_EQ(tensor_bytes(g).at("embed.fsdp.unsharded_params"), 3 * footprint::fsdp2::padded_shard_elems(s, embed) * s.e);
    EXPECT_GT(tensor_bytes(g).at("embed.fsdp.unsharded_params"), footprint::group_params(s, embed) * s.e);
    const int copy_in = op_index(g, "layer.0.fsdp.reduce_copy_in");
    ASSERT_GE(copy_in, 0);
    const std::int64_t padded = footprint::fsdp2::reduce_copy_in_padding_bytes(s, 0, s.e);
    EXPECT_GT(padded, 0);
    EXPECT_EQ(g.ops()[static_cast<std::size_t>(copy_in)].workspace_bytes, std::string(gpu) == "cpu" ? padded : 0);
  }
}

// A tied table's gradients meet in its input buffer (HfStep::tied_sum): a single TRL chunk's
// lm_head gradient, a view, and the embedding's are summed into a new [V, h] tensor; with more
// chunks the second chunk's makes that sum and the embedding's is added into it in place. The
// sum is the table's gradient as it is: no copy after. One rank and across ranks alike.
TEST(HfDistributed, ATiedTablesGradientsMeetInANewSum) {
  for (const std::int64_t gpus : {1, 2}) {
    SCOPED_TRACE(gpus);
    // 256 rows per rank: one chunk (one rank shifts 257 tokens to 256 rows).
    const std::string one_chunk = gpus == 1 ? "257" : "512";
    for (const std::string& seq : {one_chunk, std::string("8K")}) {
      SCOPED_TRACE(seq);
      const Plan p = answer_plan(hf_request("llama-3.2-1b", gpus, gpus > 1 ? 2 : 1, seq)).value().recorded;
      ASSERT_TRUE(p.model.tie_embeddings);
      const StepGraph g = build_step(step_inputs(p));
      const bool single = seq == one_chunk;
      const int add = op_index(g, "embed.grad.accumulate"), sum = op_index(g, "loss.trl.chunk.weight.grad.sum");
      ASSERT_GE(add, 0);
      EXPECT_EQ(sum >= 0, !single);
      const OpSpec& made = g.ops()[static_cast<std::size_t>(single ? add : sum)];
      ASSERT_EQ(made.outputs.size(), 1);
      EXPECT_EQ(format(g.tensor(*made.outputs.begin()).name), "embed.grad");
      EXPECT_EQ(g.tensor(*made.outputs.begin()).bytes, p.model.vocab * p.model.hidden * 2);
      EXPECT_EQ(g.ops()[static_cast<std::size_t>(add)].outputs.size(), single ? 1 : 0);
      EXPECT_EQ(op_index(g, "embed.grad.copy"), -1);
    }
  }
}

// The Trainer's checkpoint wraps the layer's call: its RNG state is saved before the layer's
// FSDP pre-forward gathers; each recompute runs under fork_rng, whose saved CPU state is device
// memory on the CPU virtual device only.
TEST(HfDistributed, TheCheckpointSavesItsRngBeforeTheGatherAndItsRecomputeForksIt) {
  for (const char* gpu : {"h100-80gb", "cpu"}) {
    PlanRequest r = hf_request("llama-3.2-1b", 2, 2, "8K");
    r.cluster.gpu = gpu;
    const Plan p = answer_plan(r).value().recorded;
    const StepGraph g = build_step(step_inputs(p));
    SCOPED_TRACE(gpu);
    const bool cpu = std::string(gpu) == "cpu";
    EXPECT_EQ(op_index(g, "layer.1.checkpoint.save_rng") >= 0, cpu);
    EXPECT_EQ(op_index(g, "layer.1.checkpoint.fork_rng") >= 0, cpu);
    if (!cpu) continue;
    EXPECT_LT(op_index(g, "layer.1.checkpoint.save_rng"), op_index(g, "layer.1.fsdp.all_gather"));
    EXPECT_EQ(tensor_bytes(g).at("layer.1.checkpoint.fork_rng"), 5056);
    // Held until the recompute's last op (non-reentrant's early stop).
    EXPECT_NE(last_reader(g, "layer.1.checkpoint.fork_rng").find(".recompute"), std::string::npos);
  }
}

// torch's checkpoint keeps the layer's input until its backward returns (non-reentrant: in its
// _NoopSaveInputs node; reentrant: in CheckpointFunction's saved tensors), the layer's last:
// in bf16, where the first norm saves an fp32 copy rather than the input, the input still lives
// through the layer's backward (one GPU and across GPUs, any device).
TEST(HfDistributed, TheCheckpointHoldsTheLayersInputThroughItsBackward) {
  for (const auto& [gpus, checkpointing] : {std::pair<std::int64_t, const char*>{1, "non-reentrant"}, {2, "non-reentrant"},
                                           {1, "reentrant"}, {2, "reentrant"}}) {
    PlanRequest r = hf_request("llama-3.2-1b", gpus, gpus, "8K");
    r.cluster.hf_checkpointing = checkpointing;
    const Plan p = answer_plan(r).value().recorded;
    ASSERT_EQ(p.train.dtype, DType::BF16);
    const StepGraph g = build_step(step_inputs(p));
    SCOPED_TRACE(fmt::format("{} GPUs, {}", gpus, checkpointing));
    const std::string reader = last_reader(g, "layer.2.in");
    const int at = op_index(g, reader);
    ASSERT_GE(at, 0) << reader;
    // No op of layer 2's backward computes after it (FSDP's reshard and reduce follow).
    for (std::size_t i = static_cast<std::size_t>(at) + 1; i < g.ops().size(); ++i) {
      const std::string name = format(g.ops()[i].name);
      if (g.ops()[i].phase == Phase::Backward && g.ops()[i].layer == 2 && name.find(".fsdp.") == std::string::npos)
        FAIL() << name << " after " << reader;
    }
    EXPECT_EQ(g.ops()[static_cast<std::size_t>(at)].layer, 2);
  }
}

TEST(HfDistributed, RefusesWhatItDoesNotModelNamingTheOption) {
  testing::expect_refused_naming_the_option(
      [] { return hf_request("llama-3.2-1b", 8, 2, "8K"); },
      {
          {"--sharding", [](PlanRequest& r) { r.knobs.sharding = Sharding::None; }},
          {"--attention", [](PlanRequest& r) { r.cluster.attention = "eager"; }},
          {"--hf-loss", [](PlanRequest& r) { r.cluster.hf_loss = "transformers"; }},
          {"--hf-no-attention-mask", [](PlanRequest& r) { r.cluster.hf_no_attention_mask = true; }},
          // Ulysses runs under DeepSpeed (hf_deepspeed_test.cpp), not beside context parallel.
          {"--ulysses", [](PlanRequest& r) { r.knobs.ulysses = 2; }},
          // accelerate's checkpointing wraps FSDP2's layers: not on one GPU.
          {"--hf-checkpointing",
           [](PlanRequest& r) {
             r.cluster.hf_checkpointing = "accelerate";
             r.cluster.gpus = 1;
             r.knobs.sharding = Sharding::None;
             r.knobs.ring = 1;
           }},
      });
}

// accelerate's fsdp_activation_checkpointing (fsdp2_apply_ac): checkpoint_wrapper without the
// RNG state, inside each FSDP2 layer, so an offloaded input is packed after the layer's gather;
// exported as the accelerate config's, the Trainer's gradient checkpointing off.
TEST(HfDistributed, AcceleratesCheckpointingSavesNoRngStateAndPacksAfterTheGather) {
  PlanRequest r = hf_request("qwen3-8b", 8, 8, "1M");
  r.cluster.hf_checkpointing = "accelerate";
  r.knobs.offload_checkpoints = true;
  const Plan p = answer_plan(r).value().recorded;
  const StepGraph g = build_step(step_inputs(p));
  {  // on the CPU virtual device, where the Trainer's checkpoint's RNG state is device memory
    PlanRequest cpu = hf_request("llama-3.2-1b", 2, 2, "8K");
    cpu.cluster.gpu = "cpu";
    cpu.cluster.hf_checkpointing = "accelerate";
    EXPECT_EQ(op_index(build_step(step_inputs(answer_plan(cpu).value().recorded)), "layer.1.checkpoint.save_rng"), -1);
  }
  EXPECT_GT(op_index(g, "layer.1.checkpoint.pack"), op_index(g, "layer.1.fsdp.all_gather"));
  const auto files = export_plan(p, kHfExporter);
  ASSERT_TRUE(files.ok()) << files.error().message;
  const std::string& yaml = files.value().files.at(kAccelerateConfigFile);
  EXPECT_NE(yaml.find("fsdp_activation_checkpointing: true"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("fsdp_activation_checkpointing_offload: true"), std::string::npos) << yaml;
  const std::string& sft = files.value().files.at(kSftConfigFile);
  EXPECT_NE(sft.find("\"gradient_checkpointing\": false"), std::string::npos) << sft;
  EXPECT_EQ(sft.find("offload"), std::string::npos) << sft;
}

// TRL's example: Qwen3-8B at a million tokens on 8 H100s, context parallel 8, its chunked
// loss, checkpoints offloaded: a plan.
TEST(HfDistributed, PlansQwen3EightBAtAMillionTokensOnEightGpus) {
  PlanRequest r = hf_request("qwen3-8b", 8, 8, "1M");
  r.knobs.offload_checkpoints = true;
  const auto a = answer_plan(r);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_GT(a.value().recorded.prediction.peak_device_bytes, 0);
}

// accelerate's config (FSDP2, parallelism_config) and TRL's SFTConfig (the Trainer's
// checkpointing, padded to 2 x cp) for such a plan.
TEST(HfDistributed, ExportsAccelerateFsdp2WithContextParallelAndSftConfig) {
  const Plan p = answer_plan(hf_request("llama-3.2-1b", 8, 4, "8K")).value().recorded;
  const auto files = export_plan(p, kHfExporter);
  ASSERT_TRUE(files.ok()) << files.error().message;
  const std::string& yaml = files.value().files.at(kAccelerateConfigFile);
  EXPECT_NE(yaml.find("distributed_type: \"FSDP\""), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("parallelism_config_cp_size: 4"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("parallelism_config_dp_shard_size: 2"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("fsdp_activation_checkpointing: false"), std::string::npos) << yaml;
  const std::string& sft = files.value().files.at(kSftConfigFile);
  EXPECT_NE(sft.find("\"pad_to_multiple_of\": 8"), std::string::npos) << sft;
  EXPECT_NE(sft.find("\"gradient_checkpointing\": true"), std::string::npos) << sft;
}

}  // namespace
}  // namespace longctx
