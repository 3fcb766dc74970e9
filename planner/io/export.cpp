// The key-by-key mapping of docs/export.md. Every key written is one the stack's own config
// schema defines; the source each comes from is cited where the key is written.
#include "planner/io/export.h"

#include <functional>

#include <fmt/format.h>

#include "planner/io/toml_text.h"
#include "planner/stacks/torchtitan/models.h"
#include "planner/io/yaml_text.h"

namespace longctx {
namespace {

using nlohmann::json;

std::string stack_name(Stack s) {
  switch (s) {
    case Stack::Arctic: return "arctic";
    case Stack::HF: return "hf";
    case Stack::DeepSpeed: return "deepspeed";
    case Stack::Torchtitan: return "torchtitan";
  }
  return "deepspeed";
}

// One knob a stack cannot run within the plan's memory: which stacks refuse it and why.
struct Refusal {
  const char* knob;  // the plan file's field
  std::function<bool(const Plan&)> applies;
  std::vector<Stack> refused_by;
  const char* why;  // completes "--stack X cannot ..."
  const char* fix;
};

const std::vector<Refusal>& refusals() {
  static const std::vector<Refusal> table = {
      {"parallel.ring", [](const Plan& p) { return p.parallel.ring > 1; }, {Stack::Arctic, Stack::HF, Stack::DeepSpeed},
       "run ring attention (its Ulysses attends over the whole sequence on each rank): each rank would hold r times "
       "the tokens the plan predicts in attention",
       "re-plan with --ring 1"},
      // A torchtitan-stack plan predicted torchtitan's own context parallel: it is exported.
      {"parallel.ring",
       [](const Plan& p) { return p.parallel.ring > 1 && p.train.stack.kind != StackKind::Torchtitan; },
       {Stack::Torchtitan},
       "run longctx's ring attention: its context parallelism (torch's ring attention) all-gathers k and v "
       "and keeps other buffers than the plan predicts",
       "re-plan with --stack torchtitan to predict its context parallel, or with --ring 1"},
      {"parallel.ulysses", [](const Plan& p) { return p.parallel.ulysses > 1; }, {Stack::Torchtitan},
       "run Ulysses sequence parallelism (it has none): each rank would attend over the whole sequence",
       "re-plan with --ulysses 1"},
      {"parallel.head_chunk", [](const Plan& p) { return p.parallel.head_chunk > 0; },
       {Stack::Arctic, Stack::HF, Stack::DeepSpeed, Stack::Torchtitan},
       "run head-chunked (untied) Ulysses attention: it attends over all local heads at once, holding more "
       "than the plan predicts",
       "re-plan with --head-chunk 0"},
      {"parallel.mlp_tiles", [](const Plan& p) { return p.parallel.mlp_tiles > 1; },
       {Stack::HF, Stack::DeepSpeed, Stack::Torchtitan},
       "tile the MLP (that is model code, not configuration): the untiled MLP holds more than the plan predicts",
       "use --stack arctic (tiled_mlp_compute) or re-plan with --mlp-tiles 1"},
      {"parallel.loss_tiles", [](const Plan& p) { return p.parallel.loss_tiles > 1; }, {Stack::DeepSpeed},
       "tile the loss (a DeepSpeed config has no loss setting): full logits hold more than the plan predicts",
       "use --stack arctic or --stack hf (Liger's fused cross-entropy) or re-plan with --loss-tiles 1"},
      {"parallel.loss_tiles", [](const Plan& p) { return p.parallel.loss_tiles > 1; }, {Stack::Torchtitan},
       "tile the loss (its cross_entropy_loss takes the full logits): they hold more than the plan predicts",
       "re-plan with --loss-tiles 1"},
      // An hf-stack plan predicted transformers' own offload (5.17 on): it is exported.
      {"parallel.offload_checkpoints",
       [](const Plan& p) { return p.parallel.offload_checkpoints && p.train.stack.kind != StackKind::HF; }, {Stack::HF},
       "offload longctx's checkpoints: transformers' offload (5.17 on) keeps other tensors than longctx's runtime, "
       "which this plan predicts",
       "re-plan with --stack hf, use --stack arctic (activation_checkpoint_cpu_offload), or re-plan without "
       "--offload-checkpoints"},
      {"parallel.offload_checkpoints", [](const Plan& p) { return p.parallel.offload_checkpoints; },
       {Stack::Torchtitan},
       "offload checkpoints: its activation checkpointing keeps them on the device, more than the plan predicts",
       "re-plan without --offload-checkpoints"},
  };
  return table;
}

const char* dtype_name(DType t) { return t == DType::BF16 ? "bf16" : "fp32"; }

json offload_to_cpu() {
  // deepspeed/runtime/zero/offload_config.py: DeepSpeedZeroOffloadParamConfig and
  // DeepSpeedZeroOffloadOptimizerConfig (device: OffloadDeviceEnum, pin_memory: bool).
  return {{"device", "cpu"}, {"pin_memory", true}};
}

// deepspeed/runtime/zero/config.py DeepSpeedZeroConfig: stage (ZeroStageEnum 0..3),
// offload_param, offload_optimizer.
json zero_optimization(const ParallelConfig& p) {
  int stage = 0;
  switch (p.sharding) {
    case Sharding::None: stage = 0; break;
    case Sharding::Zero1: stage = 1; break;
    case Sharding::Zero2: stage = 2; break;
    case Sharding::Zero3: stage = 3; break;
  }
  json z = {{"stage", stage}};
  if (p.offload_optimizer) z["offload_optimizer"] = offload_to_cpu();
  if (p.offload_params) z["offload_param"] = offload_to_cpu();  // validate(): ZeRO-3 only, as DeepSpeed requires
  return z;
}

// deepspeed/runtime/constants.py DATA_TYPES / GRAD_ACCUM_DTYPE ("data_types": {"grad_accum_dtype"}):
// the dtype gradients are accumulated and reduced in.
json data_types(const TrainConfig& t) { return {{"grad_accum_dtype", dtype_name(t.grad_dtype)}}; }

std::string every_k_note(const CheckpointPolicy& c, const char* how) {
  return fmt::format("parallel.checkpoint: {} checkpoints every layer, not {}: less device memory than planned, "
                     "more recompute",
                     how, to_string(c));
}

// ArcticTraining's TiledMLP picks its shard count itself (arctic_training/model/tiled_compute.py:
// ceil(seqlen / hidden) on the rank's sequence slice).
std::int64_t arctic_mlp_shards(const Plan& p) {
  const std::int64_t local = p.train.seq / p.parallel.ulysses;
  return (local + p.model.hidden - 1) / p.model.hidden;
}

std::string model_path_note(const Plan& p) {
  return fmt::format("model.name_or_path: the plan's model name '{}'; replace it with that model's Hugging Face id "
                     "or checkpoint folder",
                     p.model.name);
}

void add_checkpoint_notes(const Plan& p, const char* how, std::vector<std::string>& notes) {
  if (p.parallel.checkpoint.kind == CheckpointPolicy::Kind::EveryK) notes.push_back(every_k_note(p.parallel.checkpoint, how));
}

std::string dump_json(const json& j) { return j.dump(2) + "\n"; }

}  // namespace

std::string to_string(Stack s) { return stack_name(s); }

Result<Stack> parse_stack(const std::string& text, const std::string& field) {
  for (Stack s : {Stack::Arctic, Stack::HF, Stack::DeepSpeed, Stack::Torchtitan})
    if (text == stack_name(s)) return s;
  return Error::bad_input(field, fmt::format("'{}' is not a stack; give arctic, hf, deepspeed or torchtitan", text));
}

namespace {

// A plan of longctx's own runtime exported to torchtitan: what torchtitan would run with more
// device memory than the plan predicts, or not at all, is refused (the knobs every stack
// shares are in refusals()). A plan made with --stack torchtitan has passed validate()'s
// stricter rules already.
Result<bool> check_torchtitan_runs(const Plan& p) {
  const ModelConfig& m = p.model;
  const ParallelConfig& par = p.parallel;
  const std::int64_t world = p.cluster.shape.world();
  const char* replan = "re-plan with --stack torchtitan to see what torchtitan can run";
  if (const auto no = torchtitan_model_refusal(m, world))
    return Error::bad_input("model", fmt::format("--stack torchtitan {}; {}", no->reason, replan));
  if (world > 1 && par.sharding == Sharding::None)
    return Error::bad_input("parallel.sharding", fmt::format("--stack torchtitan replicates with DDP without sharding, "
                                                             "which longctx does not model; re-plan with --sharding "
                                                             "zero3 (FSDP2)"));
  if (world == 1 && p.train.dtype != DType::FP32)
    return Error::bad_input("train.dtype", "--stack torchtitan trains bf16 on one GPU under torch.autocast, which keeps "
                                           "other tensors than the plan; re-plan with --dtype fp32, or across GPUs");
  if ((par.offload_optimizer || par.offload_params) && (world == 1 || par.sharding == Sharding::None))
    return Error::bad_input(par.offload_optimizer ? "parallel.offload_optimizer" : "parallel.offload_params",
                            "--stack torchtitan offloads only under FSDP2 (enable_cpu_offload), across GPUs; re-plan "
                            "without offload or with --sharding zero3 on more than one GPU");
  // torchtitan's selective mode checkpoints floor(L / K) blocks (the K-th, 2K-th, ...), the
  // plan's every:K ceil(L / K) (layers 0, K, ...): fewer checkpointed blocks hold more.
  if (par.checkpoint.kind == CheckpointPolicy::Kind::EveryK && m.layers % par.checkpoint.every != 0)
    return Error::bad_input("parallel.checkpoint", fmt::format("--stack torchtitan's selective_ac_option {} "
                                                               "checkpoints {} of the {} blocks, the plan {}; re-plan "
                                                               "with an every:K that divides the layers, or full",
                                                               par.checkpoint.every, m.layers / par.checkpoint.every,
                                                               m.layers, (m.layers + par.checkpoint.every - 1) /
                                                                              par.checkpoint.every));
  return true;
}

}  // namespace

Result<bool> check_expressible(const Plan& p, Stack stack) {
  // A plan of the hf stack predicts transformers run alone, in one process: its files are
  // transformers', and DeepSpeed's or ArcticTraining's would run a step it did not predict.
  if (p.train.stack.kind == StackKind::HF && stack != Stack::HF)
    return Error::bad_input("--stack", fmt::format("the plan predicts transformers alone (train.stack hf); export it with "
                                                   "--stack hf, or re-plan with --stack longctx for --stack {}",
                                                   stack_name(stack)));
  // A plan of the arctic stack predicts ArcticTraining's step: its recipe is the file to run.
  if (p.train.stack.kind == StackKind::Arctic && stack != Stack::Arctic)
    return Error::bad_input("--stack", fmt::format("the plan predicts ArcticTraining (train.stack arctic); export it with "
                                                   "--stack arctic, or re-plan with --stack longctx for --stack {}",
                                                   stack_name(stack)));
  // A plan of the torchtitan stack predicts torchtitan's step: its job file is the one to run.
  if (p.train.stack.kind == StackKind::Torchtitan && stack != Stack::Torchtitan)
    return Error::bad_input("--stack", fmt::format("the plan predicts torchtitan (train.stack torchtitan); export it "
                                                   "with --stack torchtitan, or re-plan with --stack longctx for --stack {}",
                                                   stack_name(stack)));
  if (stack == Stack::Torchtitan && p.train.stack.kind == StackKind::Longctx) {
    LONGCTX_TRY(auto ok, check_torchtitan_runs(p));
    (void)ok;
  }
  for (const Refusal& r : refusals()) {
    if (!r.applies(p)) continue;
    for (Stack s : r.refused_by)
      if (s == stack) return Error::bad_input(r.knob, fmt::format("--stack {} cannot {}; {}", stack_name(stack), r.why, r.fix));
  }
  return true;
}

StackConfig deepspeed_config(const Plan& p, Stack stack) {
  // Top-level keys: deepspeed/runtime/constants.py, read by deepspeed/runtime/config.py DeepSpeedConfig.
  const bool hf = stack == Stack::HF;  // the Trainer fills "auto" from TrainingArguments
  StackConfig c;
  json& j = c.value;
  j["train_micro_batch_size_per_gpu"] = hf ? json("auto") : json(p.train.micro_batch);
  j["gradient_accumulation_steps"] = hf ? json("auto") : json(1);
  j["gradient_clipping"] = hf ? json("auto") : json(1.0);
  j["bf16"] = {{"enabled", p.train.dtype == DType::BF16}};  // BFLOAT16 = "bf16", BFLOAT16_ENABLED
  j["data_types"] = data_types(p.train);
  j["zero_optimization"] = zero_optimization(p.parallel);
  // SEQUENCE_PARALLEL_SIZE: DeepSpeed's Ulysses for Hugging Face models (ALST,
  // deepspeed/runtime/sequence_parallel/ulysses_sp.py); the config sets the group size.
  j["sequence_parallel_size"] = p.parallel.ulysses;
  // AdamW, which the plan's fp32 moments model; with offload_optimizer DeepSpeed runs it as
  // DeepSpeedCPUAdam. Hyperparameters are placeholders.
  const json auto_or = hf ? json("auto") : json();
  j["optimizer"] = {{"type", "AdamW"},
                    {"params",
                     {{"lr", hf ? auto_or : json(1e-5)},
                      {"betas", hf ? auto_or : json::array({0.9, 0.999})},
                      {"eps", hf ? auto_or : json(1e-8)},
                      {"weight_decay", hf ? auto_or : json(0.0)}}}};
  if (p.parallel.checkpoint.any() && stack == Stack::DeepSpeed) {
    // deepspeed/runtime/activation_checkpointing/config.py DeepSpeedActivationCheckpointingConfig:
    // used by deepspeed.checkpointing.checkpoint, which the model's layers must call.
    j["activation_checkpointing"] = {{"partition_activations", false},
                                     {"cpu_checkpointing", p.parallel.offload_checkpoints},
                                     {"contiguous_memory_optimization", false},
                                     {"synchronize_checkpoint_boundary", false}};
    add_checkpoint_notes(p, "deepspeed.checkpointing as the model calls it", c.approximations);
  }
  return c;
}

StackConfig arctic_recipe(const Plan& p) {
  // arctic_training/config/trainer.py TrainerConfig; model.py ModelConfig; data.py DataConfig;
  // optimizer.py OptimizerConfig. The factories' names: model/liger_factory.py "liger",
  // model/hf_factory.py "huggingface", optimizer/adam_factory.py "cpu_adam" / "fused_adam".
  StackConfig c;
  const ParallelConfig& par = p.parallel;
  // A plan of the arctic stack predicted this very recipe: its model type and attention.
  const bool arctic_plan = p.train.stack.kind == StackKind::Arctic;
  json deepspeed = {{"zero_optimization", zero_optimization(par)}, {"data_types", data_types(p.train)}};
  c.value = {
      {"type", "sft"},
      {"micro_batch_size", p.train.micro_batch},
      {"gradient_accumulation_steps", 1},
      {"sequence_parallel_size", par.ulysses},
      {"activation_checkpoint_cpu_offload", par.offload_checkpoints},
      {"tiled_mlp_compute", par.mlp_tiles > 1},
      {"deepspeed", deepspeed},
      {"model",
       {{"type", arctic_plan ? to_string(p.train.stack.arctic_model) : par.loss_tiles > 1 ? "liger" : "huggingface"},
        {"name_or_path", p.model.name},
        {"dtype", dtype_name(p.train.dtype)},
        {"attn_implementation", arctic_plan ? to_string(p.train.stack.attention) : "sdpa"},
        {"disable_activation_checkpoint", !par.checkpoint.any()}}},
      {"data", {{"sources", json::array({"DATASET"})}, {"max_length", p.train.seq}}},
      {"optimizer", {{"type", par.offload_optimizer ? "cpu_adam" : "fused_adam"}}},
  };
  auto& notes = c.approximations;
  if (arctic_plan) return c;  // what the arctic stack predicted, nothing approximated
  add_checkpoint_notes(p, "ArcticTraining's gradient checkpointing", notes);
  if (par.loss_tiles > 1)
    notes.push_back(fmt::format("parallel.loss_tiles: Liger's fused linear cross-entropy (model.type liger) chunks the "
                                "loss itself, not in {} tiles; it never holds the full logits",
                                par.loss_tiles));
  else if (par.ulysses > 1)
    notes.push_back("parallel.loss_tiles: with sequence_parallel_size > 1 ArcticTraining tiles the loss in ~1 GiB "
                    "fp32 shards anyway: less device memory than planned");
  if (par.mlp_tiles > 1 && arctic_mlp_shards(p) != par.mlp_tiles)
    notes.push_back(fmt::format("parallel.mlp_tiles: ArcticTraining's TiledMLP runs ceil((seq/ulysses)/hidden) = {} "
                                "shards, not {}",
                                arctic_mlp_shards(p), par.mlp_tiles));
  return c;
}

namespace {

// torchtitan 0.2.2's dense flavors: models/llama3/__init__.py llama3_args (FeedForward's
// hidden size worked out: int(ffn_dim_multiplier * int(2 * 4 * dim / 3)) rounded up to
// multiple_of; heads of dim / n_heads, untied) and models/qwen3/__init__.py qwen3_args (q/k
// norms, head_dim 128, tied as enable_weight_tying says).
struct TorchtitanFlavor {
  const char* model;
  const char* name;
  std::int64_t dim, layers, heads, kv_heads, head_dim, vocab, ffn;
  bool tied;
};
constexpr TorchtitanFlavor kTorchtitanFlavors[] = {
    {"llama3", "debugmodel", 256, 6, 16, 16, 16, 2048, 768, false},
    {"llama3", "8B", 4096, 32, 32, 8, 128, 128256, 14336, false},
    {"llama3", "70B", 8192, 80, 64, 8, 128, 128256, 28672, false},
    {"llama3", "405B", 16384, 126, 128, 8, 128, 128256, 53248, false},
    {"qwen3", "debugmodel", 256, 8, 16, 8, 128, 2048, 3072, true},
    {"qwen3", "0.6B", 1024, 28, 16, 8, 128, 151936, 3072, true},
    {"qwen3", "1.7B", 2048, 28, 16, 8, 128, 151936, 6144, true},
    {"qwen3", "4B", 2560, 36, 32, 8, 128, 151936, 9728, true},
    {"qwen3", "8B", 4096, 36, 32, 8, 128, 151936, 12288, false},
    {"qwen3", "14B", 5120, 40, 40, 8, 128, 151936, 17408, false},
    {"qwen3", "32B", 5120, 64, 64, 8, 128, 151936, 25600, false},
};

}  // namespace

const char* torchtitan_model_name(const ModelConfig& m) { return m.qk_norm ? "qwen3" : "llama3"; }

std::string torchtitan_flavor(const ModelConfig& m) {
  for (const TorchtitanFlavor& f : kTorchtitanFlavors)
    if (torchtitan_model_name(m) == std::string(f.model) && m.hidden == f.dim && m.layers == f.layers &&
        m.heads == f.heads && m.kv_heads == f.kv_heads && m.head_dim == f.head_dim && m.vocab == f.vocab &&
        m.intermediate == f.ffn && m.tie_embeddings == f.tied)
      return f.name;
  return "";
}

StackConfig torchtitan_job(const Plan& p) {
  // torchtitan 0.2.2 config/job_config.py: JobConfig's sections Model, Optimizer, Training,
  // Parallelism, ActivationCheckpoint, Compile. The trainer divides training.seq_len's tokens
  // by local_batch_size per rank; one step, no gradient accumulation (global_batch_size -1).
  StackConfig c;
  const ParallelConfig& par = p.parallel;
  const std::string flavor = torchtitan_flavor(p.model);
  const bool bf16 = p.train.dtype == DType::BF16;
  const std::int64_t world = p.cluster.shape.world();
  json ac = {{"mode", "none"}};
  if (par.checkpoint.kind == CheckpointPolicy::Kind::Full) ac = {{"mode", "full"}};
  if (par.checkpoint.kind == CheckpointPolicy::Kind::EveryK)
    ac = {{"mode", "selective"}, {"selective_ac_option", std::to_string(par.checkpoint.every)}};
  if (par.checkpoint.kind == CheckpointPolicy::Kind::Ops) ac = {{"mode", "selective"}, {"selective_ac_option", "op"}};
  c.value = {
      {"job", {{"description", fmt::format("longctx plan: {}, {} tokens", p.model.name, p.train.seq)}}},
      {"model", {{"name", torchtitan_model_name(p.model)}, {"flavor", flavor.empty() ? p.model.name : flavor}}},
      {"optimizer", {{"name", "AdamW"}, {"implementation", "fused"}}},
      {"training",
       {{"local_batch_size", p.train.micro_batch},
        {"seq_len", p.train.seq},
        {"mixed_precision_param", bf16 ? "bfloat16" : "float32"},
        {"mixed_precision_reduce", "float32"},
        {"enable_cpu_offload", par.offload_optimizer || par.offload_params}}},
      // FSDP2 shards over data_parallel_shard x context_parallel (parallel_dims.py's dp_shard_cp):
      // over every rank, as the plan's zero3 does.
      {"parallelism",
       {{"data_parallel_shard_degree", par.sharding == Sharding::None ? 1 : world / par.ring},
        {"data_parallel_replicate_degree", par.sharding == Sharding::None ? world / par.ring : 1},
        {"context_parallel_degree", par.ring},
        {"context_parallel_load_balancer", "headtail"},
        {"context_parallel_rotate_method", "allgather"},
        {"tensor_parallel_degree", 1},
        {"pipeline_parallel_degree", 1}}},
      {"activation_checkpoint", ac},
      {"compile", {{"enable", false}}},
  };
  auto& notes = c.approximations;
  if (p.train.stack.kind == StackKind::Torchtitan) return c;  // what the torchtitan stack predicted
  if (par.sharding == Sharding::Zero1 || par.sharding == Sharding::Zero2)
    notes.push_back(fmt::format("parallel.sharding: torchtitan shards with FSDP2 (parameters, gradients and optimizer "
                                "states), not {}: less device memory than planned",
                                to_string(par.sharding)));
  if (par.offload_optimizer != par.offload_params)
    notes.push_back("parallel.offload: torchtitan's enable_cpu_offload (FSDP2's CPUOffloadPolicy) moves parameters, "
                    "gradients and optimizer states to the host together: less device memory and more host memory "
                    "than planned");
  if (par.checkpoint.kind == CheckpointPolicy::Kind::EveryK)
    notes.push_back(fmt::format("parallel.checkpoint: torchtitan's selective mode checkpoints blocks {}, {}, ... "
                                "(counting from 1) where the plan's every:{} checkpoints layers 0, {}, ...: as many "
                                "blocks, others",
                                par.checkpoint.every, 2 * par.checkpoint.every, par.checkpoint.every,
                                par.checkpoint.every));
  return c;
}

bool hf_uses_fsdp2(const Plan& p) {
  const ParallelConfig& par = p.parallel;
  return par.sharding == Sharding::Zero3 && par.ulysses == 1 && par.offload_optimizer == par.offload_params &&
         p.train.grad_dtype == DType::FP32;
}

namespace {

// An hf-stack plan with TRL's chunked loss runs under TRL's SFTTrainer: its arguments are
// trl.SFTConfig's.
bool exports_sft_config(const Plan& p) {
  return p.train.stack.kind == StackKind::HF && p.train.stack.loss == HfLoss::TrlChunkedNll;
}

}  // namespace

StackConfig hf_training_arguments(const Plan& p) {
  // transformers/training_args.py TrainingArguments.
  StackConfig c;
  const ParallelConfig& par = p.parallel;
  json& j = c.value;
  j["output_dir"] = "output";
  j["per_device_train_batch_size"] = p.train.micro_batch;
  j["gradient_accumulation_steps"] = 1;
  j["max_grad_norm"] = 1.0;
  j["bf16"] = p.train.dtype == DType::BF16;
  j["optim"] = "adamw_torch";
  const bool fsdp2 = hf_uses_fsdp2(p);
  // Under FSDP the Trainer checkpoints through fsdp_config.activation_checkpointing (and
  // refuses both at once): gradient_checkpointing would add an all-gather in backward.
  j["gradient_checkpointing"] = par.checkpoint.any() && !fsdp2;
  // An hf-stack plan predicted the checkpoint implementation it names; longctx's own plans
  // are run with the non-reentrant one, which keeps the layer's output no longer than needed.
  const bool hf_plan = p.train.stack.kind == StackKind::HF;
  if (hf_plan) j["optim"] = to_string(p.train.stack.optimizer);
  const bool reentrant = hf_plan && p.train.stack.checkpointing == HfCheckpointing::Reentrant;
  if (par.checkpoint.any() && !fsdp2) j["gradient_checkpointing_kwargs"] = {{"use_reentrant", reentrant}};
  // transformers 5.17 on: the Trainer pops "offload" and runs each checkpoint under
  // save_on_cpu(pin_memory=True) (trainer.py, modeling_utils.py _activation_checkpointing_enable).
  if (hf_plan && par.offload_checkpoints) {
    j["gradient_checkpointing_kwargs"]["offload"] = true;
    c.approximations.push_back("parallel.offload_checkpoints: gradient_checkpointing_kwargs \"offload\" needs transformers "
                               "5.17 or later (earlier versions pass it to torch.utils.checkpoint, which refuses it)");
  }
  add_checkpoint_notes(p, "Hugging Face gradient checkpointing", c.approximations);
  if (hf_plan) {
    // One process, no DeepSpeed: what the hf stack predicted. The attention implementation
    // is chosen where the model is loaded, which TrainingArguments has no key for.
    c.approximations.push_back(fmt::format("train.stack.attention: load the model with attn_implementation=\"{}\"{}",
                                           to_string(p.train.stack.attention),
                                           p.train.stack.attention_mask ? "" : "; the plan assumes batches without an attention_mask"));
    if (exports_sft_config(p)) {
      // trl.SFTConfig (TRL 1.10 to 1.14.2, trl/trainer/sft_config.py): its chunked loss, and
      // max_length at the plan's length (its default, 1024, would truncate every sample).
      j["loss_type"] = "chunked_nll";
      j["max_length"] = p.train.seq;
      j["packing"] = false;
    }
    return c;
  }
  if (par.loss_tiles > 1) {
    j["use_liger_kernel"] = true;
    c.approximations.push_back(fmt::format("parallel.loss_tiles: Liger's fused linear cross-entropy "
                                           "(use_liger_kernel) chunks the loss itself, not in {} tiles",
                                           par.loss_tiles));
  }
  if (fsdp2) {
    j["fsdp"] = "full_shard";
    j["fsdp_config"] = {{"fsdp_version", 2},
                        {"offload_params", par.offload_params},
                        {"reshard_after_forward", true},
                        {"activation_checkpointing", par.checkpoint.any()}};
  } else {
    j["deepspeed"] = kDeepSpeedConfigFile;
  }
  return c;
}

StackConfig accelerate_config(const Plan& p) {
  // accelerate/commands/config/config_args.py ClusterConfig (and BaseConfig's fields).
  StackConfig c;
  json& j = c.value;
  j["compute_environment"] = "LOCAL_MACHINE";
  j["debug"] = false;
  j["machine_rank"] = 0;
  j["main_training_function"] = "main";
  j["mixed_precision"] = p.train.dtype == DType::BF16 ? "bf16" : "no";
  j["num_machines"] = p.cluster.shape.nodes;
  j["num_processes"] = p.cluster.shape.world();
  j["rdzv_backend"] = "static";
  j["same_network"] = true;
  j["use_cpu"] = false;
  if (p.train.stack.kind == StackKind::HF) {
    j["distributed_type"] = "NO";  // the hf stack is one process
    return c;
  }
  if (hf_uses_fsdp2(p)) {
    j["distributed_type"] = "FSDP";
    // accelerate/commands/config/cluster.py's fsdp_config questions; FSDP2's CPU offload moves
    // parameters, gradients and optimizer state together (hence hf_uses_fsdp2's rule).
    j["fsdp_config"] = {{"fsdp_version", 2},
                        {"fsdp_offload_params", p.parallel.offload_params},
                        {"fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP"},
                        {"fsdp_reshard_after_forward", true},
                        {"fsdp_state_dict_type", "SHARDED_STATE_DICT"},
                        {"fsdp_cpu_ram_efficient_loading", true},
                        {"fsdp_activation_checkpointing", p.parallel.checkpoint.any()}};
    return c;
  }
  j["distributed_type"] = "DEEPSPEED";
  j["deepspeed_config"] = {{"deepspeed_config_file", kDeepSpeedConfigFile},
                           {"zero3_init_flag", p.parallel.sharding == Sharding::Zero3}};
  if (p.parallel.ulysses > 1) {
    // accelerate/parallelism_config.py ParallelismConfig sp_size / sp_backend (ALST), as the
    // launcher's --parallelism_config_* options (accelerate/utils/launch.py). No dp sizes:
    // under the DeepSpeed backend DeepSpeed forms the data-parallel groups itself (world/u).
    j["parallelism_config"] = {{"parallelism_config_sp_size", p.parallel.ulysses},
                               {"parallelism_config_sp_backend", "deepspeed"},
                               {"parallelism_config_sp_seq_length", p.train.seq},
                               {"parallelism_config_sp_seq_length_is_variable", true},
                               {"parallelism_config_sp_attn_implementation", "sdpa"}};
  }
  return c;
}

Result<ExportedFiles> export_plan(const Plan& p, Stack stack) {
  LONGCTX_TRY(auto ok, check_expressible(p, stack));
  (void)ok;
  ExportedFiles out;
  auto take = [&out](const StackConfig& c) {
    out.approximations.insert(out.approximations.end(), c.approximations.begin(), c.approximations.end());
  };
  const std::vector<std::string> header = {
      fmt::format("longctx export --stack {}: model {}, seq {}, {} rank(s)", stack_name(stack), p.model.name, p.train.seq,
                  p.cluster.shape.world())};
  switch (stack) {
    case Stack::DeepSpeed: {
      const StackConfig ds = deepspeed_config(p, stack);
      take(ds);
      out.files[kDeepSpeedConfigFile] = dump_json(ds.value);
      break;
    }
    case Stack::Arctic: {
      const StackConfig recipe = arctic_recipe(p);
      take(recipe);
      std::vector<std::string> comment = header;
      comment.push_back(model_path_note(p));
      comment.push_back("data.sources: replace DATASET with the training data (a Hugging Face dataset name or path)");
      out.files[kArcticRecipeFile] = to_yaml(recipe.value, comment);
      break;
    }
    case Stack::Torchtitan: {
      const StackConfig job = torchtitan_job(p);
      take(job);
      std::vector<std::string> comment = header;
      comment.push_back("torchtitan 0.2.2: run with --job.config_file torchtitan_job.toml; set model.hf_assets_path to "
                        "the model's tokenizer folder and training.dataset (and dataset_path) to the data");
      if (torchtitan_flavor(p.model).empty() && !p.model.qk_norm)
        comment.push_back(fmt::format("model.flavor: torchtitan has no llama3 flavor of this shape; register "
                                      "TransformerModelArgs(dim={}, n_layers={}, n_heads={}, n_kv_heads={}, "
                                      "vocab_size={}) under '{}' in torchtitan/models/llama3/__init__.py (llama3_args), "
                                      "with multiple_of and ffn_dim_multiplier giving a hidden size of {}",
                                      p.model.hidden, p.model.layers, p.model.heads, p.model.kv_heads, p.model.vocab,
                                      p.model.name, p.model.intermediate));
      if (torchtitan_flavor(p.model).empty() && p.model.qk_norm)
        comment.push_back(fmt::format("model.flavor: torchtitan has no qwen3 flavor of this shape; register "
                                      "Qwen3ModelArgs(dim={}, n_layers={}, n_heads={}, n_kv_heads={}, head_dim={}, "
                                      "hidden_dim={}, vocab_size={}, qk_norm=True, enable_weight_tying={}) under '{}' in "
                                      "torchtitan/models/qwen3/__init__.py (qwen3_args)",
                                      p.model.hidden, p.model.layers, p.model.heads, p.model.kv_heads, p.model.head_dim,
                                      p.model.intermediate, p.model.vocab, p.model.tie_embeddings ? "True" : "False",
                                      p.model.name));
      LONGCTX_TRY(std::string text, to_toml(job.value, comment));
      out.files[kTorchtitanJobFile] = text;
      break;
    }
    case Stack::HF: {
      const StackConfig args = hf_training_arguments(p), accel = accelerate_config(p);
      take(args);
      take(accel);
      out.files[exports_sft_config(p) ? kSftConfigFile : kTrainingArgumentsFile] = dump_json(args.value);
      out.files[kAccelerateConfigFile] = to_yaml(accel.value, header);
      if (!hf_uses_fsdp2(p) && p.train.stack.kind != StackKind::HF)
        out.files[kDeepSpeedConfigFile] = dump_json(deepspeed_config(p, stack).value);
      break;
    }
  }
  return out;
}

}  // namespace longctx
