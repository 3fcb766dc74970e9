#pragma once
// The output projection and the token cross-entropy.
#include <optional>

#include <torch/torch.h>

namespace longctx::runtime {

// The label of a padding token (parallel_config.h, padded_seq): no loss, no gradient. The
// value PyTorch's cross-entropy and Hugging Face's labels use.
inline constexpr std::int64_t kIgnoreIndex = -100;

// logits = x W^T [n, V] -> (bf16: upcast to fp32) -> log_softmax (saved) -> nll, summed over
// the tokens whose target is not kIgnoreIndex, divided by `denominator` (default: all n
// tokens, the mean). Ordinary autograd ops, in the planner's order (loss.logits,
// loss.upcast, loss.log_softmax, loss.nll).
torch::Tensor cross_entropy_loss(const torch::Tensor& x, const torch::Tensor& w_out, const torch::Tensor& targets,
                                 std::optional<double> denominator = std::nullopt);

// The same value, over `tiles` row tiles cut as the planner's tile_split does (ceil(n/tiles)
// rows, the last tile shorter): each tile's fp32 logits live only while the tile runs;
// backward recomputes them. Saves only x, W and the targets. Beside the planner's
// workspace each tile makes [t]-sized masks, after logsumexp's [t, V] buffer is gone.
// REQUIRES: 1 <= tiles <= the number of tokens.
torch::Tensor tiled_cross_entropy(const torch::Tensor& x, const torch::Tensor& w_out, const torch::Tensor& targets,
                                  std::int64_t tiles, std::optional<double> denominator = std::nullopt);

}  // namespace longctx::runtime
