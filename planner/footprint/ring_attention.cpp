#include "planner/footprint/ring_attention.h"

#include <algorithm>

#include "planner/footprint/attention.h"

namespace longctx::footprint {

std::int64_t ring_chunk(const StepShapes& s) { return s.S / (2 * s.r); }

StepShapes ring_stage_shapes(const StepShapes& s, std::int64_t heads, std::int64_t kv_heads) {
  StepShapes st = s;
  st.hl = heads;
  st.kvr = kv_heads;
  return st;
}

StepShapes ring_block_shapes(const StepShapes& s) {
  StepShapes blk = s;
  blk.S = ring_chunk(s);
  return blk;
}

namespace {

std::int64_t local_rows(const StepShapes& s) { return s.b * (s.S / s.r); }     // b * Sr
std::int64_t kv_pair(const StepShapes& s) { return 2 * local_rows(s) * s.kvr * s.d * s.e; }  // P
std::int64_t accumulators(const StepShapes& s) { return 2 * local_rows(s) * s.kvr * s.d * 4; }  // A: dk, dv fp32
// Beside every block: p2p, the next pair arriving (all but the last step) and the pair
// attended (all but the first, which attends the op's own k and v); all-gather, the gathered
// buffer [r, 2, b, Sr, kvr, d] e, the rank's own pair copied into its slot.
std::int64_t pairs_beside_a_block(const StepShapes& s) {
  return s.ring_gather ? s.r * kv_pair(s) : (s.r > 2 ? 2 : 1) * kv_pair(s);
}

}  // namespace

std::int64_t ring_forward_workspace(const StepShapes& s) {
  const StepShapes blk = ring_block_shapes(s);
  const std::int64_t c = blk.S;
  const std::int64_t acc = local_rows(s) * s.hl * s.d * 4;        // [b, Sr, hl, d] fp32
  const std::int64_t o_sp = local_rows(s) * s.hl * s.d * s.e;     // the op's output
  const std::int64_t out_b = s.b * c * s.hl * s.d * s.e, lse_b = s.b * s.hl * c * 4;
  const std::int64_t kernel = out_b + lse_b + flash_forward_scratch(blk) + kv_expansion(blk, s.hl, s.kvr);
  const std::int64_t o_fp32 = s.e == 4 ? 0 : s.b * c * s.hl * s.d * 4;
  const std::int64_t merge = out_b + 2 * lse_b + std::max(lse_b, o_fp32);
  const std::int64_t block = std::max(kernel, merge);
  const std::int64_t pairs = pairs_beside_a_block(s);
  // fp32: the running output is o_sp itself; bf16: it is beside o_sp, made at the end.
  const std::int64_t end = s.e == 4 ? 0 : o_sp;
  const std::int64_t acc_ws = s.e == 4 ? 0 : acc;
  return acc_ws + std::max(block + pairs, end) - end;
}

std::int64_t ring_backward_workspace(const StepShapes& s, bool head_sliced_dout) {
  const StepShapes blk = ring_block_shapes(s);
  const std::int64_t c = blk.S, P = kv_pair(s), rows = local_rows(s);
  const std::int64_t dq32 = rows * s.hl * s.d * 4, A = accumulators(s);
  const std::int64_t dq_e = rows * s.hl * s.d * s.e, dkv_e = 2 * rows * s.kvr * s.d * s.e;
  // The kernel's gradients of one block: dq over hl heads; dk, dv over the kv heads (CPU) or
  // the query heads (CUDA, before the sum over each group).
  const std::int64_t kv_heads = s.cpu ? s.kvr : s.hl;
  const std::int64_t gq = s.b * c * s.hl * s.d * s.e, gk = s.b * c * kv_heads * s.d * s.e;
  const std::int64_t G = gq + 2 * gk;
  // LibTorch's CPU backward takes the output gradient contiguous (aten's
  // _scaled_dot_product_flash_attention_cpu_backward): a query half of [b, Sr, hl, d] is not
  // once b > 1, and is copied for the kernel's duration.
  const std::int64_t dout_copy = s.cpu && (s.b > 1 || head_sliced_dout) ? gq : 0;
  const std::int64_t kernel = G + dout_copy + flash_backward_scratch(blk, s.hl) + kv_expansion(blk, s.hl, s.kvr);
  // Summed into the fp32 accumulators one at a time through fp32 copies (bf16 only); on CUDA
  // a group sum [b, c, kvr, d] e comes first.
  const std::int64_t to32 = s.e == 4 ? 0 : 1;
  const std::int64_t kv_sum = s.cpu || s.hl == s.kvr ? 0 : s.b * c * s.kvr * s.d * s.e;
  const std::int64_t dk32 = to32 * s.b * c * s.kvr * s.d * 4;
  const std::int64_t accumulate = std::max(G + to32 * s.b * c * s.hl * s.d * 4, G - gq + kv_sum + dk32);
  const std::int64_t block = std::max(kernel, accumulate);
  if (s.ring_gather) {
    // dq fp32, the gathered pairs and every holder's dk/dv accumulators [r, 2, b, Sr, kvr, d]
    // fp32 through the blocks; then the pairs freed, this rank's sums received beside the
    // accumulators; then the outputs made from dq and the sums (fp32: they are the outputs).
    const std::int64_t blocks = dq32 + s.r * P + s.r * A + block, scatter = dq32 + s.r * A + A;
    if (s.e == 4) return std::max(blocks, scatter) - (dq32 + A);
    return std::max({blocks, scatter, dq32 + A + dq_e, dq_e + A + dkv_e}) - (dq_e + dkv_e);
  }
  const std::int64_t live = dq32 + A;
  // Beside every block the pairs as in forward; after a step's blocks the accumulators hop,
  // received beside the ones sent and the pair the next step attends (the last hop: beside
  // nothing more).
  std::int64_t peak = live + std::max(block + pairs_beside_a_block(s), A + P);
  // bf16: the outputs made from the fp32 ones, dq first.
  if (s.e != 4) peak = std::max({peak, live + dq_e, dq_e + A + dkv_e / 2, dq_e + dkv_e + A / 2});
  const std::int64_t outputs = s.e == 4 ? live : dq_e + dkv_e;
  return peak - outputs;
}

double ring_forward_sent_bytes(const StepShapes& s) { return double(s.r - 1) * double(kv_pair(s)); }

double ring_backward_sent_bytes(const StepShapes& s) {
  const double A = double(accumulators(s));
  // All-gather: the pairs gathered again, then every holder's accumulators reduce-scattered
  // ((r-1)/r of r accumulators sent).
  if (s.ring_gather) return double(s.r - 1) * (double(kv_pair(s)) + A);
  return double(s.r - 1) * (double(kv_pair(s)) + A) + A;
}

int ring_forward_calls(const StepShapes& s) { return s.ring_gather ? 1 : static_cast<int>(s.r); }
int ring_backward_calls(const StepShapes& s) { return s.ring_gather ? 2 : static_cast<int>(s.r + 1); }

double ring_forward_overlapped_bytes(const StepShapes& s) {
  // p2p: every hop beside a block. All-gather: the rank's own blocks run while the gather
  // travels, a 1/r share of the op's work; not credited (cost_model.h bounds hidden bytes by a
  // whole layer's compute, which would hide the gather behind blocks that wait for it).
  return s.ring_gather ? 0.0 : ring_forward_sent_bytes(s);
}

}  // namespace longctx::footprint
