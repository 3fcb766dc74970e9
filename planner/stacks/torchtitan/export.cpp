// `longctx export --stack torchtitan` (torchtitan/export.h): the key-by-key mapping of
// docs/export.md, and what torchtitan cannot run within a plan's memory.
#include "planner/stacks/torchtitan/export.h"

#include <fmt/format.h>

#include "planner/stacks/launch_script.h"
#include "planner/stacks/profile.h"
#include "planner/stacks/stack_tiles.h"
#include "planner/stacks/torchtitan/models.h"

namespace longctx {

using nlohmann::json;

namespace {

constexpr ExportRefusal kRefusals[] = {
    // A torchtitan-stack plan predicted torchtitan's own context parallel: it is exported.
    {"parallel.ring",
     [](const Plan& p) { return p.parallel.ring > 1 && p.train.stack.kind != StackKind::Torchtitan; },
     "run longctx's ring attention: its context parallelism (torch's ring attention) all-gathers k and v "
     "and keeps other buffers than the plan predicts",
     "re-plan with --stack torchtitan to predict its context parallel, or with --ring 1"},
    {"parallel.ulysses", [](const Plan& p) { return p.parallel.ulysses > 1; },
     "run Ulysses sequence parallelism (it has none): each rank would attend over the whole sequence",
     "re-plan with --ulysses 1"},
    kHeadChunkRefusal,
    kMlpTilesRefusal,
    {"parallel.loss_tiles", [](const Plan& p) { return p.parallel.loss_tiles > 1; },
     "tile the loss (its cross_entropy_loss takes the full logits): they hold more than the plan predicts",
     "re-plan with --loss-tiles 1"},
    {"parallel.offload_checkpoints", [](const Plan& p) { return p.parallel.offload_checkpoints; },
     "offload checkpoints: its activation checkpointing keeps them on the device, more than the plan predicts",
     "re-plan without --offload-checkpoints"},
};

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

// A plan of longctx's own runtime first passes check_torchtitan_runs.
Result<bool> check(const Plan& p) {
  if (p.train.stack.kind == StackKind::Longctx) {
    LONGCTX_TRY(auto ok, check_torchtitan_runs(p));
    (void)ok;
  }
  return first_refusal(p, "torchtitan", kRefusals);
}

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

// The job's activation_checkpoint section (ActivationCheckpoint: mode, selective_ac_option).
json activation_checkpoint(const CheckpointPolicy& c) {
  if (c.kind == CheckpointPolicy::Kind::Full) return {{"mode", "full"}};
  if (c.kind == CheckpointPolicy::Kind::EveryK) return {{"mode", "selective"}, {"selective_ac_option", std::to_string(c.every)}};
  if (c.kind == CheckpointPolicy::Kind::Ops) return {{"mode", "selective"}, {"selective_ac_option", "op"}};
  return {{"mode", "none"}};
}

// What a longctx plan runs differently under torchtitan.
void add_runtime_plan_notes(const ParallelConfig& par, std::vector<std::string>& notes) {
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
}

// The comment above the job: how to run it, and the model flavor to register where torchtitan
// has none of the plan's shape.
std::vector<std::string> job_comment(const Plan& p) {
  const ModelConfig& m = p.model;
  std::vector<std::string> comment = {
      export_header(p, "torchtitan"),
      "torchtitan 0.2.2: run with --job.config_file torchtitan_job.toml; set model.hf_assets_path to the model's "
      "tokenizer folder (or MODEL=that folder for launch.sh, whose flag then wins over this file) and "
      "training.dataset (and dataset_path) to the data"};
  if (!torchtitan_flavor(m).empty()) return comment;
  if (!m.qk_norm)
    comment.push_back(fmt::format("model.flavor: torchtitan has no llama3 flavor of this shape; register "
                                  "TransformerModelArgs(dim={}, n_layers={}, n_heads={}, n_kv_heads={}, "
                                  "vocab_size={}) under '{}' in torchtitan/models/llama3/__init__.py (llama3_args), "
                                  "with multiple_of and ffn_dim_multiplier giving a hidden size of {}",
                                  m.hidden, m.layers, m.heads, m.kv_heads, m.vocab, m.name, m.intermediate));
  else
    comment.push_back(fmt::format("model.flavor: torchtitan has no qwen3 flavor of this shape; register "
                                  "Qwen3ModelArgs(dim={}, n_layers={}, n_heads={}, n_kv_heads={}, head_dim={}, "
                                  "hidden_dim={}, vocab_size={}, qk_norm=True, enable_weight_tying={}) under '{}' in "
                                  "torchtitan/models/qwen3/__init__.py (qwen3_args)",
                                  m.hidden, m.layers, m.heads, m.kv_heads, m.head_dim, m.intermediate, m.vocab,
                                  m.tie_embeddings ? "True" : "False", m.name));
  return comment;
}

// torchrun (torch/distributed/run.py get_args_parser) on torchtitan's trainer module
// (torchtitan/train.py), with the job file and the model's assets folder.
LaunchSpec launch() {
  return {.launcher = "torchrun",
          .usage = "[TORCHTITAN_ARGS...]",
          .about = {"MODEL: the folder of the model's tokenizer files (model.hf_assets_path; torchtitan reads no "
                    "Hub id: fetch them with its scripts/download_hf_assets.py --repo_id ID --assets tokenizer); "
                    "passed only where it is a folder, so the job file's model.hf_assets_path holds otherwise"},
          // torchtitan's command line overrides its job file (config/manager.py): a Hub id passed
          // as the assets folder hid the one the user set in the job file, and torchtitan then
          // found no tokenizer there.
          .setup = {"assets=()",
                    "if [ -d \"$MODEL\" ]; then assets=(--model.hf_assets_path \"$MODEL\"); fi"},
          .command = {"torchrun", "--nnodes \"$NNODES\"", "--nproc-per-node \"$GPUS_PER_NODE\"",
                      "--node-rank \"$NODE_RANK\"", "--master-addr \"$MASTER_ADDR\"", "--master-port \"$MASTER_PORT\"",
                      "-m torchtitan.train", fmt::format("--job.config_file \"$here/{}\"", kTorchtitanJobFile),
                      "${assets[@]+\"${assets[@]}\"}", "\"$@\""}};
}

StackFiles write(const Plan& p) {
  StackConfig job = torchtitan_job(p);
  return {.files = {{kTorchtitanJobFile, ExportFile::Format::Toml, std::move(job.value), job_comment(p)},
                    launch_script(p, "torchtitan", launch())},
          .approximations = std::move(job.approximations)};
}

constexpr const char* kFileNames[] = {kTorchtitanJobFile, kLaunchScriptFile};


// What the job file runs for a longctx plan: torchtitan's own step (its model code, FSDP2, its
// checkpointing) with the plan's knobs, as the torchtitan stack models it: the gradients it
// keeps (the job's mixed_precision_reduce float32 across GPUs), and both offloads where either
// is on (enable_cpu_offload moves parameters and optimizer states together).
std::optional<Plan> as_run(const Plan& p) {
  if (p.train.stack.kind == StackKind::Torchtitan) return std::nullopt;
  Plan run = p;
  run.train.stack = default_stack(StackKind::Torchtitan);
  conform_to_stack(run.model, run.cluster.shape, run.train, run.parallel);
  if (const auto kept = stack_profile(StackKind::Torchtitan).kept_grads) {
    if (const auto grads = kept(run)) run.train.grad_dtype = grads->dtype;
  }
  if (run.parallel.offload_params || run.parallel.offload_optimizer)
    run.parallel.offload_params = run.parallel.offload_optimizer = true;
  return run;
}

}  // namespace

const StackExporter kTorchtitanExporter = {
    .word = "torchtitan",
    .files = "torchtitan_job.toml (a torchtitan 0.2.2 job file)",
    .file_names = kFileNames,
    .plans_predict = "torchtitan",
    .check = check,
    .write = write,
    .as_run = as_run,
};

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
      {"activation_checkpoint", activation_checkpoint(par.checkpoint)},
      {"compile", {{"enable", false}}},
  };
  // What the torchtitan stack predicted, nothing approximated.
  if (p.train.stack.kind != StackKind::Torchtitan) add_runtime_plan_notes(par, c.approximations);
  return c;
}

}  // namespace longctx
