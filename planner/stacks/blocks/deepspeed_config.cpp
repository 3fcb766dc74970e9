// DeepSpeed's config for a plan (blocks/deepspeed_config.h); the source of each key is cited
// where it is written.
#include "planner/stacks/blocks/deepspeed_config.h"

namespace longctx {

using nlohmann::json;

namespace {

json offload_to_cpu() {
  // deepspeed/runtime/zero/offload_config.py: DeepSpeedZeroOffloadParamConfig and
  // DeepSpeedZeroOffloadOptimizerConfig (device: OffloadDeviceEnum, pin_memory: bool).
  return {{"device", "cpu"}, {"pin_memory", true}};
}

}  // namespace

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

json data_types(const TrainConfig& t) { return {{"grad_accum_dtype", dtype_name(t.grad_dtype)}}; }

StackConfig deepspeed_config(const Plan& p, DeepSpeedLauncher launcher) {
  // Top-level keys: deepspeed/runtime/constants.py, read by deepspeed/runtime/config.py DeepSpeedConfig.
  const bool hf = launcher == DeepSpeedLauncher::HfTrainer;
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
  if (p.parallel.checkpoint.any() && !hf) {
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

}  // namespace longctx
