// What ArcticTraining can express beyond its profile's data: DeepSpeed ZeRO-3 always, Ulysses,
// offloads and checkpoint offload as longctx's knobs say, but tiles only in the counts
// DeepSpeed's TiledMLP and Liger pick (tiles.h), every layer checkpointed or none, no
// head-chunked attention, flash attention in bf16.
#include <fmt/format.h>

#include "planner/stacks/arctic/tiles.h"
#include "planner/stacks/refusals.h"

namespace longctx::arctic {
namespace {

Result<bool> check_tiles(const Plan& p) {
  const TrainConfig& t = p.train;
  const ParallelConfig& par = p.parallel;
  const std::int64_t shards = *tile_count(p.model, t, par.ulysses, false);
  if (par.mlp_tiles != 1 && par.mlp_tiles != shards)
    return refuse(p, flag(KnobId::mlp_tiles), fmt::format("runs DeepSpeed's TiledMLP in ceil(tokens per rank / hidden) = "
                                                          "{} shards: give {} or 1 (untiled)", shards, shards));
  const std::int64_t chunks = *tile_count(p.model, t, par.ulysses, true);
  if (always_tiles_loss(t.stack) && par.loss_tiles != chunks)
    return refuse(p, flag(KnobId::loss_tiles), fmt::format("with the liger model computes the loss with Liger's fused "
                                                           "linear cross-entropy in {} chunks here: give {}", chunks, chunks));
  if (t.stack.arctic_model == ArcticModel::HuggingFace && par.ulysses > 1)
    return refuse(p, flag(KnobId::ulysses), "with the huggingface model tiles its loss over the sequence "
                                            "(sequence_tiled_compute), which is not modelled: give 1, or --arctic-model liger");
  if (!always_tiles_loss(t.stack) && par.loss_tiles != 1)
    return refuse(p, flag(KnobId::loss_tiles), "with the huggingface model computes the loss over the full logits: give "
                                               "1, or --arctic-model liger for a chunked loss");
  return true;
}

}  // namespace

Result<bool> validate(const Plan& p) {
  LONGCTX_TRY(auto transformers_layers, refuse_transformers_layers(p));
  (void)transformers_layers;
  const HfAttention a = p.train.stack.attention;
  if (a != HfAttention::FlashAttention2 && a != HfAttention::FlashAttention3)
    // DeepSpeed's Ulysses takes sdpa too (ulysses_sp.py UlyssesSPAttentionHF.register_with_transformers
    // lists flash_attention_2, flash_attention_3 and sdpa); ArcticTraining's recipes run flash-attn.
    return refuse(p, flag(SettingId::attention), "is modelled with flash-attn's kernels, ArcticTraining's default (sdpa "
                                                 "is not modelled): give flash_attention_2 or flash_attention_3");
  if (p.parallel.sharding != Sharding::Zero3) return refuse(p, flag(KnobId::sharding), "runs DeepSpeed ZeRO-3: give zero3");
  if (p.train.dtype != DType::BF16) return refuse(p, flag(SettingId::dtype), "trains in bf16 (flash attention): give bf16");
  return check_tiles(p);
}

}  // namespace longctx::arctic
