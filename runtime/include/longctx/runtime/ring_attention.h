#pragma once
// Ring attention (context parallelism): causal attention over a sequence split across the r
// ranks of a ring, with no cap from the head count. Each rank keeps its queries; the key and
// value blocks travel round the ring, one neighbour hop per step, and each rank merges the
// partial outputs of the blocks it sees by their log-sum-exp.
//
// Layout (causal load balance, as torchtitan's context parallel and ring-flash-attention's
// zigzag layout): the sequence of S tokens is cut into 2r chunks of c = S/(2r) tokens; ring
// rank i holds chunks i and 2r-1-i, in that order, as its n = 2c local tokens. Every rank
// then does the same work: at step 0 its own two diagonal blocks (causal) and the block of
// its late chunk against its early one; at every later step exactly two full c x c blocks.
//
// ring_attention(q [b,n,H,d], k [b,n,K,d], v [b,n,K,d]) -> out [b,n,H,d], one autograd node.
//   Forward, per rank: the running output [b,n,H,d] fp32 and log-sum-exp [2,b,H,c] fp32; the
//   k/v block being attended and the one arriving ([b,n,K,d] each, two of each in flight);
//   each block's kernel output and lse beside its scratch (on CUDA the block's k/v expanded to
//   H heads), then their merge. Saves q, k, v, out (q's dtype) and the lse.
//   Backward: dq [b,n,H,d] fp32 accumulated locally; the k/v blocks travel again, with their
//   dk/dv accumulators [b,n,K,d] fp32 beside them; after r-1 hops a last hop brings each
//   accumulator home. Each block's gradients come from the flash backward given the final
//   out and lse, which is exact: a block's dq, dk, dv depend on the other blocks only through
//   those two. Every allocation is the planner's (footprint/ring_attention.h).
//
// The all-gather exchange (ring.exchange == RingExchange::AllGather; parallel_config.h): no
// hops. Forward gathers the ring's k and v into one buffer [r, 2, b, n, K, d] while the rank
// attends its own blocks with its own k and v, then attends every other holder's from that
// buffer. Backward gathers again, accumulates dk/dv for every holder in [r, 2, b, n, K, d]
// fp32, and reduce-scatters them: each rank keeps the sum for its own k and v [2, b, n, K, d]
// fp32, from which its outputs are made. The gather is process_group.h's
// start_gather_in_place (Gloo: an in-place all-reduce with zeros outside the rank's slot);
// the reduce-scatter on Gloo an in-place all-reduce then the rank's slot (Gloo's own clones
// the whole buffer), on NCCL _reduce_scatter_base.
//
// REQUIRES: every rank of the ring calls it with the same shapes, n even; K divides H.
#include <chrono>
#include <cstdint>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/torch.h>

#include "planner/core/parallel_config.h"

namespace longctx::runtime {

// The ring: a process group whose ranks 0..size-1 are the ring's, in ring order.
struct RingGroup {
  c10::intrusive_ptr<c10d::Backend> group;  // null with size 1
  int rank = 0, size = 1;
  // How long a hop waits for its peers on Gloo (0: Gloo's default); NCCL's watchdog enforces
  // the group's own timeout.
  std::chrono::milliseconds timeout{0};
  RingExchange exchange = RingExchange::P2p;  // how k/v reach the ring's ranks
};

// The chunks ring rank i holds of a sequence cut into 2r chunks: {i, 2r-1-i}.
std::pair<std::int64_t, std::int64_t> ring_chunks(std::int64_t rank, std::int64_t ring_size);

// This rank's n = 2S/(2r) tokens of a [b,S,...] tensor, in the layout above (a copy).
// REQUIRES: 2r divides S.
torch::Tensor ring_shard(const torch::Tensor& seq_side, std::int64_t rank, std::int64_t ring_size);

torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const RingGroup& ring);

// The same without autograd, for callers that stage heads themselves (head-chunked
// attention): the output [b,n,H,d] in q's dtype and the log-sum-exp [2,b,H,c] fp32, and back.
// dout [b,n,H,d] may be any strided view with a dense head dimension (a block's slice of it is
// copied for the CPU kernel where it is not contiguous). Returns dq, dk, dv in the inputs'
// dtypes.
struct RingResult {
  torch::Tensor out, lse;
};
RingResult ring_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const RingGroup& ring);
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> ring_backward(const torch::Tensor& dout, const torch::Tensor& q,
                                                                      const torch::Tensor& k, const torch::Tensor& v,
                                                                      const torch::Tensor& out, const torch::Tensor& lse,
                                                                      const RingGroup& ring);

}  // namespace longctx::runtime
