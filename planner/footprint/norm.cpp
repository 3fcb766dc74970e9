#include "planner/footprint/norm.h"

#include <algorithm>

#include "planner/core/row_chunk.h"

namespace longctx::footprint {

std::int64_t rms_norm_chunk_rows(std::int64_t rows, std::int64_t width) {
  return rows < 1 ? 1 : row_chunk(rows, width * 4);  // the chunk's fp32 rows bound it
}

std::int64_t rms_norm_forward_workspace(const StepShapes& s, std::int64_t rows, std::int64_t width) {
  // bf16, beside the outputs: on the CPU a chunk's x_fp32 [r, width] x 4, freed before its
  // rstd is rounded to bf16 [r] e; on CUDA the rounded rstd alone.
  if (s.e == 4) return 0;
  const std::int64_t r = rms_norm_chunk_rows(rows, width);
  return s.cpu ? r * width * 4 : r * s.e;
}

std::int64_t rms_norm_backward_workspace(const StepShapes& s, std::int64_t rows, std::int64_t width) {
  // The weight's gradient is cast to the weight's dtype after the chunks' buffers are freed: of
  // the fp32 accumulator dw the output's [width] e are counted as the op's output.
  return rms_norm_backward_scratch(s, rows, width) - width * s.e;
}

std::int64_t rms_norm_backward_scratch(const StepShapes& s, std::int64_t rows, std::int64_t width) {
  const std::int64_t r = rms_norm_chunk_rows(rows, width);
  // dw [width] fp32; bf16: wf [width] x 4, a chunk's xf and buf [r, width] x 4 each. Beside
  // them, one at a time: the chunk's column sums [width] fp32, then its row dot products
  // s [r] fp32.
  const std::int64_t fixed = s.e == 4 ? width * 4 : width * 8 + r * width * 8;
  return fixed + std::max(width, r) * 4;
}

double rms_norm_forward_traffic(const StepShapes& s, std::int64_t rows, std::int64_t width) {
  return double(rows * width) * double(5 * s.e + (s.e == 4 ? 0 : 2 * 4));
}

double rms_norm_backward_traffic(const StepShapes& s, std::int64_t rows, std::int64_t width) {
  return double(rows * width) * double(s.e == 4 ? 15 * 4 : 4 * s.e + 19 * 4);
}

}  // namespace longctx::footprint
