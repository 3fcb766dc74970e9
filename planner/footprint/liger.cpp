#include "planner/footprint/liger.h"

namespace longctx::footprint::liger {

std::int64_t norm_backward_workspace(const StepShapes& s, std::int64_t width) {
  const std::int64_t partial = s.multiprocessors * width * 4;
  const std::int64_t sum = width * 4;
  const std::int64_t cast = s.e == 4 ? 0 : width * s.e;
  return partial + sum + cast;
}

std::int64_t flce_forward_held_bytes(const StepShapes& s) { return s.n * 4 + s.n; }

std::int64_t flce_chunk_workspace(const StepShapes& s, std::int64_t rows) {
  return rows * s.V * s.e + rows * s.h * s.e;
}

}  // namespace longctx::footprint::liger
