#include "planner/core/model_config.h"

#include <cmath>
#include <filesystem>
#include <numbers>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "planner/core/json_fields.h"
#include "planner/core/limits.h"
#include "planner/core/param_layout.h"
#include "planner/core/model_config_fields.h"
#include "planner/core/presets.h"
#include "planner/core/units.h"
#include "common/input_file.h"

namespace longctx {

std::int64_t ModelConfig::params_per_layer() const {
  std::int64_t n = 0;
  for (std::int64_t elems : group_param_sizes(ParamGroupKind::Layer, *this)) n += elems;
  return n;
}

std::int64_t ModelConfig::total_params() const {
  return layers * params_per_layer() + embedding_params() + output_params() + hidden;
}

namespace {
bool known_family(const std::string& t) { return t == "llama" || t == "qwen3" || t == "qwen2" || t == "mistral"; }

// What each family's transformers code builds (model_fields::read_biases): a hand-made
// ModelConfig must describe a model a config.json can, so plan files read back unchanged.
Result<bool> validate_family(const ModelConfig& m) {
  if (!known_family(m.model_type))
    return Error::bad_input("model.model_type",
                            fmt::format("'{}' is not a Llama-family decoder; longctx models llama, mistral, qwen2 and "
                                        "qwen3",
                                        m.model_type));
  if (m.qk_norm != (m.model_type == "qwen3"))
    return Error::bad_input("model.model_type", "per-head q/k RMSNorm is qwen3's, and qwen3 always has it");
  const bool qwen2 = m.model_type == "qwen2";
  if (qwen2 ? (!m.qkv_bias || m.o_bias) : m.qkv_bias != m.o_bias)
    return Error::bad_input("model.attention_bias",
                            qwen2 ? "qwen2 has q/k/v biases and no output bias"
                                  : "biases on q/k/v and on o come together (attention_bias)");
  if (m.model_type == "mistral" && m.o_bias) return Error::bad_input("model.attention_bias", "mistral has no biases");
  if (m.model_type != "llama" && m.mlp_bias)
    return Error::bad_input("model.mlp_bias", fmt::format("{} has no MLP biases", m.model_type));
  if (m.model_type == "llama" && m.sliding_window > 0)
    return Error::bad_input("model.sliding_window", "llama has no sliding window");
  return true;
}
}  // namespace

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
  LONGCTX_TRY(auto family, validate_family(m));
  (void)family;
  if (!(m.rope_theta > 0)) return Error::bad_input("model.rope_theta", fmt::format("must be positive, found {}", m.rope_theta));
  if (m.sliding_window < 0) return Error::bad_input("model.sliding_window", "must be at least 1, or absent");
  return true;
}

Result<ModelConfig> model_from_json(const nlohmann::json& j, std::string name) {
  using namespace json_fields;
  if (!j.is_object()) return Error::bad_input("model", "must be a JSON object (a config.json)");
  ModelConfig m;
  m.name = std::move(name);
  const std::string p = "model";
  LONGCTX_TRY(auto dense, model_fields::refuse_unmodelled(j));
  (void)dense;
  if (auto t = j.find("model_type"); t != j.end()) {
    if (!t->is_string() || !known_family(t->get<std::string>()))
      return Error::bad_input("model.model_type",
                              fmt::format("{} is not a Llama-family decoder; longctx models llama, mistral, qwen2 "
                                          "and qwen3",
                                          t->dump()));
    m.model_type = t->get<std::string>();
  }
  m.qk_norm = m.model_type == "qwen3";
  if (auto s = j.find("_name_or_path"); s != j.end() && s->is_string()) m.source = s->get<std::string>();
  LONGCTX_TRY(m.hidden, get_int(j, p, "hidden_size", 1, limits::kMaxHidden));
  LONGCTX_TRY(m.intermediate, get_int(j, p, "intermediate_size", 1, limits::kMaxIntermediate));
  LONGCTX_TRY(m.layers, get_int(j, p, "num_hidden_layers", 1, limits::kMaxLayers));
  LONGCTX_TRY(m.heads, get_int(j, p, "num_attention_heads", 1, limits::kMaxHeads));
  LONGCTX_TRY(m.vocab, get_int(j, p, "vocab_size", 1, limits::kMaxVocab));
  // A key left out takes its family's default, as transformers 4.57's config classes give it
  // (configuration_<family>.py): num_key_value_heads Mistral's 8, Qwen2's and Qwen3's 32, Llama's
  // num_attention_heads; head_dim Qwen3's 128, the others' hidden_size / num_attention_heads. A
  // null num_key_value_heads is num_attention_heads in every family (their `is None` branch); a
  // null head_dim is derived by Llama's config and Mistral's attention, and fails Qwen2's and
  // Qwen3's attention (getattr(config, "head_dim", ...) returns the None): refused there.
  m.kv_heads = m.heads;
  if (!j.contains("num_key_value_heads")) {
    m.kv_heads = model_fields::default_kv_heads(m.model_type, m.heads);
    if (m.heads % m.kv_heads != 0)
      return Error::bad_input("model.num_key_value_heads",
                              fmt::format("left out, and {}'s default (transformers' config class) is {}, which does "
                                          "not divide num_attention_heads = {}; add num_key_value_heads",
                                          m.model_type, m.kv_heads, m.heads));
  }
  if (j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()) {
    LONGCTX_TRY(m.kv_heads, get_int(j, p, "num_key_value_heads", 1, limits::kMaxHeads));
  }
  if (j.contains("head_dim") && j["head_dim"].is_null() && (m.model_type == "qwen2" || m.model_type == "qwen3"))
    return Error::bad_input("model.head_dim", fmt::format("is null, which {}'s attention takes as its head size and "
                                                          "fails on; give head_dim, or leave the key out",
                                                          m.model_type));
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    LONGCTX_TRY(m.head_dim, get_int(j, p, "head_dim", 1, limits::kMaxHeadDim));
  } else if (!j.contains("head_dim") && model_fields::default_head_dim(m.model_type) > 0) {
    m.head_dim = model_fields::default_head_dim(m.model_type);
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
  if (j.contains("max_position_embeddings") && !j["max_position_embeddings"].is_null()) {
    LONGCTX_TRY(m.max_positions, get_int(j, p, "max_position_embeddings", 1, limits::kMaxSeq));
  }
  for (auto read : {model_fields::read_rope, model_fields::read_biases, model_fields::read_sliding_window,
                    model_fields::read_weights_dtype, model_fields::read_use_cache}) {
    LONGCTX_TRY(auto ok, read(j, m));
    (void)ok;
  }
  LONGCTX_TRY(auto valid, validate_model(m));
  (void)valid;
  return m;
}

nlohmann::json model_to_json(const ModelConfig& m) {
  nlohmann::json j = {{"name", m.name},
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
          {"hidden_act", "silu"}};
  model_fields::write(m, j);
  if (!m.source.empty()) j["_name_or_path"] = m.source;
  return j;
}

std::vector<double> rope_inverse_frequencies(const ModelConfig& m) {
  const std::int64_t half = m.head_dim / 2;
  const RopeScaling& r = m.rope_scaling;
  std::vector<double> inv(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i)
    inv[static_cast<std::size_t>(i)] = std::pow(m.rope_theta, -2.0 * double(i) / double(m.head_dim));
  if (r.type == "linear")
    for (double& f : inv) f /= r.factor;
  if (r.type == "llama3") {
    // transformers' modeling_rope_utils.py, _compute_llama3_parameters: wavelengths longer
    // than original/low_freq_factor are slowed by `factor`, shorter than
    // original/high_freq_factor kept, and the band between interpolated smoothly.
    const double old_len = double(r.original_max_positions);
    const double low_wavelen = old_len / r.low_freq_factor, high_wavelen = old_len / r.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f /= r.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        f = (1 - smooth) * f / r.factor + smooth * f;
      }
    }
  }
  return inv;
}

std::string to_string(MaxPositions p) { return p == MaxPositions::Model ? "model" : "extend"; }

Result<MaxPositions> parse_max_positions(const std::string& text, const std::string& field) {
  if (text == "extend") return MaxPositions::Extend;
  if (text == "model") return MaxPositions::Model;
  return Error::bad_input(field, fmt::format("'{}' is unknown; use extend (positions past the model's "
                                             "max_position_embeddings, with RoPE scaling) or model (within it)",
                                             text));
}

Result<bool> check_model_for_seq(const ModelConfig& m, std::int64_t seq, MaxPositions positions) {
  if (m.sliding_window > 0 && m.sliding_window < seq)
    return Error::bad_input("model.sliding_window",
                            fmt::format("{} tokens is shorter than the sequence ({}): sliding-window attention is not "
                                        "modelled; use --seq {} or less",
                                        m.sliding_window, seq, m.sliding_window));
  if (positions == MaxPositions::Model && past_max_positions(m, seq))
    return Error::bad_input("model.max_position_embeddings",
                            fmt::format("{} positions are fewer than the sequence ({}), and --max-positions model keeps "
                                        "to them: use --seq {} or less, or --max-positions extend with RoPE scaling "
                                        "set in the model config",
                                        m.max_positions, seq, m.max_positions));
  return true;
}

bool past_max_positions(const ModelConfig& m, std::int64_t seq) { return m.max_positions > 0 && seq > m.max_positions; }

std::string max_positions_note(const ModelConfig& m, std::int64_t seq) {
  if (!past_max_positions(m, seq)) return "";
  return fmt::format("{} tokens run past the model's max_position_embeddings of {}: positions past it need RoPE "
                     "scaling set in the model config (--max-positions model keeps within it)",
                     format_count(seq), format_count(m.max_positions));
}

std::string describe_model(const ModelConfig& m, std::int64_t seq) {
  std::string s = fmt::format("{}, rope_theta {:g}", m.model_type, m.rope_theta);
  const RopeScaling& r = m.rope_scaling;
  if (r.type == "linear") s += fmt::format(", rope linear x{:g}", r.factor);
  if (r.type == "llama3")
    s += fmt::format(", rope llama3 x{:g} (low {:g}, high {:g}, original {})", r.factor, r.low_freq_factor,
                     r.high_freq_factor, r.original_max_positions);
  std::vector<std::string> biases;
  if (m.qkv_bias) biases.emplace_back("q/k/v");
  if (m.o_bias) biases.emplace_back("o");
  if (m.mlp_bias) biases.emplace_back("mlp");
  s += biases.empty() ? ", no biases" : fmt::format(", biases {}", fmt::join(biases, "+"));
  if (m.sliding_window > 0)
    s += fmt::format(", sliding_window {} {}", m.sliding_window,
                     m.sliding_window >= seq ? fmt::format(">= seq {}: not in effect", seq)
                                             : fmt::format("< seq {}: in effect", seq));
  if (!m.weights_dtype.empty()) s += fmt::format(", checkpoint {}", m.weights_dtype);
  return s;
}

Result<std::string> json_fields::read_file(const std::string& path, const std::string& what) {
  return read_regular_file(path, what, input_limits::kJsonBytes);
}

std::vector<std::string> model_preset_names() { return presets::model_names(); }

}  // namespace longctx
