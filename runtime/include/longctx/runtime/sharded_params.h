#pragma once
// ZeRO over the world (docs/architecture.md: data- and sequence-parallel ranks hold the same
// parameters, so they share the shards). Each parameter group (a layer; the embedding; the
// head: final norm and output projection) is one flat vector padded to world x shard
// elements, in the order of the parameter table (planner/core/param_layout.h);
// rank r owns [r*shard, (r+1)*shard).
//
//   zero1  full parameters, re-laid as one flat buffer per group (the weights are views of
//          it); full gradients all-reduced; the optimizer updates this rank's shard and the
//          shards are all-gathered back into the parameters.
//   zero2  as zero1, but each group's gradient is reduce-scattered as soon as its backward
//          ends: only the shard's gradient outlives the group.
//   zero3  only the shards are kept (in the host pool with offload_params); a group is
//          all-gathered into a full buffer just before its forward and its backward and
//          freed after use; gradients as zero2.
// Matches the planner's inventory (params.shard, params.full, grad.shard, optim.* of a shard).
#include <map>
#include <vector>

#include <torch/torch.h>

#include "planner/core/parallel_config.h"
#include "longctx/runtime/communicator.h"
#include "longctx/runtime/llama_weights.h"
#include "longctx/runtime/param_home.h"

namespace longctx::runtime {

class AdamW;

class ShardedParams {
 public:
  // Takes over the full weights (every rank initialized them alike from the seed) and keeps
  // what the stage keeps; with zero3 the weights are left undefined until gathered.
  // REQUIRES: sharding is not None; w and comm outlive this object.
  ShardedParams(LlamaWeights& w, Sharding sharding, bool offload_params, Communicator& comm, bool pinned);

  int groups() const { return layers_ + 2; }
  std::int64_t group_numel(int g) const { return groups_[static_cast<std::size_t>(g)].numel; }
  int embed_group() const { return layers_; }
  int head_group() const { return layers_ + 1; }
  bool gathers() const { return sharding_ == Sharding::Zero3; }
  bool shards_grads() const { return sharding_ != Sharding::Zero1; }

  // zero3: group g all-gathered into a full buffer, as leaves that require grad (views of
  // the buffer), in the group's order. The gradients of every set gathered since the last
  // finish_grads(g) are summed there.
  std::vector<torch::Tensor> gather(int g);
  // zero3, for a group whose gathered views autograd keeps until its backward: frees the
  // buffer's memory after forward, and gathers into it again when the backward begins.
  void release(int g);
  void restore(int g);
  // zero3: every buffer gathered for group g since its last finish_grads(g) gives its memory
  // back, their leaves and gradients kept. For a group whose uses have all run backward
  // before its gradient is finished (the tied embedding after the loss).
  void release_all(int g);
  // zero3: starts gathering group g beside compute (into its released buffer, if it has
  // one); the next gather(g) or restore(g) waits for it instead of gathering. The step
  // prefetches layer l+1 while layer l runs forward and l-1 while l runs backward.
  void prefetch(int g);
  // zero2/zero3: the group's gradient is flattened into one send buffer, reduce-scattered
  // and added to the shard's gradient; the full gradient is freed. No-op for zero1.
  // With gradients_to_host, the shard's gradient then goes into the offloaded optimizer's
  // fp32 host buffer at once (AdamW::gradient_to_host).
  void finish_grads(int g);
  // zero1 too: its group's full gradients are all-reduced in place and the shard's slice goes
  // to the host at once (zero1_grads_to_host), instead of in prepare_step().
  // REQUIRES: optimizer is offloaded, holds shards() and outlives this object.
  void gradients_to_host(AdamW* optimizer) { host_grads_ = optimizer; }
  // Whether finish_grads(g) has work when a group's backward ends.
  bool finishes_grads() const { return shards_grads() || host_grads_; }

  // The tensors the optimizer updates: one shard per group, each with its gradient.
  // zero1: call prepare_step() first (all-reduces the full gradients and takes the shard's
  // slice); zero1/zero2: call finish_step() after (all-gathers the updated shards).
  const std::vector<torch::Tensor>& shards() const { return shards_; }
  void prepare_step();
  void finish_step();

 private:
  struct Group {
    std::vector<torch::Tensor*> slots;  // the LlamaWeights members of the group (LlamaWeights::group)
    std::vector<std::vector<std::int64_t>> shapes;
    std::int64_t numel = 0, shard = 0;
    torch::Tensor flat;                             // zero1/zero2: the full parameters
    std::vector<std::vector<torch::Tensor>> sets;  // zero3: gathered leaves awaiting finish_grads
    std::vector<torch::Tensor> released;           // zero3: gathered buffers released after forward
  };
  torch::Tensor flatten_grads(Group& g);
  // zero1, offloaded optimizer: finish_grads' work (prepare_step's, one group, at once).
  void zero1_grads_to_host(int g);
  // The shard where the gather reads it: the device shard itself, or a host shard copied
  // into this rank's slot of `full` (the gather then runs in place).
  torch::Tensor shard_in_slot(torch::Tensor& full, int g) const;
  std::size_t full_bytes(int g) const;       // a gathered buffer's
  torch::Tensor empty_full(int g) const;     // a new gathered buffer, on the device
  std::vector<torch::Tensor> leaves_of(Group& g, const torch::Tensor& full, bool for_backward);

  struct Inflight {
    torch::Tensor full, source;  // source: the shard, or full's slot holding it, alive until done
    Communicator::Pending pending;
    bool into_released = false;
  };
  std::map<int, Inflight> inflight_;

  LlamaWeights& w_;
  Sharding sharding_;
  bool pinned_;
  AdamW* host_grads_ = nullptr;  // gradients_to_host
  Communicator& comm_;
  int layers_;
  torch::Device device_;
  ParamHome home_;  // where the shards live (the host pool with offload_params), how they reach the device
  ParamHome device_home_;  // the embedding's and the head's shards: always on the device
  // Parameter offload streams the layers only; the embedding's and the head's shards stay on
  // the device, as on one rank (the planner streams only layer groups).
  const ParamHome& home_of(int gi) const { return gi < layers_ ? home_ : device_home_; }
  std::vector<Group> groups_;
  std::vector<torch::Tensor> shards_;
};

}  // namespace longctx::runtime
