#pragma once
// transformers' model around its decoder layers (models/llama/modeling_llama.py,
// LlamaModel.forward and LlamaForCausalLM.forward; loss/loss_utils.py, ForCausalLMLoss) as a
// training loop of `model(input_ids=..., labels=...).loss.backward()` runs it: the batch, the
// embedding's backward, the final norm, lm_head and the cross-entropy. Each stack composes
// them with its own inputs and parameter handling (planner/stacks/<name>/step.cpp).
// Footprints: footprint/hf.h, footprint/embedding.h.
#include "planner/stacks/blocks/hf_step.h"

namespace longctx::step::blocks {

// The batch as the data loader hands it over: input_ids and labels [n] int64 each (and an
// attention_mask [n] int64 where the stack passes one), into outer.tokens, outer.targets and
// model.batch.
void load_batch(HfStep& sb);
// EmbeddingBackward0 from layer 0's input gradient: the dense [V, h] e gradient, kept as the
// table's .grad, or (tied) joined to lm_head's (join_tied_grad).
void embedding_backward(HfStep& sb, TensorId d_x);
// A tied table's AccumulateGrad input buffer: the embedding's dense [V, h] e gradient joins
// lm_head's left in outer.tied_grad as sb.tied_sum says, added in place or summed into a new
// [V, h] e tensor. Returns the table's .grad (in sb.grads), for the stack's hook to take.
TensorId join_tied_grad(HfStep& sb, TensorId dense);

// The model's final norm over the last layer's output (outer.final_x, outer.xf), where
// LlamaModel.forward returns and its position tensors, mask and locals go.
NormActs final_norm_forward(HfStep& sb, TensorId final_x);
// lm_head over the final norm's output: the logits [n, V] e. `head_weight`: lm_head's weight
// gathered for the op, or -1.
TensorId lm_head_forward(HfStep& sb, TensorId head_weight);
// The cross-entropy over the logits: `.float()` (bf16: [n, V] fp32), the labels padded and
// shifted (ForCausalLMLoss, where `shift_labels`; else the batch's labels as they are),
// log_softmax [n, V] fp32 (saved) and nll_loss; then the model's output, which holds the
// logits and the cache, is dropped.
void cross_entropy_forward(HfStep& sb, TensorId logits, bool shift_labels);
// NllLossBackward0 [n, V] fp32, LogSoftmaxBackward0 [n, V] fp32 (bf16: cast back [n, V] e):
// the logits' gradient.
TensorId cross_entropy_backward(HfStep& sb);
// lm_head's MmBackward0: its weight's gradient [V, h] e and the final norm's output gradient,
// then the final norm's backward: the last layer's output gradient. Tied, the weight's
// gradient is a view left in outer.tied_grad for the embedding's to join in a new sum
// (TiedSum::New).
TensorId lm_head_backward(HfStep& sb, const NormActs& f, TensorId d_logits, TensorId head_weight);

// ForCausalLMLoss whole: the final norm, lm_head and the shifted labels' cross-entropy, and
// their backward (returning the last layer's output gradient).
NormActs causal_lm_loss_forward(HfStep& sb, TensorId final_x, TensorId head_weight);
TensorId causal_lm_loss_backward(HfStep& sb, const NormActs& f, TensorId head_weight);

}  // namespace longctx::step::blocks
