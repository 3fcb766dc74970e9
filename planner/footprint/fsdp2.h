#pragma once
// FSDP2 as torchtitan applies it (torchtitan 0.2.2 models/llama3/infra/parallelize.py,
// apply_fsdp: fully_shard on the embedding, on each block, and on [norm, output] together,
// MixedPrecisionPolicy(param_dtype, reduce_dtype=fp32)); the buffers are torch 2.11's
// (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py and _fsdp_param_group.py).
// Per rank, for one parameter group (footprint/zero.h's groups); e bytes an element of the
// parameters' compute dtype (param_dtype). Shapes: step_shapes.h.
#include <cstdint>

#include "planner/footprint/step_shapes.h"

namespace longctx::footprint::fsdp2 {

// The rank's shard: each parameter is chunked on dim 0 into world pieces of ceil(rows /
// world) rows (FSDPParam._init_sharded_param pads the last), so a group's shard is the sum
// of ceil(rows / world) * cols over its parameters. The sharded parameters are fp32 (the
// model is built in fp32; param_dtype only casts what is gathered).
std::int64_t padded_shard_elems(const StepShapes& s, int group);
std::int64_t shard_bytes(const StepShapes& s, int group);  // [shard] fp32

// foreach_all_gather: all_gather_output [world * shard] e, which FSDPParamGroup keeps (its
// all_gather_state) until the next group's copy-out in forward, or its own in backward.
std::int64_t all_gather_output_bytes(const StepShapes& s, int group);
// Beside it while it is filled: the copy-in buffer [shard] e when param_dtype is not fp32
// (the fp32 shard cast; in fp32 the shard is copied into its slot of the output).
//
// What the process group allocates itself is not counted: nothing under NCCL; under Gloo on
// the CPU a staging copy of the all-gather output and a clone of the reduce-scatter input,
// which its worker thread frees (so a CPU profile does not always see them go).
std::int64_t all_gather_workspace(const StepShapes& s, int group);
// foreach_all_gather_copy_out: each parameter unsharded until reshard, in the buffer
// FSDPParam.init_all_gather_outputs made for it, its padded shard times the world,
// [world * ceil(rows / world) * cols] e (the parameter is a narrowed view of it).
std::int64_t unsharded_bytes(const StepShapes& s, int group);

// foreach_reduce: reduce_scatter_input [world * shard] in reduce_dtype (`reduce_e` bytes an
// element: fp32 under torchtitan's policy, the parameters' bf16 under accelerate's
// set_mixed_precision, utils/dataclasses.py FullyShardedDataParallelPlugin), the unsharded
// gradients copied in (chunk_cat); FSDPParamGroup keeps it (reduce_scatter_state) until the
// next group's reduce begins, or the end of backward.
std::int64_t reduce_scatter_input_bytes(const StepShapes& s, int group, std::int64_t reduce_e = 4);
// On the CPU only, beside the copy-in: chunk_cat's generic path (aten/src/ATen/native/
// TensorShape.cpp, _pad_chunk) copies each unsharded gradient whose rows do not divide by
// world into a zero-padded [ceil(rows / world) * world, cols] of `grad_e` bytes an element,
// and holds every such copy until the cat into the input; CUDA's _chunk_cat_out_cuda
// (aten/src/ATen/native/cuda/TensorShape.cu) writes contiguous gradients without them.
std::int64_t reduce_copy_in_padding_bytes(const StepShapes& s, int group, std::int64_t grad_e);
// On the CPU only, where the gradients' dtype is not reduce_dtype (torchtitan's bf16 gradients
// into its fp32 reduce): cat_out_cpu (aten/src/ATen/native/TensorShape.cpp) copies each
// (padded) gradient into its slice of the input through a temporary of the gradient's own
// size and dtype, one gradient at a time (a profile of torch._chunk_cat: bf16 [576, 24] and
// [24] into fp32 allocate 27,648 B, then 48 B, each freed before the next). The largest of the
// group's, `grad_e` bytes an element; 0 where the dtypes agree.
std::int64_t reduce_copy_in_cast_bytes(const StepShapes& s, int group, std::int64_t grad_e, std::int64_t reduce_e);
// Its output [shard] in reduce_dtype; below fp32, _to_dtype_if_needed casts it to a new fp32
// [shard] and the reduced one dies as foreach_reduce returns.
std::int64_t reduce_scatter_output_bytes(const StepShapes& s, int group, std::int64_t reduce_e);
// The rank's gradient shard [shard] fp32, kept as the sharded parameters' grads.
std::int64_t grad_shard_bytes(const StepShapes& s, int group);

// torch.optim.AdamW, fused, on the shards: exp_avg and exp_avg_sq [shard] fp32 each and a
// scalar fp32 `step` per parameter tensor, on the parameters' device.
std::int64_t adamw_state_bytes(const StepShapes& s, int group);

}  // namespace longctx::footprint::fsdp2
