#pragma once
// Causal grouped-query attention, two ways.
//
// attention(): q [b,S,H,d], k and v [b,S,K,d] -> out [b,S,H,d]. Saves q, k, v, out and the
//   log-sum-exp [b,H,S] fp32 (planner: attn.flash.out, attn.flash.lse). The CPU flash kernel
//   takes the K heads of k and v as they are and returns dk, dv over them; on CUDA k and v
//   are expanded to H heads as scratch inside forward and backward and the kernel's dk, dv
//   over H heads are summed over each group (planner: the GQA expansion workspace).
//
// head_chunked_attention(): Untied Ulysses. Runs attention in stages of `chunk` query heads
//   per rank: each stage projects, normalizes and rotates only the heads its ranks receive
//   (chunk x u heads on this rank's n tokens), exchanges them (u > 1) into buffers sized
//   for one stage, attends over all S tokens, and sends the output back into its slice of
//   out [b,n,H*d]. K/V are projected and exchanged once per GQA group and reused by the
//   group's stages; a stage's buffers die before the next stage allocates. Saves only x
//   (the attention input), the weights, out and the per-stage log-sum-exp (hl*b*S fp32,
//   [stages,b,chunk,S] so each stage's slice is contiguous);
//   backward recomputes each stage (with its exchanges) and accumulates dx and the weight
//   gradients.
//   REQUIRES: chunk divides H/u, and chunk divides or is a multiple of (H/u)/kvr.
#include <optional>
#include <stdexcept>

#include <torch/torch.h>

#include "longctx/runtime/norm_rope.h"

namespace longctx::runtime {

// The CUDA flash kernel's limits (aten/src/ATen/native/transformers/cuda/flash_attn/
// flash_api.cpp, mha_fwd/mha_bwd): head_dim at most 256, and a multiple of 8, which
// flash_forward/flash_backward meet by zero-padding the head dimension as the composite
// scaled_dot_product_attention does (attention.cpp, pad_last_dim). Above 256 the runner
// refuses a CUDA run (runnable()).
inline constexpr std::int64_t kCudaFlashMaxHeadDim = 256;
inline constexpr std::int64_t kCudaFlashHeadDimMultiple = 8;

struct FlashOut {
  torch::Tensor out;  // [b,H,S,d] view (memory may be [b,S,H,d])
  torch::Tensor lse;  // [b,H,S] fp32
};
// A tensor handed to the flash backward is laid out as a kernel cannot read it.
class FlashLayoutError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};
// Throws FlashLayoutError unless lse is contiguous and every other input's head dimension
// is dense (what the CUDA kernel assumes). flash_backward checks it on CUDA; head-chunked
// attention, which slices each stage's lse itself, checks it on every device.
void check_flash_backward_inputs(const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& out, const torch::Tensor& lse);

// q, k, v: [b,H,S,d] (any strides, head dimension dense); on CUDA equal head counts, on the
// CPU k and v may have fewer heads (a divisor of q's: grouped-query attention). Causal unless
// `causal` is false (ring attention's off-diagonal blocks, q and k of equal length), scale
// 1/sqrt(d). CUDA: d not a multiple of 8 is zero-padded to one for the kernel (a padded
// copy of q, k, v, and of out and dout in backward: scratch the planner does not count).
FlashOut flash_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal = true);
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> flash_backward(
    const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, bool causal = true);

// k [b,S,K,d] -> [b,S,K*group,d], each kv head repeated `group` times (contiguous copy).
torch::Tensor expand_kv(const torch::Tensor& k, std::int64_t group);
// k or v [b,S,K,d] as the flash kernel of its device takes it: itself on the CPU (LibTorch's
// CPU kernel reads grouped heads), expand_kv on CUDA.
torch::Tensor kv_for_kernel(const torch::Tensor& k, std::int64_t group);
// The kernel's dk or dv [b,S,heads,d] -> [b,S,kv_heads,d]: summed over each group where the
// kernel took expanded k/v, else itself made contiguous.
torch::Tensor reduce_kv(const torch::Tensor& dk_bshd, std::int64_t kv_heads);

torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// The weights attention projects with; q_norm/k_norm undefined unless the model has qk norm.
struct AttentionWeights {
  torch::Tensor wq, wk, wv;        // [H*d, h], [K*d, h], [K*d, h]
  torch::Tensor q_norm, k_norm;    // [d] or undefined
};
struct AttentionShape {
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0;
  double norm_eps = 1e-6;
};
struct UlyssesLayout;
struct RingGroup;
// x [b,n,h] (this rank's tokens) -> out [b,n,H*d]. With a ring of several ranks each stage's
// attention is ring attention over the Ulysses group's tokens (ring_attention.h).
// REQUIRES: s, rope, layout and ring outlive the backward (they are held by address).
torch::Tensor head_chunked_attention(const torch::Tensor& x, const AttentionWeights& w, const AttentionShape& s,
                                     const RopeTables& rope, const UlyssesLayout& layout, std::int64_t chunk,
                                     const RingGroup& ring);

}  // namespace longctx::runtime
