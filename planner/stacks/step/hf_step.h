#pragma once
// The hf stack's step (stack.h): transformers' decoder layer (hf_layer.cpp) and the model
// around it, the loss and torch.optim's AdamW (hf_model.cpp), written into the same step
// graph longctx's own ops are (step_build.h), with the model states of zero.cpp.
#include <deque>
#include <functional>

#include "planner/stacks/blocks/checkpoint_offload.h"
#include "planner/stacks/step/step_build.h"

namespace longctx::step {

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

// The step of a stack written with transformers' layers.
struct HfStep : StepBuild {
  explicit HfStep(const StepInputs& inputs) : StepBuild(inputs), checkpoints(*this) {}
  HfModelActs hf_model;
  TrlLossActs trl_loss;
  Fsdp2Acts fsdp2;
  OpSac op_sac;
  std::function<void(TensorId grad, std::int64_t numel)> grad_ready;
  std::function<void()> grads_flush;
  blocks::CheckpointOffload checkpoints;
};
}  // namespace longctx::step

namespace longctx::step::hf {

using footprint::StepShapes;

inline constexpr Category kAct = Category::Activations;
inline constexpr Category kTr = Category::Transient;
inline constexpr Phase kB = Phase::Backward;

// The names of one LlamaRMSNorm call's tensors and ops (string literals: Name keeps the
// pointer), all but two from its prefix: LONGCTX_HF_NORM_NAMES below.
struct NormNames {
  const char *x32, *to_fp32, *variance, *rstd, *stats, *normed32, *scale, *normed, *to_dtype, *out, *weight;
  const char *normed_grad, *weight_bwd, *normed_grad32, *to_dtype_bwd, *x32_grad, *rstd_grad, *scale_bwd,
      *variance_grad, *rsqrt_bwd, *square_grad, *mean_bwd, *pow_bwd, *to_fp32_bwd;
  const char* weight_grad;  // the weight's gradient, a piece of its group's
  const char* in_grad;      // the input's gradient, as the next op upstream knows it
};
#define LONGCTX_HF_NORM_NAMES(P, WEIGHT_GRAD, IN_GRAD)                                                            \
  ::longctx::step::hf::NormNames {                                                                               \
    P ".in.fp32", P ".to_fp32", P ".variance", P ".rstd", P ".stats", P ".normed.fp32", P ".scale", P ".normed",   \
        P ".to_dtype", P ".out", P ".weight", P ".normed.grad", P ".weight.bwd", P ".normed.grad.fp32",           \
        P ".to_dtype.bwd", P ".in.grad.fp32", P ".rstd.grad", P ".scale.bwd", P ".variance.grad", P ".rsqrt.bwd", \
        P ".square.grad", P ".mean.bwd", P ".pow.bwd", P ".to_fp32.bwd", WEIGHT_GRAD, IN_GRAD                     \
  }

// One LlamaRMSNorm call: its rows and width, and its names.
struct NormSpec {
  int scope = Name::kNone;  // the layer, or Name::kNone for the final norm
  int layer = -1;
  std::int64_t rows = 0, width = 0;
  NormNames names;
};

// What a norm's backward reads.
struct NormActs {
  TensorId x = -1;     // input [rows, width] e
  TensorId x32 = -1;   // input in fp32 (x itself in fp32)
  TensorId rstd = -1;  // [rows] fp32
  TensorId xr = -1;    // normalized input before the weight, [rows, width] e (fp32 in fp32)
  TensorId y = -1;     // output [rows, width] e
};

struct HfLayerActs {
  TensorId in = -1;
  NormActs norm1, q_norm, k_norm, norm2;
  TensorId q = -1, k = -1, v = -1;   // after RoPE (k, v: the cache's copies when it is kept)
  TensorId k_rep = -1, v_rep = -1;   // eager, or sdpa with a mask: repeated to the query heads
  // eager: what the bmms read and save, [b*H, S, d] e: q, k_rep, v_rep, or torch.matmul's
  // contiguous copies of them where its batch fold cannot be a view (eager_matmul_operand).
  TensorId q_mm = -1, k_mm = -1, v_mm = -1;
  TensorId mask = -1;                // sdpa with a mask: the additive mask its backward saves
  TensorId probs32 = -1, probs = -1;  // eager: softmax output fp32, and cast (bf16)
  TensorId o = -1;                   // attention output [n, H*d] e
  TensorId o_heads = -1;             // torchtitan's ring: its output [b, H, Sl, d] e, saved; o is its copy
  TensorId lse = -1;                 // sdpa: [b, H, S] fp32
  TensorId rope_table = -1;          // torchtitan's qwen3 under FSDP2 in bf16: rope_cache cast [S, 2d] e;
                                     // context parallel: freqs_cis at the rank's positions [n, d/2] complex64
  TensorId mid = -1;
  TensorId gate = -1, act = -1, up = -1, prod = -1;  // [n, I] e each
  TensorId down = -1;
  TensorId out = -1;
  int last_forward_op = -1;
};

// How a layer's forward runs: plainly (use_cache keeps k/v copies), without a graph as a
// checkpointed layer's first pass does, or as a recompute (reentrant: the whole layer;
// non-reentrant: until its last saved tensor, torch.utils.checkpoint's early stop).
enum class LayerPass { Plain, Checkpointed, RecomputeWhole, RecomputeUntilSaved };

// A decoder layer's two norms (the MLP's when `mlp`), the model's final norm, and Qwen3's
// per-head norm of q or k.
NormSpec layer_norm_spec(const StepShapes& s, int l, bool mlp);
NormSpec final_norm_spec(const StepShapes& s);
NormSpec head_norm_spec(const StepShapes& s, int l, bool q);
// A projection's forward: [n, in] x [in, out] (+ bias) -> [n, out] e (its `category`).
TensorId project(HfStep& sb, int l, const char* name, const char* out_name, TensorId x, std::int64_t in,
                 std::int64_t out, Phase phase, bool rc, Category category = kAct);
// A projection's backward: its weight's gradient (appended to `grads`) and, unless `into` is
// given (the input's gradient is added into it in place), the input's gradient [n, in] e.
TensorId project_backward(HfStep& sb, int l, const char* name, const char* grad_name, const char* in_grad_name,
                          TensorId d_y, TensorId x, std::int64_t in, std::int64_t out, bool bias, Ids& grads,
                          TensorId into = -1);
// apply_rotary_pos_emb on q or k of `heads` heads ([n, heads*d] e out), and its backward.
TensorId rope(HfStep& sb, int l, const char* name, const char* out_name, Ids reads, std::int64_t heads, Phase phase,
              bool rc);
// `table`: the rotation's saved table where it is a tensor of the layer's (torchtitan's context parallel).
TensorId rope_backward(HfStep& sb, int l, const char* name, const char* out_name, TensorId grad, std::int64_t heads,
                       TensorId table = -1);

NormActs norm_forward(HfStep& sb, const NormSpec& ns, TensorId x, Phase phase, bool rc);
TensorId norm_backward(HfStep& sb, const NormSpec& ns, const NormActs& a, TensorId grad, TensorId residual,
                       Ids& grads);
// q_proj, k_proj, v_proj (Qwen3's q and k norms) and the rotation of q and k, into a.q, a.k, a.v;
// and their backward from the attention's dq, dk, dv (each [n, heads*d] e), returning the
// attention norm's output gradient: gradients laid out head-major are copied back first (k's
// when `k_head_major`, q's and v's when `qv_head_major`).
void project_qkv(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc);
TensorId project_qkv_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId dq, TensorId dk, TensorId dv,
                              bool k_head_major, bool qv_head_major, Ids& grads);
void attention_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool cache);
TensorId attention_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_o, Ids& grads);
void mlp_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool whole);
TensorId mlp_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_out, Ids& grads);
HfLayerActs layer_forward(HfStep& sb, int l, TensorId x, Phase phase, bool rc, LayerPass pass);
// Returns the layer input's gradient; appends the layer's weight gradients to `grads`.
TensorId layer_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_out, Ids& grads);

// The whole step (hf_model.cpp).
StepGraph build_step(const StepInputs& in);
// The model's final norm over the last layer's output (outer.final_x, outer.xf), where
// LlamaModel.forward returns and its position tensors, mask and locals go.
NormActs final_norm_forward(HfStep& sb, TensorId final_x);
// Its final norm, lm_head and ForCausalLMLoss, and their backward (returning the last
// layer's output gradient). `head_weight`: lm_head's weight gathered for the op (ZeRO-3), or -1.
NormActs loss_forward(HfStep& sb, TensorId final_x, TensorId head_weight);
TensorId loss_backward(HfStep& sb, const NormActs& f, TensorId head_weight);

// TRL SFTTrainer's chunked loss (trl_loss.cpp; footprint/trl.h), which loss_forward and
// loss_backward run when the stack's loss is trl-chunked-nll: the backbone without a cache,
// lm_head and the cross-entropy 256 rows at a time, each chunk checkpointed. With tied
// embeddings the summed lm_head gradient waits for the embedding's; trl_tied_grad then makes
// the table's gradient from it.
bool trl_chunked_loss(const HfStep& sb);
NormActs trl_loss_forward(HfStep& sb, TensorId final_x);
TensorId trl_loss_backward(HfStep& sb, const NormActs& f);
void trl_tied_grad(HfStep& sb);

// torchtitan's Llama 3 step (the torchtitan stack, 0.2.2: models/llama3/model/model.py,
// components/loss.py, distributed/activation_checkpoint.py), which these functions write
// where it differs from transformers' sdpa step: RoPE by complex multiplication on the
// [b, S, heads, d] layout (apply_rotary_emb) from a freqs_cis buffer, torch's RMSNorm
// (nn.RMSNorm), no cache, no position tensors or masks, the loss over unshifted labels, and
// non-reentrant checkpointing without early stop, every layer or every K-th.
bool torchtitan(const HfStep& sb);
// Whether layer l runs checkpointed: the hf stack wraps every layer or none; torchtitan's
// selective mode wraps the K-th, 2K-th, ... block it visits (_apply_layer_sac counts from 1).
bool layer_checkpointed(const HfStep& sb, int l);

// torchtitan across ranks: FSDP2 as its apply_fsdp wraps the model (torchtitan_fsdp2.cpp;
// footprint/fsdp2.h), each parameter group gathered before it runs and resharded after
// (the head group, [norm, output], not until its backward), its gradients reduce-scattered
// into fp32 shards once its backward is done.
bool fsdp2(const HfStep& sb);
void fsdp2_model_states(HfStep& sb);
// Forward: the group's all-gather and copy-out (freeing the previous group's gathered
// buffer), and its reshard after it ran; the root's end of forward frees the last gather.
void fsdp2_unshard_forward(HfStep& sb, int group, Phase phase);
void fsdp2_reshard(HfStep& sb, int group, Phase phase);
void fsdp2_end_forward(HfStep& sb);
// Backward: the gather a group's pre-backward issues for the next group to run backward
// (FSDPParamGroup's backward prefetch), the group's own copy-out, and its post-backward
// (reshard, then its gradients copied into the reduce-scatter input, the shard out).
void fsdp2_prefetch(HfStep& sb, int group, Phase phase);
void fsdp2_copy_out_backward(HfStep& sb, int group);
void fsdp2_post_backward(HfStep& sb, int group);
void fsdp2_end_backward(HfStep& sb);

// Liger-Kernel's versions (liger.cpp), which the functions above run instead when liger(sb):
// the arctic stack's liger model.
bool liger(const HfStep& sb);
NormActs liger_norm_forward(HfStep& sb, const NormSpec& ns, TensorId x, Phase phase, bool rc);
TensorId liger_norm_backward(HfStep& sb, const NormSpec& ns, const NormActs& a, TensorId grad, TensorId residual,
                             Ids& grads);
void liger_mlp_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc);
TensorId liger_mlp_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_out, Ids& grads);

}  // namespace longctx::step::hf
