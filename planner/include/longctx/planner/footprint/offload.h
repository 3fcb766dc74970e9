#pragma once
// Offloads: checkpointed layer inputs to the host and back, parameters streamed from the
// host, and gradients moved to the host for an offloaded optimizer. Shapes: step_shapes.h.
#include <cstdint>

#include "longctx/planner/footprint/step_shapes.h"

namespace longctx::footprint {

// A checkpointed layer's input x [n, h] e: what the host copy in.host holds
// (runtime/src/llama_step.cpp, CheckpointStore::keep) and what the prefetch brings back into
// in.prefetched before the layer recomputes (CheckpointStore::prefetch). Each copy moves as
// many bytes.
std::int64_t checkpoint_bytes(const StepShapes& s);

// Gradients of an offloaded optimizer on the host (runtime/src/llama_step.cpp, AdamW::step;
// under ZeRO the reduced shards, runtime/src/sharded_params.cpp, ShardedParams::finish_grads):
// grad.host in fp32, [elements of `device_bytes` of g-byte gradients] x 4.
std::int64_t host_grad_bytes(const StepShapes& s, std::int64_t device_bytes);

// Parameter streaming (offload-params, zero3 only) streams the layers' parameter shards from
// the host (runtime/src/layer_executors.cpp, streamed_layer and gathered_layer, with ParamHome::fetch
// and ShardedParams::gather);
// the embedding and the head stay on the device. The staging buffer each gather needs is
// zero.h's gather_staging_bytes.
bool streamed_group(const StepShapes& s, bool offload_params, int group);

}  // namespace longctx::footprint
