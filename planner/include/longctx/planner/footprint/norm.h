#pragma once
// RMSNorm's scratch beyond its outputs: the layers' attention and MLP norms, the final norm
// and Qwen3's per-head q and k norms. Forward and backward together.
#include <cstdint>

#include "longctx/planner/footprint/step_shapes.h"

namespace longctx::footprint {

// Forward over `rows` rows of `width` (runtime/src/layers.cpp, rms_norm_forward). bf16: the
// norm is reduced from an fp32 copy of the input, x_fp32 [rows, width] x 4, freed before the
// output [rows, width] e is made, so rows*width*(4 - e) beyond it. fp32: nothing.
std::int64_t rms_norm_forward_workspace(const StepShapes& s, std::int64_t rows, std::int64_t width);

// Backward (runtime/src/layers.cpp, rms_norm_backward): the rows' dot products s [rows] fp32;
// in bf16 also an fp32 copy of the input xf [rows, width] x 4 and the fp32 buffer that becomes
// the input gradient before its cast buf [rows, width] x 4, and the weight's fp32 copy and its
// gradient wf, dw [width] x 4 each. fp32: the gradient is computed in its own output buffer.
std::int64_t rms_norm_backward_workspace(const StepShapes& s, std::int64_t rows, std::int64_t width);

// The same backward where the weight's gradient stays fp32 (head-chunked attention adds it
// into an fp32 accumulator, q_or_k_backward): both fp32 [width] buffers are scratch.
std::int64_t rms_norm_backward_scratch(const StepShapes& s, std::int64_t rows, std::int64_t width);

// Elementwise work of the norm: 4 flops an element forward, 8 backward.
inline double rms_norm_forward_flops(std::int64_t rows, std::int64_t width) { return 4.0 * double(rows * width); }
inline double rms_norm_backward_flops(std::int64_t rows, std::int64_t width) { return 8.0 * double(rows * width); }

}  // namespace longctx::footprint
