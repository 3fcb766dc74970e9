#pragma once
// Checkpoint offload: a checkpointed layer's input copied to the host after its forward and
// brought back before its recompute (longctx's runtime, runtime/src/checkpoint_store.cpp; the
// arctic stack writes ArcticTraining's CheckpointFunctionWithCPUOffload with the same ops).
// Footprints: footprint/offload.h.
#include <vector>

#include "planner/stacks/step/step_build.h"

namespace longctx::step::blocks {

class CheckpointOffload {
 public:
  // None of the model's layers offloaded yet.
  explicit CheckpointOffload(StepBuild& sb);

  // Layer `layer`'s input x copied to the host, in forward.
  void offload(int layer, TensorId x);
  // Brings layer `layer`'s offloaded input back among the ops of layer `at_layer` (the one
  // above it, while it recomputes, or the layer itself); -1 where it was not offloaded.
  TensorId prefetch(int layer, int at_layer);

 private:
  StepBuild& sb_;
  std::vector<TensorId> host_;  // per layer: in.host [n, h] e on the host, or -1
};

}  // namespace longctx::step::blocks
