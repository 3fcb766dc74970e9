// Offloads: parameter streaming's placement, and gradients to the host for an offloaded
// optimizer (checkpoint offload: blocks/checkpoint_offload.h). Footprints: footprint/offload.h.
#include "planner/stacks/longctx/emitters.h"
#include "planner/footprint/offload.h"
#include "planner/footprint/zero.h"

namespace longctx::step {

using namespace footprint;

bool streamed(const StepBuild& sb, int group) {
  return streamed_group(sb.shapes, sb.parallel.offload_params, group);
}

void host_grad_buffer(LongctxStep& sb, int group) {
  if (sb.grad_host.empty()) sb.grad_host.assign(static_cast<std::size_t>(param_groups(sb.shapes)), -1);
  // grad.host [elements of the group's optimizer state: the group, or a ZeRO shard] fp32, on
  // the host for the whole run (runtime/src/adamw.cpp, the AdamW constructor's host_grads_).
  const std::int64_t elems = sb.shard_optim ? shard_elems(sb.shapes, group) : group_params(sb.shapes, group);
  sb.grad_host[static_cast<std::size_t>(group)] =
      sb.graph.persistent(sb.group_name(group, "grad.host"), host_grad_bytes(elems), Category::Grads, Place::Host);
}

void grads_to_host(LongctxStep& sb, int group, Phase phase, std::int64_t workspace) {
  Ids reads = sb.grads[static_cast<std::size_t>(group)];
  std::int64_t bytes = 0;
  for (TensorId t : reads) bytes += sb.graph.bytes(t);
  // Into the persistent grad.host (zero1: the rank's optimizer takes only its shard of the
  // all-reduced gradient); the device gradient is freed.
  const TensorId host = sb.grad_host[static_cast<std::size_t>(group)];
  reads.push_back(host);
  const int o =
      sb.graph.op(sb.group_name(group, "grad.to_host"), phase, sb.layer_of_group(group), reads, {}, {.workspace = workspace});
  sb.graph.set_comm(o, CommKind::DeviceToHost, double(bytes), 1);
  sb.grads[static_cast<std::size_t>(group)] = {host};
}

// As DeepSpeed's offloaded optimizer copies each reduced gradient partition to the host
// during backward (deepspeed/runtime/zero/stage_1_and_2.py,
// DeepSpeedZeroOptimizer.async_inplace_copy_grad_to_fp32_buffer_from_gpu).
void stream_whole_grad(LongctxStep& sb, int group, Phase phase) {
  const StepShapes& s = sb.shapes;
  if (s.world > 1) all_reduce_grad(sb, group, phase);
  // zero1 across ranks: the rank's slice of the reduced gradient is copied out first, [shard]
  // g, while the group's pieces are still there (runtime/src/sharded_params.cpp,
  // ShardedParams::zero1_grads_to_host).
  const std::int64_t slice = sb.shard_optim && s.world > 1 ? shard_elems(s, group) * s.g : 0;
  grads_to_host(sb, group, phase, slice);
}

}  // namespace longctx::step
