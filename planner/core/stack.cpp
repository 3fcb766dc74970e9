// The words of the stacks' options (the stack words are the registry's).
#include "planner/core/stack.h"

#include <fmt/format.h>

namespace longctx {

std::string to_string(HfAttention a) {
  switch (a) {
    case HfAttention::Eager: return "eager";
    case HfAttention::FlashAttention2: return "flash_attention_2";
    case HfAttention::FlashAttention3: return "flash_attention_3";
    case HfAttention::Sdpa: break;
  }
  return "sdpa";
}
std::string to_string(HfCheckpointing c) {
  switch (c) {
    case HfCheckpointing::Reentrant: return "reentrant";
    case HfCheckpointing::Accelerate: return "accelerate";
    case HfCheckpointing::NonReentrant: break;
  }
  return "non-reentrant";
}
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

Result<HfAttention> parse_hf_attention(const std::string& text, const std::string& field) {
  static constexpr HfAttention kAll[] = {HfAttention::Sdpa, HfAttention::Eager, HfAttention::FlashAttention2,
                                         HfAttention::FlashAttention3};
  return parse_word(text, field, kAll, "sdpa, eager, flash_attention_2, flash_attention_3");
}

Result<HfCheckpointing> parse_hf_checkpointing(const std::string& text, const std::string& field) {
  static constexpr HfCheckpointing kAll[] = {HfCheckpointing::NonReentrant, HfCheckpointing::Reentrant,
                                             HfCheckpointing::Accelerate};
  return parse_word(text, field, kAll, "non-reentrant, reentrant, accelerate");
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

}  // namespace longctx
