#pragma once
// The training stack a plan's step runs on. The same model, shapes and techniques allocate
// different tensors under different code: longctx's own runtime (the default, which the
// runtime executes), or Hugging Face transformers' modeling code trained with torch.optim's
// AdamW (`hf`), or ArcticTraining's: the same modeling code under DeepSpeed ZeRO-3, its
// Ulysses for HF, TiledMLP and checkpoint offload, with Liger's kernels (`arctic`), or
// torchtitan's training (`torchtitan`: its own llama3 and qwen3 model code, FSDP2 across
// GPUs, its activation checkpointing policies, torch's fused AdamW).
// docs/stacks.md lists what each keeps, op by op, with the source each figure comes from. A
// stack is a property of the step like its dtype; everything a stack can express, and how its
// step is written, is its profile's (planner/stacks/profile.h, one folder a stack). This
// header holds the names and the options' values as plain data.
#include <string>

#include "common/result.h"

namespace longctx {

enum class StackKind { Longctx, HF, Arctic, Torchtitan };

// transformers' `attn_implementation`: "sdpa" (torch's scaled_dot_product_attention, grouped
// k/v passed as they are), "eager" (k/v repeated to the query heads, the [b, H, S, S]
// scores and softmax materialized), or "flash_attention_2" (the flash-attn package, CUDA
// only: grouped k/v, never a mask), or "flash_attention_3" (flash-attn's Hopper kernels; the
// arctic stack only).
enum class HfAttention { Sdpa, Eager, FlashAttention2, FlashAttention3 };

// ArcticTraining's `model.type`: "liger" (Liger-Kernel's RMSNorm, RoPE, SwiGLU and fused
// linear cross-entropy patched into the transformers model) or "huggingface" (the model as
// transformers writes it).
enum class ArcticModel { Liger, HuggingFace };

// Who checkpoints each layer and how. The Trainer's gradient checkpointing, with
// `gradient_checkpointing_kwargs={"use_reentrant": ...}`: torch.utils.checkpoint's two
// implementations, which hold different tensors while a layer is recomputed, each saving the
// RNG state, around the layer's call (its FSDP hooks inside). Or accelerate's
// `fsdp_activation_checkpointing` (utils/fsdp_utils.py, fsdp2_apply_ac): checkpoint_wrapper,
// non-reentrant without the RNG state, inside each FSDP2 layer (its hooks outside).
enum class HfCheckpointing { NonReentrant, Reentrant, Accelerate };

// The Trainer's `optim`: torch.optim.AdamW fused (its default from torch 2.8: one kernel, no
// temporaries) or plain (`adamw_torch`: a parameter at a time on the CPU, foreach on CUDA).
enum class HfOptimizer { AdamWTorchFused, AdamWTorch };

// How the loss is computed: by the model (`transformers`: lm_head over every position, then
// ForCausalLMLoss on the [n, V] logits), or by TRL's SFTTrainer with `loss_type="chunked_nll"`
// (`trl-chunked-nll`, TRL 1.10 to 1.14.2: the backbone's hidden states, lm_head and the
// cross-entropy 256 tokens at a time, each chunk checkpointed, so the [n, V] logits never exist).
enum class HfLoss { Transformers, TrlChunkedNll };

// A stack and its options (the settings table's rows, settings.h); each stack takes some of
// them (its profile's `options`) and keeps the others at its defaults.
struct StackSpec {
  StackKind kind = StackKind::Longctx;
  HfAttention attention = HfAttention::Sdpa;           // hf and arctic
  HfCheckpointing checkpointing = HfCheckpointing::NonReentrant;  // hf only, with checkpointing
  // hf only: whether the batch carries an attention_mask (all ones), as the Trainer's
  // tokenized batches do. Without one and without a cache (use_cache below), transformers
  // builds a [b, 1, S, S] causal mask and sdpa materializes it (planner/stacks/hf/step.cpp).
  bool attention_mask = true;
  // hf only: the model's use_cache (the config's default, true; training scripts often set it
  // false). While the model keeps a cache (no checkpointing, transformers' loss), every layer's
  // k and v are copied into a DynamicCache held until the loss; without one and without an
  // attention_mask, sdpa gets a [b, 1, S, S] causal mask (planner/stacks/hf/step.cpp).
  bool use_cache = true;
  HfOptimizer optimizer = HfOptimizer::AdamWTorchFused;  // hf only
  HfLoss loss = HfLoss::Transformers;                    // hf only
  ArcticModel arctic_model = ArcticModel::Liger;          // arctic only
  bool operator==(const StackSpec&) const = default;
};

// "longctx", "hf", "arctic", "torchtitan": the profiles' names (stacks/registry.cpp).
std::string to_string(StackKind k);
std::string to_string(HfAttention a);      // "sdpa", "eager"
std::string to_string(HfCheckpointing c);  // "non-reentrant", "reentrant", "accelerate"
std::string to_string(HfOptimizer o);      // "adamw_torch_fused", "adamw_torch"
std::string to_string(ArcticModel m);      // "liger", "huggingface"
std::string to_string(HfLoss l);           // "transformers", "trl-chunked-nll"
// Each error names `field` and lists the words it takes.
Result<StackKind> parse_stack_kind(const std::string& text, const std::string& field);  // the registry's
Result<HfAttention> parse_hf_attention(const std::string& text, const std::string& field);
Result<HfCheckpointing> parse_hf_checkpointing(const std::string& text, const std::string& field);
Result<HfOptimizer> parse_hf_optimizer(const std::string& text, const std::string& field);
Result<HfLoss> parse_hf_loss(const std::string& text, const std::string& field);
Result<ArcticModel> parse_arctic_model(const std::string& text, const std::string& field);

// The stack's defaults (its profile's, StackProfile::defaults).
StackSpec default_stack(StackKind k);

// "longctx", "hf (sdpa attention, non-reentrant checkpointing, attention_mask passed)", or
// "arctic (liger model, flash_attention_2)": its profile's description.
std::string describe(const StackSpec& s);

}  // namespace longctx
