#pragma once
// The embedding lookup's backward: what the kernel allocates beside the dense [V, h] gradient
// it returns (that gradient is the op's output, counted by the caller).
#include <cstdint>

#include "planner/footprint/step_shapes.h"

namespace longctx::footprint {

// Bytes the lookup's backward holds at its peak beside its [V, h] output, for `tokens`
// looked-up rows (this rank's, micro-batch included).
//   CPU: 0 (embedding_dense_backward_cpu adds each row into the output in place).
//   CUDA: aten's embedding_dense_backward_cuda sorts the ids and hands them to
//   embedding_backward_cuda_kernel (aten/src/ATen/native/cuda/EmbeddingBackwardKernel.cu),
//   which sums each run of equal ids in partial segments of NROWS_PER_THREAD = 10 rows:
//     sorted and original positions        2 x [tokens] int64
//     segment_offsets                      [tokens] int64
//     partials_per_segment and its offsets 2 x [min(tokens, V)] int64
//     partial_segment_offset               [P] int64
//     grad_weight_per_segment              [P, h] fp32 (acc_type, also for bf16 gradients)
//   with P = tokens / 10 + min(tokens, V), sized for the worst case without a device sync.
//   Measured on an H100 for 65,536 tokens of Llama-3.2-1B: one 563.2 MiB block (P = 72,089
//   rows of 2048 fp32) beside 3 MiB of ids.
std::int64_t embedding_backward_workspace(const StepShapes& s, std::int64_t tokens);

}  // namespace longctx::footprint
