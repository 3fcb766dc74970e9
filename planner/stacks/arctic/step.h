#pragma once
// The arctic stack's step (core/stack.h): ArcticTraining's SFT step, transformers' decoder
// layers (planner/stacks/blocks/, with Liger's kernels for the liger model) under DeepSpeed
// ZeRO-3 (blocks/deepspeed_zero3.h), its Ulysses attention and TiledMLP (layer.cpp), the
// checkpoint offload, and the model around them, the loss and the optimizer (step.cpp).
#include "planner/stacks/blocks/hf_step.h"

namespace longctx::step::arctic {

using blocks::HfStep;
using footprint::StepShapes;

// ---- The decoder layer (layer.cpp) -----------------------------------------------------------
// Ulysses' tensors in HfLayerActs::sp (blocks/ulysses_attention.h).
using LayerActs = blocks::HfLayerActs;
// `rc`: the recompute in backward (reentrant checkpointing: the whole layer).
LayerActs layer_forward(HfStep& sb, int l, TensorId x, Phase phase, bool rc);
// Returns the layer input's gradient.
TensorId layer_backward(HfStep& sb, int l, const LayerActs& a, TensorId d_out);

// ---- The step (step.cpp) ----------------------------------------------------------------------
StepGraph build_step(const StepInputs& in);

}  // namespace longctx::step::arctic
