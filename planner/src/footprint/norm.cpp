#include "longctx/planner/footprint/norm.h"

namespace longctx::footprint {

std::int64_t rms_norm_forward_workspace(const StepShapes& s, std::int64_t rows, std::int64_t width) {
  // x_fp32 [rows, width] x 4, less the output [rows, width] e it is freed before.
  return s.e == 4 ? 0 : rows * width * (4 - s.e);
}

std::int64_t rms_norm_backward_workspace(const StepShapes& s, std::int64_t rows, std::int64_t width) {
  // s [rows] fp32; bf16: xf and buf [rows, width] x 4 each, wf and dw [width] x 4 each.
  return rows * 4 + (s.e == 4 ? 0 : rows * width * 8 + width * 8);
}

}  // namespace longctx::footprint
