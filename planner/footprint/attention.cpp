#include "planner/footprint/attention.h"

#include <algorithm>

#include "planner/footprint/flash_attn.h"

namespace longctx::footprint {

std::int64_t rope_tables_bytes(const StepShapes& s) {
  return 2 * (s.n / s.b) * (s.d / 2) * s.e;  // cos, sin [S/(u*r), d/2] e
}

double rope_traffic(const StepShapes& s, std::int64_t elems) { return 5.0 * double(elems) * double(s.e); }

double attention_flops(const StepShapes& s, std::int64_t heads) {
  // A ring rank does 1/r of its heads' work (causal load balance).
  return 2.0 * double(s.b) * double(s.S) * double(s.S) * double(s.d) * double(heads) / double(s.r);
}

std::int64_t kv_sp_elems(const StepShapes& s) { return s.n * s.u * s.kvr * s.d; }

std::int64_t kv_expansion(const StepShapes& s, std::int64_t q_heads, std::int64_t kv_heads) {
  // The CPU kernel takes grouped k and v as they are.
  if (s.cpu || q_heads == kv_heads || kv_heads == 1) return 0;
  return 2 * (s.b * s.S) * q_heads * s.d * s.e;  // k_expanded, v_expanded [b*S, q_heads, d] e
}

std::int64_t dq_accumulator(const StepShapes& s, std::int64_t q_heads) {
  // dq_accum [b, S128, q_heads, d32] fp32: the rows and the (8-padded) head rounded up as
  // FlashAttention-2's backward rounds them. Measured on an H100: a head of 16 holds 32.
  return s.cpu ? 0 : flash::fa2_dq_accum_bytes(s.b, s.S, q_heads, s.d);
}

namespace {
// As the kernel clamps them: a block never longer than the rows it splits.
std::int64_t cpu_q_block(std::int64_t rows) { return std::min<std::int64_t>(rows >= 768 ? 256 : rows >= 192 ? 64 : 32, rows); }
std::int64_t cpu_kv_block(std::int64_t keys) { return std::min<std::int64_t>(512, keys); }
}  // namespace

std::int64_t cpu_flash_q_block(const StepShapes& s) { return cpu_q_block(s.S); }
std::int64_t cpu_flash_kv_block(const StepShapes& s) { return cpu_kv_block(s.S); }

// The pairs of query rows and key columns the CPU kernel computes: each q block of `qs` rows
// attends to the keys up to its last row, rounded up to whole kv blocks of `ks`. In closed
// form (a loop over the q blocks took minutes at 2^40 tokens). Below 512 tokens a kv block is
// the whole sequence: L x L. From 512 on ks = 512 and qs (64 or 256) divides it: the q blocks
// fall in groups of k = ks/qs sharing one key bound, 512 g for group g, the last group's capped
// at L; a last partial q block of r rows sees all L keys.
double cpu_causal_kernel_pairs(std::int64_t L) {
  if (L <= 0) return 0;
  const std::int64_t qs = cpu_q_block(L), ks = cpu_kv_block(L);
  if (ks == L) return double(L) * double(L);
  const std::int64_t k = ks / qs;                 // q blocks per kv block
  const std::int64_t full = L / qs, r = L - full * qs;  // full q blocks, rows of the last
  const std::int64_t groups = (full + k - 1) / k;
  const std::int64_t in_last = full - (groups - 1) * k;
  const double g = double(groups);
  double pairs = double(qs) * (double(k) * double(ks) * (g - 1) * g / 2.0 +
                               double(in_last) * double(std::min(ks * groups, L)));
  if (r > 0) pairs += double(r) * double(L);
  return pairs;
}

double attention_kernel_flops(const StepShapes& s, std::int64_t heads) {
  const double causal = attention_flops(s, heads);
  if (!s.cpu || s.S <= 0) return causal;
  // Work per pair: the causal flops over the rank's causal pairs, S^2/(2r).
  const double S = double(s.S), rank_pairs = S * S / (2.0 * double(s.r));
  double pairs = 0;
  if (s.r == 1) {
    pairs = cpu_causal_kernel_pairs(s.S);
  } else {
    const std::int64_t c = s.S / (2 * s.r);
    pairs = rank_pairs + 2.0 * (cpu_causal_kernel_pairs(c) - double(c) * double(c) / 2.0);
  }
  return causal * pairs / rank_pairs;
}

std::int64_t cpu_flash_forward_scratch(std::int64_t q_rows, std::int64_t keys, std::int64_t d, std::int64_t e,
                                       std::int64_t threads) {
  const std::int64_t qs = cpu_q_block(q_rows), ks = cpu_kv_block(keys);
  // Per thread: scores [qs, ks], max and sum [qs] each, out accumulator [qs, d], fp32;
  // bf16: scores [qs, ks] e.
  return threads * ((qs * ks + 2 * qs + qs * d) * 4 + (e == 4 ? 0 : qs * ks * e));
}

std::int64_t cpu_flash_backward_scratch(std::int64_t q_rows, std::int64_t keys, std::int64_t e, std::int64_t threads) {
  const std::int64_t qs = cpu_q_block(q_rows), ks = cpu_kv_block(keys);
  // Per thread: probabilities and their gradient [qs, ks] fp32 each (bf16: e each too), row
  // sums of dO*O [qs] fp32.
  return threads * (2 * qs * ks * 4 + (e == 4 ? 0 : 2 * qs * ks * e) + qs * 4);
}

std::int64_t flash_forward_scratch(const StepShapes& s) {
  return s.cpu ? cpu_flash_forward_scratch(s.S, s.S, s.d, s.e, s.cpu_threads) : 0;
}

std::int64_t flash_backward_scratch(const StepShapes& s, std::int64_t q_heads) {
  // CUDA: dq_accum, and the row sums of dO*O (softmax_d) [b, q_heads, S128] fp32.
  if (!s.cpu) return dq_accumulator(s, q_heads) + flash::fa2_softmax_d_bytes(s.b, s.S, q_heads);
  return cpu_flash_backward_scratch(s.S, s.S, s.e, s.cpu_threads);
}

std::int64_t flash_op_forward_workspace(const StepShapes& s) {
  return kv_expansion(s, s.hl, s.kvr) + flash_forward_scratch(s);
}

std::vector<std::int64_t> flash_op_forward_workspace_sequence(const StepShapes& s) {
  const std::int64_t expansion = kv_expansion(s, s.hl, s.kvr);
  if (expansion == 0) return {};
  std::vector<std::int64_t> seq = {expansion / 2, expansion / 2, 0};
  if (const std::int64_t scratch = flash_forward_scratch(s); scratch > 0) seq.push_back(scratch);
  return seq;
}

std::int64_t flash_op_backward_workspace(const StepShapes& s) {
  std::int64_t ws = flash_backward_scratch(s, s.hl);
  // The CPU kernel writes dk and dv over the kv heads: the op's outputs themselves.
  if (!s.cpu && s.hl != s.kvr) {
    // dk_e, dv_e [b*S, hl, d] e; dk_sp or dv_sp [b*S, kvr, d] e.
    const std::int64_t full = 2 * (s.b * s.S) * s.hl * s.d * s.e, kv = kv_sp_elems(s) * s.e;
    // At the kernel: expanded k and v, dk_e and dv_e, its scratch; at the first sum: dk_e,
    // dv_e and the sum. Less dk_sp and dv_sp, the op's outputs.
    ws = std::max(kv_expansion(s, s.hl, s.kvr) + full + ws, full + kv) - 2 * kv;
  }
  return ws;
}

std::int64_t ulysses_qkv_send_bytes(const StepShapes& s) {
  return (s.n * s.H * s.d + 2 * kv_sp_elems(s)) * s.e;  // q [n, H, d], k, v [n, u*kvr, d]
}

std::int64_t ulysses_exchange_workspace(const StepShapes& s, std::int64_t send) {
  return s.b > 1 ? 2 * send : send;  // send, and with b > 1 the received buffers
}

std::int64_t ulysses_qkv_backward_workspace(const StepShapes& s) {
  // The received dq, dk, dv, each as large as what was sent (replicated dk and dv too: they
  // are summed straight into the outputs); each send buffer is freed before the next exchange.
  return ulysses_qkv_send_bytes(s);
}

std::int64_t ulysses_out_send_bytes(const StepShapes& s) { return s.n * s.H * s.d * s.e; }  // o [n, H, d]

double ulysses_sent_bytes(const StepShapes& s, std::int64_t send) {
  return double(send) * double(s.u - 1) / double(s.u);
}

}  // namespace longctx::footprint
