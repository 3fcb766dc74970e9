// Model states and ZeRO: parameters and optimizer states per group, zero3's gathers of a
// group's parameters, and zero2/zero3's reduce-scatter of its gradient. Footprints:
// footprint/zero.h.
#include "planner/stacks/longctx/emitters.h"
#include "planner/footprint/offload.h"
#include "planner/footprint/zero.h"

namespace longctx::step {

using namespace footprint;

void model_states(LongctxStep& sb) {
  const StepShapes& s = sb.shapes;
  const Place optim_place = sb.parallel.offload_optimizer ? Place::Host : Place::Device;
  sb.params.resize(static_cast<std::size_t>(param_groups(s)));
  for (int gi = 0; gi < param_groups(s); ++gi) {
    // params [group_params] e, or under zero3 params.shard [shard_elems] e; streamed layers on the host.
    const std::int64_t elems = sb.zero3 ? shard_elems(s, gi) : group_params(s, gi);
    sb.params[static_cast<std::size_t>(gi)] =
        sb.graph.persistent(sb.group_name(gi, sb.zero3 ? "params.shard" : "params"), elems * s.e, Category::Params,
                            streamed(sb, gi) ? Place::Host : Place::Device);
    // AdamW's states, fp32 [group_params] or [shard_elems]: master (parameters not fp32),
    // exp_avg, exp_avg_sq.
    const std::int64_t opt = sb.shard_optim ? shard_elems(s, gi) : group_params(s, gi);
    if (s.master) sb.graph.persistent(sb.group_name(gi, "optim.master"), opt * 4, Category::Optimizer, optim_place);
    sb.graph.persistent(sb.group_name(gi, "optim.exp_avg"), opt * 4, Category::Optimizer, optim_place);
    sb.graph.persistent(sb.group_name(gi, "optim.exp_avg_sq"), opt * 4, Category::Optimizer, optim_place);
    if (sb.parallel.offload_optimizer) host_grad_buffer(sb, gi);
  }
  sb.grads.assign(static_cast<std::size_t>(param_groups(s)), Ids{});
}

bool gathers_group(const LongctxStep& sb, int group) {
  // On one rank the shard is the whole group: used in place, unless it lives on the host.
  return sb.zero3 && (sb.shapes.world > 1 || streamed(sb, group));
}

namespace {
// One rank: a streamed layer's parameters copied from the host one by one, each its own
// tensor (FetchedLayer, and StreamedLayer's refill when the backward begins).
void fetch_param_copies(LongctxStep& sb, int layer, Phase phase, int at_layer) {
  const StepShapes& s = sb.shapes;
  if (sb.param_copies.empty()) sb.param_copies.resize(static_cast<std::size_t>(s.layers));
  auto& copies = sb.param_copies[static_cast<std::size_t>(layer)];
  copies.fill(-1);
  Ids outputs;
  std::int64_t bytes = 0;
  for (std::size_t i = 0; i < kParamTable.size(); ++i) {
    const ParamSpec& p = kParamTable[i];
    const std::int64_t copy = param_copy_bytes(s, p);
    if (p.group != ParamGroupKind::Layer || copy == 0) continue;
    // params.<name> [the parameter's dims] e
    copies[i] = sb.graph.tensor(Name{layer, p.copy_name}, copy, Category::Params);
    outputs.push_back(copies[i]);
    bytes += copy;
  }
  const int o = sb.graph.op(sb.group_name(layer, "fetch"), phase, at_layer, {sb.params[static_cast<std::size_t>(layer)]},
                            outputs);
  sb.graph.set_comm(o, CommKind::HostToDevice, double(bytes), 1);
}
}  // namespace

// The all-gather of a group's parameters into params.full [group_params] e; a shard that lives
// on the host is copied into its slot of it first (ShardedParams::shard_in_slot).
TensorId gather_group(LongctxStep& sb, int group, Phase phase, int at_layer) {
  const StepShapes& s = sb.shapes;
  if (!gathers_group(sb, group)) return -1;
  if (group < s.layers && fetches_param_copies(s, sb.parallel.offload_params)) {
    fetch_param_copies(sb, group, phase, at_layer);
    return -1;
  }
  const TensorId full =
      sb.graph.tensor(sb.group_name(group, "params.full"), gathered_params_bytes(s, group), Category::Params);
  const int o = sb.graph.op(sb.group_name(group, "gather"), phase, at_layer, {sb.params[static_cast<std::size_t>(group)]},
                            {full});
  sb.graph.set_comm(o, CommKind::AllGather, gather_received_bytes(s, group), static_cast<int>(s.world));
  // A layer's gather issued while another layer runs is the runtime's prefetch
  // (ShardedParams::prefetch, all_gather_async), waited for when its layer begins; the first
  // layer's, and the embedding's and head's, are waited for at once.
  sb.graph.set_comm_async(o, group < s.layers && at_layer != group);
  return full;
}

void frees_param_copies(LongctxStep& sb, int layer, int op, std::initializer_list<ParamRole> roles) {
  if (sb.param_copies.empty()) return;
  const auto& copies = sb.param_copies[static_cast<std::size_t>(layer)];
  for (ParamRole r : roles)
    if (const TensorId t = copies[static_cast<std::size_t>(r)]; t >= 0) sb.graph.add_input(op, t);
}

void reads_all_param_copies(LongctxStep& sb, int layer, int op) {
  if (sb.param_copies.empty()) return;
  for (const TensorId t : sb.param_copies[static_cast<std::size_t>(layer)])
    if (t >= 0) sb.graph.add_input(op, t);
}

// One rank has nothing to exchange: it copies a streamed layer from the host when the layer starts.
bool prefetch_params(const LongctxStep& sb) { return sb.shapes.world > 1; }

TensorId new_group_grad(LongctxStep& sb, int group) {
  // grad (or grad.full before its reduce-scatter) [group_params] g
  return sb.graph.tensor(sb.group_name(group, sb.shard_grads ? "grad.full" : "grad"),
                         group_params(sb.shapes, group) * sb.shapes.g, Category::Grads);
}

TensorId grad_piece(LongctxStep& sb, int layer, const char* sharded_name, const char* name, std::int64_t elems,
                    Ids& pieces) {
  // [elems] g
  const TensorId t = sb.graph.tensor(layer_name(layer, sb.shard_grads ? sharded_name : name), elems * sb.shapes.g,
                                     Category::Grads);
  pieces.push_back(t);
  return t;
}

void finish_group_grad(LongctxStep& sb, int group, Ids pieces, Phase phase) {
  const StepShapes& s = sb.shapes;
  if (!sb.shard_grads) {
    sb.grads[static_cast<std::size_t>(group)] = pieces;
    if (sb.parallel.offload_optimizer) stream_whole_grad(sb, group, phase);
    return;
  }
  // grad.shard [shard_elems] g; the pieces are first summed into one flat send buffer and
  // freed before the shard exists (reduce_scatter_workspace_bytes).
  const TensorId shard = sb.graph.tensor(sb.group_name(group, "grad.shard"), grad_shard_bytes(s, group), Category::Grads);
  const int o = sb.graph.op(sb.group_name(group, "grad.reduce_scatter"), phase, sb.layer_of_group(group), pieces, {shard},
                            {.workspace = reduce_scatter_workspace_bytes(s, group)});
  sb.graph.set_comm(o, CommKind::ReduceScatter, reduce_scatter_sent_bytes(s, group), static_cast<int>(s.world));
  sb.grads[static_cast<std::size_t>(group)] = {shard};
  // With the optimizer offloaded the shard then goes to host memory.
  if (sb.parallel.offload_optimizer) grads_to_host(sb, group, phase);
}

}  // namespace longctx::step
