#include "planner/footprint/torchtitan.h"

#include <algorithm>

namespace longctx::footprint::torchtitan {

std::int64_t freqs_cis_bytes(const StepShapes& s) { return s.S * (s.d / 2) * 8; }

std::int64_t rope_cache_bytes(const StepShapes& s) { return s.S * 2 * s.d * 4; }

std::int64_t rope_cache_cast_bytes(const StepShapes& s) { return s.S * 2 * s.d * s.e; }

std::int64_t rope_forward_workspace(const StepShapes& s, std::int64_t heads) {
  return s.e == 4 ? 0 : s.n * heads * s.d * 4;
}

std::int64_t rope_backward_workspace(const StepShapes& s, std::int64_t heads) {
  const std::int64_t conj = (s.r > 1 ? s.n : s.S) * (s.d / 2) * 8;
  return conj + (s.e == 4 ? 0 : 2 * s.n * heads * s.d * 4);
}

torch_ring::RingShape ring_shape(const StepShapes& s, int rank) {
  return {.b = s.b, .q_heads = s.H, .kv_heads = s.K, .local_seq = s.n / s.b, .head_dim = s.d, .elem = s.e,
          .world = static_cast<int>(s.r), .rank = rank, .load_balance = true, .rotate = torch_ring::Rotate::AllGather,
          .qkv_transposed = true, .grad_out_bshd = true, .cpu = s.cpu, .cpu_threads = s.cpu_threads};
}

namespace {

// Every rank as classes: a rank replays like any other whose runs before and after it (rank
// steps, r-1-rank steps) are as long up to three (torch_ring_attention.h, every_step).
template <typename Memory>
std::int64_t most_of_any_rank(const StepShapes& s, Memory memory) {
  const int last = static_cast<int>(s.r) - 1;
  std::int64_t most = 0;
  for (const int rank : {0, 1, 2, 3, last - 3, last - 2, last - 1, last}) {
    if (rank < 0 || rank > last) continue;
    const torch_ring::RingMemory m = memory(ring_shape(s, rank));
    most = std::max(most, m.peak - m.returned);
  }
  return most;
}

}  // namespace

std::int64_t ring_forward_workspace(const StepShapes& s) { return most_of_any_rank(s, torch_ring::forward_memory); }
std::int64_t ring_backward_workspace(const StepShapes& s) { return most_of_any_rank(s, torch_ring::backward_memory); }

double ring_forward_sent_bytes(const StepShapes& s) { return double(s.r - 1) * double(2 * s.n * s.K * s.d * s.e); }
double ring_backward_sent_bytes(const StepShapes& s) {
  return ring_forward_sent_bytes(s) + double(s.r) * double(2 * s.n * s.K * s.d * 4);
}

std::int64_t cp_positions_bytes(const StepShapes& s) { return s.S * 4; }
std::int64_t cp_indices_bytes(const StepShapes& s) { return s.S * 4; }
std::int64_t cp_shard_workspace(const StepShapes& s, std::int64_t elem) {
  return s.b * s.S * elem + s.b * s.S * 8 - s.n * elem;
}

std::int64_t cp_freqs_bytes(const StepShapes& s) { return s.n * (s.d / 2) * 8; }
std::int64_t cp_freqs_workspace(const StepShapes& s) { return s.b == 1 ? s.n * 8 : cp_freqs_bytes(s); }

}  // namespace longctx::footprint::torchtitan
