// torchtitan's llama3 and qwen3 training: FSDP2 (ZeRO-3's sharding) across GPUs, its
// activation checkpointing, and its context parallel (the ring).
#include "planner/stacks/torchtitan/export.h"
#include "planner/stacks/profile.h"
#include "planner/stacks/torchtitan/step.h"

namespace longctx {

extern const StackProfile kTorchtitanProfile;
const StackProfile kTorchtitanProfile = {
    .kind = StackKind::Torchtitan,
    .name = "torchtitan",
    .techniques =
        [](const StackSpec&) {
          return TechniqueSet()
              .set(static_cast<std::size_t>(Technique::Checkpoint))
              .set(static_cast<std::size_t>(Technique::Zero3))
              .set(static_cast<std::size_t>(Technique::Ring));
        },
    // torchtitan's Llama 3 step is transformers' sdpa step with its own RoPE, norms, loss,
    // checkpointing policies and FSDP2 (planner/stacks/torchtitan/step.h).
    .build_step = step::torchtitan::build_step,
    .exporter = &kTorchtitanExporter,
};

}  // namespace longctx
