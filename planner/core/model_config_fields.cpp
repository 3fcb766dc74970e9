#include "planner/core/model_config_fields.h"

#include <cmath>

#include <fmt/format.h>

#include "planner/core/json_fields.h"
#include "planner/core/limits.h"

namespace longctx::model_fields {

using nlohmann::json;

namespace {
const char* const kP = "model";

// A key that is present with a value (JSON null counts as absent, as transformers reads it).
const json* value_of(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

Result<bool> refuse(const std::string& field, const std::string& why) { return Error::bad_input(field, why); }
}  // namespace

Result<bool> refuse_unmodelled(const json& j) {
  // Mixtures of experts: the MLP is another computation with other parameters.
  for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"}) {
    const json* v = value_of(j, key);
    if (v && !(v->is_number() && v->get<double>() == 0))
      return refuse(fmt::format("model.{}", key),
                    fmt::format("{} experts: a mixture-of-experts model; longctx models dense decoders only", v->dump()));
  }
  // null is not absence here: transformers keeps None and ACT2FN has no such activation, so
  // the model is never built (the key left out takes the family's default, "silu").
  if (auto a = j.find("hidden_act"); a != j.end() && a->is_null())
    return refuse("model.hidden_act", "null names no activation (transformers cannot build the MLP); give \"silu\" or leave the key out");
  if (const json* a = value_of(j, "hidden_act")) {
    // transformers' ACT2FN: "swish" is SiLU too.
    if (!a->is_string() || (a->get<std::string>() != "silu" && a->get<std::string>() != "swish"))
      return refuse("model.hidden_act", fmt::format("{} is not SiLU; longctx's MLP is SwiGLU (hidden_act \"silu\")", a->dump()));
  }
  if (value_of(j, "quantization_config"))
    return refuse("model.quantization_config", "quantized weights are not modelled; use the bf16 or fp32 checkpoint's config");
  if (const json* d = value_of(j, "attention_dropout")) {
    if (!d->is_number() || d->get<double>() != 0)
      return refuse("model.attention_dropout", fmt::format("{}: dropout changes the step; longctx models 0.0", d->dump()));
  }
  return true;
}

namespace {
// The key naming the scaling's type: "rope_type" (transformers >= 4.45 and 5) or the older
// "type"; "" when there is none (the default rule).
std::string type_key(const json& s) {
  if (s.contains("rope_type")) return "rope_type";
  return s.contains("type") ? "type" : "";
}

Result<RopeScaling> read_scaling(const json& s, const std::string& field) {
  if (!s.is_object()) return Error::bad_input(field, fmt::format("must be an object or null, found {}", s.dump()));
  RopeScaling r;
  using json_fields::get_int, json_fields::get_number;
  const std::string key = type_key(s);
  if (!key.empty()) {
    LONGCTX_TRY(r.type, json_fields::get_string(s, field, key));
  } else {
    // A scaling that names no rule: transformers cannot build the model (modeling_rope_utils.py
    // looks the missing rope_type up among its rules and fails), and reading it as the default
    // rule would drop its factor without a word. Only rope_theta may stand alone
    // (transformers 5's rope_parameters).
    for (const auto& [k, v] : s.items())
      if (k != "rope_theta")
        return Error::bad_input(field + ".rope_type",
                                fmt::format("missing, but {} gives '{}': name the scaling's rule (default, linear, "
                                            "llama3) as rope_type, or remove it",
                                            field, k));
  }
  if (r.type == "default") return r;
  if (r.type == "linear") {
    LONGCTX_TRY(r.factor, get_number(s, field, "factor"));
    return r;
  }
  if (r.type == "llama3") {
    LONGCTX_TRY(r.factor, get_number(s, field, "factor"));
    LONGCTX_TRY(r.low_freq_factor, get_number(s, field, "low_freq_factor"));
    LONGCTX_TRY(r.high_freq_factor, get_number(s, field, "high_freq_factor"));
    LONGCTX_TRY(r.original_max_positions, get_int(s, field, "original_max_position_embeddings", 1, limits::kMaxSeq));
    if (!(r.high_freq_factor > r.low_freq_factor))
      return Error::bad_input(field + ".high_freq_factor",
                              fmt::format("{} must be above low_freq_factor {} (llama3 smooths between them)",
                                          r.high_freq_factor, r.low_freq_factor));
    return r;
  }
  return Error::bad_input(field + "." + key,
                          fmt::format("'{}' is not modelled (it changes RoPE's angles or attention scale); longctx "
                                      "runs default, linear and llama3",
                                      r.type));
}
}  // namespace

Result<bool> read_rope(const json& j, ModelConfig& m) {
  using json_fields::get_number;
  const json* params = value_of(j, "rope_parameters");  // transformers 5
  const json* scaling = value_of(j, "rope_scaling");    // transformers 4
  if (params && !params->is_object())
    return Error::bad_input("model.rope_parameters", fmt::format("must be an object, found {}", params->dump()));
  if (j.contains("rope_theta")) {
    LONGCTX_TRY(m.rope_theta, get_number(j, kP, "rope_theta"));
  }
  if (params && params->contains("rope_theta")) {
    LONGCTX_TRY(double theta, get_number(*params, "model.rope_parameters", "rope_theta"));
    if (j.contains("rope_theta") && theta != m.rope_theta)
      return Error::bad_input("model.rope_parameters.rope_theta",
                              fmt::format("{} disagrees with rope_theta {}; keep one", theta, m.rope_theta));
    m.rope_theta = theta;
  }
  RopeScaling from_params, from_scaling;
  if (params) {
    LONGCTX_TRY(from_params, read_scaling(*params, "model.rope_parameters"));
  }
  if (scaling) {
    LONGCTX_TRY(from_scaling, read_scaling(*scaling, "model.rope_scaling"));
  }
  if (from_params.type != "default" && from_scaling.type != "default" && !(from_params == from_scaling))
    return Error::bad_input("model.rope_scaling", "disagrees with rope_parameters; keep one");
  m.rope_scaling = from_params.type != "default" ? from_params : from_scaling;
  return true;
}

Result<bool> read_biases(const json& j, ModelConfig& m) {
  bool attention = false, mlp = false;
  if (value_of(j, "attention_bias")) {
    LONGCTX_TRY(attention, json_fields::get_bool(j, kP, "attention_bias"));
  }
  if (value_of(j, "mlp_bias")) {
    LONGCTX_TRY(mlp, json_fields::get_bool(j, kP, "mlp_bias"));
  }
  const std::string& t = m.model_type;
  // transformers' modeling_<family>.py: Llama reads both keys; Qwen3 reads attention_bias
  // (q, k, v and o) and its MLP has no bias; Qwen2's q/k/v always carry a bias and its o and
  // MLP never do; Mistral has none. A key its family never reads, set true, is a config for
  // another model: refused rather than dropped.
  if ((t == "qwen2" || t == "mistral") && attention)
    return Error::bad_input("model.attention_bias",
                            fmt::format("true, but transformers' {} attention reads no attention_bias; remove it", t));
  if (t != "llama" && mlp)
    return Error::bad_input("model.mlp_bias", fmt::format("true, but transformers' {} MLP has no bias; remove it", t));
  m.qkv_bias = attention || t == "qwen2";
  m.o_bias = attention;
  m.mlp_bias = mlp;
  return true;
}

std::int64_t default_kv_heads(const std::string& model_type, std::int64_t heads) {
  if (model_type == "mistral") return 8;                           // MistralConfig(num_key_value_heads=8)
  if (model_type == "qwen2" || model_type == "qwen3") return 32;  // Qwen2Config / Qwen3Config(num_key_value_heads=32)
  return heads;                                                    // LlamaConfig: None -> num_attention_heads
}

std::int64_t default_head_dim(const std::string& model_type) {
  return model_type == "qwen3" ? 128 : 0;  // Qwen3Config(head_dim=128); the others derive it
}

std::int64_t default_sliding_window(const std::string& model_type) {
  // MistralConfig, Qwen2Config and Qwen3Config(sliding_window=4096); Llama has none.
  return model_type == "llama" ? 0 : 4096;
}

// Whether some layer of the model attends within its sliding window (transformers 4.57):
// Mistral's every layer whenever sliding_window is not null; Qwen2's and Qwen3's a layer whose
// layer_types entry is sliding_attention, and only under use_sliding_window (else their config
// sets sliding_window to None, configuration_qwen2.py / configuration_qwen3.py), the layers
// from max_window_layers (default 28) on where layer_types is not given.
Result<bool> read_sliding_window(const json& j, ModelConfig& m) {
  const std::string& t = m.model_type;
  if (t == "llama") return true;  // transformers' Llama has no sliding window
  const bool mistral = t == "mistral";
  bool use = false;
  if (value_of(j, "use_sliding_window")) {
    LONGCTX_TRY(use, json_fields::get_bool(j, kP, "use_sliding_window"));
  }
  bool some_layer_slides = mistral;
  if (!mistral && !value_of(j, "layer_types")) {
    std::int64_t first_sliding = 28;
    if (value_of(j, "max_window_layers")) {
      LONGCTX_TRY(first_sliding, json_fields::get_int(j, kP, "max_window_layers", 0, std::int64_t{1} << 30));
    }
    some_layer_slides = first_sliding < m.layers;
  }
  if (const json* types = value_of(j, "layer_types")) {  // transformers 5: one entry per layer
    if (!types->is_array()) return Error::bad_input("model.layer_types", "must be an array of strings");
    // transformers refuses another count (configuration_utils.py, layer_type_validation).
    if (static_cast<std::int64_t>(types->size()) != m.layers)
      return Error::bad_input("model.layer_types", fmt::format("{} entries for {} layers (num_hidden_layers); give one "
                                                               "per layer",
                                                               types->size(), m.layers));
    for (const json& l : *types) {
      if (l == "sliding_attention") some_layer_slides = true;
      else if (l != "full_attention")
        return Error::bad_input("model.layer_types", fmt::format("{} is neither full_attention nor sliding_attention", l.dump()));
    }
  }
  const bool in_effect = mistral || (use && some_layer_slides);
  if (!in_effect) return true;
  // Left out, the family's default window; null, none.
  if (!j.contains("sliding_window")) {
    m.sliding_window = default_sliding_window(t);
    return true;
  }
  if (!value_of(j, "sliding_window")) return true;
  LONGCTX_TRY(m.sliding_window, json_fields::get_int(j, kP, "sliding_window", 1, limits::kMaxSeq));
  return true;
}

Result<bool> read_weights_dtype(const json& j, ModelConfig& m) {
  for (const char* key : {"torch_dtype", "dtype"}) {  // transformers 4, transformers 5
    const json* v = value_of(j, key);
    if (!v) continue;
    const std::string field = fmt::format("model.{}", key);
    if (!v->is_string()) return Error::bad_input(field, fmt::format("must be a string, found {}", v->dump()));
    const std::string d = v->get<std::string>();
    if (d.starts_with("float8") || d.starts_with("float4") || d.starts_with("int"))
      return Error::bad_input(field, fmt::format("'{}' weights are quantized; longctx trains bf16 or fp32: use that checkpoint", d));
    if (d != "bfloat16" && d != "float16" && d != "float32")
      return Error::bad_input(field, fmt::format("'{}' is not a dtype longctx knows; use bfloat16, float16 or float32", d));
    if (!m.weights_dtype.empty() && m.weights_dtype != d)
      return Error::bad_input(field, fmt::format("'{}' disagrees with torch_dtype '{}'; keep one", d, m.weights_dtype));
    m.weights_dtype = d;
  }
  return true;
}

Result<bool> read_use_cache(const json& j, ModelConfig& m) {
  const auto it = j.find("use_cache");
  if (it == j.end()) return true;
  // null is kept as None, which the model's forward reads as no cache (LlamaModel.forward:
  // `if use_cache and past_key_values is None`).
  if (it->is_null()) {
    m.use_cache = false;
    return true;
  }
  if (!it->is_boolean())
    return Error::bad_input("model.use_cache", fmt::format("must be true or false, found {}", it->dump()));
  m.use_cache = it->get<bool>();
  return true;
}

void write(const ModelConfig& m, json& j) {
  j["rope_theta"] = m.rope_theta;
  const RopeScaling& r = m.rope_scaling;
  if (r.type == "linear") j["rope_scaling"] = {{"rope_type", r.type}, {"factor", r.factor}};
  if (r.type == "llama3")
    j["rope_scaling"] = {{"rope_type", r.type},
                         {"factor", r.factor},
                         {"low_freq_factor", r.low_freq_factor},
                         {"high_freq_factor", r.high_freq_factor},
                         {"original_max_position_embeddings", r.original_max_positions}};
  // Qwen2's q/k/v biases follow from its model_type; the others' from attention_bias.
  j["attention_bias"] = m.o_bias;
  j["mlp_bias"] = m.mlp_bias;
  // Mistral slides unless its window is null: a Mistral without one says so.
  if (m.sliding_window == 0 && m.model_type == "mistral") j["sliding_window"] = nullptr;
  if (m.sliding_window > 0) {
    j["sliding_window"] = m.sliding_window;
    // Written as sliding from the first layer: the planner reads only that some layer slides
    // (lengths past the window are refused), and reads this back so.
    if (m.model_type != "mistral") {
      j["use_sliding_window"] = true;
      j["max_window_layers"] = 0;
    }
  }
  if (m.max_positions > 0) j["max_position_embeddings"] = m.max_positions;
  if (!m.weights_dtype.empty()) j["torch_dtype"] = m.weights_dtype;
  // Not use_cache: a run setting, which a plan keeps as train.stack.use_cache (where the hf
  // stack reads it); written here it would change the model's fingerprint, which traces and
  // training checkpoints name, for stacks that never read it.
}

}  // namespace longctx::model_fields
