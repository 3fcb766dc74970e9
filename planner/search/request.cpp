#include "planner/search/request.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "planner/core/json_fields.h"
#include "planner/core/limits.h"
#include "planner/search/phase_peaks.h"
#include "planner/core/units.h"
#include "planner/stacks/profile.h"
#include "planner/stacks/stack_tiles.h"

namespace longctx {

Result<ModelConfig> resolve_model(const ClusterRequest& o) {
  if (o.model_config_json.empty()) return load_model(o.model);
  // json_fields::parse: the nesting bound, then the parse, as for a config.json file.
  LONGCTX_TRY(auto j, json_fields::parse(o.model_config_json, "model"));
  return model_from_json(j, o.model);
}

namespace {

using GivenSettings = std::vector<std::pair<SettingId, std::string>>;

void add_given(GivenSettings& out, SettingId id, const std::string& text) {
  if (!text.empty()) out.emplace_back(id, text);
}
// A switch's flag given: the value it sets, as text.
void add_given(GivenSettings& out, SettingId id, bool flag) {
  if (flag) out.emplace_back(id, setting(id).rule.negated ? "false" : "true");
}

// The settings the request gives, in table order, as text.
GivenSettings given_settings(const ClusterRequest& o) {
  GivenSettings out;
#define LONGCTX_SETTING_GIVEN(field, Type, member, rule) add_given(out, SettingId::field, o.field);
  LONGCTX_SETTING_TABLE(LONGCTX_SETTING_GIVEN)
#undef LONGCTX_SETTING_GIVEN
  return out;
}

// The stack and its defaults, then every setting given: a stack's option only for a stack
// that takes it. What the settings may be together, and on the hardware, is validate()'s.
Result<bool> resolve_settings(const ClusterRequest& o, Plan& p) {
  StackKind kind = stack_profiles().front()->kind;
  if (!o.stack.empty()) {
    LONGCTX_TRY(kind, parse_stack_kind(o.stack, setting(SettingId::stack).flag));
  }
  const StackProfile& stack = stack_profile(kind);
  p.train.stack = stack.defaults;
  // The model runs with its config's use_cache unless the option turns it off.
  if (!p.model.use_cache && takes_option(stack, SettingId::hf_no_use_cache)) p.train.stack.use_cache = false;
  if (p.cluster.hardware.backend == Backend::Cpu) p.train.dtype = DType::FP32;
  for (const auto& [id, text] : given_settings(o)) {
    const Setting& s = setting(id);
    if (id == SettingId::stack) continue;
    if (s.rule.option && !takes_option(stack, id))
      return Error::bad_input(s.flag, fmt::format("{}; it needs {}", s.rule.option, stacks_taking(id)));
    LONGCTX_TRY(const KnobValue v, parse_setting(id, text, s.flag));
    set_setting(p.train, id, v);
  }
  if (o.grad_dtype.empty()) {
    // Autograd's gradients are in the parameters' dtype: longctx's runtime keeps them so on
    // every device (measured on an H100: fp32 gradients predicted for bf16 parameters put
    // each backward phase up to 14% over the caching allocator's peak), as transformers does;
    // a stack that keeps another dtype says so (torchtitan's FSDP2: fp32 shards).
    p.train.grad_dtype = p.train.dtype;
    if (stack.kept_grads)
      if (const auto kept = stack.kept_grads(p)) p.train.grad_dtype = kept->dtype;
  }
  return true;
}

}  // namespace

Result<Plan> resolve_cluster(const ClusterRequest& o) {
  Plan p;
  LONGCTX_TRY(p.model, resolve_model(o));
  LONGCTX_TRY(p.cluster.hardware, load_hardware(o.gpu));
  // Bounds first (limits.h): the searches loop over divisors of the GPUs and build graphs
  // whose sizes follow them, so an unbounded count would run long before being refused.
  if (o.gpus < 1) return Error::bad_input("--gpus", fmt::format("{} is not a GPU count; give 1 or more", o.gpus));
  if (o.gpus > limits::kMaxGpus)
    return Error::bad_input("--gpus", fmt::format("{} is above longctx's bound of {} GPUs", o.gpus, limits::kMaxGpus));
  const std::int64_t per_node = o.gpus_per_node.value_or(std::min(o.gpus, p.cluster.hardware.gpus_per_node));
  if (per_node < 1) return Error::bad_input("--gpus-per-node", "must be at least 1");
  if (per_node > limits::kMaxGpusPerNode)
    return Error::bad_input("--gpus-per-node",
                            fmt::format("{} is above longctx's bound of {} GPUs per node", per_node, limits::kMaxGpusPerNode));
  if (o.gpus % per_node != 0)
    return Error::bad_input(
        "--gpus", fmt::format("{} GPUs do not fill whole nodes of {}; give a multiple of {}, or {}", o.gpus, per_node,
                              per_node,
                              o.gpus_per_node ? "a --gpus-per-node that divides them"
                                              : fmt::format("set --gpus-per-node (the {} preset has {} a node)",
                                                            p.cluster.hardware.name, p.cluster.hardware.gpus_per_node)));
  p.cluster.shape = {o.gpus / per_node, per_node};
  p.cluster.device_budget_bytes = p.cluster.hardware.device_memory_bytes;
  if (!o.budget.empty()) {
    LONGCTX_TRY(p.cluster.device_budget_bytes, parse_bytes(o.budget, "--budget"));
  }
  p.cluster.host_budget_bytes_per_node = p.cluster.hardware.host_memory_bytes_per_node;
  if (!o.host_mem.empty()) {
    LONGCTX_TRY(p.cluster.host_budget_bytes_per_node, parse_bytes(o.host_mem, "--host-mem"));
  }
  // Larger budgets would let the max-context bounds pass int64 (limits.h).
  if (p.cluster.device_budget_bytes > limits::kMaxBytes)
    return Error::bad_input("--budget", fmt::format("{} is above longctx's bound of 4PiB per GPU", o.budget));
  if (p.cluster.host_budget_bytes_per_node > limits::kMaxBytes)
    return Error::bad_input("--host-mem", fmt::format("{} is above longctx's bound of 4PiB per node", o.host_mem));
  p.cluster.expandable_segments = o.expandable_segments;
  LONGCTX_TRY(auto settings, resolve_settings(o, p));
  (void)settings;
  return p;
}

namespace {

// The techniques the request allows that its stack can express on its hardware.
Result<TechniqueSet> allowed_techniques(const ClusterRequest& r, const Plan& base) {
  LONGCTX_TRY(TechniqueSet techniques, parse_techniques(r.techniques));
  return techniques & stack_techniques(base);
}

// A coarse knob the stack decides itself (ArcticTraining's ZeRO-3, torchtitan's FSDP2 across
// GPUs) at a value that needs a technique the search may not use: nothing to try. (A stack's
// own tile counts are the stack's whatever --techniques says: knob_candidates.)
Result<bool> check_searchable(const Plan& base, const TechniqueSet& techniques) {
  Plan decided = base;
  decided.parallel = ParallelConfig{};
  conform_to_stack(base.model, base.cluster.shape, base.train, decided.parallel);
  for (const Knob& k : knob_table()) {
    const KnobValue v = knob_value(decided, k.id);
    if (k.rule.fine || technique_allows(techniques, k.id, v)) continue;
    const std::string word = to_string(*technique_for(k.id, v));
    return Error::bad_input("--techniques", fmt::format("--stack {} always runs {} {} here: allow {} (or give all)",
                                                        to_string(base.train.stack.kind), k.rule.label,
                                                        format_knob(k.id, v), word));
  }
  return true;
}

// A fixed knob whose technique --techniques allows but the stack's search does not run (the
// hf stack's searched techniques leave out the optimizer's offload, which its DeepSpeed path
// runs as given): refused naming the knob and the stack, where best_plan would ask for the
// technique in --techniques, which it is already in.
Result<bool> check_fixed_searchable(const Plan& base, const TechniqueSet& allowed, const ClusterRequest& r,
                                    const Knobs& fixed) {
  // The knobs' own rules first, as best_plan checks them: their refusals say more.
  LONGCTX_TRY(auto valid, check_fixed_knobs(base, allowed, fixed));
  (void)valid;
  LONGCTX_TRY(const TechniqueSet requested, parse_techniques(r.techniques));
  const TechniqueSet searched = stack_techniques(base);
  for (const Knob& k : knob_table()) {
    const auto v = fixed_value(fixed, k.id);
    if (!v || technique_allows(searched, k.id, *v) || !technique_allows(requested, k.id, *v)) continue;
    return Error::bad_input(k.flag, fmt::format("--stack {}'s search does not run '{}' here (it searches {}): give "
                                                "--no-search to plan the knobs as given, or leave {} out",
                                                to_string(base.train.stack.kind), to_string(*technique_for(k.id, *v)),
                                                fmt::join(technique_names(searched), ", "), k.flag));
  }
  return true;
}

// The gradients' dtype a stack keeps may follow the fixed knobs (the hf stack: DeepSpeed's
// under Ulysses or an offload, FSDP2's across GPUs otherwise): unless --grad-dtype is given,
// the one it keeps with them.
void keep_stack_grads(const PlanRequest& r, Plan& base) {
  const StackProfile& stack = stack_profile(base.train.stack.kind);
  if (!r.cluster.grad_dtype.empty() || !stack.kept_grads) return;
  if (const auto kept = stack.kept_grads(with_knobs(base, r.knobs))) base.train.grad_dtype = kept->dtype;
}

}  // namespace

Result<PlanAnswer> answer_plan(const PlanRequest& r) {
  LONGCTX_TRY(Plan base, resolve_cluster(r.cluster));
  keep_stack_grads(r, base);
  LONGCTX_TRY(base.train.seq, parse_tokens(r.seq, "--seq"));
  LONGCTX_TRY(const TechniqueSet techniques, allowed_techniques(r.cluster, base));
  PlanAnswer a;
  if (r.no_search) {
    a.found.best = with_knobs(base, r.knobs);
    LONGCTX_TRY(auto valid, validate(a.found.best));
    (void)valid;
  } else {
    LONGCTX_TRY(auto searchable, check_searchable(base, techniques));
    LONGCTX_TRY(auto fixed_searchable, check_fixed_searchable(base, techniques, r.cluster, r.knobs));
    (void)searchable, (void)fixed_searchable;
    LONGCTX_TRY(a.found, best_plan(base, techniques, r.knobs));
  }
  a.evaluation = evaluate(a.found.best);
  a.recorded = with_phase_predictions(a.evaluation);  // the file records the peaks per phase too
  return a;
}

namespace {

// What the model itself refuses at `next` tokens (check_model_for_seq under the plan's
// --max-positions), as a binding: "the model's sliding window of 4,096 tokens
// (model.sliding_window)"; "" if nothing.
std::string model_limit(const Plan& base, std::int64_t next) {
  const ModelConfig& m = base.model;
  auto ok = check_model_for_seq(m, next, base.train.max_positions);
  if (ok) return "";
  if (ok.error().field == "model.sliding_window")
    return fmt::format("the model's sliding window of {} tokens ({})", format_count(m.sliding_window), ok.error().field);
  if (ok.error().field == "model.max_position_embeddings")
    return fmt::format("the model's max_position_embeddings of {} tokens ({}, under --max-positions model)",
                       format_count(m.max_positions), ok.error().field);
  return fmt::format("the model ({})", ok.error().what());
}

// A length the model refuses binds as itself, not as the memory the search last tried: the
// answer's next granule and each rung's next token are held to the model's own limits.
void name_model_limits(const Plan& base, MaxContextResult& r) {
  const std::int64_t next = r.max_tokens + r.granularity;
  if (std::string limit = model_limit(base, next); !limit.empty()) {
    r.binding = std::move(limit);
    // The rule line's probe met the same limit at its own length (its message up to the
    // length it names): not a rule of the layout.
    const std::string message = check_model_for_seq(base.model, next, base.train.max_positions).error().message;
    if (r.rule.find(message.substr(0, message.find('('))) != std::string::npos) r.rule.clear();
  }
  r.positions = max_positions_note(base.model, r.max_tokens);
  for (LadderRung& rung : r.ladder)
    if (rung.max_tokens > 0)
      if (std::string limit = model_limit(base, rung.max_tokens + 1); !limit.empty()) rung.binding = std::move(limit);
}

}  // namespace

Result<MaxContextResult> answer_max_context(const ClusterRequest& r, bool with_ladder) {
  LONGCTX_TRY(const Plan base, resolve_cluster(r));
  LONGCTX_TRY(const TechniqueSet techniques, allowed_techniques(r, base));
  LONGCTX_TRY(auto searchable, check_searchable(base, techniques));
  (void)searchable;
  LONGCTX_TRY(MaxContextResult answer, max_context(base, techniques, with_ladder));
  name_model_limits(base, answer);
  return answer;
}

}  // namespace longctx
