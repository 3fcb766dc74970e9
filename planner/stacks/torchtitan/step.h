#pragma once
// The torchtitan stack's step (core/stack.h): torchtitan's Llama 3 and Qwen 3 training
// (torchtitan 0.2.2: models/llama3/model/model.py, models/qwen3/model/model.py,
// components/loss.py, distributed/activation_checkpoint.py), written with transformers'
// sdpa layer (planner/stacks/blocks/) where torchtitan's model code matches it, and its own
// ops where it differs: RoPE by complex multiplication on the [b, S, heads, d] layout
// (apply_rotary_emb) from a freqs_cis buffer (qwen3: rotate-half from a rope_cache buffer),
// torch's RMSNorm, no cache, no position tensors or masks, the loss over unshifted labels,
// non-reentrant checkpointing without early stop of every layer or every K-th (or per op),
// FSDP2 across GPUs and its context parallel (torch's ring attention).
#include <optional>
#include <vector>

#include "planner/stacks/blocks/fsdp2.h"
#include "planner/stacks/blocks/hf_step.h"

namespace longctx::step::torchtitan {

using blocks::HfLayerActs;

// torchtitan's ops for each of the decoder layer's variants (model.cpp).
extern const blocks::LayerOps kTorchtitanOps;

// The torchtitan step being written: the transformers-family build with torchtitan's own
// model tensors and its FSDP2.
struct TorchtitanStep : blocks::HfStep {
  explicit TorchtitanStep(const StepInputs& inputs);

  // FSDP2 across ranks; on one rank torchtitan applies none (its dp_shard degree is 1).
  std::optional<blocks::Fsdp2> fsdp2;
  // Per layer: qwen3's rope_cache cast to param_dtype by FSDP2's cast_forward_inputs (the
  // block's floating-point forward inputs) [S, 2d] e in bf16, or -1.
  std::vector<TensorId> rope_cache_cast;
  // Context parallel: the rank's positions [b, Sl] int32 (prepare_context_parallel_input), and
  // its shards of the batch with them, which forward_backward_step holds until backward is done.
  TensorId cp_positions = -1;
  Ids cp_shards;
};

// The torchtitan build whose op `sb` runs: kTorchtitanOps are installed by TorchtitanStep
// alone, so their HfStep is always one.
inline TorchtitanStep& step_of(blocks::HfStep& sb) { return static_cast<TorchtitanStep&>(sb); }

// ---- model.cpp --------------------------------------------------------------------------------
// apply_rotary_emb's backward (MulBackward0 of view_as_complex(x) * freqs_cis): grad *
// freqs_cis.conj() [n, heads*d] e; `table`: freqs_cis at the rank's positions (context
// parallel), or -1 for the buffer.
TensorId complex_rope_backward(blocks::HfStep& sb, int l, const char* name, const char* out_name, TensorId grad,
                               std::int64_t heads, TensorId table);

// ---- context_parallel.cpp -----------------------------------------------------------------------
// The batch cut into the rank's shards (prepare_context_parallel_input).
void context_parallel_batch(TorchtitanStep& sb);
// The attention under context parallel: torch's ring attention, and its backward through the
// q/k/v projections.
// (The forward and the kernel's backward are transformers' sdpa layer's too under accelerate's
// context parallel: planner/stacks/hf/.)
void ring_attention_forward(blocks::HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc);
// The ring's backward: dq [b, H, Sl, d] e and the dk/dv pair [2, b, K, Sl, d] e, head-major.
struct RingGrads {
  TensorId dq = -1, kv_pair = -1;
};
RingGrads ring_attention_kernel_backward(blocks::HfStep& sb, int l, const HfLayerActs& a, TensorId d_o);
TensorId ring_attention_backward(blocks::HfStep& sb, int l, const HfLayerActs& a, TensorId d_o, Ids& grads);

// ---- step.cpp ---------------------------------------------------------------------------------
StepGraph build_step(const StepInputs& in);

}  // namespace longctx::step::torchtitan
