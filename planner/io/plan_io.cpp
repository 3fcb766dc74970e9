#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "planner/core/json_duplicates.h"
#include "planner/core/json_fields.h"
#include "planner/core/knobs.h"
#include "planner/core/limits.h"
#include "planner/core/plan.h"
#include "planner/core/settings.h"
#include "planner/io/plan_keys.h"
#include "planner/io/plan_text.h"
#include "planner/stacks/profile.h"

#include "common/atomic_file.h"

namespace longctx {

namespace {

// A predicted phase's figures as the plan file holds them, one row each: what phases_to_json
// writes is what phases_from_json accepts (a key only one of them knew was read as absent).
// An optional figure is written where it is set.
struct PhaseFigure {
  const char* key;
  std::int64_t PredictedPhase::*required;                 // null for an optional figure
  std::optional<std::int64_t> PredictedPhase::*optional;  // null for a required one
};
constexpr std::array<PhaseFigure, 3> kPhaseFigures = {{
    {"peak_device_bytes", &PredictedPhase::peak_device_bytes, nullptr},
    {"peak_host_bytes", &PredictedPhase::peak_host_bytes, nullptr},
    {"peak_device_reserved_bytes", nullptr, &PredictedPhase::peak_device_reserved_bytes},
}};
constexpr const char* kPhaseNameKey = "phase";

nlohmann::json phases_to_json(const std::vector<PredictedPhase>& phases) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& ph : phases) {
    nlohmann::json j = {{kPhaseNameKey, ph.phase}};
    for (const PhaseFigure& f : kPhaseFigures) {
      if (f.required != nullptr) j[f.key] = ph.*f.required;
      else if (const auto& value = ph.*f.optional) j[f.key] = *value;
    }
    out.push_back(j);
  }
  return out;
}

// prediction.phases; absent in plan files written before phases were recorded.
Result<std::vector<PredictedPhase>> phases_from_json(const nlohmann::json& prediction) {
  using namespace json_fields;
  std::vector<PredictedPhase> out;
  auto it = prediction.find("phases");
  if (it == prediction.end()) return out;
  if (!it->is_array()) return Error::bad_input("prediction.phases", "must be an array of {phase, peak_device_bytes, peak_host_bytes}");
  const auto is_key = [](const std::string& key) {
    return key == kPhaseNameKey ||
           std::any_of(kPhaseFigures.begin(), kPhaseFigures.end(), [&](const PhaseFigure& f) { return key == f.key; });
  };
  for (std::size_t i = 0; i < it->size(); ++i) {
    const auto& j = (*it)[i];
    const std::string field = fmt::format("prediction.phases[{}]", i);
    if (!j.is_object()) return Error::bad_input(field, "must be an object");
    for (const auto& [key, value] : j.items())
      if (!is_key(key)) {
        std::string keys = kPhaseNameKey;
        for (const PhaseFigure& f : kPhaseFigures) keys += fmt::format(", {}", f.key);
        return Error::bad_input(field + "." + key,
                                fmt::format("is not a key of a predicted phase ({}); check its spelling or remove it", keys));
      }
    PredictedPhase ph;
    LONGCTX_TRY(ph.phase, get_string(j, field, kPhaseNameKey));
    for (const PhaseFigure& f : kPhaseFigures) {
      if (f.required != nullptr) {
        LONGCTX_TRY(ph.*f.required, get_int(j, field, f.key, 0));
      } else if (j.contains(f.key)) {
        LONGCTX_TRY(ph.*f.optional, get_int(j, field, f.key, 0));
      }
    }
    out.push_back(std::move(ph));
  }
  return out;
}

// The settings (settings.h) as the plan file holds them under "train": the dtypes, and the
// stack, written only when it is not the default one (plan files that predate it read as
// longctx's) with the options that stack takes, and the settings added since (optional_in_file:
// --max-positions) when they are not the default. `key` "stack.attention" is train.stack.attention.
nlohmann::json& at_key(nlohmann::json& train, const std::string& key) {
  const auto dot = key.find('.');
  return dot == std::string::npos ? train[key] : train[key.substr(0, dot)][key.substr(dot + 1)];
}

bool in_stack_object(const Setting& s) { return std::string(s.rule.key).rfind("stack.", 0) == 0; }
std::string leaf(const Setting& s) {
  const std::string key = s.rule.key;
  return key.substr(key.rfind('.') + 1);  // npos + 1: the whole key
}

void settings_to_json(const TrainConfig& t, nlohmann::json& train) {
  const StackProfile& stack = stack_profile(t.stack.kind);
  const bool is_default = &stack == stack_profiles().front();
  for (const Setting& s : setting_table()) {
    if ((in_stack_object(s) && is_default) || (s.rule.option && !takes_option(stack, s.id))) continue;
    const KnobValue v = setting_value(t, s.id);
    if (s.rule.optional_in_file && !in_stack_object(s) && v == setting_value(TrainConfig{}, s.id)) continue;
    at_key(train, s.rule.key) = s.kind == KnobKind::Switch ? nlohmann::json(v != 0) : nlohmann::json(format_setting(s.id, v));
  }
}

Result<KnobValue> setting_from_json(const nlohmann::json& object, const std::string& prefix, const Setting& s) {
  using namespace json_fields;
  if (s.kind == KnobKind::Switch) {
    LONGCTX_TRY(const bool b, get_bool(object, prefix, leaf(s)));
    return b ? 1 : 0;
  }
  LONGCTX_TRY(const std::string text, get_string(object, prefix, leaf(s)));
  return parse_setting(s.id, text, s.key);
}

Result<bool> settings_from_json(const nlohmann::json& train, TrainConfig& t) {
  for (const Setting& s : setting_table()) {
    if (in_stack_object(s) || (s.rule.optional_in_file && !train.contains(leaf(s)))) continue;
    LONGCTX_TRY(const KnobValue v, setting_from_json(train, "train", s));
    set_setting(t, s.id, v);
  }
  t.stack = stack_profiles().front()->defaults;
  if (!train.contains("stack")) return true;
  LONGCTX_TRY(const auto object, json_fields::get_object(train, "train", "stack"));
  LONGCTX_TRY(const KnobValue kind, setting_from_json(object, "train.stack", setting(SettingId::stack)));
  const StackProfile& stack = stack_profile(static_cast<StackKind>(kind));
  t.stack = stack.defaults;
  for (const SettingId id : stack.options) {
    const Setting& s = setting(id);
    // An option added after plan files were written: such a file ran with the stack's default.
    if (s.rule.optional_in_file && !object.contains(leaf(s))) continue;
    LONGCTX_TRY(const KnobValue v, setting_from_json(object, "train.stack", s));
    set_setting(t, id, v);
  }
  return true;
}

Result<ClusterSpec> cluster_from_json(const nlohmann::json& cluster) {
  using namespace json_fields;
  ClusterSpec c;
  LONGCTX_TRY(c.shape.nodes, get_int(cluster, "cluster", "nodes", 1, limits::kMaxGpus));
  LONGCTX_TRY(c.shape.gpus_per_node, get_int(cluster, "cluster", "gpus_per_node", 1, limits::kMaxGpusPerNode));
  // "gpus" is written for readers; one that disagrees with nodes x gpus_per_node was edited
  // by hand, and which of the two was meant cannot be told.
  if (cluster.contains("gpus")) {
    LONGCTX_TRY(const auto gpus, get_int(cluster, "cluster", "gpus", 1, limits::kMaxGpus));
    if (gpus != c.shape.world())
      return Error::bad_input("cluster.gpus", fmt::format("{} disagrees with nodes x gpus_per_node = {} x {}; make them "
                                                          "agree (the run starts nodes x gpus_per_node ranks: --nproc {})",
                                                          gpus, c.shape.nodes, c.shape.gpus_per_node,
                                                          c.shape.world()));
  }
  LONGCTX_TRY(auto hw, get_object(cluster, "cluster", "hardware"));
  LONGCTX_TRY(c.hardware, hardware_from_json(hw));
  LONGCTX_TRY(c.device_budget_bytes, get_int(cluster, "cluster", "device_budget_bytes", 1, limits::kMaxBytes));
  LONGCTX_TRY(c.host_budget_bytes_per_node, get_int(cluster, "cluster", "host_budget_bytes_per_node", 1, limits::kMaxBytes));
  if (cluster.contains("expandable_segments")) {
    LONGCTX_TRY(c.expandable_segments, get_bool(cluster, "cluster", "expandable_segments"));
  }
  return c;
}

Result<Prediction> prediction_from_json(const nlohmann::json& pr) {
  using namespace json_fields;
  Prediction out;
  LONGCTX_TRY(out.feasible, get_bool(pr, "prediction", "feasible"));
  LONGCTX_TRY(out.peak_device_bytes, get_int(pr, "prediction", "peak_device_bytes", 0));
  LONGCTX_TRY(out.peak_host_bytes, get_int(pr, "prediction", "peak_host_bytes", 0));
  // Each figure a file leaves out is noted, so that nothing compares the 0 or "" it reads as.
  for (const char* key : {"peak_reserved_bytes", "peak_nvidia_smi_bytes", "reserved_peak_at", "peak_at", "binding",
                          "step_time_s", "tokens_per_s", "mfu", "breakdown"})
    if (!pr.contains(key)) out.not_recorded.emplace_back(key);
  // Absent from plan files written before the reserved figure was predicted.
  if (pr.contains("peak_reserved_bytes")) {
    LONGCTX_TRY(out.peak_reserved_bytes, get_int(pr, "prediction", "peak_reserved_bytes", 0));
  }
  if (pr.contains("peak_nvidia_smi_bytes")) {
    LONGCTX_TRY(out.peak_nvidia_smi_bytes, get_int(pr, "prediction", "peak_nvidia_smi_bytes", 0));
  }
  // The rest, where written (older files lack some), must be what plan -o writes: a figure
  // of another type was read as 0 or '' and then compared as though recorded.
  for (const auto& [key, to] : {std::pair{"reserved_peak_at", &out.reserved_peak_at}, std::pair{"peak_at", &out.peak_at},
                                std::pair{"binding", &out.binding}})
    if (pr.contains(key)) {
      LONGCTX_TRY(*to, get_string(pr, "prediction", key));
    }
  for (const auto& [key, to] : {std::pair{"step_time_s", &out.step_time_s}, std::pair{"tokens_per_s", &out.tokens_per_s},
                                std::pair{"mfu", &out.mfu}})
    if (pr.contains(key)) {
      LONGCTX_TRY(*to, get_number(pr, "prediction", key, /*positive=*/false));
    }
  if (auto b = pr.find("breakdown"); b != pr.end()) {
    if (!b->is_object()) return Error::bad_input("prediction.breakdown", "must be an object of category: bytes");
    for (auto& [k, v] : b->items()) {
      LONGCTX_TRY(out.breakdown[k], get_int(*b, "prediction.breakdown", k, 0));
    }
  }
  LONGCTX_TRY(out.phases, phases_from_json(pr));
  return out;
}

// The derived padding, where written, must be this longctx's: else the file was edited by
// hand or written under another padding rule.
Result<bool> check_derived_padding(const nlohmann::json& train, const Plan& p) {
  using namespace json_fields;
  const std::int64_t padded = padded_seq(p.train.seq, p.parallel);
  const std::int64_t bound = limits::kMaxSeq + 2 * limits::kMaxGpus;
  const auto rule = fmt::format("seq {} padded to a multiple of {}", p.train.seq, sequence_multiple(p.parallel));
  if (train.contains("padded_seq")) {
    LONGCTX_TRY(auto written, get_int(train, "train", "padded_seq", 1, bound));
    if (written != padded)
      return Error::bad_input("train.padded_seq", fmt::format("{} is not {} ({}); remove it or write the plan again",
                                                              written, rule, padded));
  }
  if (train.contains("padding_tokens")) {
    LONGCTX_TRY(auto written, get_int(train, "train", "padding_tokens", 0, bound));
    if (written != padded - p.train.seq)
      return Error::bad_input("train.padding_tokens", fmt::format("{} is not the padding of {} ({}); remove it or write "
                                                                  "the plan again",
                                                                  written, rule, padded - p.train.seq));
  }
  return true;
}

}  // namespace

nlohmann::json plan_to_json(const Plan& p) {
  nlohmann::json breakdown = nlohmann::json::object();
  for (const auto& [k, v] : p.prediction.breakdown) breakdown[k] = v;
  nlohmann::json train = {{"seq", p.train.seq}};
  settings_to_json(p.train, train);
  knobs_to_json(p, "train", train);
  // Derived, for readers: the length the layout runs (parallel_config.h, padded_seq) and its
  // padding per sample, which costs memory and time but no loss.
  train["padded_seq"] = padded_seq(p.train.seq, p.parallel);
  train["padding_tokens"] = padding_tokens(p.train.seq, p.parallel);
  nlohmann::json parallel = nlohmann::json::object();
  knobs_to_json(p, "parallel", parallel);
  // A Mistral without a window is written as plan files always wrote it, without the key (read
  // back as no window, plan_from_json): its model section, and the fingerprints of traces and
  // training checkpoints made from it, stay as they were. A config.json says null
  // (model_to_json), since there a Mistral left without the key slides.
  nlohmann::json model = model_to_json(p.model);
  if (p.model.model_type == "mistral" && model.contains("sliding_window") && model["sliding_window"].is_null())
    model.erase("sliding_window");
  return {
      {"schema", kPlanSchema},
      {"model", model},
      {"cluster",
       {{"nodes", p.cluster.shape.nodes},
        {"gpus_per_node", p.cluster.shape.gpus_per_node},
        {"gpus", p.cluster.shape.world()},
        {"hardware", hardware_to_json(p.cluster.hardware)},
        {"device_budget_bytes", p.cluster.device_budget_bytes},
        {"host_budget_bytes_per_node", p.cluster.host_budget_bytes_per_node},
        {"expandable_segments", p.cluster.expandable_segments}}},
      {"train", train},
      {"parallel", parallel},
      {"prediction",
       {{"feasible", p.prediction.feasible},
        {"peak_device_bytes", p.prediction.peak_device_bytes},
        {"peak_reserved_bytes", p.prediction.peak_reserved_bytes},
        {"peak_nvidia_smi_bytes", p.prediction.peak_nvidia_smi_bytes},
        {"reserved_peak_at", p.prediction.reserved_peak_at},
        {"peak_host_bytes", p.prediction.peak_host_bytes},
        {"breakdown", breakdown},
        {"peak_at", p.prediction.peak_at},
        {"step_time_s", p.prediction.step_time_s},
        {"tokens_per_s", p.prediction.tokens_per_s},
        {"mfu", p.prediction.mfu},
        {"binding", p.prediction.binding},
        {"phases", phases_to_json(p.prediction.phases)}}},
  };
}

Result<Plan> plan_from_json(const nlohmann::json& j) {
  using namespace json_fields;
  if (!j.is_object()) return Error::bad_input("plan", "must be a JSON object");
  // What `max-context --json` prints holds its plan under "plan", beside the answer.
  if (!j.contains("schema") && j.contains("max_tokens") && j.contains("plan") && j["plan"].is_object())
    return Error::bad_input("schema", "missing: this is max-context --json's answer, whose plan is its \"plan\" object; "
                                      "save that object as the plan file, or write one with max-context -o FILE");
  LONGCTX_TRY(auto schema, get_string(j, "", "schema"));
  if (schema != kPlanSchema)
    return Error::bad_input("schema", fmt::format("'{}' is not {}; write the plan again with this longctx (longctx plan ... -o FILE)", schema, kPlanSchema));
  Plan p;
  LONGCTX_TRY(auto model, get_object(j, "", "model"));
  // The name plan -o writes, where written: another type was shown as "model".
  std::string name = "model";
  if (model.contains("name")) {
    if (!model["name"].is_string() || model["name"].get<std::string>().empty())
      return Error::bad_input("model.name", fmt::format("is {}, not a model's name; write the plan again", model["name"].dump()));
    name = model["name"].get<std::string>();
  }
  if (model.contains("_name_or_path") && !model["_name_or_path"].is_string())
    return Error::bad_input("model._name_or_path", fmt::format("is {}, not a Hub id or folder", model["_name_or_path"].dump()));
  // A plan file's Mistral without a window leaves the key out (plan_to_json), which a config.json
  // reads as Mistral's default window: in a plan's model section it means none.
  if (model.contains("model_type") && model["model_type"] == "mistral" && !model.contains("sliding_window"))
    model["sliding_window"] = nullptr;
  LONGCTX_TRY(p.model, model_from_json(model, name));

  LONGCTX_TRY(auto cluster, get_object(j, "", "cluster"));
  LONGCTX_TRY(p.cluster, cluster_from_json(cluster));

  LONGCTX_TRY(auto train, get_object(j, "", "train"));
  LONGCTX_TRY(p.train.seq, get_int(train, "train", "seq", 1, limits::kMaxSeq));
  LONGCTX_TRY(auto settings, settings_from_json(train, p.train));
  (void)settings;
  LONGCTX_TRY(auto train_knobs, knobs_from_json(train, "train", p));
  (void)train_knobs;

  LONGCTX_TRY(auto par, get_object(j, "", "parallel"));
  LONGCTX_TRY(auto parallel_knobs, knobs_from_json(par, "parallel", p));
  (void)parallel_knobs;

  // A misspelt key would leave its knob at the default, silently.
  LONGCTX_TRY(auto known, refuse_unknown_plan_keys(j, p));
  (void)known;
  // What the CLI would refuse, a plan file is refused alike, naming its field.
  LONGCTX_TRY(auto ok, validate(p, FieldNames::PlanKeys));
  (void)ok;
  LONGCTX_TRY(auto padding, check_derived_padding(train, p));
  (void)padding;

  // null, as absent: no prediction recorded (Python's Plan.from_json documents it).
  if (auto it = j.find("prediction"); it != j.end() && !it->is_object() && !it->is_null())
    return Error::bad_input("prediction", fmt::format("must be an object (what plan -o writes), found a {}; remove it to "
                                                      "have the plan predicted afresh",
                                                      it->type_name()));
  if (auto it = j.find("prediction"); it != j.end() && it->is_object()) {
    LONGCTX_TRY(p.prediction, prediction_from_json(*it));
  }
  return p;
}

Result<Plan> plan_from_text(const std::string& text, const std::string& what) {
  LONGCTX_TRY(auto j, json_fields::parse(text, what));  // the nesting bound first: no deep copy below
  LONGCTX_TRY(auto once, refuse_duplicate_keys(text, what));
  (void)once;
  return plan_from_json(j);
}

Result<Plan> read_plan_file(const std::string& path) {
  LONGCTX_TRY(auto text, json_fields::read_file(path, "--plan"));
  return plan_from_text(text, path);
}

std::string plan_file_text(const Plan& p) { return plan_to_json(p).dump(2) + "\n"; }

Result<bool> write_plan_file(const Plan& p, const std::string& path) {
  return write_text_atomically(path, "-o", plan_file_text(p));
}

}  // namespace longctx
