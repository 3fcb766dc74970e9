// ArcticTraining: DeepSpeed ZeRO-3 with its offloads, Ulysses, checkpointing and its offload,
// TiledMLP, and (the liger model) a chunked loss; no ZeRO-1/2 plans, no head chunks, no ring.
#include <fmt/format.h>

#include "planner/stacks/arctic/export.h"
#include "planner/stacks/arctic/tiles.h"
#include "planner/footprint/communication.h"
#include "planner/stacks/profile.h"
#include "planner/stacks/arctic/step.h"

namespace longctx {

extern const StackProfile kArcticProfile;
const StackProfile kArcticProfile = {
    .kind = StackKind::Arctic,
    .name = "arctic",
    .summary = "ArcticTraining: transformers under DeepSpeed ZeRO-3, Ulysses, TiledMLP, Liger kernels",
    // Its attention is flash_attention_2, and its checkpointing transformers' default,
    // reentrant (modeling_utils.py gradient_checkpointing_enable), which ArcticTraining does
    // not change.
    .defaults = {.kind = StackKind::Arctic, .attention = HfAttention::FlashAttention2,
                 .checkpointing = HfCheckpointing::Reentrant},
    .options = {SettingId::attention, SettingId::arctic_model},
    .cuda_only = "runs DeepSpeed and flash attention on CUDA GPUs",
    .techniques =
        [](const Plan&) {
          TechniqueSet s = all_techniques();
          for (Technique t : {Technique::Zero1, Technique::Zero2, Technique::Untied, Technique::Ring})
            s.reset(static_cast<std::size_t>(t));
          return s;
        },
    // DeepSpeed's ZeRO-3 reduces gradients in the parameters' dtype (its fp32 copies live
    // beside the optimizer).
    .kept_grads = [](const Plan& p) -> std::optional<KeptGrads> {
      return KeptGrads{p.train.dtype, " (DeepSpeed's ZeRO-3 reduces the parameters' dtype)"};
    },
    .conform = arctic::conform,
    .tile_count = arctic::tile_count,
    .always_tiles_loss = arctic::always_tiles_loss,
    .validate = arctic::validate,
    .describe =
        [](const StackSpec& s) {
          return fmt::format("arctic ({} model, {}, DeepSpeed ZeRO-3)", to_string(s.arctic_model), to_string(s.attention));
        },
    .build_step = step::arctic::build_step,
    .exporter = &kArcticExporter,
    .communicators = footprint::nccl::deepspeed_ulysses_communicators,
};

}  // namespace longctx
