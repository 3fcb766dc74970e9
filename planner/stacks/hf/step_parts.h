#pragma once
// The pieces of the hf stack's step that its one-GPU build (step.cpp) and its build across
// GPUs (distributed.cpp: accelerate's FSDP2 and context parallel) share.
#include "planner/stacks/blocks/fsdp2.h"
#include "planner/stacks/blocks/hf_step.h"
#include "planner/stacks/hf/validate.h"

namespace longctx::step::hf {

// TRL's chunked loss in place of lm_head and ForCausalLMLoss (--hf-loss trl-chunked-nll).
bool trl_chunked_loss(const blocks::HfStep& sb);
// Whether the model keeps a DynamicCache through the forward: use_cache (--hf-no-use-cache
// turns it off), which TRL's chunked loss turns off (use_cache=False to the backbone) and so
// does checkpointing (check_model_inputs: "use_cache=True is incompatible with gradient
// checkpointing"). Every build sets HfStep::kv_cache from it before model_inputs, whose
// causal mask it decides too.
bool keeps_kv_cache(const blocks::HfStep& sb);
// LlamaModel.forward up to the first layer; the embedding under `fsdp`'s group where given,
// its table gathered by ZeRO-3 where `zero3`. Returns layer 0's input [n, h] e.
TensorId model_inputs(blocks::HfStep& sb, blocks::Fsdp2* fsdp, bool zero3);
// The loss, forward and backward (under `fsdp`'s head group where given); returns the last
// layer's output gradient.
TensorId loss(blocks::HfStep& sb, TensorId final_x, blocks::Fsdp2* fsdp);

// ---- distributed.cpp ------------------------------------------------------------------------
// The batch as the Trainer hands it to torch's context parallel, sharded in place.
void context_parallel_batch(blocks::HfStep& sb);
// The step across GPUs under FSDP2 (REQUIRES: in.cluster.world() > 1, sharding zero3, not
// runs_deepspeed: hf/validate.cpp).
StepGraph build_distributed_step(const StepInputs& in);

// ---- deepspeed.cpp --------------------------------------------------------------------------
// The batch as DeepSpeed's UlyssesSPDataLoaderAdapter hands the rank its slice.
void ulysses_batch(blocks::HfStep& sb);
// The step under DeepSpeed ZeRO-3 (REQUIRES: hf::runs_deepspeed, hf/validate.cpp's rules).
StepGraph build_deepspeed_step(const StepInputs& in);

}  // namespace longctx::step::hf
