#pragma once
// RMSNorm and rotary position embedding: the two elementwise pieces of a Llama layer, as
// autograd functions whose saved tensors are those of the planner's inventory, and as
// plain kernels that head-chunked attention calls inside its own forward and backward.
#include <torch/torch.h>

namespace longctx::runtime {

// y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) over the last dim, in fp32.
// Saves x, w and rstd [..., 1] fp32 (planner: "*.rstd", n x 4 bytes per norm).
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps);

struct NormOut {
  torch::Tensor y;     // like x
  torch::Tensor rstd;  // [..., 1] fp32
};
// The rows of x (all but its last dim, flattened) go a chunk at a time: chunk_rows of them, or
// when 0 row_chunk(rows, width * 4) (row_chunk.h), so the fp32 scratch of bf16 is one chunk's
// (planner: footprint/norm.h).
NormOut rms_norm_forward(const torch::Tensor& x, const torch::Tensor& w, double eps, std::int64_t chunk_rows = 0);
struct NormGrads {
  torch::Tensor dx;  // like x
  torch::Tensor dw;  // like w, fp32
};
// Chunked as the forward; dw accumulates over the chunks in fp32.
NormGrads rms_norm_backward(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& w,
                            const torch::Tensor& rstd, std::int64_t chunk_rows = 0);

// cos and sin of position p times inv_freq_i = theta^(-2i/d), [S, d/2], in the model dtype,
// for positions first_position .. first_position + seq - 1 (a Ulysses rank's shard).
struct RopeTables {
  torch::Tensor cos, sin;
  static RopeTables make(std::int64_t seq, std::int64_t head_dim, double theta, torch::ScalarType dtype,
                         torch::Device device, std::int64_t first_position = 0);
  // The same for given inverse frequencies [d/2] (a model's rope_scaling:
  // longctx::rope_inverse_frequencies).
  static RopeTables make(std::int64_t seq, const std::vector<double>& inv_freq, torch::ScalarType dtype,
                         torch::Device device, std::int64_t first_position = 0);
  // The same at given positions, in order (a ring's rank holds two chunks of the sample).
  static RopeTables make(const std::vector<std::int64_t>& positions, const std::vector<double>& inv_freq,
                         torch::ScalarType dtype, torch::Device device);
};

// Rotates x [b, S, heads, d] (Hugging Face's rotate_half convention: the first half of d
// pairs with the second). inverse=true rotates by minus the angle: the backward.
// Writes a fresh tensor; no scratch.
torch::Tensor rope_rotate(const torch::Tensor& x, const RopeTables& t, bool inverse);
// The same into `out` (shaped like x; may be a slice of a larger buffer, not aliasing x).
void rope_rotate_out(const torch::Tensor& out, const torch::Tensor& x, const RopeTables& t, bool inverse);
// Autograd version: saves nothing (the backward is the inverse rotation).
torch::Tensor rope(const torch::Tensor& x, const RopeTables& t);

}  // namespace longctx::runtime
