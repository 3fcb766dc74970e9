// AdamW over a list of parameters, its state on the device or in the host pool.
#include "longctx/runtime/adamw.h"

#include <cmath>

#include "longctx/runtime/memory_meter.h"

namespace longctx::runtime {

using torch::Tensor;

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o, bool offload, bool pinned,
             std::optional<torch::Device> state_device)
    : params_(std::move(params)), o_(o), offload_(offload), pinned_(pinned) {
  for (const auto& p : params_) {
    State s;
    const torch::Device where = state_device.value_or(p.device());
    TORCH_CHECK(offload_ || p.scalar_type() != torch::kFloat || p.device() == where,
                "AdamW: an fp32 parameter is its own master and must live where its state does");
    auto fp32_state = [&](const Tensor& init) {
      Tensor t;
      if (offload_) {
        t = host_empty(p.sizes(), torch::kFloat, pinned_);
        if (init.defined()) t.copy_(init); else t.zero_();
      } else {
        t = init.defined() ? init.detach().to(where, torch::kFloat).clone()
                           : at::zeros(p.sizes(), p.options().dtype(torch::kFloat).device(where));
      }
      return t;
    };
    if (p.scalar_type() != torch::kFloat) s.master = fp32_state(p.detach());
    s.exp_avg = fp32_state({});
    s.exp_avg_sq = fp32_state({});
    states_.push_back(std::move(s));
    index_[p.unsafeGetTensorImpl()] = states_.size() - 1;
    // [p's shape] fp32, in the host pool for the whole run: the gradient's landing place.
    if (offload_) host_grads_.push_back(host_empty(p.sizes(), torch::kFloat, pinned_));
  }
}

void AdamW::gradient_to_host(const Tensor& param, const Tensor& grad) {
  TORCH_CHECK(offload_, "AdamW::gradient_to_host: the optimizer is not offloaded");
  const auto it = index_.find(param.unsafeGetTensorImpl());
  TORCH_CHECK(it != index_.end(), "AdamW::gradient_to_host: not one of the optimizer's parameters");
  Tensor& buffer = host_grads_[it->second];
  Tensor p = param;  // a handle on the same parameter, to set its gradient
  if (p.grad().defined() && p.grad().is_same(buffer)) {
    buffer.add_(grad.to(buffer.device(), torch::kFloat));
    return;
  }
  buffer.copy_(grad);
  p.mutable_grad() = buffer;
}

void AdamW::update(Tensor& target, const Tensor& g, State& s) {
  const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t_));
  s.exp_avg.lerp_(g, 1.0 - o_.beta1);
  s.exp_avg_sq.mul_(o_.beta2).addcmul_(g, g, 1.0 - o_.beta2);
  // The one fp32 temporary: sqrt(v / bc2) + eps, beside the state it is computed from (an
  // offloaded state's in the host pool: the CPU allocator would count it on the device).
  Tensor denom = offload_ ? host_empty(s.exp_avg_sq.sizes(), torch::kFloat, pinned_) : at::empty_like(s.exp_avg_sq);
  at::sqrt_out(denom, s.exp_avg_sq);
  denom.div_(std::sqrt(bc2)).add_(o_.eps);
  target.mul_(1.0 - o_.lr * o_.weight_decay);
  target.addcdiv_(s.exp_avg, denom, -o_.lr / bc1);
}

void AdamW::step() {
  ++t_;
  torch::NoGradGuard no_grad;
  if (!offload_) {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      State& s = states_[i];
      // To the state's device: a host-resident parameter's gradient may arrive elsewhere.
      Tensor g = p.grad().to(s.exp_avg.device(), torch::kFloat);
      Tensor target = s.master.defined() ? s.master : p.detach();
      update(target, g, s);
      if (s.master.defined()) p.detach().copy_(s.master);
      p.mutable_grad().reset();
    }
    return;
  }
  // Offloaded: every gradient still on the device goes to its host buffer first (freeing
  // the device's), then the update runs on the host and the parameter is copied back.
  std::vector<Tensor> host_grads(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    if (!p.grad().is_same(host_grads_[i])) host_grads_[i].copy_(p.grad());
    host_grads[i] = host_grads_[i];
    p.mutable_grad().reset();
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!host_grads[i].defined()) continue;
    Tensor& p = params_[i];
    State& s = states_[i];
    if (s.master.defined()) {
      update(s.master, host_grads[i], s);
      p.detach().copy_(s.master);
    } else {
      // fp32 parameters are their own master: update a host copy (the planner's host
      // temporary of the step) and copy it back.
      Tensor host_p = host_empty(p.sizes(), torch::kFloat, pinned_);
      host_p.copy_(p.detach());
      update(host_p, host_grads[i], s);
      p.detach().copy_(host_p);
    }
    host_grads[i] = Tensor();
  }
}

}  // namespace longctx::runtime
