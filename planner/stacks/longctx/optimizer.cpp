// The optimizer phase: gradients all-reduced (unsharded: runtime/src/runner.cpp, run_plan;
// zero1: runtime/src/sharded_params.cpp, ShardedParams::prepare_step) or moved to the host
// (offloaded optimizer), AdamW per group (runtime/src/llama_step.cpp, AdamW::step), and
// zero1/zero2's all-gather of the updated parameter shards (runtime/src/sharded_params.cpp,
// ShardedParams::finish_step). Footprints: footprint/optimizer.h; the parameter order the
// update walks: footprint/zero.h, param_sizes.
#include "planner/stacks/longctx/emitters.h"
#include "planner/footprint/optimizer.h"
#include "planner/footprint/zero.h"

namespace longctx::step {

using namespace footprint;

void all_reduce_grad(LongctxStep& sb, int group, Phase phase) {
  const int at_layer = phase == Phase::Optimizer ? -1 : sb.layer_of_group(group);
  const int o = sb.graph.op(sb.group_name(group, "grad.all_reduce"), phase, at_layer,
                            sb.grads[static_cast<std::size_t>(group)], {});
  sb.graph.set_comm(o, CommKind::AllReduce, all_reduce_sent_bytes(sb.shapes, group), static_cast<int>(sb.shapes.world));
  // One all-reduce per parameter tensor, each waited for (runtime/src/runner.cpp,
  // sum_gradients; ShardedParams::prepare_step and zero1_grads_to_host).
  sb.graph.set_calls(o, static_cast<int>(param_sizes(sb.shapes, group).size()));
}

namespace {

// AdamW over one group, reading its gradient (pieces, a shard, or a host copy).
void adamw_step(LongctxStep& sb, int group) {
  const StepShapes& s = sb.shapes;
  const std::int64_t elems = sb.shard_optim ? shard_elems(s, group) : group_params(s, group);
  OpSpec o;
  o.name = sb.group_name(group, "optim.step");
  o.kind = OpKind::Optimizer;
  o.phase = Phase::Optimizer;
  o.inputs = sb.grads[static_cast<std::size_t>(group)];
  o.flops = adamw_flops(elems);
  o.memory_bytes = runtime_adamw_memory_bytes(s, elems, sb.parallel.offload_optimizer);
  // A flat shard is updated at once (zero1 too: its grad.shard); whole parameters (no ZeRO,
  // or one rank) one at a time, as the runtime's AdamW does.
  const bool whole = !sb.shard_optim || s.world == 1;
  if (sb.parallel.offload_optimizer) {
    // On the host; the update is copied straight into the device parameters.
    o.host_compute = true;
    o.host_workspace_bytes = adamw_host_workspace(s, group, elems, whole);
    o.comm = CommKind::HostToDevice;
    o.comm_bytes = double(elems * s.e);
  } else {
    o.workspace_bytes = adamw_device_workspace(s, group, elems, whole);
  }
  sb.graph.raw_op(std::move(o));
}

}  // namespace

void optimizer_step(LongctxStep& sb) {
  const StepShapes& s = sb.shapes;
  const Sharding sharding = sb.parallel.sharding;
  const bool offload = sb.parallel.offload_optimizer;
  const int groups = param_groups(s);
  // As the runtime runs it (runtime/src/runner.cpp, run_plan): every group's gradient reduced
  // first, then every group updated, then every updated shard gathered. An offloaded
  // optimizer's gradients are on the host already: each went as backward finished it
  // (grad.to_host, stream_whole_grad or finish_group_grad).
  const bool reduce = sharding == Sharding::Zero1 || (sharding == Sharding::None && s.world > 1);
  if (reduce && !offload)
    for (int gi = 0; gi < groups; ++gi) {
      all_reduce_grad(sb, gi, Phase::Optimizer);
      if (sharding != Sharding::Zero1 || s.world == 1) continue;
      // zero1 across ranks: the rank's slice of the all-reduced gradient copied out,
      // grad.shard [shard_elems] g, and the whole gradient freed
      // (runtime/src/sharded_params.cpp, ShardedParams::prepare_step).
      const TensorId shard = sb.graph.tensor(sb.group_name(gi, "grad.shard"), grad_shard_bytes(s, gi), Category::Grads);
      sb.graph.op(sb.group_name(gi, "grad.shard_copy"), Phase::Optimizer, -1, sb.grads[static_cast<std::size_t>(gi)],
                  {shard});
      sb.grads[static_cast<std::size_t>(gi)] = {shard};
    }
  for (int gi = 0; gi < groups; ++gi) adamw_step(sb, gi);
  if (sharding == Sharding::Zero1 || sharding == Sharding::Zero2)
    for (int gi = 0; gi < groups; ++gi) {
      const int g = sb.graph.op(sb.group_name(gi, "params.all_gather"), Phase::Optimizer, -1, {}, {});
      sb.graph.set_comm(g, CommKind::AllGather, gather_received_bytes(s, gi), static_cast<int>(s.world));
    }
}

}  // namespace longctx::step
