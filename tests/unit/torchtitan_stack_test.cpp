// The torchtitan stack's contract (stack.h): it plans torchtitan's Llama 3 shapes, refuses what
// torchtitan's llama3 model and one-GPU training cannot express naming the option, keeps its
// freqs_cis buffer beside the parameters, checkpoints the layers its selective mode picks, and
// exports its job file. The memory it predicts is held to torchtitan itself in tests/stacks.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "planner/io/export.h"
#include "planner/stacks/arctic/export.h"
#include "planner/stacks/hf/export.h"
#include "planner/stacks/longctx/export.h"
#include "planner/stacks/torchtitan/export.h"
#include "planner/stacks/launch_script.h"
#include "planner/footprint/step_shapes.h"
#include "planner/footprint/torchtitan.h"
#include "planner/core/param_layout.h"
#include "planner/search/memory_model.h"
#include "planner/core/plan.h"
#include "planner/search/length_refusals.h"
#include "planner/search/request.h"
#include "planner/stacks/step_builder.h"

namespace longctx {
namespace {

PlanRequest torchtitan_request(const std::string& model) {
  PlanRequest r;
  r.cluster.model = model;
  r.cluster.gpus = 1;
  r.cluster.gpu = "cpu";
  r.cluster.stack = "torchtitan";
  r.seq = "1024";
  r.no_search = true;
  return r;
}

TEST(TorchtitanStack, PlansLlamaShapesAndKeepsItsStackInThePlanFile) {
  for (const char* model : {"llama-3.1-8b", "tiny-gqa", "mistral-7b", "qwen3-8b", "qwen3-32b"}) {
    const auto a = answer_plan(torchtitan_request(model));
    ASSERT_TRUE(a.ok()) << model << ": " << a.error().message;
    const Plan& p = a.value().recorded;
    EXPECT_EQ(p.train.stack.kind, StackKind::Torchtitan);
    const auto back = plan_from_json(plan_to_json(p));
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back.value().train.stack, p.train.stack);
  }
}

TEST(TorchtitanStack, RefusesWhatTorchtitanCannotExpressNamingTheOption) {
  const std::tuple<const char*, const char*, void (*)(PlanRequest&)> cases[] = {
      {"tiny-bias", "--model", [](PlanRequest&) {}},   // q/k/v biases
      {"tiny-odd", "--gpus", [](PlanRequest& r) { r.cluster.gpus = 2; }},  // qwen3, tied, under FSDP2
      {"llama-3.2-1b", "--model", [](PlanRequest&) {}},  // tied embeddings without q/k norms
      {"tiny-gqa", "--sharding", [](PlanRequest& r) { r.cluster.gpus = 2; r.knobs.sharding = Sharding::Zero2; }},
      {"tiny-gqa", "--offload-optimizer", [](PlanRequest& r) { r.cluster.gpus = 2; r.knobs.offload_optimizer = true; }},
      {"tiny-gqa", "--head-chunk", [](PlanRequest& r) { r.knobs.head_chunk = 1; }},
      {"tiny-gqa", "--loss-tiles", [](PlanRequest& r) { r.knobs.loss_tiles = 2; }},
      {"tiny-gqa", "--dtype", [](PlanRequest& r) { r.cluster.gpu = "h100-80gb"; r.cluster.dtype = "bf16"; }},
      // Its selective mode would wrap none of tiny-gqa's two layers.
      {"tiny-gqa", "--checkpoint", [](PlanRequest& r) { r.knobs.checkpoint = CheckpointPolicy::every_k(3); }},
      // A search that may not shard has nothing to try across GPUs.
      {"tiny-gqa", "--techniques", [](PlanRequest& r) { r.cluster.gpus = 4; r.cluster.techniques = "none"; r.no_search = false; }},
  };
  for (const auto& [model, field, edit] : cases) {
    PlanRequest r = torchtitan_request(model);
    edit(r);
    const auto a = answer_plan(r);
    ASSERT_FALSE(a.ok()) << model << " " << field;
    EXPECT_EQ(a.error().field, field) << a.error().message;
    EXPECT_NE(a.error().message.find("--stack torchtitan"), std::string::npos) << a.error().message;
  }
  // One GPU: zero1 is refused without pointing at parameter offload, which torchtitan has not.
  PlanRequest r = torchtitan_request("tiny-gqa");
  r.knobs.sharding = Sharding::Zero1;
  const auto a = answer_plan(r);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().field, "--sharding");
  EXPECT_EQ(a.error().message.find("offload"), std::string::npos) << a.error().message;
}

// llama3's freqs_cis [S, d/2] complex64 and qwen3's rope_cache [S, 2d] fp32 are buffers of
// the model: persistent.
TEST(TorchtitanStack, KeepsItsRopeTableForTheTrainingLength) {
  for (const char* model : {"tiny-gqa", "qwen3-8b"}) {
    const Plan p = answer_plan(torchtitan_request(model)).value().recorded;
    const StepGraph g = build_step(step_inputs(p));
    std::int64_t bytes = -1;
    for (const auto& t : g.tensors())
      if (format(t.name) == (p.model.qk_norm ? "model.rope_cache" : "model.freqs_cis")) bytes = t.persistent ? t.bytes : -2;
    EXPECT_EQ(bytes, p.model.qk_norm ? 1024 * 2 * p.model.head_dim * 4 : 1024 * (p.model.head_dim / 2) * 8) << model;
  }
}

// _apply_layer_sac counts blocks from 1 and wraps every K-th: layers K-1, 2K-1, ...
TEST(TorchtitanStack, SelectiveCheckpointingRecomputesTheLayersTorchtitanWraps) {
  PlanRequest r = torchtitan_request("tiny-gqa");
  r.knobs.checkpoint = CheckpointPolicy::every_k(2);
  const Plan p = answer_plan(r).value().recorded;
  const StepGraph g = build_step(step_inputs(p));
  std::vector<bool> recomputed(static_cast<std::size_t>(p.model.layers), false);
  for (const auto& o : g.ops())
    if (o.phase == Phase::Backward && o.layer >= 0 && o.name.recompute)
      recomputed[static_cast<std::size_t>(o.layer)] = true;
  for (std::int64_t l = 0; l < p.model.layers; ++l) EXPECT_EQ(recomputed[static_cast<std::size_t>(l)], (l + 1) % 2 == 0) << l;
}

// _apply_op_sac keeps every odd-numbered aten.mm of a block (wq, wv, w1, w2) and, on a GPU,
// the attention kernel's outputs: the recompute runs only the rest, and the kept tensors live
// from the forward to the recompute's readers. Each case's recomputed ops per layer.
TEST(TorchtitanStack, PerOpSelectiveCheckpointingRecomputesWhatItDoesNotKeep) {
  struct Case {
    int gpus;
    const char* gpu;
    const char* dtype;
    bool attention_recomputed;  // the CPU's kernel is not on the save list
  };
  for (const Case c : {Case{1, "cpu", "fp32", true}, Case{2, "h100-80gb", "bf16", false}}) {
    PlanRequest r = torchtitan_request("tiny-gqa");
    r.cluster.gpus = c.gpus;
    r.cluster.gpu = c.gpu;
    r.cluster.dtype = c.dtype;
    r.knobs.checkpoint = CheckpointPolicy::ops();
    const auto a = answer_plan(r);
    ASSERT_TRUE(a.ok()) << a.error().message;
    const Plan& p = a.value().recorded;
    EXPECT_EQ(p.parallel.checkpoint, CheckpointPolicy::ops());
    const StepGraph g = build_step(step_inputs(p));
    for (std::int64_t l = 0; l < p.model.layers; ++l) {
      std::set<std::string> recomputed;
      for (const auto& o : g.ops())
        if (o.phase == Phase::Backward && o.layer == l && o.name.recompute) recomputed.insert(std::string(o.name.base));
      for (const char* kept : {"attn.q_proj", "attn.v_proj", "mlp.gate_proj", "mlp.down_proj"})
        EXPECT_EQ(recomputed.count(kept), 0u) << c.gpu << " layer " << l << " " << kept;
      for (const char* again : {"attn.k_proj", "attn.o_proj", "mlp.up_proj", "mlp.silu", "attn.rope_q"})
        EXPECT_EQ(recomputed.count(again), 1u) << c.gpu << " layer " << l << " " << again;
      EXPECT_EQ(recomputed.count("attn.sdpa"), c.attention_recomputed ? 1u : 0u) << c.gpu << " layer " << l;
    }
    // The forward's q projection is read again in backward, by the recompute's rotation.
    bool q_read_in_backward = false;
    for (const auto& o : g.ops())
      if (o.phase == Phase::Backward && o.layer == 0)
        for (const auto t : o.inputs) q_read_in_backward |= format(g.tensors()[static_cast<std::size_t>(t)].name) == "layer.0.attn.q";
    EXPECT_TRUE(q_read_in_backward) << c.gpu;
  }
}

// Per-op selective checkpointing is torchtitan's: the other stacks refuse it naming the flag.
TEST(TorchtitanStack, OnlyTorchtitanTakesPerOpSelectiveCheckpointing) {
  for (const char* stack : {"longctx", "hf"}) {
    PlanRequest r = torchtitan_request("tiny-gqa");
    r.cluster.stack = stack;
    r.knobs.checkpoint = CheckpointPolicy::ops();
    const auto a = answer_plan(r);
    ASSERT_FALSE(a.ok()) << stack;
    EXPECT_EQ(a.error().field, "--checkpoint") << a.error().message;
    EXPECT_NE(a.error().message.find("--stack torchtitan"), std::string::npos) << a.error().message;
  }
  const auto parsed = parse_checkpoint("op", "--checkpoint");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(to_string(parsed.value()), "op");
}

TEST(TorchtitanStack, ExportsItsJobFileAndOnlyThat) {
  PlanRequest r = torchtitan_request("tiny-gqa");
  r.knobs.checkpoint = CheckpointPolicy::every_k(2);
  const Plan p = answer_plan(r).value().recorded;
  const auto files = export_plan(p, kTorchtitanExporter);
  ASSERT_TRUE(files.ok()) << files.error().message;
  // Its job file and the torchrun script that launches it (launch_script.h), nothing else.
  ASSERT_EQ(files.value().files.size(), 2u);
  EXPECT_EQ(files.value().files.count(kLaunchScriptFile), 1u);
  const std::string& toml = files.value().files.at(kTorchtitanJobFile);
  EXPECT_NE(toml.find("[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"2\"\n"), std::string::npos) << toml;
  EXPECT_NE(toml.find("seq_len = 1024\n"), std::string::npos) << toml;
  EXPECT_TRUE(files.value().approximations.empty());
  for (const StackExporter* other : {&kArcticExporter, &kHfExporter, &kDeepSpeedExporter}) {
    const auto refused = export_plan(p, *other);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error().field, "--stack");
  }
  // Per-op selective checkpointing is its selective mode's "op" option, and survives the plan file.
  r.knobs.checkpoint = CheckpointPolicy::ops();
  const Plan ops = answer_plan(r).value().recorded;
  const auto back = plan_from_json(plan_to_json(ops));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value().parallel.checkpoint, CheckpointPolicy::ops());
  const auto op_files = export_plan(ops, kTorchtitanExporter);
  ASSERT_TRUE(op_files.ok()) << op_files.error().message;
  EXPECT_NE(op_files.value().files.at(kTorchtitanJobFile).find("mode = \"selective\"\nselective_ac_option = \"op\"\n"),
            std::string::npos);
}

// FSDP2 across ranks: each parameter chunked on dim 0 (padded to a multiple of the ranks), the
// shards fp32, a group's parameters unsharded for its forward and again for its backward, and
// its gradients reduce-scattered into fp32 shards that live until zero_grad.
TEST(TorchtitanStack, ShardsWithFsdp2AcrossRanks) {
  PlanRequest r = torchtitan_request("tiny-gqa");
  r.cluster.gpus = 3;
  r.cluster.gpu = "h100-80gb";
  r.cluster.dtype = "bf16";
  const Plan p = answer_plan(r).value().recorded;
  EXPECT_EQ(p.parallel.sharding, Sharding::Zero3);
  const StepGraph g = build_step(step_inputs(p));
  const ModelConfig& m = p.model;
  std::int64_t layer_shard = 0;  // ceil(rows / 3) * cols, summed over a layer's parameters
  for (const auto& spec : group_params(ParamGroupKind::Layer, m)) {
    const auto shape = param_shape(spec, m);
    const std::int64_t cols = shape.size() > 1 ? shape[1] : 1;
    layer_shard += (shape[0] + 2) / 3 * cols;
  }
  int gathers = 0, copy_outs = 0, reduces = 0;
  for (const auto& t : g.tensors()) {
    const std::string name = format(t.name);
    if (name == "layer.0.params.shard") EXPECT_EQ(t.bytes, layer_shard * 4);
    if (name == "layer.0.fsdp.all_gather_output") EXPECT_EQ(t.bytes, 3 * layer_shard * 2);
    if (name == "layer.0.grad.shard") EXPECT_EQ(t.bytes, layer_shard * 4);
  }
  for (const auto& o : g.ops()) {
    const std::string name = format(o.name);
    if (name == "layer.0.fsdp.all_gather") {
      ++gathers;
      EXPECT_EQ(o.stream, 1);
    }
    if (name == "layer.0.fsdp.copy_out") ++copy_outs;
    if (name == "layer.0.fsdp.reduce_scatter") {
      ++reduces;
      EXPECT_EQ(o.stream, 2);
    }
  }
  EXPECT_EQ(gathers, 2);  // forward, and backward's prefetch
  EXPECT_EQ(copy_outs, 2);
  EXPECT_EQ(reduces, 1);
}

// Context parallel: torch's ring, load balanced, k/v all-gathered, over torchtitan's llama3
// model, the sequence in 2 x R chunks; what torchtitan does not run is refused naming the option.
PlanRequest context_parallel_request(const std::string& model, int ring) {
  PlanRequest r = torchtitan_request(model);
  r.cluster.gpus = 4;
  r.knobs.ring = ring;
  r.knobs.ring_exchange = RingExchange::AllGather;
  return r;
}

TEST(TorchtitanStack, ContextParallelRefusesWhatTorchtitanDoesNotRun) {
  const std::tuple<const char*, const char*, void (*)(PlanRequest&)> cases[] = {
      {"tiny-gqa", "--ring-exchange", [](PlanRequest& r) { r.knobs.ring_exchange = RingExchange::P2p; }},
      {"tiny-gqa", "--seq", [](PlanRequest& r) { r.seq = "1028"; }},  // not a multiple of 2 x 4
      {"tiny-gqa", "--checkpoint", [](PlanRequest& r) { r.knobs.checkpoint = CheckpointPolicy::ops(); }},
      {"qwen3-8b", "--ring", [](PlanRequest&) {}},  // qwen3's rope_cache by positions
      {"tiny-gqa", "--ulysses", [](PlanRequest& r) { r.knobs.ulysses = 2; r.knobs.ring = 2; }},
  };
  for (const auto& [model, field, edit] : cases) {
    PlanRequest r = context_parallel_request(model, 4);
    edit(r);
    const auto a = answer_plan(r);
    ASSERT_FALSE(a.ok()) << model << " " << field;
    EXPECT_EQ(a.error().field, field) << a.error().message;
    EXPECT_NE(a.error().message.find("--stack torchtitan"), std::string::npos) << a.error().message;
  }
  const auto a = answer_plan(context_parallel_request("tiny-gqa", 4));
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a.value().recorded.parallel.ring, 4);
  // Its one exchange is the stack's default where none is given.
  PlanRequest r = context_parallel_request("tiny-gqa", 4);
  r.knobs.ring_exchange.reset();
  const auto d = answer_plan(r);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d.value().recorded.parallel.ring_exchange, RingExchange::AllGather);
}

TEST(TorchtitanStack, ContextParallelShardsTheBatchAndTakesTheMostOfEveryRanksRing) {
  const Plan p = answer_plan(context_parallel_request("tiny-gqa", 4)).value().recorded;
  const StepGraph g = build_step(step_inputs(p));
  const footprint::StepShapes s = footprint::step_shapes(step_inputs(p));
  ASSERT_EQ(s.n, 1024 / 4);
  auto tensor_bytes = [&](const std::string& name) {
    for (const auto& t : g.tensors())
      if (format(t.name) == name) return t.bytes;
    ADD_FAILURE() << "no tensor " << name;
    return std::int64_t{-1};
  };
  // The data loader's whole batch, and the rank's shards of it.
  EXPECT_EQ(tensor_bytes("batch.tokens"), 1024 * 8);
  EXPECT_EQ(tensor_bytes("cp.shard.inputs"), 256 * 8);
  EXPECT_EQ(tensor_bytes("cp.shard.positions"), 256 * 4);
  // freqs_cis at the rank's positions, per block; the ring's output and its copy for wo.
  EXPECT_EQ(tensor_bytes("layer.0.attn.freqs_cis.positions"), 256 * (s.d / 2) * 8);
  EXPECT_EQ(tensor_bytes("layer.0.attn.out.heads"), tensor_bytes("layer.0.attn.out"));
  // The ring's temporaries: the most of the four ranks, the last included.
  std::int64_t most = 0;
  for (int rank = 0; rank < 4; ++rank) {
    const auto m = footprint::torch_ring::forward_memory(footprint::torchtitan::ring_shape(s, rank));
    most = std::max(most, m.peak - m.returned);
  }
  int rings = 0;
  for (const auto& o : g.ops())
    if (format(o.name) == "layer.0.attn.ring") {
      ++rings;
      EXPECT_EQ(o.workspace_bytes, most);
      EXPECT_EQ(o.comm, CommKind::AllGather);
    }
  EXPECT_EQ(rings, 1);
}

// The most of every rank taken from the classes of ranks that replay alike equals every rank's,
// for rings up to 13.
TEST(TorchtitanStack, ContextParallelRingTakesTheMostOfEveryRank) {
  footprint::StepShapes s;
  s.b = 2, s.H = 6, s.K = 2, s.d = 16, s.e = 2, s.cpu = true;
  for (std::int64_t r = 2; r <= 13; ++r) {
    s.r = r;
    s.n = s.b * 32;
    std::int64_t forward = 0, backward = 0;
    for (int rank = 0; rank < r; ++rank) {
      const auto f = footprint::torch_ring::forward_memory(footprint::torchtitan::ring_shape(s, rank));
      const auto g = footprint::torch_ring::backward_memory(footprint::torchtitan::ring_shape(s, rank));
      forward = std::max(forward, f.peak - f.returned);
      backward = std::max(backward, g.peak - g.returned);
    }
    EXPECT_EQ(footprint::torchtitan::ring_forward_workspace(s), forward) << r;
    EXPECT_EQ(footprint::torchtitan::ring_backward_workspace(s), backward) << r;
  }
}

TEST(TorchtitanStack, MaxContextAnswersOnEightGpus) {
  ClusterRequest r;
  r.model = "llama-3.1-8b";
  r.gpus = 8;
  r.gpu = "h100-80gb";
  r.stack = "torchtitan";
  const auto a = answer_max_context(r, /*with_ladder=*/true);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_GT(a.value().max_tokens, 8192);
  EXPECT_EQ(a.value().plan.train.stack.kind, StackKind::Torchtitan);
  EXPECT_EQ(a.value().plan.parallel.sharding, Sharding::Zero3);
  // Its context parallel reaches past what the full logits of one rank's whole sequence allow.
  EXPECT_GT(a.value().plan.parallel.ring, 1);
  EXPECT_EQ(a.value().plan.parallel.ring_exchange, RingExchange::AllGather);
  EXPECT_GT(a.value().max_tokens, 131072);
}

// The llama3 flavors torchtitan registers are matched by shape: Llama-3.1-8B is "8B".
TEST(TorchtitanStack, NamesTheFlavorOfTheModel) {
  EXPECT_EQ(torchtitan_flavor(answer_plan(torchtitan_request("llama-3.1-8b")).value().recorded.model), "8B");
  EXPECT_EQ(torchtitan_flavor(answer_plan(torchtitan_request("llama-3.1-70b")).value().recorded.model), "70B");
  EXPECT_EQ(torchtitan_flavor(answer_plan(torchtitan_request("tiny-gqa")).value().recorded.model), "");
  const ModelConfig qwen3 = answer_plan(torchtitan_request("qwen3-8b")).value().recorded.model;
  EXPECT_STREQ(torchtitan_model_name(qwen3), "qwen3");
  EXPECT_EQ(torchtitan_flavor(qwen3), "8B");
  EXPECT_EQ(torchtitan_flavor(answer_plan(torchtitan_request("qwen3-32b")).value().recorded.model), "32B");
}

// Context parallel cuts each sample into 2 x ring pieces and pads nothing: at a length none of
// the rings divides, the search evaluates no ring plan. When nothing fits, the refusal names the
// rule and a length that lets the ring plans be tried, and that length does fit.
TEST(TorchtitanStack, NoFitNamesTheLengthRuleThatKeptTheRingPlansOut) {
  PlanRequest r = torchtitan_request("llama-3.1-8b");
  r.cluster.gpus = 8;
  r.cluster.gpu = "h100-80gb";
  r.no_search = false;
  r.seq = "131073";
  const auto a = answer_plan(r);
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().kind, ErrorKind::NoFit);
  EXPECT_NE(a.error().message.find("the plans with --ring 2, 4 or 8 were not tried: --stack torchtitan cuts each sample "
                                   "into 4, 8 or 16 equal pieces and pads nothing, which --seq 131073 does not meet: "
                                   "give a --seq divisible by 16, such as 131072, to try them"),
            std::string::npos)
      << a.error().message;
  r.seq = "131072";
  const auto fits = answer_plan(r);
  ASSERT_TRUE(fits) << fits.error().what();
  EXPECT_GT(fits->recorded.parallel.ring, 1);
  // A length every ring divides: nothing was kept out, and the refusal says nothing of it.
  r.seq = "256K";
  const auto none = answer_plan(r);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().message.find("were not tried"), std::string::npos) << none.error().message;
}

TEST(TorchtitanStack, NearbyLengthIsTheMultipleBelowOrTheMultipleItself) {
  EXPECT_EQ(nearby_length(1000001, 16), 1000000);
  EXPECT_EQ(nearby_length(131073, 16), 131072);
  EXPECT_EQ(nearby_length(15, 16), 16);
  EXPECT_EQ(nearby_length(32, 16), 32);
}

}  // namespace
}  // namespace longctx
