#pragma once
// DeepSpeed's config (keys of deepspeed/runtime/config.py and its sections) for a plan: the
// whole file, which longctx's own plans export as (--stack deepspeed) and the hf stack's
// Trainer reads, and the sections ArcticTraining's recipe embeds.
#include <nlohmann/json.hpp>

#include "planner/stacks/exporter.h"

namespace longctx {

inline constexpr const char* kDeepSpeedConfigFile = "ds_config.json";

// Who runs DeepSpeed with the file: the training script itself (deepspeed.initialize, and
// deepspeed.checkpointing as the model calls it), or Hugging Face's Trainer, which fills the
// "auto" values (batch size, accumulation, clipping, optimizer hyperparameters) from
// TrainingArguments, as its DeepSpeed integration requires.
enum class DeepSpeedLauncher { Script, HfTrainer };

StackConfig deepspeed_config(const Plan& p, DeepSpeedLauncher launcher = DeepSpeedLauncher::Script);
// deepspeed/runtime/zero/config.py DeepSpeedZeroConfig: stage, offload_param, offload_optimizer.
nlohmann::json zero_optimization(const ParallelConfig& p);
// deepspeed/runtime/constants.py DATA_TYPES / GRAD_ACCUM_DTYPE: the dtype gradients are
// accumulated and reduced in.
nlohmann::json data_types(const TrainConfig& t);

}  // namespace longctx
