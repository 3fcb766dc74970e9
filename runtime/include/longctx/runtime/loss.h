#pragma once
// The output projection and the mean token cross-entropy.
#include <torch/torch.h>

namespace longctx::runtime {

// logits = x W^T [n, V] -> (bf16: upcast to fp32) -> log_softmax (saved) -> nll, mean over
// tokens. Ordinary autograd ops, in the planner's order (loss.logits, loss.upcast,
// loss.log_softmax, loss.nll).
torch::Tensor cross_entropy_loss(const torch::Tensor& x, const torch::Tensor& w_out, const torch::Tensor& targets);

// The same value, over `tiles` row tiles: each tile's [n/tiles, V] fp32 logits live only
// while the tile runs; backward recomputes them. Saves only x, W and the targets.
// REQUIRES: tiles divides the number of tokens.
torch::Tensor tiled_cross_entropy(const torch::Tensor& x, const torch::Tensor& w_out, const torch::Tensor& targets,
                                  std::int64_t tiles);

}  // namespace longctx::runtime
