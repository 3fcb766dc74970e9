// `longctx export --stack arctic` (arctic/export.h): the key-by-key mapping of docs/export.md.
#include "planner/stacks/arctic/export.h"

#include <fmt/format.h>

#include "planner/stacks/blocks/deepspeed_config.h"
#include "planner/stacks/launch_script.h"
#include "planner/stacks/stack_tiles.h"

namespace longctx {

using nlohmann::json;

namespace {

constexpr ExportRefusal kRefusals[] = {kUlyssesRingRefusal, kHeadChunkRefusal, kStageZeroOffloadRefusal,
                                       kStageZeroGradDtypeRefusal};

Result<bool> check(const Plan& p) { return first_refusal(p, "arctic", kRefusals); }

// ArcticTraining's TiledMLP picks its shard count itself (arctic_training/model/tiled_compute.py:
// ceil(seqlen / hidden) on the rank's sequence slice).
std::int64_t arctic_mlp_shards(const Plan& p) {
  const std::int64_t local = p.train.seq / p.parallel.ulysses;
  return (local + p.model.hidden - 1) / p.model.hidden;
}

// What a longctx plan runs differently under ArcticTraining.
void add_runtime_plan_notes(const Plan& p, std::vector<std::string>& notes) {
  const ParallelConfig& par = p.parallel;
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
}

// ArcticTraining's launcher (arctic_training/cli.py main): the recipe, then the deepspeed
// runner's arguments, which it passes on (deepspeed/launcher/runner.py parse_args).
LaunchSpec launch() {
  return {.launcher = "arctic_training",
          .usage = "[DEEPSPEED_ARGS...]",
          .about = {"the recipe beside it names the model (model.name_or_path) and the data (data.sources)"},
          .setup = deepspeed_node_setup(),
          .command = {fmt::format("arctic_training \"$here/{}\"", kArcticRecipeFile),
                      "${DEEPSPEED_NODES[@]+\"${DEEPSPEED_NODES[@]}\"}", "--num_nodes \"$NNODES\"",
                      "--num_gpus \"$GPUS_PER_NODE\"", "--master_addr \"$MASTER_ADDR\"", "--master_port \"$MASTER_PORT\"",
                      "\"$@\""},
          .takes_model = false};
}

StackFiles write(const Plan& p) {
  StackConfig recipe = arctic_recipe(p);
  std::vector<std::string> comment = {export_header(p, "arctic")};
  if (p.model.source.empty())
    comment.push_back(fmt::format("model.name_or_path: the plan's model name '{}'; replace it with that model's "
                                  "Hugging Face id or checkpoint folder",
                                  p.model.name));
  comment.push_back("data.sources: replace DATASET with the training data (a Hugging Face dataset name or path)");
  return {.files = {{kArcticRecipeFile, ExportFile::Format::Yaml, std::move(recipe.value), comment},
                    launch_script(p, "arctic", launch())},
          .approximations = std::move(recipe.approximations)};
}

constexpr const char* kFileNames[] = {kArcticRecipeFile, kLaunchScriptFile};

// The recipe's attention for a plan: an arctic-stack plan's own; for another stack's,
// flash-attn's kernels (ArcticTraining's default, what the arctic stack models) where the plan
// trains in bf16, sdpa in fp32 (flash-attn runs half precision only).
HfAttention recipe_attention(const Plan& p) {
  if (p.train.stack.kind == StackKind::Arctic) return p.train.stack.attention;
  return p.train.dtype == DType::BF16 ? default_stack(StackKind::Arctic).attention : HfAttention::Sdpa;
}

// The recipe's model type for a plan: an arctic-stack plan's own; Liger's where a longctx plan
// tiles its loss (its fused linear cross-entropy never holds the logits), else huggingface.
ArcticModel recipe_model(const Plan& p) {
  if (p.train.stack.kind == StackKind::Arctic) return p.train.stack.arctic_model;
  return p.parallel.loss_tiles > 1 ? ArcticModel::Liger : ArcticModel::HuggingFace;
}

// What the recipe runs for another stack's plan: the arctic stack's step with the recipe's
// model type and attention, every layer checkpointed where any is, and the tile counts
// ArcticTraining picks itself (TiledMLP's shards where the MLP is tiled at all, Liger's loss
// chunks). Nothing where the recipe runs a step the arctic stack does not model: a ZeRO stage
// other than 3 (the recipe writes the plan's), or sdpa (an fp32 plan: flash-attn runs
// half precision only).
std::optional<Plan> as_run(const Plan& p) {
  if (p.train.stack.kind == StackKind::Arctic || p.parallel.sharding != Sharding::Zero3) return std::nullopt;
  Plan run = p;
  run.train.stack = default_stack(StackKind::Arctic);
  run.train.stack.arctic_model = recipe_model(p);
  run.train.stack.attention = recipe_attention(p);
  if (run.parallel.checkpoint.any()) run.parallel.checkpoint = CheckpointPolicy::full();
  conform_to_stack(run.model, run.cluster.shape, run.train, run.parallel);
  if (run.parallel.mlp_tiles > 1 && stack_tiles_defined(run.model, run.train, run.parallel.ulysses))
    run.parallel.mlp_tiles = static_cast<int>(*stack_tile_count(run.model, run.train, run.parallel.ulysses, false));
  return run;
}

}  // namespace

const StackExporter kArcticExporter = {
    .word = "arctic",
    .files = "arctic_recipe.yaml (an ArcticTraining recipe)",
    .file_names = kFileNames,
    .plans_predict = "ArcticTraining",
    .check = check,
    .write = write,
    .as_run = as_run,
};

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
       {{"type", to_string(recipe_model(p))},
        {"name_or_path", model_to_load(p)},
        {"dtype", dtype_name(p.train.dtype)},
        {"attn_implementation", to_string(recipe_attention(p))},
        {"disable_activation_checkpoint", !par.checkpoint.any()}}},
      // SFTDataConfig pads each batch to a multiple of div_length (data/sft_factory.py,
      // DataCollatorForCausalLM and pad(): 256 by default), up to 255 tokens past the plan's
      // length; the plan pads to its layout's multiple (the Ulysses degree), so that is the one.
      {"data",
       {{"sources", json::array({"DATASET"})}, {"max_length", p.train.seq}, {"div_length", sequence_multiple(par)}}},
      {"optimizer", {{"type", par.offload_optimizer ? "cpu_adam" : "fused_adam"}}},
  };
  // What the arctic stack predicted, nothing approximated.
  if (!arctic_plan) add_runtime_plan_notes(p, c.approximations);
  return c;
}

}  // namespace longctx
