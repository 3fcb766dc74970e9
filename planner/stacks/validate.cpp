// validate() (parallel_config.h): the one validation of command lines, plan files and Python
// requests. The rules of one setting or one knob are their rows' (settings.h, knobs.h); what
// a stack can express is its profile's (profile.h); here are only the rules that span rows and
// the order they are asked in.
#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "planner/core/limits.h"
#include "planner/core/units.h"
#include "planner/io/quoted_text.h"
#include "planner/stacks/length_rule.h"
#include "planner/stacks/profile.h"
#include "planner/stacks/refusals.h"

namespace longctx {
namespace {

using Check = Result<bool> (*)(const Plan&);

bool on_cuda(const Plan& p) { return p.cluster.hardware.backend == Backend::Cuda; }

// The cluster's and the length's bounds first: every product below (world, tokens) must not
// overflow.
Result<bool> check_shape(const Plan& p) {
  using namespace limits;
  const Cluster& c = p.cluster.shape;
  if (c.nodes < 1 || c.gpus_per_node < 1) return Error::bad_input("--gpus", "the cluster needs at least one GPU");
  if (c.gpus_per_node > kMaxGpusPerNode)
    return Error::bad_input("--gpus-per-node", fmt::format("{} is above longctx's bound of {} GPUs per node",
                                                           c.gpus_per_node, kMaxGpusPerNode));
  if (c.nodes > kMaxGpus / c.gpus_per_node)
    return Error::bad_input("--gpus", fmt::format("{} nodes of {} GPUs are above longctx's bound of {} GPUs", c.nodes,
                                                  c.gpus_per_node, kMaxGpus));
  if (p.train.seq > kMaxSeq)
    return Error::bad_input("--seq", fmt::format("{} tokens are above longctx's bound of {} (2^40)", p.train.seq, kMaxSeq));
  if (p.train.seq < 1) return Error::bad_input("--seq", "must be at least 1 token");
  if (p.cluster.expandable_segments && !on_cuda(p))
    return Error::bad_input("--expandable-segments", "is a setting of the CUDA caching allocator; the CPU virtual device "
                                                     "allocates exactly what is asked; leave it out or pick a GPU preset");
  return true;
}

std::string cuda_presets() {
  std::vector<std::string> names;
  for (const std::string& name : hardware_preset_names())
    if (const auto hw = load_hardware(name); hw && hw->backend == Backend::Cuda) names.push_back(name);
  return fmt::format("{}", fmt::join(names, ", "));
}

// Each setting's row: a value it names, on hardware that runs it. (A stack's option given for
// a stack that does not take it is the request's to refuse: in a plan it is never read.)
Result<bool> check_settings(const Plan& p) {
  for (const Setting& s : setting_table())
    if (!holds_setting_value(p.train, s.id))
      return Error::bad_input(s.flag, fmt::format("holds no value it takes ({})", s.rule.help));
  const StackProfile& stack = stack_profile(p.train.stack.kind);
  if (stack.cuda_only && !on_cuda(p))
    return Error::bad_input("--gpu", fmt::format("--stack {} {}; pick a GPU preset ({})", stack.name, stack.cuda_only,
                                                 cuda_presets()));
  for (const Setting& s : setting_table()) {
    const KnobValue v = setting_value(p.train, s.id);
    const auto& cuda_only = s.rule.cuda_only;
    if (!on_cuda(p) && std::find(cuda_only.begin(), cuda_only.end(), v) != cuda_only.end())
      return Error::bad_input(s.flag, fmt::format("{} runs on CUDA GPUs only; {}", format_setting(s.id, v), s.rule.cuda_fix));
  }
  return true;
}

// A knob value only some stacks run, under a stack that does not.
Result<bool> check_stack_value(const Plan& p, const Knob& k) {
  const KnobValue v = knob_value(p, k.id);
  if (std::find(k.rule.stack_values.begin(), k.rule.stack_values.end(), v) == k.rule.stack_values.end()) return true;
  const std::pair<KnobId, KnobValue> value{k.id, v};
  // The plan's own stack runs it: the usual case, answered without writing the refusal (the
  // search validates thousands of plans).
  const auto& own = stack_profile(p.train.stack.kind).own_values;
  if (std::find(own.begin(), own.end(), value) != own.end()) return true;
  std::vector<std::string> stacks;
  for (const StackProfile* s : stack_profiles())
    if (std::find(s->own_values.begin(), s->own_values.end(), value) != s->own_values.end())
      stacks.push_back(fmt::format("--stack {}", s->name));
  return Error::bad_input(k.flag, fmt::format("{} is {}'s alone, not --stack {}'s: give another value, or {}",
                                              format_knob(k.id, v), fmt::join(stacks, " or "),
                                              to_string(p.train.stack.kind), fmt::join(stacks, " or ")));
}

// Each knob's row, in table order (each row's rule reads the rows above it).
Result<bool> check_knobs(const Plan& p) {
  for (const Knob& k : knob_table()) {
    LONGCTX_TRY(auto row, check_knob(p, k.id));
    (void)row;
    LONGCTX_TRY(auto stack, check_stack_value(p, k));
    (void)stack;
  }
  return true;
}

// zero1 and zero2 shard optimizer state and gradients over the ranks and exchange them with
// collectives; one rank has nothing to shard or exchange with (zero3 there is the
// parameter-offload path: shards streamed from the host, where the stack has it).
Result<bool> check_sharding(const Plan& p) {
  const Sharding s = p.parallel.sharding;
  if (p.cluster.shape.world() != 1 || (s != Sharding::Zero1 && s != Sharding::Zero2)) return true;
  const bool offload = has(stack_techniques(p), Technique::OffloadParams);
  return Error::bad_input(flag(KnobId::sharding),
                          fmt::format("{} shards over several ranks; use none{} for one GPU", to_string(s),
                                      offload ? " (or zero3 with --offload-params)" : ""));
}

Result<bool> check_model_length(const Plan& p) {
  LONGCTX_TRY(auto window, check_model_for_seq(p.model, p.train.seq, p.train.max_positions));
  (void)window;
  return true;
}

// Upper estimates of one rank's step bytes, in double so they cannot overflow: per layer at
// most ~32 rows of the widest per-token row saved or live (about 17 saved, a layer's
// transients on top), the loss's rows of the vocabulary, and 20 bytes a parameter of model
// states; on the host, offloaded checkpoints and model states. Within these bounds every
// int64 sum of the step graph and simulator, and the host bytes times the GPUs of a node,
// stays far from overflow.
Result<bool> check_step_bounds(const Plan& p) {
  using namespace limits;
  const ModelConfig& m = p.model;
  const std::int64_t tokens = tokens_per_rank(p.train, p.parallel);
  const double width = std::max({double(m.hidden), double(m.intermediate), double(m.heads + 2 * m.kv_heads) * double(m.head_dim)});
  const double params = double(m.layers) * (4.0 * double(m.hidden) * double(m.heads + m.kv_heads) * double(m.head_dim) +
                                            3.0 * double(m.hidden) * double(m.intermediate)) +
                        2.0 * double(m.vocab) * double(m.hidden);
  const double device_bytes = double(tokens) * ((32.0 * double(m.layers) + 128.0) * width + 64.0 * double(m.vocab)) * 4.0 + 20.0 * params;
  const double host_bytes = double(tokens) * double(m.layers) * double(m.hidden) * 8.0 + 24.0 * params;
  // The model states alone (no token) past the bound: the model is too large at any --seq.
  if (24.0 * params > double(kMaxBytes))
    return Error::bad_input("model", fmt::format("its {:.3g} parameters alone would need on the order of {:.3g} bytes per "
                                                 "rank for weights, gradients and optimizer state, beyond longctx's bound "
                                                 "of {:.3g} at any --seq; use a model with fewer or narrower layers",
                                                 params, 24.0 * params, double(kMaxBytes)));
  if (device_bytes > double(kMaxStepBytes) || host_bytes > double(kMaxBytes)) {
    const bool device = device_bytes > double(kMaxStepBytes);
    return Error::bad_input("--seq", fmt::format("{} tokens per rank of this model would need on the order of {:.3g} {} bytes "
                                                 "per rank, beyond longctx's bound of {:.3g}; shorten --seq or "
                                                 "--micro-batch, or raise --ulysses or --ring",
                                                 tokens, device ? device_bytes : host_bytes, device ? "device" : "host",
                                                 double(device ? kMaxStepBytes : kMaxBytes)));
  }
  return true;
}

// The stack's own rules, then what its profile's data says: the gradients it keeps, and the
// lengths it takes when it pads nothing.
Result<bool> check_stack(const Plan& p) {
  const StackProfile& stack = stack_profile(p.train.stack.kind);
  if (stack.validate) {
    LONGCTX_TRY(auto own, stack.validate(p));
    (void)own;
  }
  const std::optional<KeptGrads> kept = stack.kept_grads ? stack.kept_grads(p) : std::nullopt;
  if (kept && p.train.grad_dtype != kept->dtype)
    return refuse(p, flag(SettingId::grad_dtype), fmt::format("keeps {} gradients{}: leave --grad-dtype out or give {}",
                                                              to_string(kept->dtype), kept->why, to_string(kept->dtype)));
  if (const auto multiple = unmet_length_multiple(p))
    return refuse(p, "--seq", fmt::format("{}: give a --seq divisible by {}", length_rule(std::to_string(*multiple)),
                                          *multiple));
  return true;
}

// every:K checkpoints layers 0, K, 2K, ...: past the layer count only layer 0, which every:L
// already says. Refused so that a K meant for a deeper model is not planned as one
// checkpointed layer (torchtitan's own rule, checked before, names its different counting).
Result<bool> check_checkpoint_period(const Plan& p) {
  const CheckpointPolicy& c = p.parallel.checkpoint;
  const std::int64_t layers = p.model.layers;
  if (c.kind != CheckpointPolicy::Kind::EveryK || c.every <= layers) return true;
  return Error::bad_input(flag(KnobId::checkpoint),
                          fmt::format("every:{} checkpoints layer 0 alone of the model's {} layers, as every:{} does: "
                                      "give K of at most {}",
                                      c.every, layers, layers, layers));
}

// What every process holds outside the caching allocator (the CUDA context and the
// libraries' handles) leaves nothing of a budget no larger: a refusal of the input, not a
// search that finds no plan (which advised more techniques or GPUs), from the command line
// and from a plan file alike.
Result<bool> check_budget(const Plan& p) {
  const std::int64_t context = p.cluster.hardware.context_bytes;
  if (context <= 0 || p.cluster.device_budget_bytes > context) return true;
  return Error::bad_input("--budget", fmt::format("{} per GPU is no more than the {} every process holds on {} outside the "
                                                  "caching allocator (the CUDA context and the libraries' handles); give "
                                                  "more than that",
                                                  format_bytes(p.cluster.device_budget_bytes), format_bytes(context),
                                                  terminal_line(p.cluster.hardware.name)));
}

Result<bool> check_plan(const Plan& p) {
  LONGCTX_TRY(auto model, validate_model(p.model));
  (void)model;
  for (Check check : {check_shape, check_budget, check_settings, check_knobs, check_sharding, check_model_length, check_step_bounds,
                      check_stack, check_checkpoint_period}) {
    LONGCTX_TRY(auto ok, check(p));
    (void)ok;
  }
  return true;
}

}  // namespace

Result<bool> validate(const Plan& p, FieldNames names) {
  Result<bool> r = check_plan(p);
  if (r || names == FieldNames::Flags) return r;
  return Error{r.error().kind, plan_key_of_flag(r.error().field), r.error().message};
}

Result<bool> validate(const ModelConfig& m, const Cluster& c, const TrainConfig& t, const ParallelConfig& p) {
  Plan plan;
  plan.model = m;
  plan.cluster.shape = c;
  plan.train = t;
  plan.parallel = p;
  return validate(plan);
}

}  // namespace longctx
