#include "planner/stacks/torchtitan/validate.h"

#include <fmt/format.h>

#include "planner/stacks/refusals.h"
#include "planner/stacks/torchtitan/models.h"

namespace longctx::torchtitan {
namespace {

// Context parallel (parallelism.context_parallel_degree): torch's ring attention under
// FSDP2 over the dp_shard x cp mesh, the batch cut by its head-tail load balancer into
// 2 x cp chunks (torchtitan does not pad: the profile's pads_sequence), k/v exchanged by
// all-gather (the trainer never calls set_rotate_method: context_parallel_rotate_method
// reaches only its validator).
Result<bool> check_context_parallel(const Plan& p) {
  const ParallelConfig& par = p.parallel;
  if (par.ring == 1) return true;
  if (p.cluster.shape.world() == 1) return refuse(p, flag(KnobId::ring), "needs more than one GPU for context parallel: give 1");
  if (par.ring_exchange != RingExchange::AllGather)
    return refuse(p, flag(KnobId::ring_exchange), "trains context parallel with torch's all-gather of k/v (its "
                                                  "context_parallel_rotate_method reaches only validation): give allgather");
  if (p.model.qk_norm)
    return refuse(p, flag(KnobId::ring), "runs context parallel here for its llama3 model only (qwen3's rope_cache "
                                         "indexed by positions is not modelled): give 1");
  if (par.checkpoint.kind == CheckpointPolicy::Kind::Ops)
    return refuse(p, flag(KnobId::checkpoint), "under context parallel with per-op selective checkpointing is not "
                                               "modelled: give full, every:K or none");
  return true;
}

}  // namespace

Result<bool> validate(const Plan& p) {
  const ModelConfig& m = p.model;
  const std::int64_t world = p.cluster.shape.world();
  LONGCTX_TRY(auto whole_layers, refuse_head_chunks(p));
  (void)whole_layers;
  if (const auto no = torchtitan_model_refusal(m, world)) return refuse(p, no->about_gpus ? "--gpus" : "--model", no->reason);
  if (world > 1 && p.parallel.sharding != Sharding::Zero3)
    return refuse(p, flag(KnobId::sharding), "shards across GPUs with FSDP2 (its data-parallel replication is not "
                                             "modelled): give zero3");
  if (world == 1 && p.parallel.sharding != Sharding::None)
    return refuse(p, flag(KnobId::sharding), "applies no FSDP on one GPU: give none");
  if (world == 1 && p.train.dtype != DType::FP32)
    return refuse(p, flag(SettingId::dtype), "on one GPU trains bf16 under torch.autocast, which is not modelled: give "
                                             "fp32, or shard across GPUs with FSDP2 (its param_dtype)");
  // Its selective mode wraps layers K-1, 2K-1, ...: none of a model with fewer than K layers.
  const CheckpointPolicy& c = p.parallel.checkpoint;
  if (c.kind == CheckpointPolicy::Kind::EveryK && c.every > m.layers)
    return refuse(p, flag(KnobId::checkpoint), fmt::format("checkpoints every K-th of the model's {} layers, none for "
                                                           "every:{}: give K of at most {}, or none",
                                                           m.layers, c.every, m.layers));
  LONGCTX_TRY(auto context_parallel, check_context_parallel(p));
  (void)context_parallel;
  return refuse_runtime_knobs(p, /*own_checkpoint_offload=*/false);
}

}  // namespace longctx::torchtitan
