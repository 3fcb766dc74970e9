#pragma once
// A plan as the configuration a training stack runs it with (docs/export.md): the DeepSpeed
// config JSON, an ArcticTraining recipe, Hugging Face accelerate + TrainingArguments files, or
// a torchtitan job file (TOML).
// Pure functions of the plan: no file is read or written here (the CLI and the Python
// package write what export_plan returns).
//
// Each knob is expressed exactly, approximated, or refused:
//   - approximated where the stack runs the knob with no more device memory than the plan
//     predicts (all layers checkpointed for every:k, Liger's chunked cross-entropy for loss
//     tiles, ArcticTraining's own MLP shard count): the files are written and each
//     approximation is returned as one line for the caller to print;
//   - refused (BadInput naming the knob and the stack) where the stack would hold more than
//     the plan does (head-chunked attention anywhere, MLP tiles outside ArcticTraining, loss
//     tiles in a bare DeepSpeed config, checkpoint offload under Hugging Face).
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/core/plan.h"
#include "common/result.h"

namespace longctx {

enum class Stack { Arctic, HF, DeepSpeed, Torchtitan };
std::string to_string(Stack s);  // "arctic", "hf", "deepspeed", "torchtitan"
Result<Stack> parse_stack(const std::string& text, const std::string& field);

// One configuration object and what it runs differently from the plan ("knob: what and why").
struct StackConfig {
  nlohmann::json value;
  std::vector<std::string> approximations;
};

// The files a stack needs, by file name, and the approximations made in writing them.
struct ExportedFiles {
  std::map<std::string, std::string> files;
  std::vector<std::string> approximations;
};

// File names export_plan uses.
inline constexpr const char* kDeepSpeedConfigFile = "ds_config.json";
inline constexpr const char* kArcticRecipeFile = "arctic_recipe.yaml";
inline constexpr const char* kAccelerateConfigFile = "accelerate_config.yaml";
inline constexpr const char* kTrainingArgumentsFile = "training_args.json";
// An hf-stack plan with TRL's chunked loss: trl.SFTConfig's keyword arguments instead (its
// TrainingArguments' and TRL's own).
inline constexpr const char* kSftConfigFile = "sft_config.json";
inline constexpr const char* kTorchtitanJobFile = "torchtitan_job.toml";

// BadInput naming the knob ("parallel.head_chunk") and `stack` when the stack cannot run
// the plan's knob without more memory than the plan predicts; ok otherwise.
Result<bool> check_expressible(const Plan& p, Stack stack);

// The DeepSpeed config (keys of deepspeed/runtime/config.py and its sections). For the
// `hf` stack, batch size, accumulation, clipping and optimizer hyperparameters are "auto"
// (the Trainer fills them from TrainingArguments, as its DeepSpeed integration requires).
StackConfig deepspeed_config(const Plan& p, Stack stack = Stack::DeepSpeed);
// The ArcticTraining recipe (arctic_training/config/trainer.py TrainerConfig) as JSON.
StackConfig arctic_recipe(const Plan& p);
// transformers.TrainingArguments keyword arguments, and accelerate's config file as JSON.
StackConfig hf_training_arguments(const Plan& p);
StackConfig accelerate_config(const Plan& p);
// torchtitan's job config (torchtitan 0.2.2 config/job_config.py JobConfig) as JSON tables.
StackConfig torchtitan_job(const Plan& p);
// torchtitan's model for the plan's: "qwen3" for a model with q/k norms, else "llama3".
const char* torchtitan_model_name(const ModelConfig& m);
// Its flavor (models/llama3/__init__.py llama3_args: "debugmodel", "8B", "70B", "405B";
// models/qwen3/__init__.py qwen3_args: "0.6B" to "32B" and "debugmodel"), matched by every
// shape its model arguments set, or empty when none has the plan's shape.
std::string torchtitan_flavor(const ModelConfig& m);

// Whether the hf stack runs the plan under FSDP2 (ZeRO-3 without Ulysses, parameters and
// optimizer both offloaded or neither, fp32 gradients) rather than DeepSpeed.
bool hf_uses_fsdp2(const Plan& p);

// check_expressible, then every file the stack needs, as text.
Result<ExportedFiles> export_plan(const Plan& p, Stack stack);

}  // namespace longctx
