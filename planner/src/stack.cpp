#include "longctx/planner/stack.h"

#include <fmt/format.h>

namespace longctx {

std::string to_string(StackKind k) { return k == StackKind::HF ? "hf" : "longctx"; }
std::string to_string(HfAttention a) {
  switch (a) {
    case HfAttention::Eager: return "eager";
    case HfAttention::FlashAttention2: return "flash_attention_2";
    case HfAttention::Sdpa: break;
  }
  return "sdpa";
}
std::string to_string(HfCheckpointing c) { return c == HfCheckpointing::Reentrant ? "reentrant" : "non-reentrant"; }
std::string to_string(HfOptimizer o) { return o == HfOptimizer::AdamWTorch ? "adamw_torch" : "adamw_torch_fused"; }

namespace {

template <typename E, std::size_t N>
Result<E> parse_word(const std::string& text, const std::string& field, const E (&values)[N], const char* words) {
  for (E v : values)
    if (text == to_string(v)) return v;
  return Error::bad_input(field, fmt::format("'{}' is not one of {}", text, words));
}

}  // namespace

Result<StackKind> parse_stack_kind(const std::string& text, const std::string& field) {
  if (text == "arctic")
    return Error::bad_input(field, "the arctic stack (ArcticTraining) is not modelled yet; give longctx or hf");
  static constexpr StackKind kAll[] = {StackKind::Longctx, StackKind::HF};
  return parse_word(text, field, kAll, "longctx, hf");
}

Result<HfAttention> parse_hf_attention(const std::string& text, const std::string& field) {
  static constexpr HfAttention kAll[] = {HfAttention::Sdpa, HfAttention::Eager, HfAttention::FlashAttention2};
  return parse_word(text, field, kAll, "sdpa, eager, flash_attention_2");
}

Result<HfCheckpointing> parse_hf_checkpointing(const std::string& text, const std::string& field) {
  static constexpr HfCheckpointing kAll[] = {HfCheckpointing::NonReentrant, HfCheckpointing::Reentrant};
  return parse_word(text, field, kAll, "non-reentrant, reentrant");
}

Result<HfOptimizer> parse_hf_optimizer(const std::string& text, const std::string& field) {
  static constexpr HfOptimizer kAll[] = {HfOptimizer::AdamWTorchFused, HfOptimizer::AdamWTorch};
  return parse_word(text, field, kAll, "adamw_torch_fused, adamw_torch");
}

std::string describe(const StackSpec& s) {
  if (s.kind == StackKind::Longctx) return "longctx";
  return fmt::format("hf ({} attention, {} checkpointing, attention_mask {}, {})", to_string(s.attention),
                     to_string(s.checkpointing), s.attention_mask ? "passed" : "not passed", to_string(s.optimizer));
}

}  // namespace longctx
