#pragma once
// Several linear projections of one input (q, k, v of attention; gate and up of the MLP) as
// one autograd function, so backward writes the input's gradient once (dx = sum_i dy_i W_i)
// instead of one partial per projection and their sum (planner: attn.qkv.bwd and
// mlp.gate_up.bwd each produce a single input gradient).
#include <optional>
#include <vector>

#include <torch/torch.h>

namespace longctx::runtime {

// x [..., h]; each w [out_i, h] -> y_i [..., out_i]. Saves x and the weights.
// REQUIRES: 2 or 3 weights.
std::vector<torch::Tensor> project(const torch::Tensor& x, const std::vector<torch::Tensor>& weights);

}  // namespace longctx::runtime
