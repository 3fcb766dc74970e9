#pragma once
// The layers' schedule every stack's step shares: the forward over the layers in order, then
// the backward from the last layer to the first, a checkpointed layer recomputed just before
// its backward. What differs between stacks is the schedule's policy (LayerSchedule): which
// layers are checkpointed, when a layer's parameters are gathered or prefetched and let go,
// where a checkpoint waits, and which tensors the recompute and the backward hold.
#include <cstddef>
#include <vector>

#include "planner/stacks/step/step_build.h"

namespace longctx::step {

// A stack's decoder layers and their schedule. Acts: what one layer's forward leaves for its
// backward; it names the layer's input `in` and output `out`.
template <class Acts>
class LayerSchedule {
 public:
  virtual ~LayerSchedule() = default;

  // Layer l's forward ops (`recompute`: again in backward, for a checkpointed layer) and its
  // backward ops, which return its input's gradient.
  virtual Acts forward(int l, TensorId x, Phase phase, bool recompute) = 0;
  virtual TensorId backward(int l, const Acts& a, TensorId d_out) = 0;
  // Whether layer l keeps only what recomputing it needs and runs again before its backward.
  virtual bool checkpointed(int l) const = 0;

  // The hooks, in the order forward_layers and backward_layers call them; by default none
  // writes anything.
  virtual void begin_forward() {}
  virtual void before_forward(int /*l*/, TensorId /*x*/) {}
  virtual void after_forward(int /*l*/, const Acts& /*a*/) {}
  virtual void begin_backward() {}
  // A prefix build's end: true stops the backward before layer l's.
  virtual bool stops_before(int /*l*/) { return false; }
  virtual void before_backward(int /*l*/) {}
  // The tensor a checkpointed layer's recompute starts from: its input, or the copy of it
  // brought back from where it waited.
  virtual TensorId recompute_input(int /*l*/, const Acts& first) { return first.in; }
  virtual void after_recompute(int /*l*/, const Acts& /*a*/, TensorId /*in*/, TensorId /*d_out*/) {}
  // After layer l's backward, whose last op is `last`; `recomputed`: it was checkpointed.
  virtual void after_backward(int /*l*/, const Acts& /*a*/, TensorId /*d_out*/, bool /*recomputed*/, int /*last*/) {}
};

// The forward of `layers` layers from x; `acts` receives each layer's. Returns the last
// layer's output.
template <class Acts>
TensorId forward_layers(LayerSchedule<Acts>& s, int layers, TensorId x, std::vector<Acts>& acts) {
  acts.resize(static_cast<std::size_t>(layers));
  s.begin_forward();
  for (int l = 0; l < layers; ++l) {
    s.before_forward(l, x);
    const Acts a = s.forward(l, x, Phase::Forward, false);
    s.after_forward(l, a);
    acts[static_cast<std::size_t>(l)] = a;
    x = a.out;
  }
  return x;
}

// The backward of the layers forward_layers wrote, last to first, from the last layer's
// output gradient. Returns the first layer's input gradient, or -1 where the schedule stops
// early (a prefix build).
template <class Acts>
TensorId backward_layers(LayerSchedule<Acts>& s, const std::vector<Acts>& acts, const GraphWriter& graph, TensorId d_x) {
  s.begin_backward();
  for (int l = static_cast<int>(acts.size()) - 1; l >= 0; --l) {
    if (s.stops_before(l)) return -1;
    s.before_backward(l);
    Acts a = acts[static_cast<std::size_t>(l)];
    const TensorId d_out = d_x;
    const bool recomputed = s.checkpointed(l);
    if (recomputed) {
      const TensorId in = s.recompute_input(l, a);
      a = s.forward(l, in, Phase::Backward, true);
      s.after_recompute(l, a, in, d_out);
    }
    d_x = s.backward(l, a, d_x);
    s.after_backward(l, a, d_out, recomputed, graph.last_op());
  }
  return d_x;
}

}  // namespace longctx::step
