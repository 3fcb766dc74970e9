#pragma once
// RMSNorm's scratch beyond its outputs: the layers' attention and MLP norms, the final norm
// and Qwen3's per-head q and k norms. Forward and backward together.
#include <cstdint>

#include "planner/footprint/step_shapes.h"

namespace longctx::footprint {

// Rows of the chunks a norm over `rows` rows of `width` takes at a time (runtime/src/norm_rope.cpp,
// rms_norm_forward and rms_norm_backward): row_chunk (row_chunk.h) of rows of width fp32
// elements, so the fp32 scratch is bounded by a constant number of bytes; r below.
std::int64_t rms_norm_chunk_rows(std::int64_t rows, std::int64_t width);

// Forward over `rows` rows of `width` (runtime/src/norm_rope.cpp, rms_norm_forward): the outputs
// y [rows, width] e and rstd [rows] fp32 are made first, then filled a chunk at a time. bf16
// on the CPU: the chunk's norm (at::linalg_vector_norm_out with an fp32 result) is reduced
// from an fp32 copy x_fp32 [r, width] x 4, freed before the chunk's rstd is rounded to bf16
// [r] e to scale it: r*width*4 beyond the outputs. bf16 on CUDA: the reduction kernel
// converts each element as it loads it and makes no copy (an H100's allocation log holds one
// [r] e block per chunk, the rounded rstd, and nothing else: traces/h100/): r*e. fp32: nothing.
std::int64_t rms_norm_forward_workspace(const StepShapes& s, std::int64_t rows, std::int64_t width);

// Backward (runtime/src/norm_rope.cpp, rms_norm_backward), beyond the input gradient [rows, width]
// e: the weight's gradient accumulated over the chunks in fp32 dw [width] x 4, and per chunk
// its column sums [width] fp32 and then its rows' dot products s [r] fp32; in bf16 also the
// weight's fp32 copy wf [width] x 4, and per chunk an fp32 copy of the chunk of the input
// xf [r, width] x 4 and the fp32 buffer that becomes its rows of the input gradient
// buf [r, width] x 4. fp32: each chunk is computed in its rows of the input gradient.
// Here the weight's gradient is an output ([width] e, cast from dw at the end).
std::int64_t rms_norm_backward_workspace(const StepShapes& s, std::int64_t rows, std::int64_t width);

// The same backward where the weight's gradient stays fp32 (head-chunked attention adds it
// into an fp32 accumulator, q_or_k_backward): dw is scratch too.
std::int64_t rms_norm_backward_scratch(const StepShapes& s, std::int64_t rows, std::int64_t width);

// Elementwise work of the norm: 4 flops an element forward, 8 backward.
inline double rms_norm_forward_flops(std::int64_t rows, std::int64_t width) { return 4.0 * double(rows * width); }
inline double rms_norm_backward_flops(std::int64_t rows, std::int64_t width) { return 8.0 * double(rows * width); }

// Bytes the norm's kernels move over rows x width (runtime/src/norm_rope.cpp), for its time.
// Forward (rms_norm_forward): the norm reads x, y = x * rstd reads x and writes y, y *= w
// reads and writes y: 5 passes of e bytes; in bf16 the norm reduces an fp32 copy of x,
// written and read (2 passes of 4). Backward (rms_norm_backward), fp32: dy*x, *= rstd, the
// column sum, dy*w, the row dot products, *= rstd and the addcmul, 15 passes of 4 bytes; bf16:
// x's and dy's casts into the fp32 buffer and the result's back, 4 passes of e and 19 of 4.
double rms_norm_forward_traffic(const StepShapes& s, std::int64_t rows, std::int64_t width);
double rms_norm_backward_traffic(const StepShapes& s, std::int64_t rows, std::int64_t width);

}  // namespace longctx::footprint
