#pragma once
// AdamW with fp32 master weights and moments (decoupled weight decay, bias correction).
//
// State per parameter: exp_avg and exp_avg_sq in fp32, and an fp32 master copy unless the
// parameter itself is fp32 (then it is the master). offload: the state lives in the host
// pool, and so does an fp32 gradient buffer per parameter, allocated once and kept for the
// whole run, as DeepSpeed's offloaded optimizer keeps its fp32 gradient partitions
// (deepspeed/runtime/zero/stage_1_and_2.py, DeepSpeedZeroOptimizer.__init__, the
// single_partition_of_fp32_groups' .grad); the gradient is copied into it (during backward:
// gradient_to_host), the update runs on the CPU and the parameter is copied back. step()
// consumes the gradients: each is released once applied, so the next backward allocates
// them afresh (the planner's grads live from backward to optimizer; the host buffers are
// persistent).
#include <optional>
#include <unordered_map>
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
  // Offloaded: `grad` (param's gradient, any device and dtype) is copied into param's fp32
  // host buffer, which becomes param's .grad(); the caller drops `grad`. Called as soon as
  // backward finishes a gradient (a group's on one rank, LlamaStep; a reduced shard,
  // ShardedParams::finish_grads), so no gradient waits on the device for the step. If param's
  // gradient is already its host buffer, grad is added into it.
  // REQUIRES: offload; param is one of the constructor's; outside autograd (NoGrad).
  void gradient_to_host(const torch::Tensor& param, const torch::Tensor& grad);
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
  std::unordered_map<const void*, std::size_t> index_;  // a parameter's TensorImpl -> its place
  std::vector<torch::Tensor> host_grads_;  // offload: per parameter, fp32 [param's shape], for the whole run
  std::int64_t t_ = 0;
};

}  // namespace longctx::runtime
