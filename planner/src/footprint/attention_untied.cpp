#include "longctx/planner/footprint/attention_untied.h"

#include <algorithm>

#include "longctx/planner/footprint/attention.h"
#include "longctx/planner/footprint/norm.h"

namespace longctx::footprint {
namespace {

// Buffers on the other side of each all-to-all (u > 1): one more of each exchanged tensor.
std::int64_t other_sides(const StepShapes& s, std::int64_t units) { return s.u > 1 ? units : 0; }

}  // namespace

std::int64_t untied_stages(const StepShapes& s, std::int64_t c) { return s.hl / c; }

std::int64_t untied_stage_kv_heads(const StepShapes& s, std::int64_t c) {
  const std::int64_t group = s.hl / s.kvr;
  return std::max<std::int64_t>(1, c / group);
}

std::int64_t untied_stage_unit(const StepShapes& s, std::int64_t heads) { return s.n * s.u * heads * s.d * s.e; }

std::int64_t untied_qk_projection_peak(const StepShapes& s, std::int64_t heads) {
  const std::int64_t U = untied_stage_unit(s, heads);
  // qk norm: pre, normed, rotated, and rstd [n*u*heads] fp32; else pre and rotated.
  return s.qk_norm ? 3 * U + s.n * s.u * heads * 4 : 2 * U;
}

std::int64_t untied_group_forward(const StepShapes& s, std::int64_t c) {
  const std::int64_t kvs = untied_stage_kv_heads(s, c);
  const std::int64_t expanded = kv_expansion(s, c, kvs);
  return expanded > 0 ? expanded : 2 * untied_stage_unit(s, kvs);
}

std::int64_t untied_forward_workspace(const StepShapes& s, std::int64_t c) {
  // q [b*S, c, d] and o [b*S, c, d] e, lse [b, c, S] fp32, and the kernel's block buffers.
  const std::int64_t kernel = 2 * untied_stage_unit(s, c) + (s.b * s.S) * c * 4 + flash_forward_scratch(s);
  return untied_group_forward(s, c) + std::max(untied_qk_projection_peak(s, c), kernel);
}

std::int64_t untied_backward_workspace(const StepShapes& s, std::int64_t c) {
  const std::int64_t kvs = untied_stage_kv_heads(s, c);
  const std::int64_t Uc = untied_stage_unit(s, c), Ukv = untied_stage_unit(s, kvs);
  // qk norm: k's projection [n, u*kvs, d] e and rstd [n*u*kvs] fp32 kept for the group.
  const std::int64_t norm_kv = s.qk_norm ? Ukv + s.n * s.u * kvs * 4 : 0;
  // Where expanding copies, k and v themselves are freed once expanded.
  const std::int64_t expanded = kv_expansion(s, c, kvs);
  // k, v (or their expansion) and dk_acc, dv_acc.
  const std::int64_t group = (expanded > 0 ? 2 : 4) * Ukv + norm_kv + expanded;
  // q of the stage (with qk norm, its projection and rstd too).
  const std::int64_t q = Uc + (s.qk_norm ? Uc + s.n * s.u * c * 4 : 0);
  // dq, dk, dv over the stage's heads, the slice copy of the output gradient, block buffers.
  const std::int64_t kernel = q + 3 * Uc + (c < s.hl ? Uc : 0) + flash_backward_scratch(s, c);
  // The group sum of dk (or dv) [b*S, kvs, d].
  const std::int64_t reduce = q + 3 * Uc + (c > kvs ? Ukv : 0);
  // RoPE's backward of dq, and with qk norm the norm's backward and its input gradient.
  const std::int64_t q_back = q + 2 * Uc + (s.qk_norm ? rms_norm_backward_workspace(s, s.n * s.u * c, s.d) + Uc : 0);
  const std::int64_t exchanged = other_sides(s, 2 * Uc - (c < s.hl ? Uc : 0));
  const std::int64_t q_exchange = other_sides(s, q + Uc), dq_exchange = other_sides(s, 3 * Uc);
  return group + std::max({kernel + exchanged, reduce, q_back, q_exchange, dq_exchange});
}

double untied_forward_sent_bytes(const StepShapes& s) {
  // q and the output [n, H, d] each, k and v [n, u*kvr, d] each.
  return ulysses_sent_bytes(s, (s.n * s.H * s.d * 2 + 2 * kv_sp_elems(s)) * s.e);
}

double untied_backward_sent_bytes(const StepShapes& s) {
  // q, the output, its gradient and dq [n, H, d] each; k, v, dk, dv [n, u*kvr, d] each.
  return ulysses_sent_bytes(s, (s.n * s.H * s.d * 4 + 4 * kv_sp_elems(s)) * s.e);
}

}  // namespace longctx::footprint
