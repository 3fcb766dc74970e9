// The plan -> training-stack mapping (planner/stacks/<name>/export.cpp through
// planner/io/export.cpp, docs/export.md): every knob lands on its stack's key, approximations
// are reported, refusals name the knob and stack.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "planner/io/export.h"
#include "planner/stacks/arctic/export.h"
#include "planner/stacks/blocks/deepspeed_config.h"
#include "planner/stacks/hf/export.h"
#include "planner/stacks/launch_script.h"
#include "planner/stacks/longctx/export.h"
#include "planner/search/memory_model.h"
#include "planner/stacks/profile.h"
#include "planner/stacks/torchtitan/export.h"
#include "planner/io/toml_text.h"
#include "planner/io/yaml_text.h"
#include "test_plans.h"

namespace longctx {
namespace {

// On H100s: ArcticTraining's exporter refuses the CPU virtual device, as its stack does.
Plan llama_plan() {
  Plan p = testing::gpu_plan("llama-3.2-1b", "h100-80gb", 8, 65536);
  p.train.dtype = DType::BF16;
  p.train.micro_batch = 2;
  return p;
}

bool mentions(const std::vector<std::string>& lines, const std::string& knob) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.rfind(knob, 0) == 0; });
}

// DeepSpeed's engine without ZeRO accumulates in the model's dtype only
// (DeepSpeedEngine._do_optimizer_sanity_check): a stage-0 plan keeping gradients in another
// dtype is refused by every stack whose files run DeepSpeed, naming the gradients' dtype.
TEST(Export, StageZeroWithAnotherGradientDtypeIsRefusedWhereDeepSpeedRunsIt) {
  Plan p = llama_plan();
  p.parallel.sharding = Sharding::None;
  ASSERT_EQ(p.train.dtype, DType::BF16);
  for (const DType grads : {DType::FP32, DType::BF16}) {
    p.train.grad_dtype = grads;
    for (const StackExporter* to : {&kDeepSpeedExporter, &kArcticExporter, &kHfExporter}) {
      const auto verdict = to->check(p);
      if (grads == p.train.dtype) {
        EXPECT_TRUE(verdict.ok()) << to->word << ": " << verdict.error().message;
        continue;
      }
      ASSERT_FALSE(verdict.ok()) << to->word;
      EXPECT_EQ(verdict.error().field, "train.grad_dtype") << to->word;
    }
  }
  // With ZeRO the engine takes the mix (bf16 weights, fp32 accumulation).
  p.parallel.sharding = Sharding::Zero1;
  p.train.grad_dtype = DType::FP32;
  EXPECT_TRUE(kDeepSpeedExporter.check(p).ok());
}

TEST(Export, ShardingMapsToZeroStageInDeepSpeedAndArctic) {
  Plan p = llama_plan();
  const std::pair<Sharding, int> stages[] = {{Sharding::None, 0}, {Sharding::Zero1, 1}, {Sharding::Zero2, 2}, {Sharding::Zero3, 3}};
  for (auto [sharding, stage] : stages) {
    p.parallel.sharding = sharding;
    EXPECT_EQ(deepspeed_config(p).value["zero_optimization"]["stage"], stage);
    EXPECT_EQ(arctic_recipe(p).value["deepspeed"]["zero_optimization"]["stage"], stage);
  }
}

TEST(Export, OffloadsBecomeCpuPinnedSectionsOnlyWhenPlanned) {
  Plan p = llama_plan();
  p.parallel.sharding = Sharding::Zero3;
  auto zero = deepspeed_config(p).value["zero_optimization"];
  EXPECT_FALSE(zero.contains("offload_optimizer"));
  EXPECT_FALSE(zero.contains("offload_param"));
  p.parallel.offload_optimizer = true;
  p.parallel.offload_params = true;
  zero = deepspeed_config(p).value["zero_optimization"];
  const nlohmann::json cpu = {{"device", "cpu"}, {"pin_memory", true}};
  EXPECT_EQ(zero["offload_optimizer"], cpu);
  EXPECT_EQ(zero["offload_param"], cpu);
  EXPECT_EQ(arctic_recipe(p).value["optimizer"]["type"], "cpu_adam");
  p.parallel.offload_optimizer = false;
  EXPECT_EQ(arctic_recipe(p).value["optimizer"]["type"], "fused_adam");
}

TEST(Export, BatchDtypeAndUlyssesReachEveryStack) {
  Plan p = llama_plan();
  p.parallel.ulysses = 4;
  p.train.grad_dtype = DType::BF16;
  const auto ds = deepspeed_config(p).value;
  EXPECT_EQ(ds["train_micro_batch_size_per_gpu"], 2);
  EXPECT_EQ(ds["sequence_parallel_size"], 4);
  EXPECT_EQ(ds["bf16"]["enabled"], true);
  EXPECT_EQ(ds["data_types"]["grad_accum_dtype"], "bf16");
  const auto arctic = arctic_recipe(p).value;
  EXPECT_EQ(arctic["micro_batch_size"], 2);
  EXPECT_EQ(arctic["sequence_parallel_size"], 4);
  EXPECT_EQ(arctic["data"]["max_length"], 65536);
  EXPECT_EQ(arctic["data"]["div_length"], 4);  // the plan's padding multiple, not SFTDataConfig's 256
  EXPECT_EQ(arctic["model"]["dtype"], "bf16");
  const auto args = hf_training_arguments(p).value;
  EXPECT_EQ(args["per_device_train_batch_size"], 2);
  EXPECT_EQ(args["bf16"], true);
  const auto accel = accelerate_config(p).value;
  EXPECT_EQ(accel["parallelism_config"]["parallelism_config_sp_size"], 4);
  EXPECT_EQ(accel["parallelism_config"]["parallelism_config_sp_backend"], "deepspeed");
  EXPECT_EQ(accel["num_processes"], 8);
  p.train.dtype = DType::FP32;
  EXPECT_EQ(deepspeed_config(p).value["bf16"]["enabled"], false);
  EXPECT_EQ(hf_training_arguments(p).value["bf16"], false);
  // Under DeepSpeed ds_config.json's bf16 block says it; accelerate refuses a mixed_precision
  // from its YAML beside a deepspeed_config_file. Under FSDP2 the YAML says it.
  EXPECT_FALSE(accelerate_config(p).value.contains("mixed_precision"));
  EXPECT_EQ(arctic_recipe(p).value["model"]["dtype"], "fp32");
  p.parallel.ulysses = 1;
  p.parallel.sharding = Sharding::Zero3;
  p.train.grad_dtype = DType::FP32;
  ASSERT_TRUE(hf_uses_fsdp2(p));
  EXPECT_EQ(accelerate_config(p).value["mixed_precision"], "no");
  p.train.dtype = DType::BF16;
  EXPECT_EQ(accelerate_config(p).value["mixed_precision"], "bf16");
}

TEST(Export, CheckpointingAndItsOffload) {
  Plan p = llama_plan();
  EXPECT_FALSE(deepspeed_config(p).value.contains("activation_checkpointing"));
  EXPECT_EQ(arctic_recipe(p).value["model"]["disable_activation_checkpoint"], true);
  EXPECT_EQ(hf_training_arguments(p).value["gradient_checkpointing"], false);
  p.parallel.checkpoint = CheckpointPolicy::full();
  p.parallel.offload_checkpoints = true;
  const auto ds = deepspeed_config(p);
  EXPECT_EQ(ds.value["activation_checkpointing"]["cpu_checkpointing"], true);
  EXPECT_TRUE(ds.approximations.empty());
  const auto arctic = arctic_recipe(p).value;
  EXPECT_EQ(arctic["model"]["disable_activation_checkpoint"], false);
  EXPECT_EQ(arctic["activation_checkpoint_cpu_offload"], true);
  p.parallel.offload_checkpoints = false;
  const auto args = hf_training_arguments(p).value;
  EXPECT_EQ(args["gradient_checkpointing"], true);
  EXPECT_EQ(args["gradient_checkpointing_kwargs"]["use_reentrant"], false);
}

TEST(Export, EveryKCheckpointingIsApproximatedByEveryLayer) {
  Plan p = llama_plan();
  p.parallel.checkpoint = CheckpointPolicy::every_k(2);
  EXPECT_TRUE(mentions(deepspeed_config(p).approximations, "parallel.checkpoint"));
  EXPECT_TRUE(mentions(arctic_recipe(p).approximations, "parallel.checkpoint"));
  EXPECT_TRUE(mentions(hf_training_arguments(p).approximations, "parallel.checkpoint"));
  EXPECT_EQ(hf_training_arguments(p).value["gradient_checkpointing"], true);
}

// Gradients in bf16 in the two below: without ZeRO DeepSpeed accumulates in the weights' dtype
// only (Export.StageZeroWithAnotherGradientDtypeIsRefusedWhereDeepSpeedRunsIt).
TEST(Export, LossTilesUseLigerWhereTheStackHasIt) {
  Plan p = llama_plan();
  p.train.grad_dtype = DType::BF16;
  EXPECT_EQ(arctic_recipe(p).value["model"]["type"], "huggingface");
  EXPECT_FALSE(hf_training_arguments(p).value.contains("use_liger_kernel"));
  p.parallel.loss_tiles = 8;
  EXPECT_EQ(arctic_recipe(p).value["model"]["type"], "liger");
  EXPECT_TRUE(mentions(arctic_recipe(p).approximations, "parallel.loss_tiles"));
  EXPECT_EQ(hf_training_arguments(p).value["use_liger_kernel"], true);
  const auto refused = export_plan(p, kDeepSpeedExporter);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().field, "parallel.loss_tiles");
  EXPECT_NE(refused.error().message.find("--stack deepspeed"), std::string::npos);
  EXPECT_TRUE(export_plan(p, kHfExporter).ok());
}

TEST(Export, MlpTilesOnlyArcticAndItsShardCountIsReported) {
  Plan p = llama_plan();  // hidden 2048, seq 65536
  p.parallel.mlp_tiles = 32;  // = 65536 / 2048: ArcticTraining's own count
  EXPECT_EQ(arctic_recipe(p).value["tiled_mlp_compute"], true);
  EXPECT_FALSE(mentions(arctic_recipe(p).approximations, "parallel.mlp_tiles"));
  p.parallel.mlp_tiles = 4;
  EXPECT_TRUE(mentions(arctic_recipe(p).approximations, "parallel.mlp_tiles"));
  for (const StackExporter* s : {&kHfExporter, &kDeepSpeedExporter}) {
    const auto r = export_plan(p, *s);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().field, "parallel.mlp_tiles");
    EXPECT_EQ(r.error().kind, ErrorKind::BadInput);
  }
}

TEST(Export, HeadChunkIsRefusedEverywhereAndCheckpointOffloadByHf) {
  Plan p = llama_plan();
  p.train.grad_dtype = DType::BF16;
  p.parallel.ulysses = 2;
  p.parallel.head_chunk = 2;
  for (const StackExporter* s : {&kArcticExporter, &kHfExporter, &kDeepSpeedExporter}) {
    const auto r = export_plan(p, *s);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().field, "parallel.head_chunk");
    EXPECT_NE(r.error().message.find(std::string("--stack ") + s->word), std::string::npos);
  }
  p.parallel.head_chunk = 0;
  p.parallel.checkpoint = CheckpointPolicy::full();
  p.parallel.offload_checkpoints = true;
  EXPECT_EQ(export_plan(p, kHfExporter).error().field, "parallel.offload_checkpoints");
  EXPECT_TRUE(export_plan(p, kArcticExporter).ok());
  EXPECT_TRUE(export_plan(p, kDeepSpeedExporter).ok());
}

// An hf-stack plan predicted transformers' own checkpoint offload and, where it says so,
// TRL's loss: both are exported (transformers 5.17's "offload", TRL's SFTConfig).
TEST(Export, HfStackPlansExportTheirOffloadAndTrlsLoss) {
  Plan p = testing::cpu_plan("llama-3.2-1b", 1, 16384);
  p.train.dtype = DType::BF16;
  p.train.stack = default_stack(StackKind::HF);
  p.train.stack.loss = HfLoss::TrlChunkedNll;
  p.parallel.checkpoint = CheckpointPolicy::full();
  p.parallel.offload_checkpoints = true;
  ASSERT_TRUE(check_expressible(p, kHfExporter).ok());
  const auto args = hf_training_arguments(p);
  EXPECT_EQ(args.value["gradient_checkpointing_kwargs"]["offload"], true);
  EXPECT_EQ(args.value["gradient_checkpointing_kwargs"]["use_reentrant"], false);
  EXPECT_TRUE(mentions(args.approximations, "parallel.offload_checkpoints"));
  // TRL's loss is SFTConfig's: its file, with the loss and the plan's length.
  EXPECT_EQ(args.value["loss_type"], "chunked_nll");
  EXPECT_EQ(args.value["max_length"], 16384);
  const auto files = export_plan(p, kHfExporter).value().files;
  EXPECT_TRUE(files.count(kSftConfigFile) == 1 && files.count(kTrainingArgumentsFile) == 0);
  p.train.stack.loss = HfLoss::Transformers;
  EXPECT_FALSE(hf_training_arguments(p).value.contains("loss_type"));
  EXPECT_EQ(export_plan(p, kHfExporter).value().files.count(kTrainingArgumentsFile), 1u);
}

TEST(Export, HfPicksFsdp2ForPlainZero3AndDeepSpeedOtherwise) {
  Plan p = llama_plan();
  p.parallel.sharding = Sharding::Zero3;
  ASSERT_TRUE(hf_uses_fsdp2(p));
  auto files = export_plan(p, kHfExporter).value().files;
  EXPECT_EQ(files.count(kDeepSpeedConfigFile), 0u);
  EXPECT_EQ(hf_training_arguments(p).value["fsdp"], "full_shard");
  EXPECT_EQ(accelerate_config(p).value["distributed_type"], "FSDP");
  p.parallel.checkpoint = CheckpointPolicy::full();  // FSDP checkpoints the layers itself
  EXPECT_EQ(hf_training_arguments(p).value["gradient_checkpointing"], false);
  EXPECT_EQ(hf_training_arguments(p).value["fsdp_config"]["activation_checkpointing"], true);
  EXPECT_EQ(accelerate_config(p).value["fsdp_config"]["fsdp_activation_checkpointing"], true);
  p.parallel.offload_optimizer = true;  // FSDP2 offloads parameters and optimizer together
  EXPECT_FALSE(hf_uses_fsdp2(p));
  files = export_plan(p, kHfExporter).value().files;
  EXPECT_EQ(files.count(kDeepSpeedConfigFile), 1u);
  // The config itself: a file name would be opened from wherever the Trainer runs.
  EXPECT_EQ(hf_training_arguments(p).value["deepspeed"], deepspeed_config(p, DeepSpeedLauncher::HfTrainer).value);
  const auto accel = accelerate_config(p).value;
  EXPECT_EQ(accel["distributed_type"], "DEEPSPEED");
  EXPECT_EQ(accel["deepspeed_config"]["zero3_init_flag"], true);
  EXPECT_EQ(deepspeed_config(p, DeepSpeedLauncher::HfTrainer).value["train_micro_batch_size_per_gpu"], "auto");
}

TEST(Export, EveryStackWritesALaunchScriptThatFindsItsFilesBesideIt) {
  Plan p = llama_plan();
  p.parallel.sharding = Sharding::Zero3;
  p.cluster.expandable_segments = true;
  p.model.source = "meta-llama/Llama-3.2-1B";
  for (const StackProfile* s : stack_profiles()) {
    Plan q = p;
    q.train.stack = s->defaults;  // each stack's own plan exports with its own word
    const auto e = export_plan(q, *s->exporter);
    ASSERT_TRUE(e) << s->name << ": " << e.error().what();
    ASSERT_EQ(e->files.count(kLaunchScriptFile), 1u) << s->name;
    const std::string& script = e->files.at(kLaunchScriptFile);
    EXPECT_EQ(script.rfind("#!/usr/bin/env bash\n", 0), 0u);
    EXPECT_NE(script.find("here=\"$(cd \"$(dirname \"${BASH_SOURCE[0]}\")\" && pwd)\""), std::string::npos);
    // Every other file it writes is named from the script's folder.
    for (const auto& [name, text] : e->files)
      if (name != kLaunchScriptFile && name != kDeepSpeedConfigFile)
        EXPECT_NE(script.find("$here/" + name), std::string::npos) << s->name << " " << name;
    EXPECT_NE(script.find("export PYTORCH_CUDA_ALLOC_CONF=\"${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}\""),
              std::string::npos) << s->name;
    EXPECT_NE(script.find("-ne 8 ]"), std::string::npos) << s->name;  // the plan's world, guarded
  }
  p.cluster.expandable_segments = false;
  const auto ds = export_plan(p, kDeepSpeedExporter).value().files.at(kLaunchScriptFile);
  EXPECT_EQ(ds.find("PYTORCH_CUDA_ALLOC_CONF"), std::string::npos);
  EXPECT_NE(ds.find("MODEL_OF_PLAN='meta-llama/Llama-3.2-1B'\nMODEL=\"${MODEL:-$MODEL_OF_PLAN}\""), std::string::npos);
  EXPECT_NE(ds.find("--deepspeed_config \"$here/ds_config.json\""), std::string::npos);
  // A model read from a folder is loaded from that folder; without a source, by its name.
  // Single-quoted, a quote of its own escaped: bash reads a single quote inside a double-quoted
  // ${MODEL:-...} as quoting, and a name with one left the script unterminated.
  p.model.source = "/models/my \"llama\" it's $HOME `x`";
  EXPECT_NE(export_plan(p, kDeepSpeedExporter).value().files.at(kLaunchScriptFile).find(
                "MODEL_OF_PLAN='/models/my \"llama\" it'\\''s $HOME `x`'"),
            std::string::npos);
  p.model.source.clear();
  EXPECT_EQ(arctic_recipe(p).value["model"]["name_or_path"], p.model.name);
}

TEST(Export, VerdictsSayWhichStacksExportAPlanAndWhyTheOthersRefuse) {
  Plan p = llama_plan();
  p.parallel.sharding = Sharding::Zero3;
  p.parallel.ulysses = 8;
  p.parallel.loss_tiles = 4;
  const auto verdicts = export_verdicts(p);
  ASSERT_EQ(verdicts.size(), stack_profiles().size());
  std::map<std::string, std::string> refused;
  for (const auto& v : verdicts)
    if (v.refusal) refused[v.word] = v.refusal->field;
  EXPECT_EQ(refused.at("deepspeed"), "parallel.loss_tiles");  // no loss setting in a DeepSpeed config
  EXPECT_EQ(refused.count("torchtitan"), 1u);  // no Ulysses (and Llama 3.2 1B's tied embeddings across GPUs)
  EXPECT_EQ(refused.count("arctic"), 0u);
  EXPECT_EQ(refused.count("hf"), 0u);
  EXPECT_EQ(describe_exports(p).rfind("hf, arctic; not deepspeed (parallel.loss_tiles), torchtitan (", 0), 0u)
      << describe_exports(p);
  p.parallel.head_chunk = 1;  // no stack runs head-chunked attention
  EXPECT_EQ(describe_exports(p).rfind("none: not ", 0), 0u) << describe_exports(p);
}

// A longctx plan exported to a stack longctx models runs that stack's own step: ArcticTraining's
// recipe runs its TiledMLP shards, Liger's loss chunks and DeepSpeed's ZeRO-3 buffers and
// communicators, which can be over the budget where the plan fits (Llama-3.1-8B on 8 H100s at
// 5,373,952 tokens: the plan 79.5 GiB, arctic's step 84 GiB as nvidia-smi shows it).
Plan long_llama_8b(std::int64_t seq) {
  Plan p = testing::gpu_plan("llama-3.1-8b", "h100-80gb", 8, seq);
  p.train.grad_dtype = DType::BF16;
  ParallelConfig& par = p.parallel;
  par.sharding = Sharding::Zero3;
  par.ulysses = 8;
  par.checkpoint = CheckpointPolicy::full();
  par.offload_checkpoints = par.offload_optimizer = par.offload_params = true;
  par.mlp_tiles = 16;
  par.loss_tiles = 64;
  return p;
}

TEST(Export, AnotherStacksOwnStepOverTheBudgetIsRefusedWhereThePlanFits) {
  const Plan p = long_llama_8b(5373952);
  ASSERT_TRUE(validate(p));
  ASSERT_TRUE(predict(p).feasible);
  const std::optional<Plan> run = kArcticExporter.as_run(p);
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->train.stack.kind, StackKind::Arctic);
  EXPECT_EQ(run->train.stack.arctic_model, ArcticModel::Liger);  // the recipe's model.type for loss tiles
  EXPECT_EQ(run->parallel.mlp_tiles, 164);  // ceil(5,373,952 / 8 / 4,096)
  EXPECT_FALSE(predict(*run).feasible);
  const auto refused = check_expressible(p, kArcticExporter);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().field, "train.stack");
  EXPECT_NE(refused.error().message.find("re-plan with --stack arctic"), std::string::npos) << refused.error().message;
  EXPECT_NE(describe_exports(p).find("arctic (train.stack)"), std::string::npos) << describe_exports(p);
  // Shorter, ArcticTraining's step fits too: exported.
  const Plan shorter = long_llama_8b(4194304);
  ASSERT_TRUE(predict(*kArcticExporter.as_run(shorter)).feasible);
  EXPECT_TRUE(check_expressible(shorter, kArcticExporter).ok());
  // A plan that does not fit itself is exported as asked (export exits 3 after writing it).
  const Plan over = long_llama_8b(8388608);
  ASSERT_FALSE(predict(over).feasible);
  EXPECT_TRUE(check_expressible(over, kArcticExporter).ok());
  // The stack's own plans run their own step: nothing to hold them to.
  EXPECT_FALSE(kArcticExporter.as_run(*run).has_value());
}

// Where the other stack's step needs more host memory than the node has and the plan does not,
// the refusal names the host memory, not a device figure.
TEST(Export, AnotherStacksStepOverTheHostMemoryIsRefusedNamingIt) {
  Plan p = long_llama_8b(4194304);
  const std::optional<Plan> run = kArcticExporter.as_run(p);
  ASSERT_TRUE(run.has_value());
  const std::int64_t own_host = predict(p).peak_host_bytes, arctic_host = predict(*run).peak_host_bytes;
  ASSERT_LT(own_host, arctic_host);  // DeepSpeed's host Adam keeps more than longctx's offload
  p.cluster.host_budget_bytes_per_node = own_host + (arctic_host - own_host) / 2;
  ASSERT_TRUE(predict(p).feasible);
  const auto refused = check_expressible(p, kArcticExporter);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().field, "train.stack");
  EXPECT_NE(refused.error().message.find("of host memory per node, over its"), std::string::npos)
      << refused.error().message;
}

// What each modelled stack's files run for a longctx plan, in its own terms.
TEST(Export, TheStepsOtherStacksRunForALongctxPlan) {
  Plan p = llama_plan();
  p.parallel.sharding = Sharding::Zero3;
  p.parallel.checkpoint = CheckpointPolicy::full();
  // hf under FSDP2 (zero3, no Ulysses, no offload, fp32 gradients): accelerate's checkpointing
  // and torch's AdamW, as training_args.json and the accelerate config say.
  ASSERT_TRUE(hf_uses_fsdp2(p));
  const std::optional<Plan> hf = kHfExporter.as_run(p);
  ASSERT_TRUE(hf.has_value());
  EXPECT_EQ(hf->train.stack.kind, StackKind::HF);
  EXPECT_EQ(hf->train.stack.checkpointing, HfCheckpointing::Accelerate);
  EXPECT_EQ(hf->train.stack.optimizer, HfOptimizer::AdamWTorch);
  EXPECT_EQ(hf_training_arguments(p).value["optim"], "adamw_torch");
  // Liger's loss is not the hf stack's to model: no step to hold the plan to.
  Plan liger = p;
  liger.parallel.loss_tiles = 4;
  EXPECT_FALSE(kHfExporter.as_run(liger).has_value());
  // DeepSpeed where the files run FSDP2 (offloading both under FSDP2, which the hf stack runs
  // under DeepSpeed): not the files' step, nothing.
  Plan offloading = p;
  offloading.parallel.offload_optimizer = offloading.parallel.offload_params = true;
  ASSERT_TRUE(hf_uses_fsdp2(offloading));
  EXPECT_FALSE(kHfExporter.as_run(offloading).has_value());
  // Under DeepSpeed's Ulysses the accelerate config names flash_attention_2, the core attention
  // the hf stack models there: the step it predicts is the one the files run.
  Plan ulysses = p;
  ulysses.parallel.ulysses = 2;
  ulysses.train.grad_dtype = DType::BF16;  // ZeRO-3 reduces in the parameters' dtype
  const std::optional<Plan> hf_ulysses = kHfExporter.as_run(ulysses);
  ASSERT_TRUE(hf_ulysses.has_value());
  EXPECT_EQ(hf_ulysses->train.stack.attention, HfAttention::FlashAttention2);
  // The model is loaded with it, which only the user's script can do: the files say so
  // (DeepSpeed's register_with_transformers refuses a model loaded with sdpa).
  const std::vector<std::string> notes = hf_training_arguments(ulysses).approximations;
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find("attn_implementation=\"flash_attention_2\"") != std::string::npos;
  })) << notes.size() << " notes";
  EXPECT_TRUE(validate(*hf_ulysses)) << validate(*hf_ulysses).error().message;
  EXPECT_EQ(accelerate_config(ulysses).value["parallelism_config"]["parallelism_config_sp_attn_implementation"],
            "flash_attention_2");
  const std::optional<Plan> titan = kTorchtitanExporter.as_run(p);
  ASSERT_TRUE(titan.has_value());
  EXPECT_EQ(titan->train.stack.kind, StackKind::Torchtitan);
  EXPECT_FALSE(kDeepSpeedExporter.as_run);  // longctx's own plans: its files run the plan's step
  // torchtitan keeps fp32 gradients across GPUs (its job's mixed_precision_reduce): a plan of
  // the CLI's default bf16 gradients is held to that step, not skipped as one torchtitan
  // refuses. Llama-3.1-8B on 8 H100s at 34K, zero3, every layer checkpointed: the plan fits,
  // torchtitan's step does not.
  Plan titan_8b = testing::gpu_plan("llama-3.1-8b", "h100-80gb", 8, 34816);
  titan_8b.train.grad_dtype = DType::BF16;
  titan_8b.parallel.sharding = Sharding::Zero3;
  titan_8b.parallel.checkpoint = CheckpointPolicy::full();
  const std::optional<Plan> titan_run = kTorchtitanExporter.as_run(titan_8b);
  ASSERT_TRUE(titan_run.has_value());
  EXPECT_EQ(titan_run->train.grad_dtype, DType::FP32);
  EXPECT_TRUE(validate(*titan_run)) << validate(*titan_run).error().message;
  ASSERT_TRUE(predict(titan_8b).feasible);
  const auto titan_refused = check_expressible(titan_8b, kTorchtitanExporter);
  ASSERT_FALSE(titan_refused.ok());
  EXPECT_EQ(titan_refused.error().field, "train.stack");
  // ZeRO-1 or -2: the recipe and ds_config.json write the plan's stage, which the arctic and hf
  // stacks do not model: no step to hold the plan to.
  Plan zero2 = p;
  zero2.parallel.sharding = Sharding::Zero2;
  EXPECT_FALSE(kArcticExporter.as_run(zero2).has_value());
  EXPECT_FALSE(kHfExporter.as_run(zero2).has_value());
  // flash-attn runs half precision only: an fp32 plan's files name sdpa.
  Plan fp32 = ulysses;
  fp32.train.dtype = DType::FP32;
  EXPECT_EQ(arctic_recipe(fp32).value["model"]["attn_implementation"], "sdpa");
  EXPECT_EQ(accelerate_config(fp32).value["parallelism_config"]["parallelism_config_sp_attn_implementation"], "sdpa");
  // ArcticTraining's recipe names the attention its step models, flash-attn's.
  EXPECT_EQ(arctic_recipe(p).value["model"]["attn_implementation"], "flash_attention_2");
  EXPECT_EQ(kArcticExporter.as_run(p)->train.stack.attention, HfAttention::FlashAttention2);
}

// ArcticTraining runs DeepSpeed and flash attention on CUDA GPUs: a plan of the CPU virtual
// device is not exported to it (`plan --stack arctic --gpu cpu` is refused alike); the others are.
// export refuses a folder holding another set's file by these names (export_command.cpp): a
// name an exporter writes without declaring it would let a stale file of it through.
TEST(Export, EveryFileWrittenIsAmongItsExportersNames) {
  std::vector<Plan> plans;
  for (Sharding sharding : {Sharding::None, Sharding::Zero1, Sharding::Zero2, Sharding::Zero3}) {
    Plan p = llama_plan();
    p.parallel.sharding = sharding;
    plans.push_back(p);
    p.parallel.ulysses = 4;
    p.parallel.offload_optimizer = sharding != Sharding::None;
    plans.push_back(p);
  }
  for (HfLoss loss : {HfLoss::Transformers, HfLoss::TrlChunkedNll})
    for (std::int64_t gpus : {1, 8}) {
      Plan p = testing::gpu_plan("llama-3.2-1b", "h100-80gb", gpus, 16384);
      p.train.dtype = DType::BF16;
      p.train.stack = default_stack(StackKind::HF);
      p.train.stack.loss = loss;
      p.parallel.sharding = gpus > 1 ? Sharding::Zero3 : Sharding::None;
      plans.push_back(p);
      p.parallel.ulysses = gpus;  // under DeepSpeed
      plans.push_back(p);
    }
  for (std::int64_t gpus : {1, 8}) {
    Plan p = testing::gpu_plan("llama-3.1-8b", "h100-80gb", gpus, 8192);
    p.train.dtype = DType::BF16;
    p.train.stack = default_stack(StackKind::Torchtitan);
    p.parallel.sharding = Sharding::Zero3;
    plans.push_back(p);
  }
  int exported = 0;
  std::set<std::string> written;
  for (const Plan& p : plans)
    for (const StackProfile* s : stack_profiles()) {
      const auto e = export_plan(p, *s->exporter);
      if (!e) continue;
      ++exported;
      for (const auto& [name, text] : e->files) {
        written.insert(name);
        EXPECT_TRUE(std::find(s->exporter->file_names.begin(), s->exporter->file_names.end(), name) !=
                    s->exporter->file_names.end())
            << s->exporter->word << " wrote " << name << " without naming it";
      }
    }
  EXPECT_GT(exported, 20);
  // Every name was written by some plan here, and the union lists each once.
  const auto every = every_export_file_name();
  EXPECT_EQ(std::set<std::string>(every.begin(), every.end()), written);
  EXPECT_TRUE(std::is_sorted(every.begin(), every.end()) && std::adjacent_find(every.begin(), every.end()) == every.end());
}

TEST(Export, ACudaOnlyStackRefusesAPlanOfTheCpu) {
  Plan p = testing::cpu_plan("llama-3.2-1b", 8, 65536);
  const auto r = export_plan(p, kArcticExporter);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "--stack");
  EXPECT_NE(r.error().message.find("on CUDA GPUs"), std::string::npos) << r.error().message;
  EXPECT_TRUE(export_plan(p, kDeepSpeedExporter).ok());
  // accelerate runs a CPU plan as one process of its own, without DeepSpeed: eight ranks are
  // refused (one rank of `--stack hf` runs: tests/python/test_export.py).
  const auto hf = export_plan(p, kHfExporter);
  ASSERT_FALSE(hf.ok());
  EXPECT_EQ(hf.error().field, "cluster.hardware");
  EXPECT_NE(hf.error().message.find("as one process"), std::string::npos) << hf.error().message;
}

TEST(Export, ParseStackNamesTheField) {
  EXPECT_STREQ(parse_stack("arctic", "--stack").value().word, "arctic");
  const auto bad = parse_stack("megatron", "--stack");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().field, "--stack");
}

TEST(YamlText, BlocksScalarsAndQuoting) {
  const nlohmann::json j = {{"a", 1},
                            {"b", {{"c", true}, {"d", nlohmann::json::array({"x", 2})}}},
                            {"e", nlohmann::json::object()},
                            {"f", 1e-5},
                            {"g", "yes"},
                            {"h", nlohmann::json::array({{{"k", 1}, {"l", 2}}})},
                            {"odd key", nullptr}};
  EXPECT_EQ(to_yaml(j, {"top"}),
            "# top\n"
            "a: 1\n"
            "b:\n  c: true\n  d:\n    - \"x\"\n    - 2\n"
            "e: {}\n"
            "f: 1.0e-05\n"
            "g: \"yes\"\n"
            "h:\n  -\n    k: 1\n    l: 2\n"
            "\"odd key\": null\n");
}

TEST(TomlText, ScalarsFirstThenTablesAndEveryFloatWithAPoint) {
  const nlohmann::json j = {{"title", "a \"quoted\" name"},
                            {"model", {{"flavor", "8B"}, {"n", 3}, {"lr", 1.0}, {"eps", 1e-8}, {"on", false}}},
                            {"odd key", {{"list", nlohmann::json::array({1, "x"})}}}};
  const auto toml = to_toml(j, {"top"});
  ASSERT_TRUE(toml.ok()) << toml.error().message;
  EXPECT_EQ(toml.value(),
            "# top\n"
            "title = \"a \\\"quoted\\\" name\"\n"
            "\n[model]\neps = 1e-08\nflavor = \"8B\"\nlr = 1.0\nn = 3\non = false\n"
            "\n[\"odd key\"]\nlist = [1, \"x\"]\n");
}

// TOML has no null and the job file nests no deeper than a table of scalars: both refused by name.
TEST(TomlText, RefusesNullAndNestedTablesNamingTheKey) {
  const auto null_value = to_toml({{"t", {{"k", nullptr}}}});
  ASSERT_FALSE(null_value.ok());
  EXPECT_EQ(null_value.error().field, "t.k");
  const auto nested = to_toml({{"t", {{"u", {{"k", 1}}}}}});
  ASSERT_FALSE(nested.ok());
  EXPECT_EQ(nested.error().field, "t.u");
  EXPECT_FALSE(to_toml(nlohmann::json::array({1})).ok());
}

}  // namespace
}  // namespace longctx
