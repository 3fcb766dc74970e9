#pragma once
// One training step of a Llama model with the plan's memory techniques, on one rank:
// forward (embedding, layers, final norm), loss, backward. The optimizer is separate
// (adamw.h). Each technique is chosen per op from the ParallelConfig:
//   checkpoint          layers the policy names keep only their input (CheckpointStore) and
//                       are recomputed inside their backward (a custom autograd function)
//   offload_checkpoints those inputs wait in the host pool
//   head_chunk >= 1     head_chunked_attention(); 0: attention() over all heads
//   mlp_tiles > 1       tiled_mlp(); 1: project() gate and up, swiglu(), down linear
//   loss_tiles > 1      tiled_cross_entropy(); 1: cross_entropy_loss()
//   offload_params      layer weights live in the host pool and are copied to the device by
//                       each layer that uses them. A checkpointed layer's copies die with its
//                       forward and are made again by its recompute; a layer that is not
//                       checkpointed releases its copies' memory after forward (the tensors
//                       autograd saved stay, empty) and refills them from the host when its
//                       backward begins, as FSDP does.
// Phases are reported to the active MemoryMeter: forward.embed, forward.layer.L, loss,
// backward.loss, backward.layer.L, backward.embed.
//
// Across ranks (a Communicator): each rank runs its S/u tokens of its sample; attention is
// wrapped in the Ulysses all-to-alls (ulysses.h), or runs the staged Untied schedule with
// its exchanges inside; RoPE uses the rank's own positions. The loss is this rank's token
// mean divided by the world size, so the sum over ranks of loss and gradients is the
// token-weighted mean over every token of every sample: the single-process loss.
#include <map>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "longctx/planner/model_config.h"
#include "longctx/planner/parallel_config.h"
#include "longctx/runtime/attention.h"
#include "longctx/runtime/checkpoint_store.h"
#include "longctx/runtime/llama_weights.h"
#include "longctx/runtime/norm_rope.h"
#include "longctx/runtime/sharded_params.h"
#include "longctx/runtime/ulysses.h"

namespace longctx::runtime {

class LlamaStep {
 public:
  // REQUIRES: weights match m and outlive the step; the configuration passed validate() and
  // runnable(); seq is the longest sequence forward() will see.
  // seq is the full sequence; tokens passed to forward() are this rank's S/u of it.
  // comm: nullptr for one rank.
  LlamaStep(const ModelConfig& m, const ParallelConfig& p, std::int64_t seq, LlamaWeights& weights,
            torch::Device device, Communicator* comm = nullptr);

  // The mean token cross-entropy of tokens -> targets ([b, S] int64), with its graph.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& targets);
  // forward, then backward into the weights' .grad(); returns the loss (summed over ranks:
  // the whole batch's). Takes the batch by
  // value and lets go of it after forward, so the graph alone decides when tokens and
  // targets die (targets after the loss backward, tokens after the embedding's).
  double forward_backward(torch::Tensor tokens, torch::Tensor targets);

  // One layer's forward (with autograd when grad mode is on); the checkpoint's recompute
  // calls it again inside the layer's backward.
  torch::Tensor layer_forward(std::int64_t layer, const torch::Tensor& x);
  CheckpointStore& checkpoints() { return *checkpoints_; }
  // ZeRO across ranks: parameters come from (zero3) and gradients go to (zero2/zero3) the
  // shards. REQUIRES: shards outlive the step; set before the first forward.
  void use_shards(ShardedParams* shards) { shards_ = shards; }
  ShardedParams* shards() { return shards_; }
  // zero3: starts gathering layer l's parameters beside compute (no-op otherwise).
  void prefetch_layer(std::int64_t layer);
  const ParallelConfig& parallel() const { return p_; }

 private:
  LayerWeights fetch_layer(std::int64_t layer);  // seam: zero3 gathers go here

 public:
  // Parameter offload of layers that are not checkpointed: frees the device copies' memory
  // after the layer's forward; restores it (from the host leaves) when its backward begins.
  void release_streamed(std::int64_t layer);
  void restore_streamed(std::int64_t layer);

  // What the step does when the gradient reaches a mark it put in the graph:
  //   GroupGradsReady       at a group's input, its backward has ended: reduce-scatter the
  //                         group's gradient into its shard (zero2/zero3)
  //   RegatherLayer         at a layer's output, its backward begins: gather its parameters
  //                         again, and start the layer below (zero3)
  //   RestoreStreamedLayer  the same for parameter offload on one rank
  enum class BackwardEvent : std::int64_t { GroupGradsReady, RegatherLayer, RestoreStreamedLayer };
  void on_backward(BackwardEvent event, std::int64_t index);

 private:
  // x, marked so that on_backward(event, index) runs when its gradient arrives.
  torch::Tensor on_backward_of(const torch::Tensor& x, BackwardEvent event, std::int64_t index);
  struct Streamed {
    torch::Tensor device;  // the copy autograd saved
    torch::Tensor host;    // the host-resident leaf it came from
    std::size_t bytes = 0;
  };
  std::vector<Streamed> last_fetched_;  // of the layer running now, when record_fetches_
  bool record_fetches_ = false;
  std::map<std::int64_t, std::vector<Streamed>> streamed_;

  ModelConfig m_;
  ParallelConfig p_;
  LlamaWeights& w_;
  torch::Device device_;
  Communicator* comm_;
  ShardedParams* shards_ = nullptr;
  UlyssesLayout layout_;
  RopeTables rope_;
  AttentionShape attn_shape_;
  std::unique_ptr<CheckpointStore> checkpoints_;
};

// Sets the active meter's phase (no-op without one).
void set_phase(const std::string& name);
// Identity whose backward sets the phase to `name`: marks where a backward phase begins.
torch::Tensor mark_backward_phase(const torch::Tensor& x, const std::string& name);

}  // namespace longctx::runtime
