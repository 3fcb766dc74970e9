#pragma once
// The layer schedule of a step written with transformers' decoder layers
// (step/layer_loop.h), checkpointed by torch.utils.checkpoint as transformers'
// gradient_checkpointing_enable wraps each layer: the RNG state saved per checkpointed layer,
// the recompute (reentrant: the whole layer, holding its output and the gradient handed in;
// non-reentrant: until its last saved tensor), transformers' checkpoint offload
// (save_on_cpu), and per-op selective checkpointing (OpSac) where the policy is per op.
// A stack changes what its checkpoint wrapper does by overriding the protected hooks
// (torchtitan's, planner/stacks/torchtitan/).
#include <deque>
#include <vector>

#include "planner/stacks/blocks/hf_step.h"
#include "planner/stacks/step/layer_loop.h"

namespace longctx::step::blocks {

class HfLayers : public LayerSchedule<HfLayerActs> {
 public:
  explicit HfLayers(HfStep& sb);

  HfLayerActs forward(int l, TensorId x, Phase phase, bool recompute) override;
  TensorId backward(int l, const HfLayerActs& a, TensorId d_out) override;
  // gradient_checkpointing_enable wraps every decoder layer, or none.
  bool checkpointed(int l) const override;
  void before_forward(int l, TensorId x) override;
  TensorId recompute_input(int l, const HfLayerActs& first) override;
  void after_recompute(int l, const HfLayerActs& a, TensorId in, TensorId d_out) override;
  void after_backward(int l, const HfLayerActs& a, TensorId d_out, bool recomputed, int last) override;
  // Where the step drops its autograd graph (the loss that holds it freed), after the ops
  // written so far, in `phase`: what lives as long as the graph dies there. Reentrant
  // checkpointing keeps each layer's RNG state until then, an attribute of its
  // CheckpointFunction node (torch/utils/checkpoint.py, CheckpointFunction.forward:
  // ctx.fwd_cpu_state) that the engine's release of the node's saved tensors leaves alone;
  // non-reentrant's frame goes with its layer's backward.
  void free_graph(Phase phase);

 protected:
  // How a checkpointed layer is recomputed: the whole layer (reentrant), or until its last
  // saved tensor (non-reentrant's early stop).
  virtual LayerPass recompute_pass() const;
  // What the checkpoint keeps until the layer's backward is done besides its RNG state: the
  // function's keyword arguments here (the mask and the position tensors).
  virtual Ids checkpoint_inputs(int l, const HfLayerActs& a) const;

  HfStep& sb_;

 private:
  bool offloaded(int l) const;

  std::vector<TensorId> rng_;              // checkpointed: torch.get_rng_state() kept per layer
  std::vector<TensorId> held_by_graph_;    // what lives until the step drops its graph
  TensorId fork_rng_ = -1;                 // the recompute under way: fork_rng's saved state
  std::vector<TensorId> host_;             // offloaded: the layer input's pinned host copy
  std::vector<std::deque<TensorId>> kept_;  // per-op selective checkpointing: what each block kept
};

}  // namespace longctx::step::blocks
