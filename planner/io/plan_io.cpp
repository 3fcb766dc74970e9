#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "planner/core/json_fields.h"
#include "planner/core/knobs.h"
#include "planner/core/limits.h"
#include "planner/core/plan.h"

#include "common/atomic_file.h"

namespace longctx {

namespace {

nlohmann::json phases_to_json(const std::vector<PredictedPhase>& phases) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& ph : phases) {
    nlohmann::json j = {{"phase", ph.phase}, {"peak_device_bytes", ph.peak_device_bytes}, {"peak_host_bytes", ph.peak_host_bytes}};
    if (ph.peak_device_reserved_bytes) j["peak_device_reserved_bytes"] = *ph.peak_device_reserved_bytes;
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
  for (std::size_t i = 0; i < it->size(); ++i) {
    const auto& j = (*it)[i];
    const std::string field = fmt::format("prediction.phases[{}]", i);
    if (!j.is_object()) return Error::bad_input(field, "must be an object");
    PredictedPhase ph;
    LONGCTX_TRY(ph.phase, get_string(j, field, "phase"));
    LONGCTX_TRY(ph.peak_device_bytes, get_int(j, field, "peak_device_bytes", 0));
    LONGCTX_TRY(ph.peak_host_bytes, get_int(j, field, "peak_host_bytes", 0));
    if (j.contains("peak_device_reserved_bytes")) {
      LONGCTX_TRY(ph.peak_device_reserved_bytes, get_int(j, field, "peak_device_reserved_bytes", 0));
    }
    out.push_back(std::move(ph));
  }
  return out;
}

}  // namespace

nlohmann::json plan_to_json(const Plan& p) {
  nlohmann::json breakdown = nlohmann::json::object();
  for (const auto& [k, v] : p.prediction.breakdown) breakdown[k] = v;
  nlohmann::json train = {{"seq", p.train.seq}, {"dtype", to_string(p.train.dtype)}, {"grad_dtype", to_string(p.train.grad_dtype)}};
  knobs_to_json(p, "train", train);
  // The stack, written only when it is not longctx's own runtime (plan files that predate it
  // read as longctx's), with the options that stack has.
  const StackSpec& st = p.train.stack;
  if (st.kind == StackKind::HF)
    train["stack"] = {{"name", to_string(st.kind)},
                      {"attention", to_string(st.attention)},
                      {"checkpointing", to_string(st.checkpointing)},
                      {"attention_mask", st.attention_mask},
                      {"optimizer", to_string(st.optimizer)},
                      {"loss", to_string(st.loss)}};
  if (st.kind == StackKind::Torchtitan) train["stack"] = {{"name", to_string(st.kind)}};
  if (st.kind == StackKind::Arctic)
    train["stack"] = {{"name", to_string(st.kind)}, {"attention", to_string(st.attention)},
                      {"arctic_model", to_string(st.arctic_model)}};
  // Derived, for readers: the length the layout runs (parallel_config.h, padded_seq) and its
  // padding per sample, which costs memory and time but no loss.
  train["padded_seq"] = padded_seq(p.train.seq, p.parallel);
  train["padding_tokens"] = padding_tokens(p.train.seq, p.parallel);
  nlohmann::json parallel = nlohmann::json::object();
  knobs_to_json(p, "parallel", parallel);
  return {
      {"schema", kPlanSchema},
      {"model", model_to_json(p.model)},
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
  LONGCTX_TRY(auto schema, get_string(j, "", "schema"));
  if (schema != kPlanSchema)
    return Error::bad_input("schema", fmt::format("'{}' is not {}; write the plan again with this longctx (longctx plan ... -o FILE)", schema, kPlanSchema));
  Plan p;
  LONGCTX_TRY(auto model, get_object(j, "", "model"));
  std::string name = model.contains("name") && model["name"].is_string() ? model["name"].get<std::string>() : "model";
  LONGCTX_TRY(p.model, model_from_json(model, name));

  LONGCTX_TRY(auto cluster, get_object(j, "", "cluster"));
  LONGCTX_TRY(p.cluster.shape.nodes, get_int(cluster, "cluster", "nodes", 1, limits::kMaxGpus));
  LONGCTX_TRY(p.cluster.shape.gpus_per_node, get_int(cluster, "cluster", "gpus_per_node", 1, limits::kMaxGpusPerNode));
  // "gpus" is written for readers; one that disagrees with nodes x gpus_per_node was edited
  // by hand, and which of the two was meant cannot be told.
  if (cluster.contains("gpus")) {
    LONGCTX_TRY(const auto gpus, get_int(cluster, "cluster", "gpus", 1, limits::kMaxGpus));
    if (gpus != p.cluster.shape.world())
      return Error::bad_input("cluster.gpus", fmt::format("{} disagrees with nodes x gpus_per_node = {} x {}; make them "
                                                          "agree (the run starts nodes x gpus_per_node ranks: --nproc {})",
                                                          gpus, p.cluster.shape.nodes, p.cluster.shape.gpus_per_node,
                                                          p.cluster.shape.world()));
  }
  LONGCTX_TRY(auto hw, get_object(cluster, "cluster", "hardware"));
  LONGCTX_TRY(p.cluster.hardware, hardware_from_json(hw));
  LONGCTX_TRY(p.cluster.device_budget_bytes, get_int(cluster, "cluster", "device_budget_bytes", 1, limits::kMaxBytes));
  LONGCTX_TRY(p.cluster.host_budget_bytes_per_node, get_int(cluster, "cluster", "host_budget_bytes_per_node", 1, limits::kMaxBytes));
  if (cluster.contains("expandable_segments")) {
    LONGCTX_TRY(p.cluster.expandable_segments, get_bool(cluster, "cluster", "expandable_segments"));
  }

  LONGCTX_TRY(auto train, get_object(j, "", "train"));
  LONGCTX_TRY(p.train.seq, get_int(train, "train", "seq", 1, limits::kMaxSeq));
  LONGCTX_TRY(auto dtype, get_string(train, "train", "dtype"));
  LONGCTX_TRY(p.train.dtype, parse_dtype(dtype, "train.dtype"));
  LONGCTX_TRY(auto gdtype, get_string(train, "train", "grad_dtype"));
  LONGCTX_TRY(p.train.grad_dtype, parse_dtype(gdtype, "train.grad_dtype"));
  LONGCTX_TRY(auto train_knobs, knobs_from_json(train, "train", p));
  (void)train_knobs;
  if (train.contains("stack")) {
    LONGCTX_TRY(auto stack, get_object(train, "train", "stack"));
    LONGCTX_TRY(auto kind_text, get_string(stack, "train.stack", "name"));
    LONGCTX_TRY(const StackKind kind, parse_stack_kind(kind_text, "train.stack.name"));
    p.train.stack = default_stack(kind);
    StackSpec& st = p.train.stack;
    if (kind == StackKind::HF || kind == StackKind::Arctic) {
      LONGCTX_TRY(auto attention, get_string(stack, "train.stack", "attention"));
      LONGCTX_TRY(st.attention, parse_hf_attention(attention, "train.stack.attention"));
    }
    if (kind == StackKind::HF) {
      LONGCTX_TRY(auto checkpointing, get_string(stack, "train.stack", "checkpointing"));
      LONGCTX_TRY(st.checkpointing, parse_hf_checkpointing(checkpointing, "train.stack.checkpointing"));
      LONGCTX_TRY(st.attention_mask, get_bool(stack, "train.stack", "attention_mask"));
      LONGCTX_TRY(auto optimizer, get_string(stack, "train.stack", "optimizer"));
      LONGCTX_TRY(st.optimizer, parse_hf_optimizer(optimizer, "train.stack.optimizer"));
      // Plans written before TRL's loss was modelled computed transformers' own.
      if (stack.contains("loss")) {
        LONGCTX_TRY(auto loss, get_string(stack, "train.stack", "loss"));
        LONGCTX_TRY(st.loss, parse_hf_loss(loss, "train.stack.loss"));
      }
    }
    if (kind == StackKind::Arctic) {
      LONGCTX_TRY(auto model, get_string(stack, "train.stack", "arctic_model"));
      LONGCTX_TRY(st.arctic_model, parse_arctic_model(model, "train.stack.arctic_model"));
    }
  }

  LONGCTX_TRY(auto par, get_object(j, "", "parallel"));
  LONGCTX_TRY(auto parallel_knobs, knobs_from_json(par, "parallel", p));
  (void)parallel_knobs;

  LONGCTX_TRY(auto ok, validate(p.model, p.cluster.shape, p.train, p.parallel));
  (void)ok;
  // The derived padding, where written, must be this longctx's: else the file was edited by
  // hand or written under another padding rule.
  if (train.contains("padded_seq")) {
    LONGCTX_TRY(auto padded, get_int(train, "train", "padded_seq", 1, limits::kMaxSeq + 2 * limits::kMaxGpus));
    if (padded != padded_seq(p.train.seq, p.parallel))
      return Error::bad_input("train.padded_seq", fmt::format("{} is not seq {} padded to a multiple of {} ({}); "
                                                              "remove it or write the plan again",
                                                              padded, p.train.seq, sequence_multiple(p.parallel),
                                                              padded_seq(p.train.seq, p.parallel)));
  }

  if (auto it = j.find("prediction"); it != j.end() && it->is_object()) {
    const auto& pr = *it;
    LONGCTX_TRY(p.prediction.feasible, get_bool(pr, "prediction", "feasible"));
    LONGCTX_TRY(p.prediction.peak_device_bytes, get_int(pr, "prediction", "peak_device_bytes", 0));
    LONGCTX_TRY(p.prediction.peak_host_bytes, get_int(pr, "prediction", "peak_host_bytes", 0));
    // Absent from plan files written before the reserved figure was predicted.
    if (pr.contains("peak_reserved_bytes")) {
      LONGCTX_TRY(p.prediction.peak_reserved_bytes, get_int(pr, "prediction", "peak_reserved_bytes", 0));
    }
    if (pr.contains("peak_nvidia_smi_bytes")) {
      LONGCTX_TRY(p.prediction.peak_nvidia_smi_bytes, get_int(pr, "prediction", "peak_nvidia_smi_bytes", 0));
    }
    if (pr.contains("reserved_peak_at") && pr["reserved_peak_at"].is_string()) p.prediction.reserved_peak_at = pr["reserved_peak_at"];
    if (auto b = pr.find("breakdown"); b != pr.end() && b->is_object())
      for (auto& [k, v] : b->items())
        if (v.is_number_integer()) p.prediction.breakdown[k] = v.get<std::int64_t>();
    if (pr.contains("peak_at") && pr["peak_at"].is_string()) p.prediction.peak_at = pr["peak_at"];
    if (pr.contains("step_time_s") && pr["step_time_s"].is_number()) p.prediction.step_time_s = pr["step_time_s"];
    if (pr.contains("tokens_per_s") && pr["tokens_per_s"].is_number()) p.prediction.tokens_per_s = pr["tokens_per_s"];
    if (pr.contains("mfu") && pr["mfu"].is_number()) p.prediction.mfu = pr["mfu"];
    if (pr.contains("binding") && pr["binding"].is_string()) p.prediction.binding = pr["binding"];
    LONGCTX_TRY(p.prediction.phases, phases_from_json(pr));
  }
  return p;
}

Result<Plan> read_plan_file(const std::string& path) {
  LONGCTX_TRY(auto text, json_fields::read_file(path, "--plan"));
  LONGCTX_TRY(auto j, json_fields::parse(text, path));
  return plan_from_json(j);
}

Result<bool> write_plan_file(const Plan& p, const std::string& path) {
  return write_text_atomically(path, "-o", plan_to_json(p).dump(2) + "\n");
}

}  // namespace longctx
