#pragma once
// Parameter offload in one place: where parameter storage lives (the device, or the host
// pool with offload_params) and how a use of it gets a copy on the device. Both holders of
// offloaded parameters go through it:
//   one rank   a layer's parameters live in the host pool (init_weights allocates them
//              here) and each use of the layer fetches device copies (the streamed layer
//              executor);
//   zero3      each group's shard lives in the host pool (ShardedParams) and each gather
//              copies it into its slot of the gathered buffer first.
// Device copies that autograd saves for the backward are parked after forward (their
// memory handed back, the tensors kept) and refilled when the backward begins: park() and
// unpark() below, used by both.
#include <cstddef>

#include <torch/torch.h>

namespace longctx::runtime {

class ParamHome {
 public:
  // offload: the parameters live in the host pool (offload_params); device: where the step
  // computes; pinned: host pages are page-locked (CUDA).
  ParamHome(bool offload, torch::Device device, bool pinned) : offload_(offload), pinned_(pinned), device_(device) {}

  bool on_host() const { return offload_; }
  torch::Device device() const { return device_; }

  // Uninitialized storage for parameters, where they live.
  torch::Tensor allocate(at::IntArrayRef sizes, torch::ScalarType dtype) const;
  // A device copy of host-resident `leaf` for one use, inside autograd: its gradient flows
  // back to the leaf. On CUDA the copy is asynchronous on the current stream.
  torch::Tensor fetch(const torch::Tensor& leaf) const;

 private:
  bool offload_, pinned_;
  torch::Device device_;
};

// Hands back the memory of t's storage; every tensor on it (autograd's saved ones too) stays,
// empty. ENSURES: the pool's count drops by the storage's bytes.
void park(const torch::Tensor& t);
// Gives a parked storage `bytes` again and returns the whole storage as a flat tensor of
// t's dtype. Write into the result, not into t: the result has its own version counter, so
// the tensors autograd saved do not look modified in place.
torch::Tensor unpark(const torch::Tensor& t, std::size_t bytes);

}  // namespace longctx::runtime
