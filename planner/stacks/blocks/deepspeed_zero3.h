#pragma once
// DeepSpeed ZeRO-3 (DeepSpeed v0.17.1, deepspeed/runtime/zero/stage3.py
// DeepSpeedZeroOptimizer_Stage3, partition_parameters.py, partitioned_param_coordinator.py)
// around a transformers model, with the defaults ArcticTraining's recipes leave in place: the
// model states, the gathers of a module's parameters, the gradients' reduction as backward
// makes them, and the optimizer step. Footprints: footprint/deepspeed.h.
#include <cstdint>

#include "planner/stacks/blocks/hf_step.h"

namespace longctx::step::blocks {

// The model states: bf16 partitions, the persistent parameters, the gradient partitions and
// the optimizer's fp32 states (on the host when offloaded).
void deepspeed_model_states(StepBuild& sb);

// A module's parameters gathered for its forward or backward: a tensor of `numel`'s gathered
// bytes, or -1 where nothing is allocated (one rank, partitions on the device). The caller
// makes the op that last uses them read it. `module`: fetched by the module's hook on the
// allgather stream; else gathered synchronously on the default one (an external parameter).
TensorId deepspeed_gather(StepBuild& sb, int layer, const char* name, std::int64_t numel, Phase phase, bool rc = false,
                          bool module = true);
// The elements a layer's modules gather (the persistent norms excluded).
std::int64_t layer_gathered_elems(const StepShapes& s, bool attention, bool mlp);

// The hook on each parameter's accumulated gradient (reduce_independent_p_g_buckets_and_remove_grads):
// a gradient that would overflow the bucket first reduces what it holds; one that fits is
// copied in and freed, a larger one joins it as it is. Its bucket buffer is persistent.
class DeepSpeedGradients final : public GradientHook {
 public:
  explicit DeepSpeedGradients(StepBuild& sb);
  void ready(TensorId grad, std::int64_t numel) override;
  // The end of backward: the last bucket reduced (independent_gradient_partition_epilogue).
  void flush();

 private:
  void reduce();

  StepBuild& sb_;
  TensorId buffer_ = -1;           // __ipg_bucket_flat_buffer
  std::int64_t elems_ = 0;         // elements of the gradients that joined it since the last reduction
  std::int64_t flat_elems_ = 0;    // their partitions padded to the world, as reduce_scatter_coalesced cats them
  std::int64_t partition_ws_ = 0;  // the largest partition_grads workspace among them
  Ids pending_;                    // gradients too large to copy in: their own buffers until the reduction
};

// EmbeddingBackward0 under ZeRO-3, the module's table gathered for it (its pre-backward hook):
// the dense [V, h] e gradient, to the hook; or, tied, joined to lm_head's gradient
// (join_tied_grad), the sum then reaching the hook.
void deepspeed_embedding_backward(HfStep& sb, TensorId d_x);

// stage3.py step(): the CPU Adam step on the host (offloaded) or fused Adam on the device,
// and the bf16 partitions refreshed from the fp32 masters.
void deepspeed_optimizer_step(StepBuild& sb);

}  // namespace longctx::step::blocks
