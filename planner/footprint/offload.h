#pragma once
// Offloads: checkpointed layer inputs to the host and back, parameters streamed from the
// host, and gradients moved to the host for an offloaded optimizer. Shapes: step_shapes.h.
#include <cstdint>

#include "planner/footprint/step_shapes.h"

namespace longctx::footprint {

// A checkpointed layer's input x [n, h] e: what the host copy in.host holds
// (runtime/src/llama_step.cpp, CheckpointStore::keep) and what the prefetch brings back into
// in.prefetched before the layer recomputes (CheckpointStore::prefetch). Each copy moves as
// many bytes.
std::int64_t checkpoint_bytes(const StepShapes& s);

// The fp32 gradient buffers of an offloaded optimizer on the host, one per optimizer state,
// kept for the whole run (runtime/src/adamw.cpp, AdamW's host_grads_: each gradient is
// copied into its buffer as soon as backward finishes it, AdamW::gradient_to_host; under
// ZeRO the reduced shards, runtime/src/sharded_params.cpp, ShardedParams::finish_grads):
// grad.host [elems] x 4, elems those of the group's optimizer state (the group, or its shard).
std::int64_t host_grad_bytes(std::int64_t elems);

// Parameter streaming (offload-params, zero3 only) streams the layers' parameter shards from
// the host (runtime/src/layer_executors.cpp, streamed_layer and gathered_layer, with ParamHome::fetch
// and ShardedParams::gather);
// the embedding and the head stay on the device; zero.h says what a gather or a fetch of a
// streamed layer allocates.
bool streamed_group(const StepShapes& s, bool offload_params, int group);

}  // namespace longctx::footprint
