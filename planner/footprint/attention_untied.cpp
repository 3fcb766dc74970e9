#include "planner/footprint/attention_untied.h"

#include <algorithm>

#include "planner/footprint/attention.h"
#include "planner/footprint/norm.h"
#include "planner/footprint/ring_attention.h"

namespace longctx::footprint {
namespace {

// Buffers on the other side of each all-to-all (u > 1): one more of each exchanged tensor.
std::int64_t other_sides(const StepShapes& s, std::int64_t units) { return s.u > 1 ? units : 0; }

// A stage's log-sum-exp, [b, c, S/r] fp32 (with a ring, its [2, b, c, S/(2r)] in that slot).
std::int64_t stage_lse(const StepShapes& s, std::int64_t c) { return s.b * (s.S / s.r) * c * 4; }

// The ring's shapes for a stage of c heads and the kv heads they read.
StepShapes stage_ring(const StepShapes& s, std::int64_t c) {
  return ring_stage_shapes(s, c, untied_stage_kv_heads(s, c));
}

}  // namespace

std::int64_t untied_stages(const StepShapes& s, std::int64_t c) { return s.hl / c; }

std::int64_t untied_stage_kv_heads(const StepShapes& s, std::int64_t c) {
  const std::int64_t group = s.hl / s.kvr;
  return std::max<std::int64_t>(1, c / group);
}

std::int64_t untied_kv_loads(const StepShapes& s, std::int64_t c) { return std::min(untied_stages(s, c), s.kvr); }

std::int64_t untied_stage_unit(const StepShapes& s, std::int64_t heads) { return s.n * s.u * heads * s.d * s.e; }

std::int64_t untied_qk_projection_peak(const StepShapes& s, std::int64_t heads) {
  // The send buffer [n, u*heads, d] (one unit); each destination's slice [n, heads, d] is
  // projected into its own buffer, normed (qk norm: its rstd [n*heads] fp32, the norm's
  // fp32 copy beyond the normed slice) and rotated into the send buffer, then freed.
  const std::int64_t U = untied_stage_unit(s, heads), slice = U / s.u, rows = s.n * heads;
  return U + slice + (s.qk_norm ? rows * 4 + slice + rms_norm_forward_workspace(s, rows, s.d) : 0);
}

std::int64_t untied_group_forward(const StepShapes& s, std::int64_t c) {
  const std::int64_t kvs = untied_stage_kv_heads(s, c);
  // With a ring k and v stay grouped: each block expands its own (ring_forward_workspace).
  const std::int64_t expanded = s.r > 1 ? 0 : kv_expansion(s, c, kvs);
  return expanded > 0 ? expanded : 2 * untied_stage_unit(s, kvs);
}

std::int64_t untied_forward_workspace(const StepShapes& s, std::int64_t c) {
  // q [b*S, c, d] and o [b*S, c, d] e, lse [b, c, S] fp32, and the kernel's block buffers;
  // with a ring, ring attention's over the stage's heads beside q, o and lse.
  const std::int64_t Uc = untied_stage_unit(s, c), lse = stage_lse(s, c);
  const std::int64_t kernel =
      2 * Uc + lse + (s.r > 1 ? ring_forward_workspace(stage_ring(s, c)) : flash_forward_scratch(s));
  // Sending the stage's output back (u > 1; runtime/src/attention.cpp, to_rank_slices): q is
  // freed, and beside o and lse stand what the all-to-all receives, [n, u*c, d], and with
  // b > 1 o's copy laid out one slice per destination (ulysses.cpp, to_ranks; with one
  // sample the kernel's output, laid out [b, S, c, d], is already that). Larger than the
  // kernel's moment when the block buffers are smaller than one stage's output.
  const std::int64_t out_exchange = Uc + lse + other_sides(s, (s.b > 1 ? 2 : 1) * Uc);
  return untied_group_forward(s, c) + std::max({untied_qk_projection_peak(s, c), kernel, out_exchange});
}

std::int64_t untied_backward_workspace(const StepShapes& s, std::int64_t c) {
  const std::int64_t kvs = untied_stage_kv_heads(s, c);
  const std::int64_t Uc = untied_stage_unit(s, c), Ukv = untied_stage_unit(s, kvs);
  // qk norm: k's projection [n, u*kvs, d] e and rstd [n*u*kvs] fp32 kept for the group.
  const std::int64_t norm_kv = s.qk_norm ? Ukv + s.n * s.u * kvs * 4 : 0;
  // Where expanding copies, k and v themselves are freed once expanded (never with a ring: its
  // blocks expand their own).
  const std::int64_t expanded = s.r > 1 ? 0 : kv_expansion(s, c, kvs);
  // k, v (or their expansion) and dk_acc, dv_acc.
  const std::int64_t group = (expanded > 0 ? 2 : 4) * Ukv + norm_kv + expanded;
  // q of the stage (with qk norm, its projection and rstd too).
  const std::int64_t q = Uc + (s.qk_norm ? Uc + s.n * s.u * c * 4 : 0);
  // dq over the stage's heads, dk and dv over its heads (CUDA) or its kv heads (the CPU kernel
  // takes grouped k and v), the slice copy of the output gradient, block buffers. On CUDA the
  // stage's output is copied too: it is a slice of the layer's output (stage_heads) and
  // PyTorch's flash backward makes both it and the output gradient contiguous
  // (attention_backward.cu, _flash_attention_backward: contiguous_grad_out, contiguous_out).
  // Measured on an H100 (head chunks of 4): 64 MiB under the backward's peak without it.
  const std::int64_t dkv = 2 * (s.cpu || s.r > 1 ? Ukv : Uc);
  // With a ring: its dq, dk, dv over the stage's heads and kv heads, beside its own workspace
  // (a block's contiguous copy of the output gradient where the stage slices it), and with
  // u > 1 the exchanged output and its gradient.
  const std::int64_t kernel =
      s.r > 1 ? q + Uc + dkv + other_sides(s, 2 * Uc) + ring_backward_workspace(stage_ring(s, c), s.u == 1 && c < s.hl)
              : q + Uc + dkv + (c < s.hl ? (s.cpu ? 1 : 2) * Uc : 0) + flash_backward_scratch(s, c);
  // CUDA: the group sum of dk (or dv) [b*S, kvs, d]; the CPU kernel's are added as they are.
  const std::int64_t reduce = q + Uc + dkv + (!s.cpu && c > kvs ? Ukv : 0);
  // After the kernel q is freed and dq [b*S, c, d] (u > 1: received back, [n, u*c, d]) is
  // pushed back one destination's slice [n, c, d] at a time: RoPE's backward of the slice,
  // and with qk norm the norm's backward over its n*c rows and its input gradient, one slice.
  const std::int64_t slice = Uc / s.u;
  const std::int64_t q_back = (q - Uc) + Uc + slice +
                              (s.qk_norm ? rms_norm_backward_scratch(s, s.n * c, s.d) + slice : 0);
  // qk norm: the norms' weight gradients accumulate in fp32 [d] each from the start, cast to
  // the weights' dtype at the end (the op's output counts them in g bytes).
  const std::int64_t norm_accumulators = s.qk_norm ? 2 * s.d * (4 - s.g) : 0;
  const std::int64_t exchanged = s.r > 1 ? 0 : other_sides(s, 2 * Uc - (c < s.hl ? Uc : 0));
  const std::int64_t q_exchange = other_sides(s, q + Uc), dq_exchange = other_sides(s, 3 * Uc);
  return norm_accumulators + group + std::max({kernel + exchanged, reduce, q_back, q_exchange, dq_exchange});
}

double untied_forward_sent_bytes(const StepShapes& s) {
  // q and the output [n, H, d] each, k and v [n, u*kvr, d] each.
  return s.u > 1 ? ulysses_sent_bytes(s, (s.n * s.H * s.d * 2 + 2 * kv_sp_elems(s)) * s.e) : 0;
}

double untied_backward_sent_bytes(const StepShapes& s) {
  // q, the output, its gradient and dq [n, H, d] each; k, v, dk, dv [n, u*kvr, d] each.
  return s.u > 1 ? ulysses_sent_bytes(s, (s.n * s.H * s.d * 4 + 4 * kv_sp_elems(s)) * s.e) : 0;
}

double untied_ring_forward_sent_bytes(const StepShapes& s, std::int64_t c) {
  return s.r > 1 ? double(untied_stages(s, c)) * ring_forward_sent_bytes(stage_ring(s, c)) : 0;
}

double untied_ring_forward_overlapped_bytes(const StepShapes& s, std::int64_t c) {
  return s.r > 1 ? double(untied_stages(s, c)) * ring_forward_overlapped_bytes(stage_ring(s, c)) : 0;
}

double untied_ring_backward_sent_bytes(const StepShapes& s, std::int64_t c) {
  return s.r > 1 ? double(untied_stages(s, c)) * ring_backward_sent_bytes(stage_ring(s, c)) : 0;
}

}  // namespace longctx::footprint
