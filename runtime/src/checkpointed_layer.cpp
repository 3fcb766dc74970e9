// The checkpointed layer executor: a reentrant checkpoint around another layer executor.
#include "longctx/runtime/layer_executors.h"
#include "longctx/runtime/memory_meter.h"

namespace longctx::runtime {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

class CheckpointedLayer final : public LayerExecutor {
 public:
  CheckpointedLayer(std::unique_ptr<LayerExecutor> inner, CheckpointStore& store, std::int64_t layer,
                    std::function<void()> prefetch_below)
      : inner_(std::move(inner)), store_(store), layer_(layer), prefetch_below_(std::move(prefetch_below)) {}

  Tensor forward(const Tensor& x) override;
  // A checkpointed layer run on its own is its inner layer: nothing to keep for a later backward.
  Tensor run(const Tensor& x) override { return inner_->run(x); }
  void prefetch() override { inner_->prefetch(); }

  // The custom function's two halves (CheckpointFn).
  Tensor keep_and_run(const Tensor& x) {
    store_.keep(layer_, x);
    torch::NoGradGuard no_grad;
    return inner_->run(x);
  }
  Tensor recompute_backward(const Tensor& grad_out) {
    Tensor x = store_.take(layer_).detach().requires_grad_(true);
    // The next layer down (its input, its parameters) starts coming back while this one
    // recomputes (planner order).
    if (layer_ > 0) {
      store_.prefetch(layer_ - 1);
      prefetch_below_();
    }
    {
      torch::AutoGradMode grad_on(true);
      Tensor out = inner_->run(x);
      // The backward starts from the recomputed output's place in the graph, not from its
      // values (a residual add saves nothing): its bytes go before the backward starts,
      // unless something else holds its storage.
      if (out.storage().use_count() == 1) resize_storage(out, 0);
      torch::autograd::backward({out}, {grad_out});
    }
    return x.grad();
  }

 private:
  std::unique_ptr<LayerExecutor> inner_;
  CheckpointStore& store_;
  std::int64_t layer_;
  std::function<void()> prefetch_below_;
};

// Forward without a graph, keeping only the input; backward fetches the input, recomputes
// the layer with a graph and backpropagates through it.
class CheckpointFn : public torch::autograd::Function<CheckpointFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, CheckpointedLayer* layer) {
    ctx->saved_data["layer"] = reinterpret_cast<std::int64_t>(layer);
    return layer->keep_and_run(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* layer = reinterpret_cast<CheckpointedLayer*>(ctx->saved_data["layer"].toInt());
    return {layer->recompute_backward(grads[0]), Tensor()};
  }
};

Tensor CheckpointedLayer::forward(const Tensor& x) { return CheckpointFn::apply(x, this); }

}  // namespace

std::unique_ptr<LayerExecutor> checkpointed_layer(std::unique_ptr<LayerExecutor> inner, CheckpointStore& store,
                                                  std::int64_t layer, std::function<void()> prefetch_below) {
  return std::make_unique<CheckpointedLayer>(std::move(inner), store, layer, std::move(prefetch_below));
}

}  // namespace longctx::runtime
