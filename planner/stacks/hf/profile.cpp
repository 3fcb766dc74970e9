// transformers' modeling code trained with torch.optim's AdamW on one GPU: checkpointing of
// every decoder layer (gradient_checkpointing_enable) and, from transformers 5.17, its offload.
#include "planner/stacks/hf/export.h"
#include "planner/stacks/profile.h"
#include "planner/stacks/hf/step.h"

namespace longctx {

extern const StackProfile kHfProfile;
const StackProfile kHfProfile = {
    .kind = StackKind::HF,
    .name = "hf",
    .techniques =
        [](const StackSpec&) {
          return TechniqueSet()
              .set(static_cast<std::size_t>(Technique::Checkpoint))
              .set(static_cast<std::size_t>(Technique::OffloadCheckpoints));
        },
    .build_step = step::hf::build_step,
    .exporter = &kHfExporter,
};

}  // namespace longctx
