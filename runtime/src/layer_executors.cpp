// The parameters' executors: plain, streamed (host-resident parameters) and gathered (zero3);
// and the backward mark they park and refill by.
#include "longctx/runtime/layer_executors.h"

namespace longctx::runtime {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {
// Identity in forward; when the gradient reaches it, calls the hook (see on_backward_of).
class OnBackwardFn : public torch::autograd::Function<OnBackwardFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, BackwardHook* hook, std::int64_t index) {
    ctx->saved_data["hook"] = reinterpret_cast<std::int64_t>(hook);
    ctx->saved_data["index"] = index;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    reinterpret_cast<BackwardHook*>(ctx->saved_data["hook"].toInt())->on_backward(ctx->saved_data["index"].toInt());
    return {grads[0], Tensor(), Tensor()};
  }
};
}  // namespace

Tensor on_backward_of(const Tensor& x, BackwardHook& hook, std::int64_t index) {
  return OnBackwardFn::apply(x, &hook, index);
}

namespace {

class PlainLayer final : public LayerExecutor {
 public:
  PlainLayer(LayerBody body, const LayerWeights& w) : body_(std::move(body)), w_(w) {}
  Tensor forward(const Tensor& x) override { return run(x); }
  Tensor run(const Tensor& x) override { return body_(w_, x); }

 private:
  LayerBody body_;
  const LayerWeights& w_;
};

// Device copies of a host-resident layer's parameters for one use (RAII: they die with it,
// unless autograd saved them or they are parked).
class FetchedLayer {
 public:
  FetchedLayer(const LayerWeights& host, const ParamHome& home) {
    for (const ParamSpec& p : kParamTable) {
      if (p.group != ParamGroupKind::Layer || !host[p.role].defined()) continue;
      w_[p.role] = home.fetch(host[p.role]);  // in the table's order: the order they are allocated
      copies_.push_back({w_[p.role], host[p.role], w_[p.role].storage().nbytes()});
    }
  }
  const LayerWeights& weights() const { return w_; }

  // A copy autograd saved, the host leaf it came from, and its bytes.
  struct Copy {
    Tensor device, host;
    std::size_t bytes = 0;
  };
  // After a forward whose graph saved the copies: their memory goes now, the tensors stay.
  std::vector<Copy> park() && {
    torch::NoGradGuard no_grad;
    for (auto& c : copies_) runtime::park(c.device);
    return std::move(copies_);
  }

 private:
  LayerWeights w_;
  std::vector<Copy> copies_;
};

class StreamedLayer final : public LayerExecutor, private BackwardHook {
 public:
  StreamedLayer(LayerBody body, const LayerWeights& host, const ParamHome& home)
      : body_(std::move(body)), host_(host), home_(home) {}

  Tensor forward(const Tensor& x) override {
    if (!torch::GradMode::is_enabled()) return run(x);
    Tensor out;
    {
      FetchedLayer fetched(host_, home_);
      out = body_(fetched.weights(), x);
      parked_ = std::move(fetched).park();
    }
    return on_backward_of(out, *this, 0);
  }
  Tensor run(const Tensor& x) override {
    FetchedLayer fetched(host_, home_);
    return body_(fetched.weights(), x);
  }

 private:
  // The layer's backward begins: the parked copies are refilled from the host.
  void on_backward(std::int64_t) override {
    torch::NoGradGuard no_grad;
    for (auto& c : parked_)
      unpark(c.device, c.bytes).view(c.device.sizes()).copy_(c.host, /*non_blocking=*/c.device.is_cuda());
    parked_.clear();  // the saved tensors keep the memory until their nodes have run
  }

  LayerBody body_;
  const LayerWeights& host_;
  ParamHome home_;
  std::vector<FetchedLayer::Copy> parked_;
};

// One layer's parameters gathered from the shards for one use (RAII). With park_after(), the
// gathered buffer's memory goes when the use ends (autograd's saved views stay, empty).
class GatheredLease {
 public:
  GatheredLease(ShardedParams& shards, std::int64_t layer, const ModelConfig& m) : shards_(shards), layer_(layer) {
    auto leaves = shards.gather(static_cast<int>(layer));
    std::size_t i = 0;
    for (const ParamSpec& p : group_params(ParamGroupKind::Layer, m)) w_[p.role] = leaves[i++];
  }
  ~GatheredLease() {
    if (park_) shards_.release(static_cast<int>(layer_));
  }
  GatheredLease(const GatheredLease&) = delete;
  GatheredLease& operator=(const GatheredLease&) = delete;
  const LayerWeights& weights() const { return w_; }
  void park_after() { park_ = true; }

 private:
  ShardedParams& shards_;
  std::int64_t layer_;
  LayerWeights w_;
  bool park_ = false;
};

class GatheredLayer final : public LayerExecutor, private BackwardHook {
 public:
  GatheredLayer(LayerBody body, ShardedParams& shards, std::int64_t layer, const ModelConfig& m)
      : body_(std::move(body)), shards_(shards), layer_(layer), m_(m) {}

  Tensor forward(const Tensor& x) override {
    if (!torch::GradMode::is_enabled()) return run(x);
    Tensor out;
    {
      GatheredLease lease(shards_, layer_, m_);
      lease.park_after();
      out = body_(lease.weights(), x);
    }
    return on_backward_of(out, *this, layer_);
  }
  Tensor run(const Tensor& x) override {
    GatheredLease lease(shards_, layer_, m_);
    return body_(lease.weights(), x);
  }
  void prefetch() override { shards_.prefetch(static_cast<int>(layer_)); }

 private:
  // The layer's backward begins: gather into the parked buffer again, and start the layer below.
  void on_backward(std::int64_t) override {
    shards_.restore(static_cast<int>(layer_));
    shards_.prefetch(static_cast<int>(layer_) - 1);
  }

  LayerBody body_;
  ShardedParams& shards_;
  std::int64_t layer_;
  ModelConfig m_;
};

}  // namespace

std::unique_ptr<LayerExecutor> plain_layer(LayerBody body, const LayerWeights& w) {
  return std::make_unique<PlainLayer>(std::move(body), w);
}

std::unique_ptr<LayerExecutor> streamed_layer(LayerBody body, const LayerWeights& host, const ParamHome& home) {
  return std::make_unique<StreamedLayer>(std::move(body), host, home);
}

std::unique_ptr<LayerExecutor> gathered_layer(LayerBody body, ShardedParams& shards, std::int64_t layer,
                                              const ModelConfig& m) {
  return std::make_unique<GatheredLayer>(std::move(body), shards, layer, m);
}

}  // namespace longctx::runtime
