#include "longctx/planner/model_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "json_fields.h"
#include "longctx/planner/limits.h"
#include "longctx/planner/presets.h"

namespace longctx {

std::int64_t ModelConfig::params_per_layer() const {
  const std::int64_t attn = hidden * q_dim() + 2 * hidden * kv_dim() + q_dim() * hidden;
  const std::int64_t mlp = 3 * hidden * intermediate;
  const std::int64_t norms = 2 * hidden + (qk_norm ? 2 * head_dim : 0);
  return attn + mlp + norms;
}

std::int64_t ModelConfig::total_params() const {
  return layers * params_per_layer() + embedding_params() + output_params() + hidden;
}

Result<bool> validate_model(const ModelConfig& m) {
  struct Size { const char* field; std::int64_t value, max; };
  const Size sizes[] = {
      {"model.hidden_size", m.hidden, limits::kMaxHidden},
      {"model.intermediate_size", m.intermediate, limits::kMaxIntermediate},
      {"model.num_hidden_layers", m.layers, limits::kMaxLayers},
      {"model.num_attention_heads", m.heads, limits::kMaxHeads},
      {"model.num_key_value_heads", m.kv_heads, limits::kMaxHeads},
      {"model.head_dim", m.head_dim, limits::kMaxHeadDim},
      {"model.vocab_size", m.vocab, limits::kMaxVocab},
  };
  for (const Size& s : sizes) {
    if (s.value < 1) return Error::bad_input(s.field, fmt::format("must be at least 1, found {}", s.value));
    if (s.value > s.max)
      return Error::bad_input(s.field, fmt::format("{} is above longctx's bound of {} (real models stay far below it); "
                                                   "check the config",
                                                   s.value, s.max));
  }
  if (m.heads % m.kv_heads != 0)
    return Error::bad_input("model.num_key_value_heads",
                            fmt::format("{} does not divide num_attention_heads = {}; GQA needs "
                                        "whole query groups",
                                        m.kv_heads, m.heads));
  if (m.head_dim % 2 != 0)
    return Error::bad_input("model.head_dim", fmt::format("{} is odd; RoPE rotates pairs, so it must be even", m.head_dim));
  return true;
}

Result<ModelConfig> model_from_json(const nlohmann::json& j, std::string name) {
  using namespace json_fields;
  if (!j.is_object()) return Error::bad_input("model", "must be a JSON object (a config.json)");
  ModelConfig m;
  m.name = std::move(name);
  const std::string p = "model";
  if (auto t = j.find("model_type"); t != j.end() && t->is_string()) m.model_type = t->get<std::string>();
  if (m.model_type != "llama" && m.model_type != "qwen3" && m.model_type != "qwen2" &&
      m.model_type != "mistral")
    return Error::bad_input("model.model_type",
                            fmt::format("'{}' is not a Llama-family decoder; longctx models llama, "
                                        "mistral, qwen2 and qwen3",
                                        m.model_type));
  m.qk_norm = m.model_type == "qwen3";
  LONGCTX_TRY(m.hidden, get_int(j, p, "hidden_size", 1, limits::kMaxHidden));
  LONGCTX_TRY(m.intermediate, get_int(j, p, "intermediate_size", 1, limits::kMaxIntermediate));
  LONGCTX_TRY(m.layers, get_int(j, p, "num_hidden_layers", 1, limits::kMaxLayers));
  LONGCTX_TRY(m.heads, get_int(j, p, "num_attention_heads", 1, limits::kMaxHeads));
  LONGCTX_TRY(m.vocab, get_int(j, p, "vocab_size", 1, limits::kMaxVocab));
  m.kv_heads = m.heads;
  if (j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()) {
    LONGCTX_TRY(m.kv_heads, get_int(j, p, "num_key_value_heads", 1, limits::kMaxHeads));
  }
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    LONGCTX_TRY(m.head_dim, get_int(j, p, "head_dim", 1, limits::kMaxHeadDim));
  } else {
    if (m.hidden % m.heads != 0)
      return Error::bad_input("model.head_dim",
                              fmt::format("missing, and hidden_size {} is not a multiple of "
                                          "num_attention_heads {}; add head_dim",
                                          m.hidden, m.heads));
    m.head_dim = m.hidden / m.heads;
  }
  if (j.contains("tie_word_embeddings")) {
    LONGCTX_TRY(m.tie_embeddings, get_bool(j, p, "tie_word_embeddings"));
  }
  if (j.contains("rms_norm_eps")) {
    LONGCTX_TRY(m.rms_norm_eps, get_number(j, p, "rms_norm_eps"));
  }
  if (j.contains("rope_theta")) {
    LONGCTX_TRY(m.rope_theta, get_number(j, p, "rope_theta"));
  }
  LONGCTX_TRY(auto valid, validate_model(m));
  (void)valid;
  return m;
}

nlohmann::json model_to_json(const ModelConfig& m) {
  return {{"name", m.name},
          {"model_type", m.model_type},
          {"hidden_size", m.hidden},
          {"intermediate_size", m.intermediate},
          {"num_hidden_layers", m.layers},
          {"num_attention_heads", m.heads},
          {"num_key_value_heads", m.kv_heads},
          {"head_dim", m.head_dim},
          {"vocab_size", m.vocab},
          {"tie_word_embeddings", m.tie_embeddings},
          {"rms_norm_eps", m.rms_norm_eps},
          {"rope_theta", m.rope_theta}};
}

Result<std::string> json_fields::read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::bad_input(what, fmt::format("cannot read '{}': check the path", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<ModelConfig> load_model(const std::string& name_or_path) {
  if (auto text = presets::model(name_or_path)) {
    LONGCTX_TRY(auto j, json_fields::parse(std::string(*text), "--model"));
    return model_from_json(j, name_or_path);
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(name_or_path, ec))
    return Error::bad_input("--model",
                            fmt::format("'{}' is neither a preset nor a config.json file; presets: {}",
                                        name_or_path, fmt::join(model_preset_names(), ", ")));
  LONGCTX_TRY(auto text, json_fields::read_file(name_or_path, "--model"));
  LONGCTX_TRY(auto j, json_fields::parse(text, name_or_path));
  fs::path path(name_or_path);
  std::string name = path.stem().string();
  if (name == "config" && path.has_parent_path()) name = path.parent_path().filename().string();
  return model_from_json(j, name);
}

std::vector<std::string> model_preset_names() { return presets::model_names(); }

}  // namespace longctx
