#pragma once
// A plan as Hugging Face's files (`longctx export --stack hf`, docs/export.md):
// transformers.TrainingArguments keyword arguments (trl.SFTConfig's for an hf-stack plan with
// TRL's chunked loss), accelerate's config file, and the DeepSpeed config the Trainer reads
// unless the plan runs under FSDP2.
#include "planner/stacks/exporter.h"

namespace longctx {

extern const StackExporter kHfExporter;

inline constexpr const char* kAccelerateConfigFile = "accelerate_config.yaml";
inline constexpr const char* kTrainingArgumentsFile = "training_args.json";
// An hf-stack plan with TRL's chunked loss: trl.SFTConfig's keyword arguments instead (its
// TrainingArguments' and TRL's own).
inline constexpr const char* kSftConfigFile = "sft_config.json";

// transformers.TrainingArguments keyword arguments, and accelerate's config file as JSON.
StackConfig hf_training_arguments(const Plan& p);
StackConfig accelerate_config(const Plan& p);
// Whether the hf stack runs the plan under FSDP2 (ZeRO-3 without Ulysses, parameters and
// optimizer both offloaded or neither, fp32 gradients) rather than DeepSpeed.
bool hf_uses_fsdp2(const Plan& p);

}  // namespace longctx
