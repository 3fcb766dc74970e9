#include "planner/core/stack.h"

#include <fmt/format.h>

namespace longctx {

std::string to_string(StackKind k) {
  switch (k) {
    case StackKind::HF: return "hf";
    case StackKind::Arctic: return "arctic";
    case StackKind::Torchtitan: return "torchtitan";
    case StackKind::Longctx: break;
  }
  return "longctx";
}
std::string to_string(HfAttention a) {
  switch (a) {
    case HfAttention::Eager: return "eager";
    case HfAttention::FlashAttention2: return "flash_attention_2";
    case HfAttention::FlashAttention3: return "flash_attention_3";
    case HfAttention::Sdpa: break;
  }
  return "sdpa";
}
std::string to_string(HfCheckpointing c) { return c == HfCheckpointing::Reentrant ? "reentrant" : "non-reentrant"; }
std::string to_string(HfOptimizer o) { return o == HfOptimizer::AdamWTorch ? "adamw_torch" : "adamw_torch_fused"; }
std::string to_string(HfLoss l) { return l == HfLoss::TrlChunkedNll ? "trl-chunked-nll" : "transformers"; }
std::string to_string(ArcticModel m) { return m == ArcticModel::HuggingFace ? "huggingface" : "liger"; }

namespace {

template <typename E, std::size_t N>
Result<E> parse_word(const std::string& text, const std::string& field, const E (&values)[N], const char* words) {
  for (E v : values)
    if (text == to_string(v)) return v;
  return Error::bad_input(field, fmt::format("'{}' is not one of {}", text, words));
}

}  // namespace

Result<StackKind> parse_stack_kind(const std::string& text, const std::string& field) {
  static constexpr StackKind kAll[] = {StackKind::Longctx, StackKind::HF, StackKind::Arctic, StackKind::Torchtitan};
  return parse_word(text, field, kAll, "longctx, hf, arctic, torchtitan");
}

Result<HfAttention> parse_hf_attention(const std::string& text, const std::string& field) {
  static constexpr HfAttention kAll[] = {HfAttention::Sdpa, HfAttention::Eager, HfAttention::FlashAttention2,
                                         HfAttention::FlashAttention3};
  return parse_word(text, field, kAll, "sdpa, eager, flash_attention_2, flash_attention_3");
}

Result<HfCheckpointing> parse_hf_checkpointing(const std::string& text, const std::string& field) {
  static constexpr HfCheckpointing kAll[] = {HfCheckpointing::NonReentrant, HfCheckpointing::Reentrant};
  return parse_word(text, field, kAll, "non-reentrant, reentrant");
}

Result<HfOptimizer> parse_hf_optimizer(const std::string& text, const std::string& field) {
  static constexpr HfOptimizer kAll[] = {HfOptimizer::AdamWTorchFused, HfOptimizer::AdamWTorch};
  return parse_word(text, field, kAll, "adamw_torch_fused, adamw_torch");
}

Result<HfLoss> parse_hf_loss(const std::string& text, const std::string& field) {
  static constexpr HfLoss kAll[] = {HfLoss::Transformers, HfLoss::TrlChunkedNll};
  return parse_word(text, field, kAll, "transformers, trl-chunked-nll");
}

Result<ArcticModel> parse_arctic_model(const std::string& text, const std::string& field) {
  static constexpr ArcticModel kAll[] = {ArcticModel::Liger, ArcticModel::HuggingFace};
  return parse_word(text, field, kAll, "liger, huggingface");
}

StackSpec default_stack(StackKind k) {
  StackSpec s;
  s.kind = k;
  // torchtitan's batches carry no attention_mask (its trainer passes the tokens alone).
  if (k == StackKind::Torchtitan) s.attention_mask = false;
  if (k == StackKind::Arctic) {
    s.attention = HfAttention::FlashAttention2;
    s.checkpointing = HfCheckpointing::Reentrant;
  }
  return s;
}

std::string describe(const StackSpec& s) {
  if (s.kind == StackKind::Longctx) return "longctx";
  if (s.kind == StackKind::Torchtitan)
    return "torchtitan (its llama3 model, or qwen3 for q/k norms; sdpa; FSDP2 across GPUs; fused AdamW)";
  if (s.kind == StackKind::Arctic)
    return fmt::format("arctic ({} model, {}, DeepSpeed ZeRO-3)", to_string(s.arctic_model), to_string(s.attention));
  return fmt::format("hf ({} attention, {} checkpointing, attention_mask {}, {}, {} loss)", to_string(s.attention),
                     to_string(s.checkpointing), s.attention_mask ? "passed" : "not passed", to_string(s.optimizer),
                     to_string(s.loss));
}

}  // namespace longctx
