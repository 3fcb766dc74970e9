#include "longctx/planner/footprint/norm.h"

namespace longctx::footprint {

std::int64_t rms_norm_forward_workspace(const StepShapes& s, std::int64_t rows, std::int64_t width) {
  // x_fp32 [rows, width] x 4, less the output [rows, width] e it is freed before.
  return s.e == 4 ? 0 : rows * width * (4 - s.e);
}

std::int64_t rms_norm_backward_workspace(const StepShapes& s, std::int64_t rows, std::int64_t width) {
  // s [rows] fp32; bf16: xf and buf [rows, width] x 4 each, wf and dw [width] x 4 each. The
  // weight's gradient is cast to the weight's dtype after the [rows, width] copies are freed:
  // of its two fp32 [width] buffers, one becomes that output at the peak.
  return rms_norm_backward_scratch(s, rows, width) - (s.e == 4 ? 0 : width * s.e);
}

std::int64_t rms_norm_backward_scratch(const StepShapes& s, std::int64_t rows, std::int64_t width) {
  // s [rows] fp32; bf16: xf and buf [rows, width] x 4 each, wf and dw [width] x 4 each.
  return rows * 4 + (s.e == 4 ? 0 : rows * width * 8 + width * 8);
}

}  // namespace longctx::footprint
