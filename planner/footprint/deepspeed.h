#pragma once
// DeepSpeed ZeRO-3 as ArcticTraining's recipes configure it (the DeepSpeed defaults:
// reduce_bucket_size 5e8, stage3_param_persistence_threshold 1e5, contiguous_gradients,
// overlap_comm, reduce_scatter; DeepSpeed v0.17.1, deepspeed/runtime/zero/): the buffers it
// holds for a rank of `world`, and those it makes around a gather or a gradient reduction.
// Every figure per rank, in bytes; e is the model's dtype (bf16: DeepSpeed's gradients and
// partitions are in it too). Shapes: step_shapes.h. The ops that use them:
// planner/stacks/blocks/deepspeed_zero3.cpp.
#include <cstdint>

#include "planner/footprint/step_shapes.h"

namespace longctx::footprint::deepspeed {

// zero/config.py DeepSpeedZeroConfig defaults.
inline constexpr std::int64_t kReduceBucketElems = 500'000'000;        // reduce_bucket_size
inline constexpr std::int64_t kPersistenceThreshold = 100'000;          // stage3_param_persistence_threshold
// stage3.py _constant_buffered_norm2: the gradient norm in fp64 over splits of this many elements.
inline constexpr std::int64_t kNormSplitElems = 250'000'000;

// A parameter's partition: ceil(numel / world) elements (partition_parameters.py
// Init._partition_param).
std::int64_t partition_elems(const StepShapes& s, std::int64_t numel);

// Whether a parameter stays whole on every rank (ds_persist: numel at most the persistence
// threshold, parameter_offload.py mark_persistent_parameters): the RMSNorm weights.
bool persistent_param(std::int64_t numel);

// A parameter gathered for its module (partition_parameters.py, _all_gather): a fresh buffer
// of ceil(numel / world) * world elements e, or on one rank with the partition on the host
// (offload_param) its copy of numel elements; on one rank with the partition on the device
// the full parameter aliases it: 0.
std::int64_t gathered_bytes(const StepShapes& s, std::int64_t numel, bool offload_params);

// The persistent gradient bucket (stage3.py _setup_for_real_optimizer,
// __ipg_bucket_flat_buffer): reduce_bucket_size elements e on the device.
std::int64_t ipg_bucket_bytes(const StepShapes& s);

// A reduction of the bucket's gradients, `elems` of them
// (__reduce_and_partition_ipg_grads -> comm/coalesced_collectives.py reduce_scatter_coalesced):
// the flat torch.cat of their partitions padded to the world, elems rounded up per tensor,
// beside them; then partition_grads per parameter of `numel` elements: with the optimizer
// offloaded a device copy of its partition [n_p] e, its fp64 norm over at most 2.5e8 elements
// and the fp32 copy [n_p] sent to the host (at most the larger of the two beside the copy);
// without offload a copy into grad_partitions_flat_buffer, nothing new.
std::int64_t reduce_flat_bytes(const StepShapes& s, std::int64_t elems);
std::int64_t partition_grad_workspace(const StepShapes& s, std::int64_t numel, bool offload_optimizer);

// The optimizer's step on the device (no offload; stage3.py _prepare_fp32_grad_for_sub_group):
// the sub-group's gradients flattened [p] e and cast [p] fp32, p the rank's partition
// elements (one sub-group: sub_group_size 1e9 is above the partitions of these models).
std::int64_t device_step_workspace(const StepShapes& s, std::int64_t partition);

}  // namespace longctx::footprint::deepspeed
