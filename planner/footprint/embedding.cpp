#include "planner/footprint/embedding.h"

#include <algorithm>

namespace longctx::footprint {

std::int64_t embedding_backward_workspace(const StepShapes& s, std::int64_t tokens) {
  if (s.cpu) return 0;
  constexpr std::int64_t kRowsPerThread = 10;  // NROWS_PER_THREAD
  const std::int64_t segments = std::min(tokens, s.V);
  const std::int64_t partials = tokens / kRowsPerThread + segments;
  const std::int64_t ids = (3 * tokens + 2 * segments + partials) * 8;
  return ids + partials * s.h * 4;
}

}  // namespace longctx::footprint
