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
//   offload_params      layer weights live in the host pool (zero3's shards, across ranks)
//                       and come to the device for each use of their layer
// How each layer runs follows from these once, when the step is set up: one LayerExecutor
// per layer (layer_executor.h).
// Phases are reported to the active MemoryMeter: forward.embed, forward.layer.L, loss,
// backward.loss, backward.layer.L, backward.embed.
//
// Across ranks (a Communicator): each rank runs its S/u tokens of its sample; attention is
// wrapped in the Ulysses all-to-alls (ulysses.h), or runs the staged Untied schedule with
// its exchanges inside; RoPE uses the rank's own positions. The loss is this rank's token
// mean divided by the world size, so the sum over ranks of loss and gradients is the
// token-weighted mean over every token of every sample: the single-process loss.
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "planner/core/model_config.h"
#include "planner/core/parallel_config.h"
#include "longctx/runtime/attention.h"
#include "longctx/runtime/checkpoint_store.h"
#include "longctx/runtime/layer_executor.h"
#include "longctx/runtime/llama_weights.h"
#include "longctx/runtime/norm_rope.h"
#include "longctx/runtime/ring_attention.h"
#include "longctx/runtime/sharded_params.h"
#include "longctx/runtime/ulysses.h"

namespace longctx::runtime {

class AdamW;

class LlamaStep : private BackwardHook {
 public:
  // REQUIRES: weights match m and outlive the step; the configuration passed validate() and
  // runnable(); seq is the longest sequence forward() will see.
  // seq is the full sequence; tokens passed to forward() are this rank's padded_seq/(u*r) of
  // it (ulysses.h, sequence_shard: padding at the end, its targets kIgnoreIndex).
  // comm: nullptr for one rank.
  LlamaStep(const ModelConfig& m, const ParallelConfig& p, std::int64_t seq, LlamaWeights& weights,
            torch::Device device, Communicator* comm = nullptr);
  ~LlamaStep();
  LlamaStep(const LlamaStep&) = delete;
  LlamaStep& operator=(const LlamaStep&) = delete;

  // This rank's share of the batch's mean token cross-entropy of tokens -> targets ([b, n]
  // int64): its tokens' sum over all the batch's real tokens, so that the ranks' shares sum
  // to the mean, with its graph.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& targets);
  // forward, then backward into the weights' .grad() (fp32 copies in the host pool where
  // streams_gradients()); returns the loss (summed over ranks:
  // the whole batch's). Takes the batch by
  // value and lets go of it after forward, so the graph alone decides when tokens and
  // targets die (targets after the loss backward, tokens after the embedding's).
  double forward_backward(torch::Tensor tokens, torch::Tensor targets);

  CheckpointStore& checkpoints() { return *checkpoints_; }
  // ZeRO across ranks: parameters come from (zero3) and gradients go to (zero2/zero3) the
  // shards; the layers' executors are chosen again. REQUIRES: shards outlive the step; set
  // before the first forward.
  void use_shards(ShardedParams* shards);
  ShardedParams* shards() { return shards_; }
  const ParallelConfig& parallel() const { return p_; }
  // An offloaded optimizer without ZeRO's shards (one rank, or sharding none across ranks):
  // each group's gradient is all-reduced across ranks and goes into the optimizer's fp32
  // host buffers as soon as its backward ends (AdamW::gradient_to_host), not all at the
  // optimizer step. REQUIRES: optimizer is offloaded, holds LlamaWeights::all() and outlives
  // the step; set before the first forward.
  void stream_gradients_to(AdamW* optimizer) { host_grads_ = optimizer; }
  bool streams_gradients() const;

 private:
  // One executor per layer (layer_executors.h), from the plan and where the parameters
  // live: gathered (zero3), streamed (offload_params on one rank) or plain, checkpointed
  // where the policy names the layer.
  void choose_executors();
  // The layer's computation on parameters already on the device: out [b, S, h] from x [b, S, h].
  torch::Tensor layer_body(const LayerWeights& w, const torch::Tensor& x) const;
  // The final norm and the loss from the last layer's output x [b, S, h].
  torch::Tensor head_loss(torch::Tensor x, const torch::Tensor& targets);
  // The backward of parameter group `group` has ended (the mark at its input): zero2/zero3
  // reduce-scatter its gradient into its shard; streams_gradients() moves it to the host.
  void on_backward(std::int64_t group) override;

  ModelConfig m_;
  ParallelConfig p_;
  LlamaWeights& w_;
  torch::Device device_;
  Communicator* comm_;
  ShardedParams* shards_ = nullptr;
  AdamW* host_grads_ = nullptr;  // stream_gradients_to
  std::int64_t seq_;  // tokens a sample before padding: the loss's mean is over these
  UlyssesLayout layout_;
  RingGroup ring_;  // size 1: no ring attention
  RopeTables rope_;
  AttentionShape attn_shape_;
  std::unique_ptr<CheckpointStore> checkpoints_;
  std::vector<std::unique_ptr<LayerExecutor>> executors_;  // one per layer
  // every:K with offloaded checkpoints: when the backward reaches a layer that is not
  // checkpointed, the offloaded input of the checkpointed layer below starts coming back.
  struct CheckpointPrefetch final : BackwardHook {
    CheckpointStore* store = nullptr;
    void on_backward(std::int64_t layer) override { store->prefetch(layer); }
  } checkpoint_prefetch_;
};

// Sets the active meter's phase (no-op without one).
void set_phase(const std::string& name);
// Identity whose backward sets the phase to `name`: marks where a backward phase begins.
torch::Tensor mark_backward_phase(const torch::Tensor& x, const std::string& name);

}  // namespace longctx::runtime
