#pragma once
// PyTorch's own ring attention, the context parallelism torchtitan and accelerate train with
// (torch/distributed/tensor/experimental/_context_parallel/_attention.py:
// _templated_ring_attention and _templated_ring_attention_backward, with their defaults
// convert_to_f32 and, for causal attention, load balancing), on one rank of a ring of r:
//   q [b, H, Sl, d] e, k and v [b, K, Sl, d] e: the rank's Sl = S/r tokens (under load
//   balancing its two mirrored chunks of Sl/2), H query and K key/value heads
// Forward, step i of r: the k/v pair a rank attends travels as one flat buffer, cat(k, v)
// [2, b, K, Sl, d] e, either gathered from every rank once (all-gather: [r, 2, b, K, Sl, d] e,
// torchtitan's default) or passed to the next rank each step (all-to-all: one pair received per
// step); the kernel's block output and lse [b, H, rows] fp32 are merged into a running output
// and lse in fp32 (sigmoid/logsigmoid temporaries of the block's rows; under load balancing the
// second half of the queries is merged by torch.cat into a new whole). Backward: fp32
// accumulators for dq [b, H, Sl, d] and dk, dv [b, K, Sl, d]; k/v travel as in forward, while
// dk and dv travel round the ring by all-to-all, one cat(dk, dv) [2, b, K, Sl, d] fp32 sent and
// one received per step; dq is made back in e at the end, and the dk/dv pair that came home.
//
// What is counted: every tensor the two functions and the kernels they call allocate, replayed
// with Python's reference counts (a loop variable keeps its block until it is reassigned; a
// skipped step keeps the previous one). The CPU kernels (_scaled_dot_product_flash_attention_
// for_cpu and its backward) and their scratch: attention.h's block sizes, per thread; the
// backward copies grad_out into [b, rows, H, d] unless it is laid out so. On the CPU a bf16
// addend of an fp32 accumulator is cast to fp32 beside the sum (TensorIterator); CUDA kernels
// cast as they read. Not counted: the bf16 CPU backward's GEMM scratch inside
// cpu_flash_attention_backward (CPU bf16 only; docs/stacks.md gives its size), and on CUDA the
// flash kernel's own scratch beyond dq_accum and softmax_d (flash_attn.h).
#include <cstdint>

namespace longctx::footprint::torch_ring {

enum class Rotate { AllGather, AllToAll };

struct RingShape {
  std::int64_t b = 1, q_heads = 1, kv_heads = 1;
  std::int64_t local_seq = 2;  // Sl, even under load balancing
  std::int64_t head_dim = 1;
  std::int64_t elem = 4;  // e: bytes of an element of q, k, v (4 fp32, 2 bf16)
  int world = 2, rank = 0;
  bool load_balance = true;
  Rotate rotate = Rotate::AllGather;
  // q, k and v reach the op as transposed views of [b, Sl, heads, d] (torchtitan's, accelerate's):
  // key.contiguous() copies k and v unless K == 1. False: all three are contiguous [b, heads, Sl, d].
  bool qkv_transposed = true;
  // Backward: grad_out is laid out [b, Sl, H, d] in memory (the gradient of
  // `out.transpose(1, 2).contiguous()`, as both stacks write the attention's output).
  bool grad_out_bshd = true;
  bool cpu = false;
  std::int64_t cpu_threads = 1;
  // Replay every one of the world's steps. By default a run of like steps (those before the
  // rank's, those after it) is replayed up to three long: a step's allocations depend only on
  // its kind, the previous step's and whether it is the last, so longer runs repeat the same
  // state and peak alike (tests compare the two), and a ring of 2^20 ranks costs no more than
  // one of eight.
  bool every_step = false;

  bool operator==(const RingShape&) const = default;
};

// Bytes beyond the op's inputs (q, k, v; in backward also grad_out, out, lse): the most
// allocated at once while it runs, and what it returns (forward: out [b, H, Sl, d] e and lse
// [b, H, Sl] fp32; backward: dq [b, H, Sl, d] e and the dk/dv pair [2, b, K, Sl, d] e).
struct RingMemory {
  std::int64_t peak = 0;
  std::int64_t returned = 0;
};

// Each shape's figures are computed once per thread and remembered (a few dozen shapes).
RingMemory forward_memory(const RingShape& s);
RingMemory backward_memory(const RingShape& s);

// Whether the forward's output is laid out [b, Sl, H, d]: the kernel makes its output in q's
// layout and the merges keep it, but a load-balanced merge of the second half (torch.cat) makes
// it [b, H, Sl, d]. What ones_like(out) would be laid out as.
bool forward_output_bshd(const RingShape& s);

}  // namespace longctx::footprint::torch_ring
