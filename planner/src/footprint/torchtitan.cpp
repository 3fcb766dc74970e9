#include "longctx/planner/footprint/torchtitan.h"

namespace longctx::footprint::torchtitan {

std::int64_t freqs_cis_bytes(const StepShapes& s) { return s.S * (s.d / 2) * 8; }

std::int64_t rope_cache_bytes(const StepShapes& s) { return s.S * 2 * s.d * 4; }

std::int64_t rope_cache_cast_bytes(const StepShapes& s) { return s.S * 2 * s.d * s.e; }

std::int64_t rope_forward_workspace(const StepShapes& s, std::int64_t heads) {
  return s.e == 4 ? 0 : s.n * heads * s.d * 4;
}

std::int64_t rope_backward_workspace(const StepShapes& s, std::int64_t heads) {
  const std::int64_t conj = s.S * (s.d / 2) * 8;
  return conj + (s.e == 4 ? 0 : 2 * s.n * heads * s.d * 4);
}

}  // namespace longctx::footprint::torchtitan
