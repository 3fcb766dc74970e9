#pragma once
// A Llama-family decoder as a Hugging Face config.json describes it.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "longctx/planner/result.h"

namespace longctx {

struct ModelConfig {
  std::string name;
  std::string model_type = "llama";  // "llama" or "qwen3" (qwen3 adds per-head q/k RMSNorm)
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

  std::int64_t q_dim() const { return heads * head_dim; }
  std::int64_t kv_dim() const { return kv_heads * head_dim; }

  // Parameter counts, derived from shapes.
  std::int64_t params_per_layer() const;  // attention + MLP + two RMSNorm weights (+ q/k norms)
  std::int64_t embedding_params() const { return vocab * hidden; }
  std::int64_t output_params() const { return tie_embeddings ? 0 : vocab * hidden; }
  std::int64_t total_params() const;  // layers, embedding, output, final norm
};

// Every rule a model must satisfy: sizes at least 1 and within longctx::limits (so the
// planner's byte counts cannot overflow), GQA groups whole, head_dim even. Errors name the
// config.json field ("model.hidden_size").
Result<bool> validate_model(const ModelConfig& m);

// Reads the fields longctx needs from a config.json object; every missing or wrong-typed
// field is reported by name. The result satisfies validate_model().
Result<ModelConfig> model_from_json(const nlohmann::json& j, std::string name);
nlohmann::json model_to_json(const ModelConfig& m);

// A preset name from models/ ("llama-3.1-8b"), or a path to a config.json.
Result<ModelConfig> load_model(const std::string& name_or_path);
std::vector<std::string> model_preset_names();

}  // namespace longctx
