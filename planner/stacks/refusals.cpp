#include "planner/stacks/refusals.h"

#include <fmt/format.h>

#include "planner/stacks/profile.h"

namespace longctx {

const std::string& flag(KnobId id) { return knob(id).flag; }
const std::string& flag(SettingId id) { return setting(id).flag; }

Error refuse(const Plan& p, const std::string& field, const std::string& what) {
  return Error::bad_input(field, fmt::format("--stack {} {}; use --stack {} for it", to_string(p.train.stack.kind), what,
                                             stack_profiles().front()->name));
}

Result<bool> refuse_head_chunks(const Plan& p) {
  if (p.parallel.head_chunk != 0) return refuse(p, flag(KnobId::head_chunk), "has no head-chunked attention: give 0");
  return true;
}

Result<bool> refuse_transformers_layers(const Plan& p, bool own_ring) {
  LONGCTX_TRY(auto whole_layers, refuse_head_chunks(p));
  (void)whole_layers;
  if (p.parallel.ring != 1 && !own_ring)
    return refuse(p, flag(KnobId::ring), "has no ring attention modelled: give 1 (--stack torchtitan has its context parallel)");
  if (p.parallel.checkpoint.kind == CheckpointPolicy::Kind::EveryK)
    return refuse(p, flag(KnobId::checkpoint), "checkpoints every decoder layer or none: give full or none");
  return true;
}

Result<bool> refuse_runtime_knobs(const Plan& p, bool own_checkpoint_offload, bool own_deepspeed) {
  const ParallelConfig& par = p.parallel;
  if (par.ulysses != 1 && !own_deepspeed) return refuse(p, flag(KnobId::ulysses), "has no sequence parallelism of its own: give 1");
  if (par.mlp_tiles != 1) return refuse(p, flag(KnobId::mlp_tiles), "has no tiled MLP: give 1");
  if (par.loss_tiles != 1) {
    // TRL's chunked NLL chunks the loss itself, in chunks of its own size, not in --loss-tiles.
    const bool trl_chunked = p.train.stack.kind == StackKind::HF && p.train.stack.loss == HfLoss::TrlChunkedNll;
    return refuse(p, flag(KnobId::loss_tiles),
                  trl_chunked ? "with --hf-loss trl-chunked-nll chunks the loss in TRL's own chunks, not in longctx's "
                                "tiles: give 1 (the prediction already holds TRL's chunks)"
                              : "computes the loss over the full logits: give 1");
  }
  if (par.offload_checkpoints && !own_checkpoint_offload)
    return refuse(p, flag(KnobId::offload_checkpoints), "does not offload checkpoints: leave it out");
  if ((par.offload_optimizer || par.offload_params) && !own_deepspeed)
    return refuse(p, flag(par.offload_optimizer ? KnobId::offload_optimizer : KnobId::offload_params),
                  "keeps its model states on the GPU");
  return true;
}

}  // namespace longctx
