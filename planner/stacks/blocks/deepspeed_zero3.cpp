// DeepSpeed ZeRO-3's ops (blocks/deepspeed_zero3.h; DeepSpeed v0.17.1,
// deepspeed/runtime/zero/stage3.py DeepSpeedZeroOptimizer_Stage3, partition_parameters.py,
// partitioned_param_coordinator.py) with the defaults ArcticTraining's recipes leave in place.
// Footprints: footprint/deepspeed.h.
//
// Simplifications, each a few hundred MB at most for an 8B model: a layer's attention
// projections are gathered together for the forward, and its MLP's (DeepSpeed fetches module
// by module and prefetches up to stage3_prefetch_bucket_size, 5e7 elements, ahead); in
// backward the whole layer is gathered from its recompute to the end of its backward (which
// max_reuse_distance 1e9 keeps); the last layer is not held gathered across the turn from
// forward to backward.
#include "planner/stacks/blocks/deepspeed_zero3.h"

#include <algorithm>

#include "planner/footprint/deepspeed.h"
#include "planner/footprint/embedding.h"
#include "planner/footprint/optimizer.h"
#include "planner/footprint/zero.h"
#include "planner/stacks/blocks/hf_model.h"

namespace longctx::step::blocks {

using namespace footprint;
using namespace footprint::deepspeed;

namespace {

// overlap_comm's streams (stage3.py and parameter_offload.py): gathers run on the allgather
// stream, the gradients' reductions on reduce_and_partition_stream; what each allocates stays
// in its stream's pools (OpSpec::stream).
constexpr int kAllGatherStream = 1;
constexpr int kReduceStream = 2;

// Elements of a group's parameters DeepSpeed partitions: all but the persistent ones.
struct GroupElems {
  std::int64_t partition = 0;    // the rank's partitions, sum of ceil(numel / world)
  std::int64_t persistent = 0;   // whole on every rank (ds_persist)
};

GroupElems group_elems(const StepShapes& s, int group) {
  GroupElems g;
  for (const std::int64_t numel : param_sizes(s, group)) {
    g.partition += partition_elems(s, numel);
    if (persistent_param(numel)) g.persistent += numel;
  }
  return g;
}

}  // namespace

void deepspeed_model_states(StepBuild& sb) {
  const StepShapes& s = sb.shapes;
  const Place params_place = sb.parallel.offload_params ? Place::Host : Place::Device;
  const Place optim_place = sb.parallel.offload_optimizer ? Place::Host : Place::Device;
  sb.params.resize(static_cast<std::size_t>(param_groups(s)));
  for (int g = 0; g < param_groups(s); ++g) {
    const GroupElems ge = group_elems(s, g);
    // lp_param_buffer (the device) or the pinned fp16 flat (offload_param): bf16 partitions.
    sb.params[static_cast<std::size_t>(g)] =
        sb.graph.persistent(sb.group_name(g, "params.partition"), ge.partition * s.e, Category::Params, params_place);
    if (ge.persistent > 0)  // the norms, whole on the device beside their partitions
      sb.graph.persistent(sb.group_name(g, "params.persistent"), ge.persistent * s.e, Category::Params, Place::Device);
    // grad_partitions_flat_buffer [partition] e (gradient_accumulation_dtype: bf16 under ZeRO)
    sb.graph.persistent(sb.group_name(g, "grad.partition"), ge.partition * s.e, Category::Grads, optim_place);
    // _create_fp32_partitions and the optimizer's moments: fp32 master, exp_avg, exp_avg_sq;
    // offloaded, the sub-group's fp32 gradient too (initialize_optimizer_states).
    sb.graph.persistent(sb.group_name(g, "optim.master"), ge.partition * 4, Category::Optimizer, optim_place);
    sb.graph.persistent(sb.group_name(g, "optim.exp_avg"), ge.partition * 4, Category::Optimizer, optim_place);
    sb.graph.persistent(sb.group_name(g, "optim.exp_avg_sq"), ge.partition * 4, Category::Optimizer, optim_place);
    if (sb.parallel.offload_optimizer)
      sb.graph.persistent(sb.group_name(g, "grad.fp32"), ge.partition * 4, Category::Grads, Place::Host);
  }
  sb.grads.assign(static_cast<std::size_t>(param_groups(s)), Ids{});
}

DeepSpeedGradients::DeepSpeedGradients(StepBuild& sb)
    : sb_(sb),
      buffer_(sb.graph.persistent(step_name("zero.ipg_bucket"), ipg_bucket_bytes(sb.shapes), Category::Grads,
                                  Place::Device)) {}

void DeepSpeedGradients::ready(TensorId grad, std::int64_t numel) {
  const StepShapes& s = sb_.shapes;
  if (elems_ + numel > kReduceBucketElems && elems_ > 0) reduce();
  if (elems_ + numel <= kReduceBucketElems) {
    sb_.graph.op(step_name("zero.grad_to_bucket"), Phase::Backward, -1, {grad, buffer_}, {});
  } else {
    pending_.push_back(grad);
  }
  elems_ += numel;
  flat_elems_ += partition_elems(s, numel) * s.world;
  partition_ws_ = std::max(partition_ws_, partition_grad_workspace(s, numel, sb_.parallel.offload_optimizer));
}

void DeepSpeedGradients::flush() { reduce(); }

void DeepSpeedGradients::reduce() {
  if (elems_ == 0) return;
  const StepShapes& s = sb_.shapes;
  Ids reads = pending_;
  reads.push_back(buffer_);
  const int o = sb_.graph.op(step_name("zero.reduce_scatter"), Phase::Backward, -1, reads, {},
                             {.workspace = reduce_flat_bytes(s, flat_elems_) + partition_ws_});
  sb_.graph.set_comm(o, CommKind::ReduceScatter, double(flat_elems_ * s.e), static_cast<int>(s.world));
  sb_.graph.set_stream(o, kReduceStream);
  sb_.graph.set_comm_async(o);  // on reduce_and_partition_stream while backward goes on
  if (sb_.parallel.offload_optimizer) {
    // partition_grads: each partition's fp32 copy goes to the host's sub-group gradient, on
    // the same stream (non_blocking copies).
    const int c = sb_.graph.op(step_name("zero.grads_to_host"), Phase::Backward, -1, {}, {});
    sb_.graph.set_comm(c, CommKind::DeviceToHost, double(flat_elems_ / s.world * 4), 1);
    sb_.graph.set_comm_async(c);
  }
  elems_ = flat_elems_ = partition_ws_ = 0;
  pending_ = Ids{};
}

TensorId deepspeed_gather(StepBuild& sb, int layer, const char* name, std::int64_t numel, Phase phase, bool rc,
                          bool module) {
  const StepShapes& s = sb.shapes;
  const std::int64_t bytes = gathered_bytes(s, numel, sb.parallel.offload_params);
  if (bytes == 0) return -1;
  const Name n = layer >= 0 ? layer_name(layer, name, rc) : step_name(name, rc);
  const TensorId t = sb.graph.tensor(n, bytes, Category::Params);
  const int o = sb.graph.op(n, phase, layer, {}, {t});
  if (s.world > 1) sb.graph.set_comm(o, CommKind::AllGather, double(bytes) / double(s.world), static_cast<int>(s.world));
  else sb.graph.set_comm(o, CommKind::HostToDevice, double(bytes), 1);
  if (module) {
    // A module's parameters: fetched on the all-gather stream, ahead of use by the prefetch
    // coordinator (partitioned_param_coordinator.py, fetch_sub_module).
    sb.graph.set_stream(o, kAllGatherStream);
    sb.graph.set_comm_async(o);
  }
  return t;
}

std::int64_t layer_gathered_elems(const StepShapes& s, bool attention, bool mlp) {
  // The parameter table's projections: q_proj to o_proj, and gate_proj to down_proj, each
  // weight with its bias where the model has one.
  std::int64_t bytes = 0;
  for (const ParamSpec& p : kParamTable) {
    const bool of_attention = p.role >= ParamRole::Wq && p.role <= ParamRole::Bo;
    const bool of_mlp = p.role >= ParamRole::Gate && p.role <= ParamRole::BDown;
    if ((attention && of_attention) || (mlp && of_mlp)) bytes += param_copy_bytes(s, p);
  }
  return bytes / s.e;
}

void deepspeed_embedding_backward(HfStep& sb, TensorId d_x) {
  const StepShapes& s = sb.shapes;
  const TensorId w = deepspeed_gather(sb, -1, "embed.params.full.bwd", s.V * s.h, kB);
  Ids reads = {d_x, sb.outer.tokens};
  if (w >= 0) reads.push_back(w);
  const OpCost cost = {.workspace = embedding_backward_workspace(s, s.n), .flops = double(s.n * s.h)};
  if (sb.outer.tied_grad >= 0) {
    // A tied table: lm_head's gradient waits for this one in the table's input buffer, and
    // ZeRO's post-accumulate hook sees their sum, once (TiedSum).
    const TensorId dense = sb.graph.tensor(Name{Name::kEmbed, "grad.dense"}, s.V * s.h * s.e, kTr);
    sb.graph.op(Name{Name::kEmbed, "backward"}, kB, -1, reads, {dense}, cost);
    grad_ready(sb, join_tied_grad(sb, dense), s.V * s.h);
    return;
  }
  const TensorId g = sb.graph.tensor(Name{Name::kEmbed, "grad"}, s.V * s.h * s.e, Category::Grads);
  sb.graph.op(Name{Name::kEmbed, "backward"}, kB, -1, reads, {g}, cost);
  grad_ready(sb, g, s.V * s.h);
}

void deepspeed_optimizer_step(StepBuild& sb) {
  const StepShapes& s = sb.shapes;
  std::int64_t partition = 0;
  for (int g = 0; g < param_groups(s); ++g) partition += group_elems(s, g).partition;
  OpSpec o;
  o.name = step_name("optim.step");
  o.kind = OpKind::Optimizer;
  o.phase = Phase::Optimizer;
  // _partition_all_parameters: parameters still gathered (Liger's lm_head) are released first.
  if (sb.outer.head_full >= 0) o.inputs = {sb.outer.head_full};
  o.flops = adamw_flops(partition);
  o.memory_bytes = adamw_memory_bytes(s, partition);
  if (sb.parallel.offload_optimizer) {
    // DeepSpeedCPUAdam on the host; the bf16 partitions refreshed from the fp32 masters.
    o.host_compute = true;
    o.comm = CommKind::HostToDevice;
    o.comm_bytes = double(partition * s.e);
  } else {
    o.workspace_bytes = device_step_workspace(s, partition);
  }
  sb.graph.raw_op(std::move(o));
}

}  // namespace longctx::step::blocks
