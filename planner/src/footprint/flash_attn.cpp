#include "longctx/planner/footprint/flash_attn.h"

namespace longctx::footprint::flash {

namespace {
std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }
}  // namespace

std::int64_t fa2_dq_accum_bytes(std::int64_t b, std::int64_t rows, std::int64_t heads, std::int64_t d) {
  return b * round_up(rows, 128) * heads * (d <= 192 ? round_up(d, 32) : 256) * 4;
}

std::int64_t fa2_softmax_d_bytes(std::int64_t b, std::int64_t rows, std::int64_t heads) {
  return b * heads * round_up(rows, 128) * 4;
}

std::int64_t fa2_backward_workspace(const StepShapes& s, std::int64_t heads, std::int64_t kv_heads) {
  const std::int64_t expanded = heads != kv_heads ? 2 * s.b * s.S * heads * s.d * s.e : 0;
  return fa2_softmax_d_bytes(s.b, s.S, heads) + fa2_dq_accum_bytes(s.b, s.S, heads, s.d) + expanded;
}

std::int64_t fa3_backward_workspace(const StepShapes& s, std::int64_t heads, std::int64_t kv_heads) {
  const std::int64_t q_rows = round_up(s.S, 64), k_rows = round_up(s.S, 128);
  const std::int64_t softmax = 2 * s.b * heads * q_rows * 4;
  const std::int64_t dq_accum = s.b * heads * q_rows * s.d * 4;
  const std::int64_t kv_accum = heads != kv_heads ? 2 * s.b * kv_heads * k_rows * s.d * 4 : 0;
  return softmax + dq_accum + kv_accum;
}

}  // namespace longctx::footprint::flash
