// `longctx export --stack hf` (hf/export.h): the key-by-key mapping of docs/export.md. Every
// key written is one the stack's own config schema defines; the source each comes from is
// cited where the key is written.
#include "planner/stacks/hf/export.h"

#include <fmt/format.h>

#include "planner/stacks/blocks/deepspeed_config.h"
#include "planner/stacks/hf/validate.h"
#include "planner/stacks/launch_script.h"
#include "planner/stacks/stack_tiles.h"

namespace longctx {

using nlohmann::json;

namespace {

bool writes_deepspeed_config(const Plan& p);

constexpr ExportRefusal kRefusals[] = {
    // An hf-stack plan's ring is torch's context parallel, which accelerate runs (exported).
    {kUlyssesRingRefusal.knob, [](const Plan& p) { return plan_has_ring(p) && p.train.stack.kind != StackKind::HF; },
     kUlyssesRingRefusal.why, kUlyssesRingRefusal.fix},
    kHeadChunkRefusal,
    kMlpTilesRefusal,
    kStageZeroOffloadRefusal,
    // Where the files run DeepSpeed (an FSDP2 run keeps fp32 gradients of bf16 weights itself).
    {kStageZeroGradDtypeRefusal.knob,
     [](const Plan& p) { return writes_deepspeed_config(p) && plan_mixes_dtypes_unsharded(p); },
     kStageZeroGradDtypeRefusal.why, kStageZeroGradDtypeRefusal.fix},
    // An hf-stack plan predicted transformers' own offload (5.17 on): it is exported.
    {"parallel.offload_checkpoints",
     [](const Plan& p) { return p.parallel.offload_checkpoints && p.train.stack.kind != StackKind::HF; },
     "offload longctx's checkpoints: transformers' offload (5.17 on) keeps other tensors than longctx's runtime, "
     "which this plan predicts",
     "re-plan with --stack hf, use --stack arctic (activation_checkpoint_cpu_offload), or re-plan without "
     "--offload-checkpoints"},
    // accelerate launches a CPU run (use_cpu) as one process of its own (commands/launch.py
    // launch_command: DeepSpeed, FSDP and several processes are launched only where the run is
    // not on the CPU; several CPU processes need an MPI launcher these files do not set up), and
    // there shards nothing (state.py AcceleratorState: DeepSpeed and FSDP are distributed types
    // of several devices).
    {"cluster.hardware",
     [](const Plan& p) {
       return p.cluster.hardware.backend == Backend::Cpu &&
              (p.cluster.shape.world() > 1 || writes_deepspeed_config(p) || hf_uses_fsdp2(p));
     },
     "run a plan of the CPU virtual device as more than one process, under DeepSpeed or under FSDP: accelerate runs a "
     "CPU plan as one process on its own, its model unsharded",
     "plan for one CPU rank (--gpus 1) with --stack hf, or plan with a GPU preset (--gpu h100-80gb)"},
};

Result<bool> check(const Plan& p) { return first_refusal(p, "hf", kRefusals); }

// A plan made for the hf stack: one process, accelerate's FSDP2 or DeepSpeed ZeRO-3, what the
// hf stack predicted.
bool hf_plan(const Plan& p) { return p.train.stack.kind == StackKind::HF; }

// Whether the plan runs under DeepSpeed, with its config file: longctx's own plans unless
// FSDP2 can run them, an hf-stack plan where the hf stack predicted DeepSpeed.
bool writes_deepspeed_config(const Plan& p) {
  return hf_plan(p) ? hf::runs_deepspeed(p) : !hf_uses_fsdp2(p);
}

// Whether the layers are checkpointed through accelerate's fsdp_config (fsdp2_apply_ac)
// rather than the Trainer's gradient_checkpointing: longctx's own plans under FSDP2, and an
// hf-stack plan that predicted accelerate's.
bool checkpoints_by_accelerate(const Plan& p) {
  if (!hf_uses_fsdp2(p)) return false;
  return !hf_plan(p) || p.train.stack.checkpointing == HfCheckpointing::Accelerate;
}

// An hf-stack plan with TRL's chunked loss runs under TRL's SFTTrainer: its arguments are
// trl.SFTConfig's.
bool exports_sft_config(const Plan& p) { return hf_plan(p) && p.train.stack.loss == HfLoss::TrlChunkedNll; }

// The attention the files run: an hf-stack plan's own; for longctx's plans sdpa, and under
// DeepSpeed's Ulysses on GPUs flash_attention_2, the core attention the hf stack models there
// (hf/validate.cpp: its Ulysses over sdpa holds other tensors than it models).
HfAttention attention_run(const Plan& p) {
  if (hf_plan(p)) return p.train.stack.attention;
  // flash-attn runs half precision only: an fp32 plan keeps sdpa.
  const bool flash = p.parallel.ulysses > 1 && p.cluster.hardware.backend == Backend::Cuda && p.train.dtype == DType::BF16;
  return flash ? HfAttention::FlashAttention2 : HfAttention::Sdpa;
}

// accelerate 1.15.0 accelerator.py _prepare_deepspeed: sp_backend "deepspeed" needs DeepSpeed
// 0.18.2 (ver_min_required), and the batch needs position_ids (ulysses_sp.py
// UlyssesSPDataLoaderAdapter.refill refuses a batch without them).
void add_ulysses_note(const Plan& p, StackConfig& c) {
  if (p.parallel.ulysses > 1)
    c.approximations.push_back("parallel.ulysses: DeepSpeed's Ulysses under accelerate needs DeepSpeed 0.18.2 or later, "
                               "and a collator that returns position_ids (UlyssesSPDataLoaderAdapter requires them)");
}

// What an hf-stack plan predicted beyond longctx's knobs: the checkpoint offload (transformers
// 5.17 on: the Trainer pops "offload" and runs each checkpoint under save_on_cpu(pin_memory=True),
// trainer.py, modeling_utils.py _activation_checkpointing_enable), the attention implementation
// (chosen where the model is loaded, which TrainingArguments has no key for), and TRL's loss
// (trl.SFTConfig, TRL 1.10 to 1.14.2, trl/trainer/sft_config.py: its chunked loss, and
// max_length at the plan's length, as its default, 1024, would truncate every sample).
void hf_plan_arguments(const Plan& p, StackConfig& c) {
  json& j = c.value;
  if (p.parallel.offload_checkpoints && !checkpoints_by_accelerate(p)) {
    j["gradient_checkpointing_kwargs"]["offload"] = true;
    c.approximations.push_back("parallel.offload_checkpoints: gradient_checkpointing_kwargs \"offload\" needs transformers "
                               "5.17 or later (earlier versions pass it to torch.utils.checkpoint, which refuses it)");
  }
  add_checkpoint_notes(p, "Hugging Face gradient checkpointing", c.approximations);
  add_ulysses_note(p, c);
  // use_cache is the model config's (from_pretrained takes it as a config attribute; the
  // Trainer's arguments have no key for it): where the plan has it off, the load sets it.
  c.approximations.push_back(fmt::format("train.stack.attention: load the model with attn_implementation=\"{}\"{}{}",
                                         to_string(p.train.stack.attention),
                                         p.train.stack.use_cache ? "" : " and use_cache=False",
                                         p.train.stack.attention_mask ? "" : "; the plan assumes batches without an attention_mask"));
  if (!exports_sft_config(p)) return;
  j["loss_type"] = "chunked_nll";
  j["max_length"] = p.train.seq;
  j["packing"] = false;
  // torch's load balancer cuts each sample into 2 x cp chunks (_HeadTailLoadBalancer), so
  // the collator pads to that multiple (TRL's examples/sft_qwen3_8b_1m_context does so).
  if (p.parallel.ring > 1) j["pad_to_multiple_of"] = 2 * p.parallel.ring;
}

// A longctx plan under the Trainer: Liger's fused cross-entropy for loss tiles, and FSDP2 or
// DeepSpeed for the sharding.
void runtime_plan_arguments(const Plan& p, StackConfig& c) {
  const ParallelConfig& par = p.parallel;
  json& j = c.value;
  add_checkpoint_notes(p, "Hugging Face gradient checkpointing", c.approximations);
  add_ulysses_note(p, c);
  // The core attention UlyssesSPAttentionHF wraps is the one the model was loaded with:
  // register_with_transformers (ulysses_sp.py) refuses a model loaded with another than the
  // config's sp_attn_implementation, and from_pretrained loads sdpa unless told.
  if (par.ulysses > 1)
    c.approximations.push_back(fmt::format("parallel.ulysses: load the model with attn_implementation=\"{}\", the "
                                           "attention accelerate_config.yaml names for Ulysses",
                                           to_string(attention_run(p))));
  if (par.loss_tiles > 1) {
    j["use_liger_kernel"] = true;
    c.approximations.push_back(fmt::format("parallel.loss_tiles: Liger's fused linear cross-entropy "
                                           "(use_liger_kernel) chunks the loss itself, not in {} tiles",
                                           par.loss_tiles));
  }
  if (hf_uses_fsdp2(p)) {
    j["fsdp"] = "full_shard";
    // cpu_ram_efficient_loading as accelerate_config.yaml says it: TrainingArguments writes
    // FSDP_CPU_RAM_EFFICIENT_LOADING from its own fsdp_config (training_args.py __post_init__,
    // default "false") over what `accelerate launch` set from the YAML.
    j["fsdp_config"] = {{"fsdp_version", 2},
                        {"offload_params", par.offload_params},
                        {"reshard_after_forward", true},
                        {"activation_checkpointing", par.checkpoint.any()},
                        {"cpu_ram_efficient_loading", true}};
  } else {
    // The config itself, not its file name, which the Trainer would open from the folder it
    // runs in (TrainingArguments.deepspeed takes "a path or an already loaded json file as a
    // dict": transformers/training_args.py; HfTrainerDeepSpeedConfig reads either).
    j["deepspeed"] = deepspeed_config(p, DeepSpeedLauncher::HfTrainer).value;
  }
}

// accelerate's launcher (accelerate/commands/launch.py launch_command_parser) on the user's
// Trainer script: the config file, and the machines and rendezvous from the parameters, which
// take precedence over the file's (_validate_launch_command fills only what is not given).
LaunchSpec launch(const Plan& p) {
  const char* args = exports_sft_config(p) ? kSftConfigFile : kTrainingArgumentsFile;
  LaunchSpec s{.launcher = "accelerate launch",
               .usage = "TRAIN.py [ARGS...]",
               .about = {fmt::format("TRAIN.py: your Trainer script; it finds its arguments in $LONGCTX_TRAINING_ARGS "
                                     "(this folder's {}: HfArgumentParser(...).parse_json_file) and the model in "
                                     "$LONGCTX_MODEL",
                                     args)},
               .setup = {fmt::format("export LONGCTX_TRAINING_ARGS=\"$here/{}\"", args), "export LONGCTX_MODEL=\"$MODEL\""},
               .command = {"accelerate launch", fmt::format("--config_file \"$here/{}\"", kAccelerateConfigFile)},
               .takes_script = true};
  if (writes_deepspeed_config(p))
    s.command.push_back(fmt::format("--deepspeed_config_file \"$here/{}\"", kDeepSpeedConfigFile));
  for (const char* word : {"--num_machines \"$NNODES\"", "--num_processes \"$((NNODES * GPUS_PER_NODE))\"",
                           "--machine_rank \"$NODE_RANK\"", "--main_process_ip \"$MASTER_ADDR\"",
                           "--main_process_port \"$MASTER_PORT\"", "\"$@\""})
    s.command.push_back(word);
  return s;
}

StackFiles write(const Plan& p) {
  StackConfig args = hf_training_arguments(p), accel = accelerate_config(p);
  StackFiles out;
  out.approximations = std::move(args.approximations);
  out.approximations.insert(out.approximations.end(), accel.approximations.begin(), accel.approximations.end());
  out.files.push_back({exports_sft_config(p) ? kSftConfigFile : kTrainingArgumentsFile, ExportFile::Format::Json,
                       std::move(args.value), {}});
  out.files.push_back({kAccelerateConfigFile, ExportFile::Format::Yaml, std::move(accel.value), {export_header(p, "hf")}});
  if (writes_deepspeed_config(p))
    out.files.push_back({kDeepSpeedConfigFile, ExportFile::Format::Json,
                         deepspeed_config(p, DeepSpeedLauncher::HfTrainer).value, {}});
  out.files.push_back(launch_script(p, "hf", launch(p)));
  return out;
}

constexpr const char* kFileNames[] = {kTrainingArgumentsFile, kSftConfigFile, kAccelerateConfigFile, kDeepSpeedConfigFile,
                                       kLaunchScriptFile};


// What the Trainer runs for a longctx plan, where the hf stack models it: transformers' model
// with the files' attention (attention_run) and its own loss, torch's AdamW (`adamw_torch`), non-reentrant
// checkpointing of every layer or accelerate's under FSDP2, under FSDP2 or DeepSpeed ZeRO-3 as the
// files say. Not modelled, so nothing: Liger's loss (loss tiles), ZeRO-1 or -2, and a sharding the hf stack would run
// otherwise than the files (its FSDP2 / DeepSpeed rule, hf/validate.h, against
// hf_uses_fsdp2's).
std::optional<Plan> as_run(const Plan& p) {
  // The hf stack models ZeRO-3 alone under DeepSpeed, and ds_config.json writes the plan's stage.
  if (hf_plan(p) || p.parallel.loss_tiles > 1 || p.parallel.sharding != Sharding::Zero3) return std::nullopt;
  Plan run = p;
  run.train.stack = default_stack(StackKind::HF);
  run.train.stack.attention = attention_run(p);
  run.train.stack.optimizer = HfOptimizer::AdamWTorch;
  run.train.stack.checkpointing = checkpoints_by_accelerate(p) ? HfCheckpointing::Accelerate : HfCheckpointing::NonReentrant;
  if (run.parallel.checkpoint.any()) run.parallel.checkpoint = CheckpointPolicy::full();  // every layer, as the files
  conform_to_stack(run.model, run.cluster.shape, run.train, run.parallel);
  if (hf::runs_deepspeed(run) != writes_deepspeed_config(p)) return std::nullopt;
  return run;
}

}  // namespace

const StackExporter kHfExporter = {
    .word = "hf",
    .files = "training_args.json (TrainingArguments; sft_config.json for TRL's chunked loss), accelerate_config.yaml and, under DeepSpeed, ds_config.json",
    .file_names = kFileNames,
    .plans_predict = "transformers alone",
    .check = check,
    .write = write,
    .as_run = as_run,
};

bool hf_uses_fsdp2(const Plan& p) {
  const ParallelConfig& par = p.parallel;
  if (hf_plan(p)) return p.cluster.shape.world() > 1 && !hf::runs_deepspeed(p);
  return par.sharding == Sharding::Zero3 && par.ulysses == 1 && par.offload_optimizer == par.offload_params &&
         p.train.grad_dtype == DType::FP32;
}

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
  j["optim"] = hf_plan(p) ? to_string(p.train.stack.optimizer) : "adamw_torch";
  // TrainingArguments' own device choice (_setup_devices): the CPU virtual device's plans on the
  // CPU, whatever GPU the machine has.
  if (p.cluster.hardware.backend == Backend::Cpu) j["use_cpu"] = true;
  // Under FSDP longctx's plans checkpoint through fsdp_config.activation_checkpointing (the
  // Trainer refuses both at once: gradient_checkpointing would add an all-gather in
  // backward); an hf-stack plan predicted the checkpointing it names, the Trainer's (as TRL
  // runs it) or accelerate's.
  const bool by_accelerate = checkpoints_by_accelerate(p);
  j["gradient_checkpointing"] = par.checkpoint.any() && !by_accelerate;
  // An hf-stack plan predicted the checkpoint implementation it names; longctx's own plans
  // are run with the non-reentrant one, which keeps the layer's output no longer than needed.
  const bool reentrant = hf_plan(p) && p.train.stack.checkpointing == HfCheckpointing::Reentrant;
  if (par.checkpoint.any() && !by_accelerate) j["gradient_checkpointing_kwargs"] = {{"use_reentrant", reentrant}};
  if (hf_plan(p)) hf_plan_arguments(p, c);
  else runtime_plan_arguments(p, c);
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
  j["num_machines"] = p.cluster.shape.nodes;
  j["num_processes"] = p.cluster.shape.world();
  j["rdzv_backend"] = "static";
  j["same_network"] = true;
  // A plan of the CPU virtual device runs on the CPU even where a GPU is visible.
  j["use_cpu"] = p.cluster.hardware.backend == Backend::Cpu;
  // One process, FSDP2, or else DeepSpeed. Under DeepSpeed the precision is ds_config.json's
  // (its "bf16" block) and the YAML names none: accelerate launch marks a mixed_precision read
  // from the config file, whatever its value, as a DeepSpeed field (commands/launch.py
  // _validate_launch_command's mp_from_config_flag, deepspeed_launcher's
  // ACCELERATE_CONFIG_DS_FIELDS), and with a deepspeed_config_file DeepSpeedPlugin refuses it on
  // every rank before the model loads (utils/dataclasses.py _deepspeed_config_checks).
  const bool one_process = hf_plan(p) && !hf::runs_deepspeed(p) && p.cluster.shape.world() == 1;
  if (one_process || hf_uses_fsdp2(p)) j["mixed_precision"] = p.train.dtype == DType::BF16 ? "bf16" : "no";
  if (one_process) {
    j["distributed_type"] = "NO";
    return c;
  }
  if (hf_uses_fsdp2(p)) {
    j["distributed_type"] = "FSDP";
    // accelerate/commands/config/cluster.py's fsdp_config questions; FSDP2's CPU offload moves
    // parameters, gradients and optimizer state together (hence hf_uses_fsdp2's rule). An
    // hf-stack plan checkpoints with the Trainer (hf_training_arguments).
    j["fsdp_config"] = {{"fsdp_version", 2},
                        {"fsdp_offload_params", p.parallel.offload_params},
                        {"fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP"},
                        {"fsdp_reshard_after_forward", true},
                        {"fsdp_state_dict_type", "SHARDED_STATE_DICT"},
                        {"fsdp_cpu_ram_efficient_loading", true},
                        {"fsdp_activation_checkpointing", p.parallel.checkpoint.any() && checkpoints_by_accelerate(p)}};
    // accelerate's offload_wrapper around each checkpoint_wrapper (fsdp2_apply_ac): save_on_cpu.
    if (hf_plan(p) && p.parallel.offload_checkpoints && checkpoints_by_accelerate(p))
      j["fsdp_config"]["fsdp_activation_checkpointing_offload"] = true;
    // accelerate/parallelism_config.py ParallelismConfig: context parallel over cp_size ranks,
    // FSDP over dp_shard x cp, k/v all-gathered (TorchContextParallelConfig's strategy).
    if (p.parallel.ring > 1)
      j["parallelism_config"] = {{"parallelism_config_dp_shard_size", p.cluster.shape.world() / p.parallel.ring},
                                 {"parallelism_config_cp_size", p.parallel.ring},
                                 {"parallelism_config_cp_comm_strategy", "allgather"}};
    return c;
  }
  j["distributed_type"] = "DEEPSPEED";
  // Across nodes accelerate otherwise launches through DeepSpeed's pdsh runner from a hostfile
  // (accelerate/utils/launch.py prepare_deepspeed_cmd_env); "standard" launches each node
  // itself with torch's launcher, from launch.sh's --machine_rank and --main_process_ip.
  j["deepspeed_config"] = {{"deepspeed_config_file", kDeepSpeedConfigFile},
                           {"deepspeed_multinode_launcher", "standard"},
                           {"zero3_init_flag", p.parallel.sharding == Sharding::Zero3}};
  if (p.parallel.ulysses > 1) {
    // accelerate/parallelism_config.py ParallelismConfig sp_size / sp_backend (ALST), as the
    // launcher's --parallelism_config_* options (accelerate/utils/launch.py). DeepSpeed forms
    // the data-parallel groups itself (world/u), but accelerate sets DeepSpeed's
    // train_batch_size to micro-batch x accumulation x ParallelismConfig.data_parallel_size
    // (accelerator.py _prepare_deepspeed, its sp_backend "deepspeed" branch), where DeepSpeed
    // asserts micro-batch x accumulation x world/u: with more ranks than the Ulysses group and
    // no dp size the run stops at DeepSpeedConfig. The replicas are named as such.
    // The core attention UlyssesSPAttentionHF wraps: the plan's (attention_run).
    const std::string core = to_string(attention_run(p));
    j["parallelism_config"] = {{"parallelism_config_sp_size", p.parallel.ulysses},
                               {"parallelism_config_sp_backend", "deepspeed"},
                               {"parallelism_config_sp_seq_length", p.train.seq},
                               {"parallelism_config_sp_seq_length_is_variable", true},
                               {"parallelism_config_sp_attn_implementation", core}};
    if (const std::int64_t replicas = p.cluster.shape.world() / p.parallel.ulysses; replicas > 1)
      j["parallelism_config"]["parallelism_config_dp_replicate_size"] = replicas;
  }
  return c;
}

}  // namespace longctx
