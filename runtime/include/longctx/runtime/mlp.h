#pragma once
// The SwiGLU MLP: down(silu(gate(x)) * up(x)).
#include <torch/torch.h>

namespace longctx::runtime {

// act = silu(gate) * up. Saves gate and up (planner: mlp.gate, mlp.up); the backward
// recomputes silu and writes the gradients into gate's and up's buffers
// (swiglu_backward_in_place; planner: the mlp.swiglu.bwd workspace), unless gate or up is a
// leaf (a caller's own tensor), which it copies first. The forward writes silu(gate) into act
// and multiplies in place: no scratch.
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// The gradients of act = silu(g) * u for the act gradient da [rows, I], written over g and u:
// d_gate into u's buffer and d_up into g's, a chunk of chunk_rows rows at a time (0:
// row_chunk(rows, I * element size), row_chunk.h) beside one [chunk, I] scratch.
// REQUIRES: g and u contiguous, shaped like da, and read by no one afterwards.
// Returns {d_gate, d_up}: u and g.
std::pair<torch::Tensor, torch::Tensor> swiglu_backward_in_place(const torch::Tensor& da, const torch::Tensor& g,
                                                                 const torch::Tensor& u, std::int64_t chunk_rows = 0);

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
