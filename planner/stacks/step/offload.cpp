// Offloads: checkpointed layer inputs to the host in forward and back before their recompute,
// parameter streaming's placement, and gradients to the host for an offloaded optimizer.
// Footprints: footprint/offload.h.
#include "planner/stacks/step/emitters.h"
#include "planner/footprint/offload.h"
#include "planner/footprint/zero.h"

namespace longctx::step {

using namespace footprint;

bool streamed(const StepBuild& sb, int group) {
  return streamed_group(sb.shapes, sb.parallel.offload_params, group);
}

void offload_checkpoint(StepBuild& sb, int layer, TensorId x) {
  const std::int64_t bytes = checkpoint_bytes(sb.shapes);
  // in.host [n, h] e, on the host
  const TensorId host = sb.graph.tensor(layer_name(layer, "in.host"), bytes, Category::Activations, Place::Host);
  sb.checkpoint_host[static_cast<std::size_t>(layer)] = host;
  const int o = sb.graph.op(layer_name(layer, "checkpoint.offload"), Phase::Forward, layer, {x}, {host});
  sb.graph.set_comm(o, CommKind::DeviceToHost, double(bytes), 1);
  // On CUDA a side stream's copy (runtime/src/checkpoint_store.cpp); the CPU virtual device's
  // is a memcpy the step waits for.
  sb.graph.set_comm_async(o, !sb.shapes.cpu);
}

// Brings layer l's checkpoint back, among the ops of layer `at_layer` (the one above it,
// while it recomputes, or l itself for the last layer).
TensorId prefetch_checkpoint(StepBuild& sb, int layer, int at_layer) {
  const TensorId host = sb.checkpoint_host[static_cast<std::size_t>(layer)];
  if (host < 0) return -1;
  const std::int64_t bytes = checkpoint_bytes(sb.shapes);
  // in.prefetched [n, h] e
  const TensorId dev = sb.graph.tensor(layer_name(layer, "in.prefetched"), bytes, Category::Activations);
  const int o = sb.graph.op(layer_name(layer, "checkpoint.prefetch"), Phase::Backward, at_layer, {host}, {dev});
  sb.graph.set_comm(o, CommKind::HostToDevice, double(bytes), 1);
  sb.graph.set_comm_async(o, !sb.shapes.cpu);  // as the offload's copy
  return dev;
}

void host_grad_buffer(StepBuild& sb, int group) {
  if (sb.grad_host.empty()) sb.grad_host.assign(static_cast<std::size_t>(param_groups(sb.shapes)), -1);
  // grad.host [elements of the group's optimizer state: the group, or a ZeRO shard] fp32, on
  // the host for the whole run (runtime/src/adamw.cpp, the AdamW constructor's host_grads_).
  const std::int64_t elems = sb.shard_optim ? shard_elems(sb.shapes, group) : group_params(sb.shapes, group);
  sb.grad_host[static_cast<std::size_t>(group)] =
      sb.graph.persistent(sb.group_name(group, "grad.host"), host_grad_bytes(elems), Category::Grads, Place::Host);
}

void grads_to_host(StepBuild& sb, int group, Phase phase, std::int64_t workspace) {
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
void stream_whole_grad(StepBuild& sb, int group, Phase phase) {
  const StepShapes& s = sb.shapes;
  if (s.world > 1) all_reduce_grad(sb, group, phase);
  // zero1 across ranks: the rank's slice of the reduced gradient is copied out first, [shard]
  // g, while the group's pieces are still there (runtime/src/sharded_params.cpp,
  // ShardedParams::zero1_grads_to_host).
  const std::int64_t slice = sb.shard_optim && s.world > 1 ? shard_elems(s, group) * s.g : 0;
  grads_to_host(sb, group, phase, slice);
}

}  // namespace longctx::step
