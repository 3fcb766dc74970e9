// The hf stack's contract beyond what tests/stacks holds against transformers: a plan file
// keeps its stack, the stack refuses what it cannot express naming the option, the search
// only turns knobs it has, and the graph keeps what transformers' modules keep where
// longctx's own runtime keeps less.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "planner/search/memory_model.h"
#include "planner/core/plan.h"
#include "planner/search/request.h"
#include "planner/stacks/step_builder.h"
#include "planner/core/model_config.h"

namespace longctx {
namespace {

PlanRequest hf_request(const std::string& seq) {
  PlanRequest r;
  r.cluster.model = "tiny-gqa";
  r.cluster.gpus = 1;
  r.cluster.gpu = "cpu";
  r.cluster.stack = "hf";
  r.cluster.hf_no_attention_mask = false;
  r.seq = seq;
  return r;
}

TEST(HfStack, APlanFileKeepsItsStack) {
  PlanRequest r = hf_request("512");
  r.cluster.attention = "eager";
  r.cluster.hf_checkpointing = "reentrant";
  r.knobs.checkpoint = CheckpointPolicy::full();
  r.no_search = true;
  const Plan p = answer_plan(r).value().recorded;
  const Plan back = plan_from_json(plan_to_json(p)).value();
  EXPECT_EQ(back.train.stack, p.train.stack);
  EXPECT_EQ(back.train.stack.attention, HfAttention::Eager);
  EXPECT_EQ(back.train.stack.checkpointing, HfCheckpointing::Reentrant);
  PlanRequest trl = hf_request("512");
  trl.cluster.hf_loss = "trl-chunked-nll";
  trl.no_search = true;
  const Plan t = answer_plan(trl).value().recorded;
  EXPECT_EQ(plan_from_json(plan_to_json(t)).value().train.stack.loss, HfLoss::TrlChunkedNll);
  // A plan file from before the loss was a choice computed transformers' own.
  nlohmann::json old = plan_to_json(t);
  old["train"]["stack"].erase("loss");
  EXPECT_EQ(plan_from_json(old).value().train.stack.loss, HfLoss::Transformers);
  // A plan file without the key is longctx's.
  nlohmann::json j = plan_to_json(p);
  j["train"].erase("stack");
  EXPECT_EQ(plan_from_json(j).value().train.stack.kind, StackKind::Longctx);
  j["train"]["stack"] = {{"name", "hf"}, {"attention", "flash"}, {"checkpointing", "reentrant"}};
  const auto bad = plan_from_json(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().field, "train.stack.attention");
}

TEST(HfStack, RefusesWhatItCannotExpressNamingTheOption) {
  const std::pair<const char*, void (*)(PlanRequest&)> cases[] = {
      // One GPU with ZeRO-3 runs DeepSpeed (hf_deepspeed_test.cpp), on CUDA GPUs only.
      {"--sharding", [](PlanRequest& r) { r.knobs.sharding = Sharding::Zero3; r.knobs.offload_params = true; }},
      {"--mlp-tiles", [](PlanRequest& r) { r.knobs.mlp_tiles = 2; }},
      {"--loss-tiles", [](PlanRequest& r) { r.knobs.loss_tiles = 2; }},
      {"--checkpoint", [](PlanRequest& r) { r.knobs.checkpoint = CheckpointPolicy::every_k(2); }},
      // Across GPUs it runs accelerate's FSDP2 (hf_distributed_test.cpp), not replicas: a
      // sharding other than zero3 there is refused (left out, its profile decides zero3).
      {"--sharding", [](PlanRequest& r) { r.cluster.gpus = 2; r.knobs.sharding = Sharding::Zero1; }},
      {"--grad-dtype", [](PlanRequest& r) { r.cluster.grad_dtype = "bf16"; }},
  };
  for (const auto& [field, edit] : cases) {
    PlanRequest r = hf_request("512");
    r.no_search = true;
    edit(r);
    const auto a = answer_plan(r);
    ASSERT_FALSE(a.ok()) << field;
    EXPECT_EQ(a.error().field, field);
    EXPECT_NE(a.error().message.find("--stack hf"), std::string::npos) << a.error().message;
  }
  PlanRequest fa2 = hf_request("512");
  fa2.cluster.attention = "flash_attention_2";  // the flash-attn package: CUDA only
  const auto cpu = answer_plan(fa2);
  ASSERT_FALSE(cpu.ok());
  EXPECT_EQ(cpu.error().field, "--attention");
  fa2.cluster.gpu = "h100-80gb";
  fa2.no_search = true;
  EXPECT_TRUE(answer_plan(fa2).ok());
  PlanRequest r = hf_request("512");
  r.cluster.stack = "longctx";
  r.cluster.attention = "eager";
  const auto a = answer_plan(r);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().field, "--attention");
}

TEST(HfStack, TheSearchTurnsOnlyCheckpointing) {
  // A budget between the peaks with and without checkpointing: the search must checkpoint.
  auto peak = [](bool checkpoint) {
    PlanRequest fixed = hf_request("4K");
    fixed.no_search = true;
    if (checkpoint) fixed.knobs.checkpoint = CheckpointPolicy::full();
    return answer_plan(fixed).value().recorded.prediction.peak_device_bytes;
  };
  const std::int64_t with = peak(true), without = peak(false);
  ASSERT_LT(with, without);
  PlanRequest r = hf_request("4K");
  r.cluster.budget = std::to_string((with + without) / 2);
  const auto a = answer_plan(r);
  ASSERT_TRUE(a.ok()) << a.error().message;
  const Plan& p = a.value().recorded;
  EXPECT_EQ(p.train.stack.kind, StackKind::HF);
  EXPECT_TRUE(p.parallel.checkpoint.any());
  EXPECT_EQ(p.parallel.sharding, Sharding::None);
  EXPECT_EQ(p.parallel.mlp_tiles, 1);
  EXPECT_EQ(p.parallel.loss_tiles, 1);
  EXPECT_EQ(p.train.grad_dtype, p.train.dtype);
}

// transformers' SwiGLU saves gate, silu(gate), up and their product; its RMSNorm the
// normalized input besides the output: more than longctx's runtime, and the hf graph says so.
TEST(HfStack, KeepsWhatTransformersModulesKeep) {
  PlanRequest r = hf_request("1K");
  r.no_search = true;
  Plan p = answer_plan(r).value().recorded;
  const StepGraph hf = build_step(step_inputs(p));
  p.train.stack = {};
  const StepGraph own = build_step(step_inputs(p));
  auto saved = [](const StepGraph& g, const std::string& prefix) {
    int count = 0;
    for (const auto& t : g.tensors())
      if (t.category == Category::Activations && format(t.name).rfind(prefix, 0) == 0) ++count;
    return count;
  };
  EXPECT_EQ(saved(hf, "layer.0.mlp."), 4);
  EXPECT_EQ(saved(own, "layer.0.mlp."), 3);
  EXPECT_GT(evaluate(p).sim.peak_device_bytes, 0);
  PlanRequest r2 = hf_request("1K");
  r2.no_search = true;
  EXPECT_GT(answer_plan(r2).value().evaluation.sim.peak_device_bytes, evaluate(p).sim.peak_device_bytes);
}

// TRL's chunked loss never makes a tensor of the whole sequence's logits: its largest loss
// tensor is a chunk's, and the step's peak is below transformers' loss over the full logits.
TEST(HfStack, TrlsChunkedLossHoldsOneChunksLogits) {
  PlanRequest r = hf_request("8K");
  r.no_search = true;
  const Plan full = answer_plan(r).value().recorded;
  r.cluster.hf_loss = "trl-chunked-nll";
  const Plan trl = answer_plan(r).value().recorded;
  const StepGraph g = build_step(step_inputs(trl));
  const std::int64_t vocab = trl.model.vocab, tokens = 8192;
  std::int64_t largest = 0;
  for (const auto& t : g.tensors())
    if (format(t.name).rfind("loss.", 0) == 0) largest = std::max(largest, t.bytes);
  EXPECT_LE(largest, std::max<std::int64_t>(256 * vocab * 4, tokens * trl.model.hidden * 4));
  EXPECT_LT(trl.prediction.peak_device_bytes, full.prediction.peak_device_bytes);
}

// use_cache (--hf-no-use-cache turns it off): while the model keeps a cache, each layer's k and
// v are copied into it ([n, K*d] e each); without a cache and without an attention_mask, sdpa
// gets a [b, 1, S, S] boolean mask. Checkpointing turns the cache off either way, so there the
// option changes nothing.
TEST(HfStack, UseCacheDecidesTheCacheCopiesAndTheSdpaMask) {
  auto graph = [](bool use_cache, bool mask, bool checkpoint) {
    PlanRequest r = hf_request("1K");
    r.no_search = true;
    r.cluster.hf_no_use_cache = !use_cache;
    r.cluster.hf_no_attention_mask = !mask;
    if (checkpoint) r.knobs.checkpoint = CheckpointPolicy::full();
    const Plan p = answer_plan(r).value().recorded;
    EXPECT_EQ(p.train.stack.use_cache, use_cache);
    EXPECT_EQ(plan_from_json(plan_to_json(p)).value().train.stack.use_cache, use_cache);
    return build_step(step_inputs(p));
  };
  auto bytes_named = [](const StepGraph& g, const std::string& suffix) {
    std::int64_t sum = 0;
    for (const auto& t : g.tensors()) {
      const std::string name = format(t.name);
      if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) sum += t.bytes;
    }
    return sum;
  };
  const Plan shape = answer_plan([] { PlanRequest r = hf_request("1K"); r.no_search = true; return r; }()).value().recorded;
  const std::int64_t layers = shape.model.layers, kv = shape.model.kv_heads * shape.model.head_dim;
  const std::int64_t e = 4;  // fp32 on the CPU virtual device
  EXPECT_EQ(bytes_named(graph(true, true, false), "attn.cache.k"), layers * 1024 * kv * e);
  EXPECT_EQ(bytes_named(graph(false, true, false), "attn.cache.k"), 0);
  EXPECT_EQ(bytes_named(graph(true, false, false), "model.causal_mask"), 0);
  EXPECT_EQ(bytes_named(graph(false, false, false), "model.causal_mask"), 1024 * 1024);  // [1, 1, S, S] bool
  EXPECT_EQ(bytes_named(graph(false, true, false), "model.causal_mask"), 0);
  for (const bool mask : {true, false}) {
    const StepGraph on = graph(true, mask, true), off = graph(false, mask, true);
    EXPECT_EQ(on.tensors().size(), off.tensors().size());
    EXPECT_EQ(bytes_named(on, "model.causal_mask"), bytes_named(off, "model.causal_mask"));
  }
  // An old plan file, without the key, keeps the config's cache.
  PlanRequest r = hf_request("1K");
  r.no_search = true;
  r.cluster.hf_no_use_cache = true;
  nlohmann::json j = plan_to_json(answer_plan(r).value().recorded);
  j["train"]["stack"].erase("use_cache");
  EXPECT_TRUE(plan_from_json(j).value().train.stack.use_cache);
}

// A config.json with "use_cache": false is what transformers runs without --hf-no-use-cache:
// the plan says so, builds the step the option builds, and keeps it from a plan file that says
// the option's default beside that model.
TEST(HfStack, TheConfigsUseCacheIsTheDefault) {
  PlanRequest r = hf_request("1K");
  r.no_search = true;
  const Plan cached = answer_plan(r).value().recorded;
  nlohmann::json config = model_to_json(cached.model);
  config["use_cache"] = false;
  const std::string path = ::testing::TempDir() + "no_cache_" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream out(path);
    out << config.dump();
  }
  r.cluster.model = path;
  const auto answered = answer_plan(r);
  // Another stack, which reads no use_cache, plans the same model as before.
  PlanRequest own = r;
  own.cluster.stack = "longctx";
  const auto own_answer = answer_plan(own);
  std::remove(path.c_str());
  ASSERT_TRUE(answered.ok()) << answered.error().what();
  ASSERT_TRUE(own_answer.ok()) << own_answer.error().what();
  const Plan& from_config = answered->recorded;
  EXPECT_FALSE(from_config.model.use_cache);
  EXPECT_FALSE(from_config.train.stack.use_cache);
  r.cluster.model = "tiny-gqa";
  r.cluster.hf_no_use_cache = true;
  const Plan by_option = answer_plan(r).value().recorded;
  // The cache's copies of every layer's k and v: the config's false drops them as the option does.
  auto cache_bytes = [](const Plan& p) {
    std::int64_t sum = 0;
    const StepGraph g = build_step(step_inputs(p));  // held: a range-for over a temporary's list dangles
    for (const auto& t : g.tensors())
      if (format(t.name).find("attn.cache.") != std::string::npos) sum += t.bytes;
    return sum;
  };
  EXPECT_GT(cache_bytes(cached), 0);
  EXPECT_EQ(cache_bytes(by_option), 0);
  EXPECT_EQ(cache_bytes(from_config), 0);
  // The plan file keeps it as the setting, not in the model's section (whose fingerprint traces
  // and training checkpoints name, for every stack), and reads back without the cache.
  const nlohmann::json j = plan_to_json(from_config);
  EXPECT_FALSE(j["model"].contains("use_cache"));
  const auto back = plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().what();
  EXPECT_FALSE(back->train.stack.use_cache);
  EXPECT_EQ(cache_bytes(*back), 0);
  EXPECT_FALSE(plan_to_json(own_answer->recorded)["model"].contains("use_cache"));
}

// transformers' checkpoint offload pins host memory: refused on the CPU virtual device; on a
// GPU each layer's input leaves the device for the host.
TEST(HfStack, OffloadsCheckpointsToPinnedHostMemoryOnAGpu) {
  PlanRequest r = hf_request("16K");
  r.no_search = true;
  r.knobs.checkpoint = CheckpointPolicy::full();
  r.knobs.offload_checkpoints = true;
  const auto cpu = answer_plan(r);
  ASSERT_FALSE(cpu.ok());
  EXPECT_EQ(cpu.error().field, "--offload-checkpoints");
  r.cluster.gpu = "h100-80gb";
  r.cluster.dtype = "bf16";
  const Plan off = answer_plan(r).value().recorded;
  r.knobs.offload_checkpoints = false;
  const Plan kept = answer_plan(r).value().recorded;
  const std::int64_t band = 16384 * off.model.hidden * 2;  // a layer's input [n, h] bf16
  EXPECT_EQ(off.prediction.peak_host_bytes, off.model.layers * band);
  EXPECT_EQ(kept.prediction.peak_host_bytes, 0);
  EXPECT_LE(off.prediction.peak_device_bytes, kept.prediction.peak_device_bytes - (off.model.layers - 2) * band);
}

}  // namespace
}  // namespace longctx
