#pragma once
// The step of a stack whose decoder layers are transformers' (the hf, arctic and torchtitan
// stacks): the core build, the model's tensors every layer reads, and the op variants the
// stack runs (LayerOps: whose norm, RoPE, q/k/v projection, attention and MLP). The blocks
// of planner/stacks/blocks/ write the ops; each stack picks its variants and composes them
// (planner/stacks/<name>/). Shapes below: n = b*S tokens of the rank.
#include <cstdint>
#include <deque>
#include <vector>

#include "planner/stacks/step/step_build.h"

namespace longctx::step::blocks {

using footprint::StepShapes;

inline constexpr Category kAct = Category::Activations;
inline constexpr Category kTr = Category::Transient;
inline constexpr Phase kB = Phase::Backward;

// How a tied table's two gradients meet in its AccumulateGrad's input buffer
// (torch/csrc/autograd/input_buffer.cpp, accumulate): the one that came first is added to in
// place where the buffer holds its last reference and its storage's (can_accumulate_inplace),
// else both go into a new sum, which the AccumulateGrad then takes as it is. lm_head's
// gradient through `w.t()` is MmBackward0's `.t()` of a new [V, h] (mm_mat2_backward returns
// a column-major mat2's gradient column-major) seen again through TBackward0: a view whose
// base shares its storage, so it is never added to in place.
enum class TiedSum { InPlace, New };

// LlamaModel.forward's tensors that every layer reads (hf_model.cpp, and each stack's inputs).
struct HfModelActs {
  TensorId positions = -1;  // cache_position [S] int64, until the model's forward returns
  TensorId cos = -1;        // RoPE tables [b, S, d] e each, saved by every layer's rotation
  TensorId sin = -1;
  TensorId mask = -1;       // the model's causal mask (model_inputs), if it makes one
  TensorId labels = -1;     // ForCausalLMLoss's shifted labels [b, S+1] int64, until nll's backward
  std::vector<TensorId> cache;  // use_cache: the k/v copies the DynamicCache holds until the loss
  Ids model_locals;             // what else LlamaModel.forward holds until it returns (arctic: position_ids, the embedding output)
  Ids batch;                    // input_ids, labels (and an attention_mask), held until the step returns
  Ids context_locals;           // context parallel: what its generator's frame holds until backward is done
};

// The names of one RMSNorm call's tensors and ops (string literals: Name keeps the pointer),
// all but two from its prefix: LONGCTX_HF_NORM_NAMES below.
struct NormNames {
  const char *x32, *to_fp32, *variance, *rstd, *stats, *normed32, *scale, *normed, *to_dtype, *out, *weight;
  const char *normed_grad, *weight_bwd, *normed_grad32, *to_dtype_bwd, *x32_grad, *rstd_grad, *scale_bwd,
      *variance_grad, *rsqrt_bwd, *square_grad, *mean_bwd, *pow_bwd, *to_fp32_bwd;
  const char* weight_grad;  // the weight's gradient, a piece of its group's
  const char* in_grad;      // the input's gradient, as the next op upstream knows it
};
#define LONGCTX_HF_NORM_NAMES(P, WEIGHT_GRAD, IN_GRAD)                                                            \
  ::longctx::step::blocks::NormNames {                                                                           \
    P ".in.fp32", P ".to_fp32", P ".variance", P ".rstd", P ".stats", P ".normed.fp32", P ".scale", P ".normed",   \
        P ".to_dtype", P ".out", P ".weight", P ".normed.grad", P ".weight.bwd", P ".normed.grad.fp32",           \
        P ".to_dtype.bwd", P ".in.grad.fp32", P ".rstd.grad", P ".scale.bwd", P ".variance.grad", P ".rsqrt.bwd", \
        P ".square.grad", P ".mean.bwd", P ".pow.bwd", P ".to_fp32.bwd", WEIGHT_GRAD, IN_GRAD                     \
  }

// One RMSNorm call: its rows and width, and its names.
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

// DeepSpeed's Ulysses attention (ulysses_attention.h): what flash attention reads after the
// all-to-all, [b*S, hl or kvr, d] e each (the projections' q, k, v themselves when u = 1), and
// its output [b*S, hl, d] e.
struct UlyssesActs {
  TensorId q = -1, k = -1, v = -1;
  TensorId o = -1;
};

// What one decoder layer's forward leaves for its backward.
struct HfLayerActs {
  TensorId in = -1;                  // the layer's input [n, h] e
  NormActs norm1, q_norm, k_norm, norm2;
  TensorId q = -1, k = -1, v = -1;   // after RoPE [n, heads*d] e (k, v: the cache's copies when it is kept)
  TensorId k_rep = -1, v_rep = -1;   // eager, or sdpa with a mask: repeated to the query heads [n, H*d] e
  // eager: what the bmms read and save, [b*H, S, d] e: q, k_rep, v_rep, or torch.matmul's
  // contiguous copies of them where its batch fold cannot be a view (eager_matmul_operand).
  TensorId q_mm = -1, k_mm = -1, v_mm = -1;
  TensorId mask = -1;                // sdpa with a mask: the additive mask its backward saves [b, 1, S, S] e
  TensorId probs32 = -1, probs = -1;  // eager: softmax output [b, H, S, S] fp32, and cast (bf16)
  TensorId o = -1;                   // attention output [n, H*d] e
  TensorId o_heads = -1;             // torchtitan's ring: its output [b, H, Sl, d] e, saved; o is its copy
  TensorId lse = -1;                 // sdpa: [b, H, S] fp32 (flash under Ulysses: [b, hl, S] fp32)
  UlyssesActs sp;                    // DeepSpeed's Ulysses attention (ulysses_attention.h)
  TensorId attn_params = -1;         // ZeRO-3: the attention projections gathered, until o_proj returns
  TensorId rope_table = -1;          // torchtitan's qwen3 under FSDP2 in bf16: rope_cache cast [S, 2d] e;
                                     // context parallel: freqs_cis at the rank's positions [n, d/2] complex64
  TensorId mid = -1;                 // residual stream after attention [n, h] e
  TensorId gate = -1, act = -1, up = -1, prod = -1;  // [n, I] e each
  TensorId down = -1;                // down_proj's output [n, h] e
  TensorId out = -1;                 // the layer's output [n, h] e
  int last_forward_op = -1;          // the op that writes `out` (or the recompute's last)
};

// How a layer's forward runs: plainly (use_cache keeps k/v copies), without a graph as a
// checkpointed layer's first pass does, or as a recompute (reentrant: the whole layer;
// non-reentrant: until its last saved tensor, torch.utils.checkpoint's early stop).
enum class LayerPass { Plain, Checkpointed, RecomputeWhole, RecomputeUntilSaved };

struct HfStep;

// The implementation of each op a stack's decoder layer runs: transformers' own
// (kTransformersOps, hf_layer.h), Liger's kernels in its place (kLigerOps, liger.h), or
// torchtitan's model code (planner/stacks/torchtitan/).
struct LayerOps {
  // RMSNorm over `ns`'s rows, and its backward: the input's gradient (the residual's added
  // into it where one is given); the weight's gradient is appended to `grads`.
  NormActs (*norm_forward)(HfStep& sb, const NormSpec& ns, TensorId x, Phase phase, bool rc);
  TensorId (*norm_backward)(HfStep& sb, const NormSpec& ns, const NormActs& a, TensorId grad, TensorId residual,
                            Ids& grads);
  // The rotation of q or k (the first of `reads`) of `heads` heads, and its backward.
  TensorId (*rope)(HfStep& sb, int l, const char* name, const char* out_name, Ids reads, std::int64_t heads,
                   Phase phase, bool rc);
  TensorId (*rope_backward)(HfStep& sb, int l, const char* name, const char* out_name, TensorId grad,
                            std::int64_t heads, const HfLayerActs& a);
  // q, k and v from the attention norm's output, rotated, into a.q, a.k, a.v.
  void (*project_qkv)(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc);
  // The attention over a.q, a.k, a.v into a.o (`cache`: use_cache's DynamicCache first), and
  // its backward through the q/k/v projections: the attention norm's output gradient.
  void (*attention_forward)(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool cache);
  TensorId (*attention_backward)(HfStep& sb, int l, const HfLayerActs& a, TensorId d_o, Ids& grads);
  // The MLP over the MLP norm's output into a.down (`whole`: false stops once its last
  // saved tensor is made, as a non-reentrant recompute does), and its backward: d_xn2.
  void (*mlp_forward)(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool whole);
  TensorId (*mlp_backward)(HfStep& sb, int l, const HfLayerActs& a, TensorId d_out, Ids& grads);
};

// What a stack does with each parameter's gradient as backward makes it (DeepSpeed ZeRO-3's
// hook, deepspeed_zero3.h).
class GradientHook {
 public:
  // `grad` [numel] e, just after the op that made it.
  virtual void ready(TensorId grad, std::int64_t numel) = 0;

 protected:
  ~GradientHook() = default;
};

// Per-op selective checkpointing of the block being written (torch.utils.checkpoint with a
// policy; torchtitan's CheckpointPolicy::Ops: torchtitan/distributed/activation_checkpoint.py,
// _apply_op_sac's _custom_policy with the models' _op_sac_save_list,
// models/llama3/infra/parallelize.py): the policy counts the block's aten.mm calls and keeps
// the output of every odd-numbered one (wq, wv, w1, w2), and on a GPU the outputs of the
// attention kernel (the flash, efficient and cuDNN kernels are on the list; the CPU's
// _scaled_dot_product_flash_attention_for_cpu is not). The block's recompute takes those
// tensors back in the same order instead of running their ops (torch.utils.checkpoint's
// _CachedTorchDispatchMode), so each lives from its forward op to its last reader in the
// recompute.
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

struct HfStep : StepBuild {
  HfStep(const StepInputs& inputs, const LayerOps& layer_ops) : StepBuild(inputs), ops(layer_ops) {}

  const LayerOps& ops;
  HfModelActs model;
  OpSac op_sac;                       // off unless the checkpoint policy is per-op (hf_layers.cpp)
  GradientHook* grad_hook = nullptr;  // none unless the stack reduces gradients as they come
  bool kv_cache = false;              // a plain layer forward appends k and v to a DynamicCache (use_cache)
  // How the embedding's dense gradient joins a tied table's lm_head gradient (outer.tied_grad)
  // in the table's AccumulateGrad input buffer: set by the loss that made it. The table's
  // gradient reaches the stack's hook once, summed (autograd sums a parameter's uses before
  // its AccumulateGrad, whose post-accumulate hook ZeRO-3 registers: deepspeed/utils/torch.py
  // register_grad_hook, from stage3.py create_reduce_and_remove_grad_hooks).
  TiedSum tied_sum = TiedSum::InPlace;
};

// A parameter's gradient made: handed to the stack's hook, if it has one.
inline void grad_ready(HfStep& sb, TensorId grad, std::int64_t numel) {
  if (sb.grad_hook != nullptr) sb.grad_hook->ready(grad, numel);
}

}  // namespace longctx::step::blocks
