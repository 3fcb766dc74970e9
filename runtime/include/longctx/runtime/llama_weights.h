#pragma once
// The parameters of a Llama-family model, laid out as Hugging Face names them
// (planner/core/param_layout.h: the one table of their order and shapes), with a
// deterministic initialization from a seed.
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "planner/core/model_config.h"
#include "planner/core/param_layout.h"

namespace longctx::runtime {

struct LayerWeights {
  torch::Tensor attn_norm;       // [h]
  torch::Tensor wq, wk, wv, wo;  // [H*d, h], [K*d, h], [K*d, h], [h, H*d]
  torch::Tensor q_norm, k_norm;  // [d] (qk_norm models), else undefined
  torch::Tensor mlp_norm;        // [h]
  torch::Tensor w_gate, w_up;    // [I, h]
  torch::Tensor w_down;          // [h, I]
  // Biases (undefined when the model has none): [H*d], [K*d], [K*d], [h]; [I], [I], [h].
  torch::Tensor bq, bk, bv, bo;
  torch::Tensor b_gate, b_up, b_down;
  // The member holding a layer parameter. REQUIRES: role is one of a layer's (kParamTable).
  torch::Tensor& operator[](ParamRole role);
  const torch::Tensor& operator[](ParamRole role) const;
  std::vector<torch::Tensor> all() const;  // the defined ones, in the table's order
};

struct LlamaWeights {
  torch::Tensor embed;       // [V, h]
  std::vector<LayerWeights> layers;
  torch::Tensor final_norm;  // [h]
  torch::Tensor output;      // [V, h]; undefined when tied to embed
  const torch::Tensor& head() const { return output.defined() ? output : embed; }
  // Parameter group g (layers 0..L-1, the embedding L, the head L+1): its defined members,
  // in the table's order.
  std::vector<torch::Tensor*> group(std::int64_t g);
  std::vector<torch::Tensor> all() const;  // every group's, in group order: layers, embed, head
};

struct WeightPlacement {
  torch::ScalarType dtype = torch::kFloat;
  torch::Device device = torch::kCPU;
  bool layers_in_host_pool = false;  // parameter offload: layer weights live in the host pool
  bool pinned = false;               // host pool pages are pinned (CUDA)
};

// Normal(0, 0.02) matrices, Normal(0, 0.1) biases and unit norm weights (with a small seeded perturbation, so norm
// gradients are not symmetric), drawn on the CPU in fp32 from `seed` so every device and
// dtype starts from the same values. Every tensor requires grad.
LlamaWeights init_weights(const ModelConfig& m, std::uint64_t seed, const WeightPlacement& where);

// Detached copies that require grad: the reference computation's own leaves.
LlamaWeights clone_weights(const LlamaWeights& w);

}  // namespace longctx::runtime
