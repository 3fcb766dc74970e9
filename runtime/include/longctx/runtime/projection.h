#pragma once
// Several linear projections of one input (q, k, v of attention; gate and up of the MLP) as
// one autograd function, so backward writes the input's gradient once (dx = sum_i dy_i W_i)
// instead of one partial per projection and their sum (planner: attn.qkv.bwd and
// mlp.gate_up.bwd each produce a single input gradient).
#include <optional>
#include <vector>

#include <torch/torch.h>

namespace longctx::runtime {

// x [..., h]; each w [out_i, h] (and bias b_i [out_i]) -> y_i = x w_i^T + b_i [..., out_i].
// Saves x and the weights. A bias is added inside the product (addmm: no second output) and
// its gradient is the column sum of dy_i [out_i] (planner: in the projection's gradient piece).
// REQUIRES: 2 or 3 weights; biases empty or one per weight, each undefined or [out_i].
std::vector<torch::Tensor> project(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                   const std::vector<torch::Tensor>& biases = {});

}  // namespace longctx::runtime
