#pragma once
// How one decoder layer runs in the step. The step chooses an executor per layer once, when
// it is set up, from the plan (layer_executors.h); the forward then only calls it:
//
//   plain         the layer's parameters stay on the device; autograd keeps what it saves
//   streamed      the parameters live in the host pool; each use fetches device copies
//   gathered      zero3: each use all-gathers the layer's shards, the next layer's gather
//                 starting beside it
//   checkpointed  wraps one of the above: forward keeps only the layer's input
//                 (CheckpointStore), backward runs the wrapped layer again with a graph
//
// Parameters brought to the device for a use that autograd saves (streamed, gathered) are
// parked after the layer's forward and brought back when its backward begins.
#include <cstdint>
#include <functional>

#include <torch/torch.h>

#include "longctx/runtime/llama_weights.h"

namespace longctx::runtime {

// The layer's computation: out [b, S, h] from x [b, S, h] and its parameters on the device.
using LayerBody = std::function<torch::Tensor(const LayerWeights& w, const torch::Tensor& x)>;

class LayerExecutor {
 public:
  virtual ~LayerExecutor() = default;

  // The layer's forward as the step runs it. Grad mode on: inside the step's graph, whose
  // backward may come long after; the executor may put marks in it that act when the
  // gradient reaches them. Grad mode off: an evaluation.
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  // The layer on its own: parameters brought for this call and let go when it returns; a
  // graph built here (a checkpoint's recompute) is backpropagated before anything else runs.
  virtual torch::Tensor run(const torch::Tensor& x) = 0;
  // Starts bringing the parameters of the layer's next use beside compute; no-op where they
  // are on the device already.
  virtual void prefetch() {}
};

// Something the step does when the backward reaches a point in the graph.
class BackwardHook {
 public:
  virtual void on_backward(std::int64_t index) = 0;

 protected:
  ~BackwardHook() = default;
};

// x, marked so that hook.on_backward(index) runs when x's gradient arrives, before the
// gradient flows on past the mark. REQUIRES: hook outlives the backward.
torch::Tensor on_backward_of(const torch::Tensor& x, BackwardHook& hook, std::int64_t index);

}  // namespace longctx::runtime
