#pragma once
// DeepSpeed-Ulysses around attention: all-to-alls over the Ulysses group that turn
// "S/u tokens x all heads" into "all S tokens x H/u heads" and back.
//
// Layout. Rank j of the group holds tokens [j*n, (j+1)*n) of each sample (n = S/u) and, after
// the exchange, query heads [j*hl, (j+1)*hl) (hl = H/u) and kvr kv heads: [j*kvr, (j+1)*kvr)
// when u divides K, else the one kv head j*K/u, replicated to u/K ranks whose gradients are
// summed on the way back. A send buffer is [u, b, n, heads, d]: slice j goes to rank j. With
// micro-batch 1 the sequence side [b, S, heads, d] is a view of the same memory, so only the
// head side is copied.
#include <torch/torch.h>

#include "planner/core/model_config.h"
#include "planner/core/parallel_config.h"
#include "longctx/runtime/communicator.h"

namespace longctx::runtime {

struct UlyssesLayout {
  Communicator* comm = nullptr;  // nullptr: one rank, u = 1
  std::int64_t u = 1, rank = 0;  // group size and this rank's place in it
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0;
  std::int64_t hl = 0, kvr = 0;  // query and kv heads per rank after the exchange

  static UlyssesLayout make(const ModelConfig& m, Communicator* comm);
  // The global kv head that rank j's local kv head i is.
  std::int64_t kv_head(std::int64_t j, std::int64_t i) const {
    return u <= kv_heads ? j * kvr + i : j * kv_heads / u;
  }
  bool replicated() const { return u > kv_heads; }
};

// A rank's columns of a sample of `seq` tokens padded to padded_seq (parallel_config.h), in
// the order the rank holds them. Without a ring, one range: columns [j*cols, (j+1)*cols) of
// Ulysses rank j, cols = padded_seq/u. With a ring of r, the sample is cut into 2r chunks of
// c tokens and ring rank i's Ulysses group holds chunks i and 2r-1-i, in that order (causal
// load balance, ring_attention.h); Ulysses rank j holds piece j of those 2c tokens, which
// may straddle the two chunks (two ranges). Columns at or past `seq` are padding (only the
// last chunk holds any).
struct SequenceShard {
  struct Range {
    std::int64_t first = 0, cols = 0;
  };
  std::vector<Range> ranges;
  std::int64_t seq = 0;  // real tokens of a sample
  std::int64_t cols() const;
  // Each column's position in the sample, in order: RoPE's angles.
  std::vector<std::int64_t> positions() const;
};
SequenceShard sequence_shard(std::int64_t seq, std::int64_t u, std::int64_t rank);
SequenceShard sequence_shard(std::int64_t seq, const ParallelConfig& p, std::int64_t ring_rank,
                             std::int64_t ulysses_rank);

// This shard's tokens and targets [rows, cols] int64 on `device`, from a window [rows, seq + 1]
// of token ids: targets are the next tokens; a padding column holds token 0 and target
// kIgnoreIndex (loss.h), so it adds no loss and, attention being causal, nothing to any real
// token's output or gradient. Fresh tensors: a one-row slice of the window would keep it all.
struct ShardBatch {
  torch::Tensor tokens, targets;  // [rows, cols] int64
};
ShardBatch shard_batch(const torch::Tensor& window, const SequenceShard& shard, torch::Device device);

// [b, S, c, d] (sequence side) <-> [u, b, n, c, d] (send/receive side). Views for b = 1 and
// contiguous input; copies otherwise.
torch::Tensor to_ranks(const torch::Tensor& seq_side, std::int64_t u);
torch::Tensor to_sequence(const torch::Tensor& rank_side);

// q [b,n,H,d], k and v [b,n,K,d] on this rank's tokens -> {q [b,S,hl,d], k and v [b,S,kvr,d]}.
// One autograd node: the three send buffers exist together while the exchanges run (the
// planner's attn.a2a_qkv). Backward: three exchanges back, then the copies to [b,n,.,d].
std::vector<torch::Tensor> ulysses_to_sequence(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                               const UlyssesLayout& layout);
// o [b,S,hl,d] -> [b,n,H,d] (the planner's attn.a2a_out).
torch::Tensor ulysses_to_heads(const torch::Tensor& o, const UlyssesLayout& layout);

}  // namespace longctx::runtime
