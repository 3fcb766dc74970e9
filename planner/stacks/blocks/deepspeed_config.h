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

// DeepSpeed offloads the optimizer under ZeRO only: at stage 0 the engine builds its basic
// optimizer, DeepSpeedCPUAdam when offload_optimizer names the CPU (deepspeed/runtime/engine.py,
// DeepSpeedEngine._configure_basic_optimizer: zero_use_cpu_optimizer()), over parameters left
// on the GPU, and its first step fails (deepspeed/ops/adam/cpu_adam.py, DeepSpeedCPUAdam.step:
// "CPUAdam param is on cuda:0 and must be 'cpu'"). A stage-0 config with offload_optimizer
// does not run, so it is not written.
inline bool plan_offloads_unsharded_optimizer(const Plan& p) {
  return p.parallel.offload_optimizer && p.parallel.sharding == Sharding::None;
}
inline constexpr ExportRefusal kStageZeroOffloadRefusal = {
    "parallel.offload_optimizer", plan_offloads_unsharded_optimizer,
    "offload the optimizer at ZeRO stage 0 (sharding none): DeepSpeed's CPU Adam then steps parameters left on the "
    "GPU and fails at the first step",
    "re-plan with --sharding zero1 (or zero2, zero3) and --offload-optimizer, or without --offload-optimizer"};

// Without ZeRO DeepSpeed accumulates gradients in the model's dtype only: at stage 0 its engine
// refuses any other grad_accum_dtype before the first step (deepspeed/runtime/engine.py,
// DeepSpeedEngine._do_optimizer_sanity_check: "unsupported mix of model_dtype and
// grad_accum_dtype"). A stage-0 config whose data_types differ from the model's does not run.
inline bool plan_mixes_dtypes_unsharded(const Plan& p) {
  return p.parallel.sharding == Sharding::None && p.train.grad_dtype != p.train.dtype;
}
inline constexpr ExportRefusal kStageZeroGradDtypeRefusal = {
    "train.grad_dtype", plan_mixes_dtypes_unsharded,
    "keep gradients in another dtype than the model's at ZeRO stage 0 (sharding none): DeepSpeed's engine refuses "
    "that mix before the first step",
    "re-plan with --grad-dtype equal to --dtype, or with --sharding zero1 (or zero2, zero3)"};

}  // namespace longctx
