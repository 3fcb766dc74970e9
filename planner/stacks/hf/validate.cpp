#include "planner/stacks/hf/validate.h"

#include <fmt/format.h>

#include "planner/core/limits.h"
#include "planner/stacks/refusals.h"

namespace longctx::hf {
namespace {

// Eager attention materializes [b, H, S, S] scores a few times over, and a batch without an
// attention_mask may get a [b, 1, S, S] mask: bound them as validate() bounds the rest.
Result<bool> check_scores(const Plan& p) {
  const TrainConfig& t = p.train;
  if (t.stack.attention != HfAttention::Eager && t.stack.attention_mask) return true;
  const double scores = double(t.micro_batch) * double(p.model.heads) * double(t.seq) * double(t.seq) * 4.0 * 8.0;
  if (scores > double(limits::kMaxStepBytes))
    return Error::bad_input("--seq", fmt::format("{} tokens would need on the order of {:.3g} bytes for the attention's "
                                                 "[S, S] scores or mask, beyond longctx's bound of {:.3g}; use --attention "
                                                 "sdpa with an attention_mask, or shorten --seq", t.seq, scores,
                                                 double(limits::kMaxStepBytes)));
  return true;
}

}  // namespace

Result<bool> validate(const Plan& p) {
  LONGCTX_TRY(auto transformers_layers, refuse_transformers_layers(p));
  (void)transformers_layers;
  if (p.train.stack.attention == HfAttention::FlashAttention3)
    return refuse(p, flag(SettingId::attention), "models sdpa, eager and flash_attention_2: give one of them "
                                                 "(flash_attention_3 is modelled for --stack arctic)");
  if (p.cluster.shape.world() != 1) return refuse(p, "--gpus", "is modelled on one GPU (one process) so far: give --gpus 1");
  if (p.parallel.sharding != Sharding::None) return refuse(p, flag(KnobId::sharding), "runs without ZeRO sharding: give none");
  // transformers' checkpoint offload (activation_checkpointing_enable(offload=True), 5.17 on)
  // copies to pinned host memory, which torch allocates only where an accelerator's driver is.
  if (p.parallel.offload_checkpoints && p.cluster.hardware.backend != Backend::Cuda)
    return Error::bad_input(flag(KnobId::offload_checkpoints),
                            "--stack hf offloads checkpoints as transformers does, to pinned host memory, which needs a "
                            "GPU: pick a GPU preset or leave it out");
  LONGCTX_TRY(auto plain, refuse_runtime_knobs(p, /*own_checkpoint_offload=*/true));
  (void)plain;
  return check_scores(p);
}

}  // namespace longctx::hf
