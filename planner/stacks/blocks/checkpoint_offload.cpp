// Checkpoint offload's copies (blocks/checkpoint_offload.h).
#include "planner/stacks/blocks/checkpoint_offload.h"

#include "planner/footprint/offload.h"

namespace longctx::step::blocks {

CheckpointOffload::CheckpointOffload(StepBuild& sb)
    : sb_(sb), host_(static_cast<std::size_t>(sb.shapes.layers), -1) {}

void CheckpointOffload::offload(int layer, TensorId x) {
  const std::int64_t bytes = footprint::checkpoint_bytes(sb_.shapes);
  // in.host [n, h] e, on the host
  const TensorId host = sb_.graph.tensor(layer_name(layer, "in.host"), bytes, Category::Activations, Place::Host);
  host_[static_cast<std::size_t>(layer)] = host;
  const int o = sb_.graph.op(layer_name(layer, "checkpoint.offload"), Phase::Forward, layer, {x}, {host});
  sb_.graph.set_comm(o, CommKind::DeviceToHost, double(bytes), 1);
  // On CUDA a side stream's copy (runtime/src/checkpoint_store.cpp); the CPU virtual device's
  // is a memcpy the step waits for.
  sb_.graph.set_comm_async(o, !sb_.shapes.cpu);
}

TensorId CheckpointOffload::prefetch(int layer, int at_layer) {
  const TensorId host = host_[static_cast<std::size_t>(layer)];
  if (host < 0) return -1;
  const std::int64_t bytes = footprint::checkpoint_bytes(sb_.shapes);
  // in.prefetched [n, h] e
  const TensorId dev = sb_.graph.tensor(layer_name(layer, "in.prefetched"), bytes, Category::Activations);
  const int o = sb_.graph.op(layer_name(layer, "checkpoint.prefetch"), Phase::Backward, at_layer, {host}, {dev});
  sb_.graph.set_comm(o, CommKind::HostToDevice, double(bytes), 1);
  sb_.graph.set_comm_async(o, !sb_.shapes.cpu);  // as the offload's copy
  return dev;
}

}  // namespace longctx::step::blocks
