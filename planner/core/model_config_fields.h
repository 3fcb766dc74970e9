#pragma once
// The parts of a config.json beyond the shapes, each read faithfully or refused by name:
// RoPE (transformers 4 rope_theta/rope_scaling, transformers 5 rope_parameters), biases per
// family, the sliding window, the weights' dtype, and the fields of models longctx does not
// model (mixtures of experts, other activations, quantized weights, attention dropout).
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/core/model_config.h"
#include "common/result.h"

namespace longctx::model_fields {

// Fields that would make the step another model's: refused with the field's name.
Result<bool> refuse_unmodelled(const nlohmann::json& j);
// REQUIRES: m.model_type is set. Fills m.rope_theta and m.rope_scaling.
Result<bool> read_rope(const nlohmann::json& j, ModelConfig& m);
// REQUIRES: m.model_type is set. Fills m.qkv_bias, m.o_bias, m.mlp_bias.
Result<bool> read_biases(const nlohmann::json& j, ModelConfig& m);
// REQUIRES: m.model_type is set. Fills m.sliding_window.
Result<bool> read_sliding_window(const nlohmann::json& j, ModelConfig& m);

// The family's value of a key a config.json leaves out (transformers 4.57's config classes):
// num_key_value_heads (`heads`: Llama's, which defaults to num_attention_heads), head_dim (0:
// hidden_size / num_attention_heads), sliding_window (0: no window).
std::int64_t default_kv_heads(const std::string& model_type, std::int64_t heads);
std::int64_t default_head_dim(const std::string& model_type);
std::int64_t default_sliding_window(const std::string& model_type);
Result<bool> read_weights_dtype(const nlohmann::json& j, ModelConfig& m);
// Fills m.use_cache.
Result<bool> read_use_cache(const nlohmann::json& j, ModelConfig& m);

// The transformers-4 config.json keys for what the four readers above filled.
void write(const ModelConfig& m, nlohmann::json& j);

}  // namespace longctx::model_fields
