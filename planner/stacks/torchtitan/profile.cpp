// torchtitan's llama3 and qwen3 training: FSDP2 (ZeRO-3's sharding) across GPUs, its
// activation checkpointing (per-op selective among them), and its context parallel (the ring,
// all-gathered, the sequence not padded).
#include "planner/footprint/communication.h"
#include "planner/stacks/blocks/fsdp2_sharding.h"
#include "planner/stacks/profile.h"
#include "planner/stacks/torchtitan/export.h"
#include "planner/stacks/torchtitan/step.h"
#include "planner/stacks/torchtitan/validate.h"

namespace longctx {

extern const StackProfile kTorchtitanProfile;
const StackProfile kTorchtitanProfile = {
    .kind = StackKind::Torchtitan,
    .name = "torchtitan",
    .summary = "its llama3 and qwen3 models, FSDP2, activation checkpointing",
    // Its batches carry no attention_mask (its trainer passes the tokens alone).
    .defaults = {.kind = StackKind::Torchtitan, .attention_mask = false},
    .own_values = {{KnobId::checkpoint, kCheckpointOps}},
    .pads_sequence = false,
    .ring_exchange = RingExchange::AllGather,
    .techniques =
        [](const Plan&) {
          return TechniqueSet()
              .set(static_cast<std::size_t>(Technique::Checkpoint))
              .set(static_cast<std::size_t>(Technique::Zero3))
              .set(static_cast<std::size_t>(Technique::Ring));
        },
    // FSDP2's gradients are its sharded parameters' dtype, fp32 (the unsharded bf16 ones are
    // reduce-scattered into them); on one GPU autograd's, the parameters'.
    .kept_grads = [](const Plan& p) -> std::optional<KeptGrads> {
      const Cluster& c = p.cluster.shape;
      if (c.nodes > 1 || c.gpus_per_node > 1) return KeptGrads{DType::FP32, " (FSDP2's sharded gradients)"};
      return KeptGrads{p.train.dtype, " (the parameters' dtype)"};
    },
    .conform = step::blocks::conform_fsdp2_sharding,
    .validate = torchtitan::validate,
    .describe =
        [](const StackSpec&) {
          return std::string("torchtitan (its llama3 model, or qwen3 for q/k norms; sdpa; FSDP2 across GPUs; fused AdamW)");
        },
    // torchtitan's Llama 3 step is transformers' sdpa step with its own RoPE, norms, loss,
    // checkpointing policies and FSDP2 (planner/stacks/torchtitan/step.h).
    .build_step = step::torchtitan::build_step,
    .exporter = &kTorchtitanExporter,
    .communicators = footprint::nccl::fsdp2_context_parallel_communicators,
};

}  // namespace longctx
