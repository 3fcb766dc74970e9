#pragma once
// The SwiGLU MLP: down(silu(gate(x)) * up(x)).
#include <torch/torch.h>

namespace longctx::runtime {

// act = silu(gate) * up. Saves gate and up (planner: mlp.gate, mlp.up); silu is recomputed in
// backward with one [n, I] scratch (planner: the mlp.swiglu.bwd workspace). The forward
// writes silu(gate) into act and multiplies in place: no scratch.
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// The whole MLP over `tiles` row tiles of x [b,S,h] (tokens flattened), cut as the planner's
// tile_split does: ceil(b*S/tiles) rows a tile, the last one shorter. Saves only x and the
// weights; each tile's gate, up and activation live only while that tile runs, forward and
// backward (planner: mlp.tiled and mlp.tiled.bwd workspaces, the largest tile's).
// REQUIRES: 1 <= tiles <= b*S.
// mlp_bias models: the biases of gate, up [I] and down [h]; undefined when the model has none.
struct MlpBiases {
  torch::Tensor gate, up, down;
};
torch::Tensor tiled_mlp(const torch::Tensor& x, const torch::Tensor& w_gate, const torch::Tensor& w_up,
                        const torch::Tensor& w_down, std::int64_t tiles, const MlpBiases& biases = {});

}  // namespace longctx::runtime
