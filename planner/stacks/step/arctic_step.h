#pragma once
// The arctic stack's step (stack.h): ArcticTraining's SFT step, transformers' decoder layers
// (hf_step.h, with Liger's kernels for the liger model) under DeepSpeed ZeRO-3
// (arctic_zero.cpp), its Ulysses attention and TiledMLP and the checkpoint offload
// (arctic_layer.cpp), and the model around them, the loss and the optimizer
// (arctic_model.cpp).
#include "planner/stacks/step/hf_step.h"

namespace longctx::step::arctic {

using footprint::StepShapes;

// ---- DeepSpeed ZeRO-3 (arctic_zero.cpp) ------------------------------------------------
// The model states: bf16 partitions, the persistent parameters, the gradient bucket, the
// gradient partitions and the optimizer's fp32 states (on the host when offloaded); installs
// sb.grad_ready, DeepSpeed's per-parameter gradient hook.
void model_states(HfStep& sb);
// A module's parameters gathered for its forward or backward: a tensor of `numel`'s gathered
// bytes, or -1 where nothing is allocated (one rank, partitions on the device). The caller
// makes the op that last uses them read it. `module`: fetched by the module's hook on the
// allgather stream; else gathered synchronously on the default one (an external parameter).
TensorId gather(HfStep& sb, int layer, const char* name, std::int64_t numel, Phase phase, bool rc = false,
                bool module = true);
// The elements a layer's modules gather (the persistent norms excluded).
std::int64_t layer_gathered_elems(const StepShapes& s, bool attention, bool mlp);
// The end of backward: the last bucket reduced (independent_gradient_partition_epilogue).
void flush_gradients(HfStep& sb);
// stage3.py step(): the CPU Adam step on the host (offloaded) or fused Adam on the device,
// and the bf16 partitions refreshed from the fp32 masters.
void optimizer_step(HfStep& sb);

// ---- The decoder layer (arctic_layer.cpp) -----------------------------------------------
struct Attention {
  TensorId q_sp = -1, k_sp = -1, v_sp = -1;  // what flash attention reads (after Ulysses' all-to-all)
  TensorId o_sp = -1;                        // its output [b*S, hl, d] e
};
struct LayerActs {
  hf::HfLayerActs hf;
  Attention attn;
};
// `rc`: the recompute in backward (reentrant checkpointing: the whole layer); `keep`: the
// activations are kept for a backward (no checkpointing, or the recompute).
LayerActs layer_forward(HfStep& sb, int l, TensorId x, Phase phase, bool rc);
// Returns the layer input's gradient.
TensorId layer_backward(HfStep& sb, int l, const LayerActs& a, TensorId d_out);

// ---- The step (arctic_model.cpp) ----------------------------------------------------------
StepGraph build_step(const StepInputs& in);

}  // namespace longctx::step::arctic
