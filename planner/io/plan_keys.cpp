#include "planner/io/plan_keys.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "planner/core/json_fields.h"
#include "planner/core/knobs.h"
#include "planner/core/settings.h"
#include "planner/stacks/profile.h"

namespace longctx {
namespace {

using Keys = std::vector<std::string>;

// The first key of `object` not in `known`, named "section.key".
Result<bool> only_known(const nlohmann::json& object, const std::string& section, const Keys& known) {
  return json_fields::refuse_unknown_keys(object, section, known,
                                          section.empty() ? "in a plan file" : "under " + section);
}

// model_to_json's keys (the model's source, "_name_or_path", among them) and the config.json
// spellings model_from_json also reads (planner/core/model_config.cpp, model_config_fields.cpp).
const Keys kModelKeys = {"name", "_name_or_path", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
                         "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
                         "tie_word_embeddings", "rms_norm_eps", "hidden_act", "rope_theta", "rope_scaling",
                         "rope_parameters", "attention_bias", "mlp_bias", "sliding_window", "use_sliding_window",
                         "max_window_layers", "layer_types", "torch_dtype", "dtype", "num_experts", "num_local_experts", "n_routed_experts",
                         "quantization_config", "attention_dropout", "max_position_embeddings", "use_cache"};
// cluster.hardware's keys are refused by its reader (hardware_from_json), before these.
const Keys kClusterKeys = {"nodes", "gpus_per_node", "gpus", "hardware", "device_budget_bytes",
                           "host_budget_bytes_per_node", "expandable_segments"};
// "search", "exports" and "positions" (plan --json) and "ladder" (max-context --json's plan, read
// by explain --html) are written beside a plan by the commands whose output users save as plan
// files; they are derived from the plan, so reading them back ignores them.
const Keys kTopKeys = {"schema", "model", "cluster", "train", "parallel", "prediction", "search", "exports", "positions",
                       "ladder"};

std::string leaf_of(const char* key) {
  const std::string k = key;
  return k.substr(k.rfind('.') + 1);  // npos + 1: the whole key
}

Keys knob_keys(const std::string& section) {
  Keys out;
  for (const Knob& k : knob_table())
    if (section == k.section) out.emplace_back(k.name);
  return out;
}

Keys train_keys() {
  Keys out = knob_keys("train");
  for (const char* derived : {"seq", "padded_seq", "padding_tokens", "stack"}) out.emplace_back(derived);
  for (const Setting& s : setting_table())
    if (std::string(s.rule.key).find('.') == std::string::npos) out.emplace_back(s.rule.key);
  return out;
}

// The plan's stack's options, by their keys under train.stack.
Keys stack_keys(const Plan& p) {
  Keys out = {leaf_of(setting(SettingId::stack).rule.key)};
  for (const SettingId id : stack_profile(p.train.stack.kind).options) out.push_back(leaf_of(setting(id).rule.key));
  return out;
}

// Every key plan_to_json writes under "prediction" (it writes them all, whatever the plan).
Keys prediction_keys(const Plan& p) {
  Keys out;
  const nlohmann::json written = plan_to_json(p);
  for (const auto& [key, value] : written.at("prediction").items()) out.push_back(key);
  return out;
}

}  // namespace

Result<bool> refuse_unknown_plan_keys(const nlohmann::json& j, const Plan& p) {
  // The object under `key`, or nullptr (a missing section is its reader's to refuse).
  const auto sub = [](const nlohmann::json* parent, const char* key) -> const nlohmann::json* {
    if (parent == nullptr || !parent->is_object()) return nullptr;
    const auto it = parent->find(key);
    return it == parent->end() ? nullptr : &*it;
  };
  const nlohmann::json* cluster = sub(&j, "cluster");
  const nlohmann::json* train = sub(&j, "train");
  const std::vector<std::tuple<const nlohmann::json*, const char*, Keys>> sections = {
      {&j, "", kTopKeys},
      {sub(&j, "model"), "model", kModelKeys},
      {cluster, "cluster", kClusterKeys},
      {train, "train", train_keys()},
      {sub(train, "stack"), "train.stack", stack_keys(p)},
      {sub(&j, "parallel"), "parallel", knob_keys("parallel")},
      {sub(&j, "prediction"), "prediction", prediction_keys(p)},
  };
  for (const auto& [object, name, known] : sections) {
    if (object == nullptr) continue;
    LONGCTX_TRY(auto ok, only_known(*object, name, known));
    (void)ok;
  }
  return true;
}

}  // namespace longctx
