#pragma once
// TRL SFTTrainer's chunked loss (trl_loss.cpp; footprint/trl.h) in place of lm_head and
// ForCausalLMLoss, as the hf stack runs it with `--hf-loss trl-chunked-nll`: the backbone
// without a cache, lm_head and the cross-entropy 256 rows at a time, each chunk checkpointed.
// With tied embeddings the summed lm_head gradient waits for the embedding's
// (embedding_backward, as HfStep::tied_sum says).
#include "planner/stacks/blocks/hf_step.h"

namespace longctx::step::blocks {

// What the chunks' checkpoint frames and the gather's backward keep from the forward to the
// backward.
struct TrlLossActs {
  TensorId gathered = -1;   // hidden[order] [N, h] e, held by every chunk's saved inputs
  TensorId labels = -1;     // labels[order] [N] int64, likewise
  TensorId order = -1;      // the argsort [N] int64, saved by IndexBackward0
  TensorId rng_last = -1;   // the last chunk's RNG state, until its backward (the first to run)
  TensorId rng_rest = -1;   // the other chunks', until the first chunk's backward
};

NormActs trl_loss_forward(HfStep& sb, TensorId final_x, TrlLossActs& t);
// Returns the last layer's output gradient.
TensorId trl_loss_backward(HfStep& sb, const NormActs& f, const TrlLossActs& t);

}  // namespace longctx::step::blocks
