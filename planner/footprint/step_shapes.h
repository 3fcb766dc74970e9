#pragma once
// The sizes every footprint of one training step is written in, computed once from the
// step's inputs. The footprint functions (this folder) are pure functions of these.
#include <cstdint>

#include "planner/core/step_inputs.h"

namespace longctx::footprint {

// Symbols (as in docs/memory-model.md and every shape comment of the step builder):
//   b     micro-batch: samples per data-parallel rank
//   S     sequence: tokens per sample as the layout runs it, before Ulysses and the ring split
//         it: the user's length padded to a multiple of u, or of 2*r*u with a ring
//         (parallel_config.h, padded_seq)
//   u     Ulysses degree (sequence-parallel ranks)
//   r     ring (context-parallel) degree: 1 without ring attention
//   ring_gather  the ring's k/v all-gathered rather than passed hop by hop (RingExchange)
//   n     = b*S/(u*r), tokens on this rank (padding included)
//   world ranks of the job (the collectives' group; N in the docs)
//   h     hidden size
//   I     intermediate (MLP) size
//   V     vocabulary size
//   H     query heads
//   K     key/value heads (GQA)
//   d     head_dim
//   hl    = H/u, query heads per rank after the Ulysses all-to-all
//   kvr   kv heads per rank after it: K/u, or 1 replicated head when u > K
//   e     bytes per parameter and activation element (bf16 2, fp32 4)
//   g     bytes per gradient element
//   layers  decoder layers
//   qk_norm per-head RMSNorm of q and k (Qwen3)
//   tied    output projection tied to the embedding
//   qkv_bias, o_bias, mlp_bias  the projections' biases (ModelConfig's)
//   master  fp32 master weights beside the parameters (parameters not fp32)
//   cpu     LibTorch's CPU kernels (the virtual device) rather than CUDA's
//   cpu_threads  intra-op threads of the CPU backend (the flash kernel's buffers are per thread)
//   multiprocessors  CUDA streaming multiprocessors (per-SM partial buffers); 0 if unknown
//   cublas_workspace  CUDA: bytes of one cuBLAS workspace; 0 on the CPU or if not modelled
//   layer_params, embed_params, head_params  parameter elements of each kind of group: the
//                sums of zero.h's param_sizes, computed once (the search builds thousands of
//                graphs and asks for them at every gather and reduction)
struct StepShapes {
  std::int64_t b = 0, S = 0, u = 0, r = 1, n = 0, world = 0;
  bool ring_gather = false;
  std::int64_t h = 0, I = 0, V = 0, H = 0, K = 0, d = 0, hl = 0, kvr = 0;
  std::int64_t e = 0, g = 0;
  std::int64_t layers = 0;
  bool qk_norm = false, tied = false, master = false;
  bool qkv_bias = false, o_bias = false, mlp_bias = false;
  bool cpu = false;
  std::int64_t cpu_threads = 1;
  std::int64_t multiprocessors = 0;
  std::int64_t cublas_workspace = 0;
  std::int64_t layer_params = 0, embed_params = 0, head_params = 0;
};

// REQUIRES: validate(in.model, in.cluster, in.train, in.parallel) holds.
StepShapes step_shapes(const StepInputs& in);

// 2*m*k*n: the flops of an [m, k] x [k, n] matmul.
inline double matmul_flops(std::int64_t m, std::int64_t k, std::int64_t n) {
  return 2.0 * double(m) * double(k) * double(n);
}

}  // namespace longctx::footprint
