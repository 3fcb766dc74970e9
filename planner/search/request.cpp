#include "planner/search/request.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "planner/core/limits.h"
#include "planner/search/phase_peaks.h"
#include "planner/core/units.h"
#include "planner/stacks/profile.h"

namespace longctx {

Result<ModelConfig> resolve_model(const ClusterRequest& o) {
  if (o.model_config_json.empty()) return load_model(o.model);
  const auto j = nlohmann::json::parse(o.model_config_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Error::bad_input("model", "the model's config is not a JSON object; give a config.json's contents");
  return model_from_json(j, o.model);
}

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
    return Error::bad_input("--gpus", fmt::format("{} GPUs do not fill whole nodes of {}; give a multiple, or set --gpus-per-node", o.gpus, per_node));
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
  if (o.expandable_segments && p.cluster.hardware.backend != Backend::Cuda)
    return Error::bad_input("--expandable-segments", "is a setting of the CUDA caching allocator; the CPU virtual device "
                                                     "allocates exactly what is asked; leave it out or pick a GPU preset");
  if (p.cluster.hardware.backend == Backend::Cpu) p.train.dtype = DType::FP32;
  if (!o.dtype.empty()) {
    LONGCTX_TRY(p.train.dtype, parse_dtype(o.dtype, "--dtype"));
  }
  LONGCTX_TRY(const StackKind stack, parse_stack_kind(o.stack, "--stack"));
  p.train.stack = default_stack(stack);
  const bool hf = stack == StackKind::HF, arctic = stack == StackKind::Arctic;
  const char* hf_flag = !o.hf_checkpointing.empty()   ? "--hf-checkpointing"
                        : !o.hf_optimizer.empty()       ? "--hf-optimizer"
                        : !o.hf_loss.empty()            ? "--hf-loss"
                        : o.hf_no_attention_mask        ? "--hf-no-attention-mask"
                                                        : nullptr;
  if (!hf && hf_flag != nullptr)
    return Error::bad_input(hf_flag, "describes how transformers runs the step; it needs --stack hf");
  if (!hf && !arctic && !o.attention.empty())
    return Error::bad_input("--attention", "is transformers' attn_implementation; it needs --stack hf or --stack arctic");
  if (!arctic && !o.arctic_model.empty())
    return Error::bad_input("--arctic-model", "is ArcticTraining's model.type; it needs --stack arctic");
  if (arctic && p.cluster.hardware.backend != Backend::Cuda)
    return Error::bad_input("--gpu", "--stack arctic runs DeepSpeed and flash attention on CUDA GPUs; pick a GPU preset "
                                     "(h100-80gb, h200-141gb, a100-80gb)");
  if (!o.arctic_model.empty()) {
    LONGCTX_TRY(p.train.stack.arctic_model, parse_arctic_model(o.arctic_model, "--arctic-model"));
  }
  if (!o.hf_optimizer.empty()) {
    LONGCTX_TRY(p.train.stack.optimizer, parse_hf_optimizer(o.hf_optimizer, "--hf-optimizer"));
  }
  if (!o.hf_loss.empty()) {
    LONGCTX_TRY(p.train.stack.loss, parse_hf_loss(o.hf_loss, "--hf-loss"));
  }
  if (hf) p.train.stack.attention_mask = !o.hf_no_attention_mask;
  if (!o.attention.empty()) {
    LONGCTX_TRY(p.train.stack.attention, parse_hf_attention(o.attention, "--attention"));
    // Which implementations a stack takes is validate()'s to say (parallel_config.cpp).
    const HfAttention a = p.train.stack.attention;
    if (a == HfAttention::FlashAttention2 && p.cluster.hardware.backend != Backend::Cuda)
      return Error::bad_input("--attention", "flash_attention_2 runs on CUDA GPUs only; give sdpa or eager with --gpu cpu");
  }
  if (!o.hf_checkpointing.empty()) {
    LONGCTX_TRY(p.train.stack.checkpointing, parse_hf_checkpointing(o.hf_checkpointing, "--hf-checkpointing"));
  }
  if (!o.grad_dtype.empty()) {
    LONGCTX_TRY(p.train.grad_dtype, parse_dtype(o.grad_dtype, "--grad-dtype"));
  } else {
    // Autograd's gradients are in the parameters' dtype: longctx's runtime keeps them so on
    // every device (measured on an H100: fp32 gradients predicted for bf16 parameters put
    // each backward phase up to 14% over the caching allocator's peak), as transformers does;
    // DeepSpeed's ZeRO-3 reduces bf16 gradients (its fp32 copies live beside the optimizer).
    p.train.grad_dtype = p.train.dtype;
    // torchtitan's FSDP2 across GPUs keeps fp32 gradient shards beside its fp32 parameter shards.
    if (stack == StackKind::Torchtitan && p.cluster.shape.world() > 1) p.train.grad_dtype = DType::FP32;
  }
  return p;
}

namespace {

// transformers' checkpoint offload (activation_checkpointing_enable(offload=True), 5.17 on)
// copies to pinned host memory, which torch allocates only where an accelerator's driver is:
// the hf stack offloads nothing on the CPU virtual device.
bool hf_offload_refused(const Plan& base) {
  return base.train.stack.kind == StackKind::HF && base.cluster.hardware.backend != Backend::Cuda;
}

// The techniques the request allows that its stack can express on its hardware.
Result<TechniqueSet> allowed_techniques(const ClusterRequest& r, const Plan& base) {
  LONGCTX_TRY(TechniqueSet techniques, parse_techniques(r.techniques));
  techniques &= stack_profile(base.train.stack.kind).techniques(base.train.stack);
  if (hf_offload_refused(base)) techniques.reset(static_cast<std::size_t>(Technique::OffloadCheckpoints));
  return techniques;
}

// ArcticTraining always runs ZeRO-3, torchtitan across GPUs always FSDP2: a search without
// zero3 has nothing to try.
Result<bool> check_searchable(const Plan& base, const TechniqueSet& techniques) {
  const StackKind kind = base.train.stack.kind;
  if ((kind == StackKind::Arctic || (kind == StackKind::Torchtitan && base.cluster.shape.world() > 1)) &&
      !has(techniques, Technique::Zero3))
    return Error::bad_input("--techniques", fmt::format("--stack {} shards with {}{}: allow zero3 (or give all)",
                                                        to_string(kind),
                                                        kind == StackKind::Arctic ? "DeepSpeed ZeRO-3" : "FSDP2",
                                                        kind == StackKind::Arctic ? "" : " across GPUs"));
  return true;
}

Result<bool> check_fixed_for_hardware(const Plan& base, const Knobs& knobs) {
  if (hf_offload_refused(base) && knobs.offload_checkpoints.value_or(false))
    return Error::bad_input("--offload-checkpoints", "--stack hf offloads checkpoints as transformers does, to pinned host "
                                                     "memory, which needs a GPU: pick a GPU preset or leave it out");
  return true;
}

}  // namespace

Result<PlanAnswer> answer_plan(const PlanRequest& r) {
  LONGCTX_TRY(Plan base, resolve_cluster(r.cluster));
  LONGCTX_TRY(base.train.seq, parse_tokens(r.seq, "--seq"));
  LONGCTX_TRY(const TechniqueSet techniques, allowed_techniques(r.cluster, base));
  LONGCTX_TRY(auto hardware_ok, check_fixed_for_hardware(base, r.knobs));
  (void)hardware_ok;
  PlanAnswer a;
  if (r.no_search) {
    a.found.best = with_knobs(base, r.knobs);
    auto valid = validate(a.found.best.model, a.found.best.cluster.shape, a.found.best.train, a.found.best.parallel);
    if (!valid) return valid.error();
  } else {
    LONGCTX_TRY(auto searchable, check_searchable(base, techniques));
    (void)searchable;
    LONGCTX_TRY(a.found, best_plan(base, techniques, r.knobs));
  }
  a.evaluation = evaluate(a.found.best);
  a.recorded = with_phase_predictions(a.evaluation);  // the file records the peaks per phase too
  return a;
}

Result<MaxContextResult> answer_max_context(const ClusterRequest& r, bool with_ladder) {
  LONGCTX_TRY(const Plan base, resolve_cluster(r));
  LONGCTX_TRY(const TechniqueSet techniques, allowed_techniques(r, base));
  LONGCTX_TRY(auto searchable, check_searchable(base, techniques));
  (void)searchable;
  return max_context(base, techniques, with_ladder);
}

}  // namespace longctx
