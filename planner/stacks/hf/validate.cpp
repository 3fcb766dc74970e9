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

// DeepSpeed ZeRO-3 under the Trainer (hf/deepspeed.cpp), as modelled: on CUDA GPUs (its
// offloads pin host memory, and flash attention is CUDA's), transformers' loss over
// the full logits (TRL's chunked loss under it is not), no ring (accelerate's ParallelismConfig
// keeps context parallel to FSDP2), and under Ulysses flash_attention_2 as the core attention
// (UlyssesSPAttentionHF's sdpa path is not modelled) inside the Trainer's checkpointing (which
// turns the cache off: the cache's copies under Ulysses are not modelled).
Result<bool> check_deepspeed(const Plan& p) {
  if (p.cluster.hardware.backend != Backend::Cuda)
    return refuse(p, flag(KnobId::sharding), "runs DeepSpeed ZeRO-3 on CUDA GPUs here: pick a GPU preset, or give none");
  if (p.parallel.ring != 1 && p.parallel.ulysses > 1)
    return refuse(p, flag(KnobId::ulysses), "runs DeepSpeed's Ulysses or context parallel (accelerate's ParallelismConfig "
                                            "keeps context parallel to FSDP2), not both: give 1");
  if (p.parallel.ring != 1)
    return refuse(p, flag(KnobId::ring), "runs context parallel under FSDP2 only, not under DeepSpeed: give 1");
  if (p.train.stack.loss != HfLoss::Transformers)
    return refuse(p, flag(SettingId::hf_loss), "under DeepSpeed is modelled with transformers' loss: give transformers");
  if (p.parallel.ulysses == 1) return true;
  if (p.train.stack.attention != HfAttention::FlashAttention2)
    return refuse(p, flag(SettingId::attention), "runs DeepSpeed's Ulysses here over flash_attention_2: give flash_attention_2");
  if (!p.parallel.checkpoint.any())
    return refuse(p, flag(KnobId::checkpoint), "runs DeepSpeed's Ulysses here with the Trainer's gradient checkpointing: "
                                               "give full");
  return true;
}

// Across GPUs: accelerate's FSDP2 (fsdp_version 2) shards every rank's model states, and its
// context parallel (parallelism_config cp_size) runs torch's ring attention, which the
// Trainer allows with sdpa only (trainer.py: "Context parallelism is supported only with
// SDPA"), k/v all-gathered (cp_comm_strategy's default, TorchContextParallelConfig). Modelled
// with TRL's chunked loss and the collator's attention_mask (no cache, no mask built).
Result<bool> check_gpus(const Plan& p) {
  const std::int64_t world = p.cluster.shape.world();
  if (world == 1 && p.parallel.sharding != Sharding::None && p.parallel.sharding != Sharding::Zero3)
    return refuse(p, flag(KnobId::sharding), "applies no FSDP on one GPU, and DeepSpeed at ZeRO-3 only: give none or zero3");
  if (world > 1 && p.parallel.sharding != Sharding::Zero3)
    return refuse(p, flag(KnobId::sharding), "shards across GPUs with accelerate's FSDP2 (data-parallel replication "
                                             "is not modelled): give zero3");
  if (p.train.stack.checkpointing == HfCheckpointing::Accelerate && (world == 1 || runs_deepspeed(p)))
    return refuse(p, flag(SettingId::hf_checkpointing), "checkpoints with accelerate's fsdp_activation_checkpointing only "
                                                        "around FSDP2's layers across GPUs: give non-reentrant or reentrant");
  if (runs_deepspeed(p)) return check_deepspeed(p);
  const ParallelConfig& par = p.parallel;
  if (par.ulysses > 1 || par.offload_optimizer || par.offload_params)
    return refuse(p, flag(KnobId::sharding), "runs Ulysses and the state offloads under DeepSpeed ZeRO-3: give zero3");
  if (p.parallel.ring == 1) return true;
  if (world == 1) return refuse(p, flag(KnobId::ring), "needs more than one GPU for context parallel: give 1");
  if (p.train.stack.attention != HfAttention::Sdpa)
    return refuse(p, flag(SettingId::attention), "runs context parallel with sdpa only (the Trainer's rule): give sdpa");
  if (p.parallel.ring_exchange != RingExchange::AllGather)
    return refuse(p, flag(KnobId::ring_exchange), "is modelled with accelerate's default cp_comm_strategy: give allgather");
  if (p.train.stack.loss != HfLoss::TrlChunkedNll)
    return refuse(p, flag(SettingId::hf_loss), "runs context parallel here with TRL's chunked loss only (transformers' "
                                               "loss under it is not modelled): give trl-chunked-nll");
  if (!p.train.stack.attention_mask)
    return refuse(p, flag(SettingId::hf_no_attention_mask), "under context parallel is modelled with the collator's "
                                                            "attention_mask: leave it out");
  return true;
}

}  // namespace

Result<bool> validate(const Plan& p) {
  LONGCTX_TRY(auto transformers_layers, refuse_transformers_layers(p, /*own_ring=*/true));
  (void)transformers_layers;
  if (p.train.stack.attention == HfAttention::FlashAttention3)
    return refuse(p, flag(SettingId::attention), "models sdpa, eager and flash_attention_2: give one of them "
                                                 "(flash_attention_3 is modelled for --stack arctic)");
  LONGCTX_TRY(auto gpus, check_gpus(p));
  (void)gpus;
  // transformers' checkpoint offload (activation_checkpointing_enable(offload=True), 5.17 on)
  // copies to pinned host memory, which torch allocates only where an accelerator's driver is.
  if (p.parallel.offload_checkpoints && p.cluster.hardware.backend != Backend::Cuda)
    return Error::bad_input(flag(KnobId::offload_checkpoints),
                            "--stack hf offloads checkpoints as transformers does, to pinned host memory, which needs a "
                            "GPU: pick a GPU preset or leave it out");
  LONGCTX_TRY(auto plain, refuse_runtime_knobs(p, /*own_checkpoint_offload=*/true, /*own_deepspeed=*/runs_deepspeed(p)));
  (void)plain;
  return check_scores(p);
}

}  // namespace longctx::hf
