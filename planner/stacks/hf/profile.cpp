// transformers' modeling code trained with torch.optim's AdamW: on one GPU, checkpointing of
// every decoder layer (gradient_checkpointing_enable) and, from transformers 5.17, its
// offload; across GPUs, accelerate's FSDP2 and its torch context parallel (distributed.cpp);
// under DeepSpeed ZeRO-3 (one GPU or more), its offloads and Ulysses (deepspeed.cpp).
#include <fmt/format.h>

#include "planner/stacks/hf/export.h"
#include "planner/stacks/hf/validate.h"
#include "planner/footprint/communication.h"
#include "planner/stacks/blocks/fsdp2_sharding.h"
#include "planner/stacks/profile.h"
#include "planner/stacks/hf/step.h"

namespace longctx {

extern const StackProfile kHfProfile;
const StackProfile kHfProfile = {
    .kind = StackKind::HF,
    .name = "hf",
    .summary = "transformers' modeling code with torch AdamW; accelerate's FSDP2 and context parallel, or DeepSpeed "
               "ZeRO-3 and Ulysses, under the Trainer",
    .defaults = {.kind = StackKind::HF},
    .options = {SettingId::attention, SettingId::hf_checkpointing, SettingId::hf_optimizer, SettingId::hf_loss,
                SettingId::hf_no_attention_mask, SettingId::hf_no_use_cache},
    // accelerate's cp_comm_strategy default (TorchContextParallelConfig): k/v all-gathered.
    .ring_exchange = RingExchange::AllGather,
    // Its checkpoint offload pins host memory: none on the CPU virtual device (validate.cpp).
    .techniques =
        [](const Plan& base) {
          TechniqueSet s = TechniqueSet().set(static_cast<std::size_t>(Technique::Checkpoint));
          if (base.cluster.hardware.backend == Backend::Cuda) s.set(static_cast<std::size_t>(Technique::OffloadCheckpoints));
          if (base.cluster.shape.world() > 1)
            s.set(static_cast<std::size_t>(Technique::Zero3)).set(static_cast<std::size_t>(Technique::Ring));
          return s;
        },
    // Autograd's gradients: the parameters' dtype (torch.optim's AdamW keeps its moments so
    // too); across GPUs FSDP2's sharded ones, fp32 (accelerate upcasts the shards).
    .kept_grads = [](const Plan& p) -> std::optional<KeptGrads> {
      if (hf::runs_deepspeed(p)) return KeptGrads{p.train.dtype, " (DeepSpeed's ZeRO-3 reduces the parameters' dtype)"};
      if (p.cluster.shape.world() > 1) return KeptGrads{DType::FP32, " (FSDP2's sharded gradients)"};
      return KeptGrads{p.train.dtype, " (the parameters' dtype)"};
    },
    .conform = step::blocks::conform_fsdp2_sharding,
    .validate = hf::validate,
    .describe =
        [](const StackSpec& s) {
          return fmt::format("hf ({} attention, {} checkpointing, attention_mask {}, {}, {} loss{})", to_string(s.attention),
                             to_string(s.checkpointing), s.attention_mask ? "passed" : "not passed", to_string(s.optimizer),
                             to_string(s.loss), s.use_cache ? "" : ", use_cache off");
        },
    .build_step = step::hf::build_step,
    .exporter = &kHfExporter,
    // accelerate builds torchtitan's mesh, cp innermost, FSDP2 on dp_shard_cp (parallelism_config.py);
    // under DeepSpeed, DeepSpeed's own groups, as ArcticTraining's.
    .communicators =
        [](const Plan& p) {
          return hf::runs_deepspeed(p) ? footprint::nccl::deepspeed_ulysses_communicators(p)
                                       : footprint::nccl::fsdp2_context_parallel_communicators(p);
        },
};

}  // namespace longctx
