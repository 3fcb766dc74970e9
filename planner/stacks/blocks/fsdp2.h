#pragma once
// FSDP2 (torch.distributed.fsdp.fully_shard) as torchtitan's apply_fsdp wraps a model
// (models/llama3/infra/parallelize.py): per parameter group (the embedding, each block,
// [norm, output]) the all-gather, its copy-out into unsharded parameters, the reshard, and
// the reduce-scatter of the gradients into fp32 shards once the group's backward is done.
// Footprints: footprint/fsdp2.h.
#include <vector>

#include "planner/stacks/step/step_build.h"

namespace longctx::step::blocks {

class Fsdp2 {
 public:
  // `reduce_e`: bytes an element of the policy's reduce_dtype (torchtitan's fp32: 4;
  // accelerate's bf16 mixed precision reduces in the parameters' dtype).
  explicit Fsdp2(StepBuild& sb, std::int64_t reduce_e = 4);

  // The sharded parameters [shard] fp32 and fused AdamW's state on them, per group.
  void model_states();
  // Forward: the group's all-gather and copy-out (freeing the previous group's gathered
  // buffer), and its reshard after it ran; the root's end of forward frees the last gather.
  void unshard_forward(int group, Phase phase);
  void reshard(int group, Phase phase);
  void end_forward();
  // Backward: the gather a group's pre-backward issues for the next group to run backward
  // (FSDPParamGroup's backward prefetch), the group's own copy-out, and its post-backward
  // (reshard, then its gradients copied into the reduce-scatter input, the shard out).
  void prefetch(int group, Phase phase);
  void copy_out_backward(int group);
  void post_backward(int group);
  void end_backward();
  // A reentrant checkpoint's recompute runs the group's forward hooks inside its backward
  // (CheckpointFunction.backward, before the inner backward's pre-backward hooks): the group
  // is that forward's root (_fsdp_state.py _root_pre_forward), its pre-forward copies out the
  // gather prefetched for it (or gathers) in forward state, so FSDPParamGroup.wait_for_unshard
  // keeps the gathered buffer (all_gather_state) until the recompute's post-forward frees it
  // as the root's (_post_forward). REQUIRES: the group's backward gather issued (prefetch).
  void copy_out_recompute(int group);
  void end_recompute(int group);
  // One fully_shard call over two groups' modules (accelerate's tied wrapping,
  // utils/fsdp_utils.py fsdp2_prepare_model: fully_shard([final norm, embedding, lm_head])):
  // `joined`'s parameters are gathered, copied out, resharded and reduced with `into`'s, in
  // one buffer each (one FSDPParamGroup); calls naming `joined` then do nothing.
  // REQUIRES: before any op of either group; joined != into.
  void join(int joined, int into);

 private:
  void copy_out(int group, Phase phase, TensorId frees);
  // The groups one FSDPParamGroup holds: `group`, and the group joined to it.
  std::vector<int> members(int group) const;
  template <class Bytes>
  std::int64_t summed(int group, Bytes bytes) const;

  StepBuild& sb_;
  std::int64_t reduce_e_;
  std::vector<TensorId> gathered_;   // per group: all_gather_output [world * shard] e, while held
  std::vector<TensorId> unsharded_;  // per group: the parameters unsharded [group_params] e
  TensorId forward_gathered_ = -1;   // forward: the last group's gather, freed at the next copy-out
  TensorId reduce_input_ = -1;       // backward: the last reduce-scatter's input, freed at the next
  int joined_ = -1, into_ = -1;      // join(): the group gathered and reduced with another
};

}  // namespace longctx::step::blocks
