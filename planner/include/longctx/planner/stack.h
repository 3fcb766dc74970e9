#pragma once
// The training stack a plan's step runs on. The same model, shapes and techniques allocate
// different tensors under different code: longctx's own runtime (the default, which the
// runtime executes), or Hugging Face transformers' modeling code trained with torch.optim's
// AdamW (`hf`: docs/stacks.md lists what it keeps, op by op, with the source each figure comes
// from). A stack is a property of the step like its dtype: the step builder writes that
// stack's ops (planner/src/step/hf_*.cpp for `hf`), and validate() (parallel_config.h) refuses
// the knobs a stack cannot express, naming the stack.
#include <string>

#include "longctx/planner/result.h"

namespace longctx {

enum class StackKind { Longctx, HF };

// transformers' `attn_implementation`: "sdpa" (torch's scaled_dot_product_attention, grouped
// k/v passed as they are), "eager" (k/v repeated to the query heads, the [b, H, S, S]
// scores and softmax materialized), or "flash_attention_2" (the flash-attn package, CUDA
// only: grouped k/v, never a mask).
enum class HfAttention { Sdpa, Eager, FlashAttention2 };

// `gradient_checkpointing_kwargs={"use_reentrant": ...}`: torch.utils.checkpoint's two
// implementations, which hold different tensors while a layer is recomputed.
enum class HfCheckpointing { NonReentrant, Reentrant };

// The Trainer's `optim`: torch.optim.AdamW fused (its default from torch 2.8: one kernel, no
// temporaries) or plain (`adamw_torch`: a parameter at a time on the CPU, foreach on CUDA).
enum class HfOptimizer { AdamWTorchFused, AdamWTorch };

struct StackSpec {
  StackKind kind = StackKind::Longctx;
  HfAttention attention = HfAttention::Sdpa;           // hf only
  HfCheckpointing checkpointing = HfCheckpointing::NonReentrant;  // hf only, with checkpointing
  // hf only: whether the batch carries an attention_mask (all ones), as the Trainer's
  // tokenized batches do. Without one and without a cache (checkpointing), transformers
  // builds a [b, 1, S, S] causal mask and sdpa materializes it (planner/src/step/hf_model.cpp).
  bool attention_mask = true;
  HfOptimizer optimizer = HfOptimizer::AdamWTorchFused;  // hf only
  bool operator==(const StackSpec&) const = default;
};

std::string to_string(StackKind k);        // "longctx", "hf"
std::string to_string(HfAttention a);      // "sdpa", "eager"
std::string to_string(HfCheckpointing c);  // "non-reentrant", "reentrant"
std::string to_string(HfOptimizer o);      // "adamw_torch_fused", "adamw_torch"
// Each error names `field` and lists the words it takes.
Result<StackKind> parse_stack_kind(const std::string& text, const std::string& field);
Result<HfAttention> parse_hf_attention(const std::string& text, const std::string& field);
Result<HfCheckpointing> parse_hf_checkpointing(const std::string& text, const std::string& field);
Result<HfOptimizer> parse_hf_optimizer(const std::string& text, const std::string& field);

// "longctx", or "hf (sdpa attention, non-reentrant checkpointing, attention_mask passed)".
std::string describe(const StackSpec& s);

}  // namespace longctx
