#pragma once
// A Llama-family decoder as a Hugging Face config.json describes it (transformers 4 and 5
// layouts). Every field that changes the step's memory or math is either modelled here or
// refused by model_from_json with the field's name: nothing is read and then ignored.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/result.h"

namespace longctx {

// RoPE's frequency rule: inverse frequencies theta^(-2i/d), then the scaling's rewrite.
// transformers' modeling_rope_utils.py: "default", "linear" (_compute_linear_scaling_parameters)
// and "llama3" (_compute_llama3_parameters) keep the attention scale at 1, so they change
// the angles only; the other types (dynamic, yarn, longrope) are refused.
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0;                     // linear, llama3
  double low_freq_factor = 1.0;            // llama3
  double high_freq_factor = 4.0;           // llama3
  std::int64_t original_max_positions = 0; // llama3: original_max_position_embeddings
  bool operator==(const RopeScaling&) const = default;
};

struct ModelConfig {
  std::string name;
  // Where a training stack loads the model from (config.json's "_name_or_path"): the Hugging
  // Face Hub id given or a preset's, or the absolute folder of the config.json read; "" if none.
  std::string source;
  // "llama", "mistral", "qwen2" or "qwen3" (qwen3 adds per-head q/k RMSNorm).
  std::string model_type = "llama";
  std::int64_t hidden = 0;
  std::int64_t intermediate = 0;
  std::int64_t layers = 0;
  std::int64_t heads = 0;     // query heads
  std::int64_t kv_heads = 0;  // key/value heads (GQA); divides heads
  std::int64_t head_dim = 0;  // hidden / heads unless the config says otherwise
  std::int64_t vocab = 0;
  bool tie_embeddings = false;
  bool qk_norm = false;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // Biases (transformers' Linear(bias=...)): q/k/v projections (Llama and Qwen3
  // attention_bias, always on Qwen2), the output projection (attention_bias; never on Qwen2),
  // gate/up/down (Llama mlp_bias).
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  // The sliding attention window in tokens when the config puts one in effect, else 0. A step
  // whose sequence is longer is refused (check_model_for_seq); a window >= seq is plain
  // causal attention.
  std::int64_t sliding_window = 0;
  // config.json's max_position_embeddings: the positions the checkpoint was trained with, or 0
  // when the config gives none. Long-context training extends RoPE past it (MaxPositions).
  std::int64_t max_positions = 0;
  std::string weights_dtype;  // torch_dtype / dtype: "bfloat16", "float16" or "float32"; "" if unset
  // config.json's use_cache (true when left out, as every family's config class gives it): the
  // model keeps a k/v cache in a forward unless told otherwise, which `--stack hf` plans.
  bool use_cache = true;

  std::int64_t q_dim() const { return heads * head_dim; }
  std::int64_t kv_dim() const { return kv_heads * head_dim; }

  // Parameter counts, derived from shapes.
  std::int64_t params_per_layer() const;  // attention + MLP + two RMSNorm weights (+ q/k norms)
  std::int64_t embedding_params() const { return vocab * hidden; }
  std::int64_t output_params() const { return tie_embeddings ? 0 : vocab * hidden; }
  std::int64_t total_params() const;  // layers, embedding, output, final norm
};

// RoPE's d/2 inverse frequencies under m's rope_theta and rope_scaling.
std::vector<double> rope_inverse_frequencies(const ModelConfig& m);

// Whether a step may use positions past the model's max_position_embeddings (the
// --max-positions setting): Extend (the default) plans them, as long-context training does
// with RoPE scaling set in the model config; Model holds --seq to the model's limit.
enum class MaxPositions { Extend, Model };
std::string to_string(MaxPositions p);  // "extend", "model"
Result<MaxPositions> parse_max_positions(const std::string& text, const std::string& field);

// The rules that depend on the step's sequence length: a sliding window shorter than seq is
// refused (longctx models full causal attention only), naming model.sliding_window; under
// MaxPositions::Model a seq past max_position_embeddings is refused, naming that field.
Result<bool> check_model_for_seq(const ModelConfig& m, std::int64_t seq, MaxPositions positions = MaxPositions::Extend);

// Whether seq runs positions past the model's max_position_embeddings (the config gives one).
bool past_max_positions(const ModelConfig& m, std::int64_t seq);
// What positions past the limit need, for answers past it under MaxPositions::Extend:
// "131,072 tokens (model.max_position_embeddings) are exceeded: positions past it need RoPE
// scaling set in the model config"; "" when seq is within it.
std::string max_positions_note(const ModelConfig& m, std::int64_t seq);

// One line of what was read beyond the shapes: rope theta and scaling, biases, the weights'
// dtype, and the sliding window against seq (whether it is in effect).
std::string describe_model(const ModelConfig& m, std::int64_t seq);

// Every rule a model must satisfy: sizes at least 1 and within longctx::limits (so the
// planner's byte counts cannot overflow), GQA groups whole, head_dim even. Errors name the
// config.json field ("model.hidden_size").
Result<bool> validate_model(const ModelConfig& m);

// Reads the fields longctx needs from a config.json object; every missing or wrong-typed
// field is reported by name. The result satisfies validate_model().
Result<ModelConfig> model_from_json(const nlohmann::json& j, std::string name);
nlohmann::json model_to_json(const ModelConfig& m);

// A path to a config.json or to a model directory holding one (named after the directory), a
// preset name from models/ ("llama-3.1-8b", any case) or a preset's Hub id, or a Hub id in the
// local Hugging Face cache (hub_cache.h; never the network). planner/core/model_lookup.cpp.
Result<ModelConfig> load_model(const std::string& name_or_path);
// The file load_model reads for `name_or_path`: the path itself, a folder's config.json, or a
// Hub id's config.json in the local cache; empty for a preset or a name it cannot resolve.
// What an output must not replace (a plan written over the model's config.json).
std::string model_config_file(const std::string& name_or_path);
std::vector<std::string> model_preset_names();

}  // namespace longctx
