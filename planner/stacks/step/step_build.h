#pragma once
// The state the step's emitters share while they write one rank's step graph: the shapes,
// the graph, and the tensors one technique produces and another reads (parameters,
// gradients, the activations a layer's backward reads). Shapes: footprint/step_shapes.h.
#include <array>
#include <deque>
#include <functional>
#include <vector>

#include "planner/stacks/step/graph_writer.h"
#include "planner/footprint/step_shapes.h"
#include "planner/core/param_layout.h"
#include "planner/stacks/step_builder.h"

namespace longctx::step {

// A tensor's index in the graph; -1: absent under this configuration.
using TensorId = int;

// The tensors of one layer's forward that its backward reads (the first pass, or the
// recompute of a checkpointed layer).
struct LayerActs {
  TensorId in = -1;      // layer input, the residual stream [n, h] e
  TensorId rstd1 = -1;   // attention norm's rstd [n] fp32
  TensorId xn1 = -1;     // attention norm's output [n, h] e
  // Qwen3 qk norm: q and k before the per-head norm, and the norms' rstd.
  TensorId q_pre = -1;   // [n, H*d] e
  TensorId k_pre = -1;   // [n, K*d] e
  TensorId rstd_q = -1;  // [n*H] fp32
  TensorId rstd_k = -1;  // [n*K] fp32
  // Unchunked attention's inputs and outputs on the sequence side of the all-to-all.
  TensorId q_sp = -1;    // [b*S, hl, d] e
  TensorId k_sp = -1;    // [b*S, kvr, d] e
  TensorId v_sp = -1;    // [b*S, kvr, d] e
  TensorId o_sp = -1;    // [b*S, hl, d] e
  TensorId lse = -1;     // log-sum-exp [b, hl, S] fp32
  TensorId o_loc = -1;   // attention output on this rank's tokens, all heads: o_proj's input [n, H*d] e
  TensorId mid = -1;     // residual stream after attention [n, h] e
  TensorId rstd2 = -1;   // MLP norm's rstd [n] fp32
  TensorId xn2 = -1;     // MLP norm's output [n, h] e
  // Plain MLP (the tiled MLP keeps none of these).
  TensorId gate = -1;    // [n, I] e
  TensorId up = -1;      // [n, I] e
  TensorId act = -1;     // silu(gate) * up [n, I] e
  TensorId out = -1;     // layer output, the next layer's input [n, h] e
  int last_forward_op = -1;  // the op that writes `out`
};

// Tensors of the batch, the loss and the head, shared by the embedding, the loss and the
// layers' schedule.
struct OuterActs {
  TensorId tokens = -1;     // token ids [n] int64
  TensorId targets = -1;    // target ids [n] int64
  TensorId final_x = -1;    // last layer's output, the final norm's input [n, h] e
  TensorId rstd_f = -1;     // final norm's rstd [n] fp32
  TensorId xf = -1;         // final norm's output [n, h] e
  TensorId logp = -1;       // untiled loss: log-softmax [n, V] fp32
  TensorId head_full = -1;  // zero3: the head group's gathered parameters
  TensorId tied_full = -1;  // zero3, tied: the embedding gathered again for the output projection
  TensorId tied_grad = -1;  // tied: the embedding's gradient, first produced by the loss
};

// The hf stack's tensors that every layer reads (planner/stacks/step/hf_model.cpp).
struct HfModelActs {
  TensorId positions = -1;  // cache_position [S] int64, until the model's forward returns
  TensorId cos = -1;        // RoPE tables [b, S, d] e each, saved by every layer's rotation
  TensorId sin = -1;
  TensorId mask = -1;       // the model's causal mask (model_inputs), if it makes one
  TensorId labels = -1;     // ForCausalLMLoss's shifted labels [b, S+1] int64, until nll's backward
  std::vector<TensorId> cache;  // use_cache: the k/v copies the DynamicCache holds until the loss
  Ids model_locals;             // what else LlamaModel.forward holds until it returns (arctic: position_ids, the embedding output)
  Ids batch;                    // input_ids, labels (and an attention_mask), held until the step returns
  // torchtitan's context parallel: the rank's positions [b, Sl] int32 (prepare_context_parallel_input),
  // and its shards of the batch with them, which forward_backward_step holds until backward is done.
  TensorId cp_positions = -1;
  Ids cp_shards;
};

// TRL's chunked loss (planner/stacks/step/trl_loss.cpp): what its chunks' checkpoint frames and
// the gather's backward keep from the forward to the backward.
struct TrlLossActs {
  TensorId gathered = -1;   // hidden[order] [N, h] e, held by every chunk's saved inputs
  TensorId labels = -1;     // labels[order] [N] int64, likewise
  TensorId order = -1;      // the argsort [N] int64, saved by IndexBackward0
  TensorId rng_last = -1;   // the last chunk's RNG state, until its backward (the first to run)
  TensorId rng_rest = -1;   // the other chunks', until the first chunk's backward
};

// The torchtitan stack across ranks: FSDP2's buffers per parameter group (torchtitan_fsdp2.cpp).
struct Fsdp2Acts {
  std::vector<TensorId> gathered;   // per group: all_gather_output [world * shard] e, while held
  std::vector<TensorId> unsharded;  // per group: the parameters unsharded [group_params] e
  TensorId forward_gathered = -1;   // forward: the last group's gather, freed at the next copy-out
  TensorId reduce_input = -1;       // backward: the last reduce-scatter's input, freed at the next
  // Per layer: the block's floating-point forward inputs cast to param_dtype
  // (cast_forward_inputs): qwen3's rope_cache [S, 2d] e in bf16; -1 where nothing is cast.
  std::vector<TensorId> cast_inputs;
};

// torchtitan's per-op selective checkpointing (CheckpointPolicy::Ops) of the block being
// written (torchtitan/distributed/activation_checkpoint.py, _apply_op_sac's _custom_policy
// with the models' _op_sac_save_list, models/llama3/infra/parallelize.py): its policy counts
// the block's aten.mm calls and keeps the output of every odd-numbered one (wq, wv, w1, w2),
// and on a GPU the outputs of the attention kernel (the flash, efficient and cuDNN kernels are
// on the list; the CPU's _scaled_dot_product_flash_attention_for_cpu is not). The block's
// recompute takes those tensors back in the same order instead of running their ops
// (torch.utils.checkpoint's _CachedTorchDispatchMode), so each lives from its forward op to
// its last reader in the recompute.
struct OpSac {
  enum class Mode { Off, Keep, Replay };
  Mode mode = Mode::Off;
  int mm_count = 0;            // the block's aten.mm calls so far, this pass
  std::deque<TensorId> kept;   // Keep: appended in op order; Replay: taken from the front

  // Replay: the next kept tensor, in the order the forward kept them.
  TensorId take() {
    const TensorId t = kept.front();
    kept.pop_front();
    return t;
  }
};

struct StepBuild {
  explicit StepBuild(const StepInputs& inputs);

  const StepInputs& in;
  const ParallelConfig& parallel;
  footprint::StepShapes shapes;
  bool zero3 = false;
  bool shard_grads = false;  // zero2/zero3 across ranks: gradients reduce-scattered into shards
  bool shard_optim = false;  // any ZeRO stage: optimizer states sharded
  GraphWriter graph;

  std::vector<TensorId> params;   // per group: its parameters (a shard under zero3)
  std::vector<Ids> grads;         // per group: what the optimizer step reads
  std::vector<TensorId> grad_host;  // offloaded optimizer, per group: its persistent fp32 host gradient
  std::vector<LayerActs> acts;    // per layer
  std::vector<TensorId> checkpoint_host;  // per layer: the offloaded checkpoint, or -1
  // One rank, streamed layers: per layer, the device copy of each parameter (kParamTable's
  // rows; -1 where absent or where the layer is one gathered buffer), from its latest fetch.
  std::vector<std::array<TensorId, kParamTable.size()>> param_copies;
  OuterActs outer;
  HfModelActs hf_model;
  TrlLossActs trl_loss;
  Fsdp2Acts fsdp2;
  OpSac op_sac;  // the torchtitan stack's per-op selective checkpointing, while a block is written
  // The arctic stack: DeepSpeed's hook on each parameter's gradient, called with the gradient
  // [numel] e just after the op that made it (planner/stacks/step/arctic_zero.cpp); unset elsewhere.
  std::function<void(TensorId grad, std::int64_t numel)> grad_ready;
  std::function<void()> grads_flush;  // and the reduction of what its bucket still holds

  // A group's tensor name ("layer.3.", "embed.", "head.").
  Name group_name(int group, const char* base) const;
  // The layer a group's ops run among, -1 for the embedding and the head.
  int layer_of_group(int group) const { return group < shapes.layers ? group : -1; }
};

}  // namespace longctx::step
