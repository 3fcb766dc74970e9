#pragma once
// AdamW with fp32 master weights and moments (decoupled weight decay, bias correction).
//
// State per parameter: exp_avg and exp_avg_sq in fp32, and an fp32 master copy unless the
// parameter itself is fp32 (then it is the master). offload: the state lives in the host
// pool, the gradient is copied there, the update runs on the CPU and the parameter is
// copied back. step() consumes the gradients: each is released once applied, so the next
// backward allocates them afresh (the planner's grads live from backward to optimizer).
#include <optional>
#include <vector>

#include <torch/torch.h>

namespace longctx::runtime {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

class AdamW {
 public:
  // REQUIRES: params are leaves that require grad; they outlive the optimizer.
  // state_device (not offloaded): where the state lives and the update runs, the device the
  // gradients are computed on; unset, beside each parameter. ZeRO-3 with offloaded
  // parameters but not optimizer keeps the shards in the host pool while their gradients
  // come from the reduce-scatter on the GPU: the state is on the GPU with them (the
  // planner's optim.* on the device), each gradient is moved to the state's device, and
  // the updated master is copied into the host shard.
  // REQUIRES: an fp32 parameter (its own master) lives on state_device.
  AdamW(std::vector<torch::Tensor> params, AdamWOptions o, bool offload, bool pinned,
        std::optional<torch::Device> state_device = std::nullopt);
  // Offloaded: the gradients arrive already in the host pool, in fp32 (ZeRO's shards, moved
  // there as soon as they are reduced; on one rank each group's, moved as its backward
  // ends: gradients_to_host below), and are used where they are.
  void gradients_on_host(bool on) { grads_on_host_ = on; }
  // Applies one update from each parameter's .grad() (parameters without one are skipped).
  void step();
  std::int64_t steps() const { return t_; }

  struct State {
    torch::Tensor master, exp_avg, exp_avg_sq;  // master undefined when the param is fp32
  };
  // The state a training-state checkpoint saves: one entry per parameter, in the
  // constructor's order, living where the optimizer put it (device, or host pool with
  // offload). Restoring copies into these tensors and sets the step count with set_steps.
  const std::vector<State>& state() const { return states_; }
  void set_steps(std::int64_t t) { t_ = t; }

 private:
  // One AdamW update of `target` (fp32: the master, or the parameter itself) in place.
  void update(torch::Tensor& target, const torch::Tensor& grad_fp32, State& s);

  std::vector<torch::Tensor> params_;
  std::vector<State> states_;
  AdamWOptions o_;
  bool offload_, pinned_;
  bool grads_on_host_ = false;
  std::int64_t t_ = 0;
};

// An offloaded optimizer's input, made as soon as backward finishes a parameter group: each
// parameter's gradient is replaced by an fp32 copy in the host pool, one parameter at a
// time, so its device gradient is freed before the next one's copy is allocated (the
// planner's grad.to_host). Values are those AdamW::step would copy itself: the same fp32
// cast of the same gradient. Parameters without a gradient are skipped.
// REQUIRES: inside NoGrad or outside autograd; no later backward adds into these gradients
// before the optimizer consumes them (the group's backward has ended).
void gradients_to_host(const std::vector<torch::Tensor*>& params, bool pinned);

}  // namespace longctx::runtime
