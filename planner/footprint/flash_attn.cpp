#include "planner/footprint/flash_attn.h"

#include <numeric>
#include <vector>

namespace longctx::footprint::flash {

namespace {
std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }
}  // namespace

std::int64_t fa3_rounded_head_dim(std::int64_t d) {
  for (const std::int64_t r : {64, 96, 128, 192}) if (d <= r) return r;
  return 256;
}

std::int64_t fa2_dq_accum_bytes(std::int64_t b, std::int64_t rows, std::int64_t heads, std::int64_t d) {
  return b * round_up(rows, 128) * heads * (d <= 192 ? round_up(d, 32) : 256) * 4;
}

std::int64_t fa2_softmax_d_bytes(std::int64_t b, std::int64_t rows, std::int64_t heads) {
  return b * heads * round_up(rows, 128) * 4;
}

std::vector<std::int64_t> fa2_backward_workspace_sequence(const StepShapes& s, std::int64_t heads,
                                                           std::int64_t kv_heads) {
  // mha_bwd: softmax_d, dq_accum (its `loop`, seqlen_k above one block of keys), and under GQA
  // dk_expanded, dv_expanded [b, S, heads, d] e, summed into dk, dv by at::sum_out.
  std::vector<std::int64_t> seq = {0, fa2_softmax_d_bytes(s.b, s.S, heads), fa2_dq_accum_bytes(s.b, s.S, heads, s.d)};
  if (heads != kv_heads) seq.insert(seq.end(), 2, s.b * s.S * heads * s.d * s.e);
  return seq;
}

std::vector<std::int64_t> fa3_backward_workspace_sequence(const StepShapes& s, std::int64_t heads,
                                                           std::int64_t kv_heads) {
  // hopper/flash_api.cpp, mha_bwd: softmax_d, softmax_lse_log2, dq_accum, then under GQA
  // dk_accum and dv_accum (torch::zeros), the accumulators over the head size rounded up
  // (round_up_headdim); after set_params_dgrad, dq_semaphore [ceil(S/64), b, heads] int32 (its
  // dk and dv semaphores only with `deterministic`, which transformers leaves off).
  const std::int64_t q_rows = round_up(s.S, 64), k_rows = round_up(s.S, 128);
  const std::int64_t softmax = s.b * heads * q_rows * 4;
  const std::int64_t d = fa3_rounded_head_dim(s.d);
  std::vector<std::int64_t> seq = {0, softmax, softmax, s.b * heads * q_rows * d * 4};
  if (heads != kv_heads) seq.insert(seq.end(), 2, s.b * kv_heads * k_rows * d * 4);
  seq.push_back(q_rows / 64 * s.b * heads * 4);
  return seq;
}

std::int64_t fa2_backward_workspace(const StepShapes& s, std::int64_t heads, std::int64_t kv_heads) {
  const auto blocks = fa2_backward_workspace_sequence(s, heads, kv_heads);
  return std::accumulate(blocks.begin(), blocks.end(), std::int64_t{0});
}

std::int64_t fa3_backward_workspace(const StepShapes& s, std::int64_t heads, std::int64_t kv_heads) {
  const auto blocks = fa3_backward_workspace_sequence(s, heads, kv_heads);
  return std::accumulate(blocks.begin(), blocks.end(), std::int64_t{0});
}

}  // namespace longctx::footprint::flash
