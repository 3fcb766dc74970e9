#pragma once
// DeepSpeed's Ulysses attention for transformers' models (deepspeed/runtime/sequence_parallel/
// ulysses_sp.py, UlyssesSPAttentionHF, as register_with_transformers installs it in place of the
// model's attention function) around flash attention: q, k and v exchanged from the rank's
// tokens of every head to every token of its heads, flash attention over them, and its output
// exchanged back; with u = 1 flash attention alone. The arctic stack (ArcticTraining) and the
// hf stack under DeepSpeed (accelerate's sp_backend "deepspeed") both run it.
//
// Shapes: n = b*S/u tokens of the rank; the kernel runs on b*S tokens of hl query heads and kvr
// kv heads (step_shapes.h).
#include "planner/stacks/blocks/hf_step.h"

namespace longctx::step::blocks {

// LayerOps' attention: from a.q, a.k, a.v (rotated, [n, heads*d] e) to a.o ([n, H*d] e), the
// exchanges, flash attention's output and softmax_lse (a.lse), into a.sp. `cache`: ignored;
// no DynamicCache is kept (REQUIRES: its callers run it without one: checkpointed layers,
// or ArcticTraining's model).
void ulysses_attention_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool cache);
// Its backward from o's gradient: flash attention's, the exchanges' back, and the q/k/v
// projections' (flash's gradients are laid out as its inputs were: no head-major copies);
// returns the attention norm's output gradient.
TensorId ulysses_attention_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_o, Ids& grads);

}  // namespace longctx::step::blocks
