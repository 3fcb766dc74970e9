#pragma once
// longctx's own runtime's step (runtime/src/llama_step.cpp): its build (LongctxStep) and the
// emitters of its ops, one source file per technique with its forward and its backward ops;
// step.cpp composes them in execution order.
#include <array>
#include <vector>

#include "planner/core/param_layout.h"
#include "planner/stacks/blocks/checkpoint_offload.h"
#include "planner/stacks/step/step_build.h"

namespace longctx::step {

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

// The step of longctx's runtime being written: the core build and what its ZeRO, its
// streamed parameters and its offloads keep.
struct LongctxStep : StepBuild {
  explicit LongctxStep(const StepInputs& inputs);

  bool zero3 = false;
  bool shard_grads = false;  // zero2/zero3 across ranks: gradients reduce-scattered into shards
  bool shard_optim = false;  // any ZeRO stage: optimizer states sharded
  std::vector<TensorId> grad_host;  // offloaded optimizer, per group: its persistent fp32 host gradient
  // One rank, streamed layers: per layer, the device copy of each parameter (kParamTable's
  // rows; -1 where absent or where the layer is one gathered buffer), from its latest fetch.
  std::vector<std::array<TensorId, kParamTable.size()>> param_copies;
  blocks::CheckpointOffload checkpoints;  // offloaded checkpoints, per layer
};

// ---- zero.cpp: model states, ZeRO gathers and gradient reduction -------------------------
void model_states(LongctxStep& sb);
// zero3: whether a group's parameters are gathered into a buffer of their own for each use
// (across ranks, or from the host); one rank otherwise uses its shard in place.
bool gathers_group(const LongctxStep& sb, int group);
// zero3: gathers a group's parameters among the ops of `at_layer`; -1 when nothing is gathered.
TensorId gather_group(LongctxStep& sb, int group, Phase phase, int at_layer);
// One rank, streamed layers: op is the last backward node that saved the device copies of
// `roles` (footprint/zero.h, param_copy_bytes), which go after it. No-op where the layer's
// parameters are one gathered buffer or live on the device.
void frees_param_copies(LongctxStep& sb, int layer, int op, std::initializer_list<ParamRole> roles);
// Every device copy of the layer's parameters read by op: the end of a forward (the
// executor parks them all there, StreamedLayer::forward).
void reads_all_param_copies(LongctxStep& sb, int layer, int op);
// Whether a layer's parameters are gathered while the layer before it runs.
bool prefetch_params(const LongctxStep& sb);
// The embedding's or the head's whole gradient buffer.
TensorId new_group_grad(LongctxStep& sb, int group);
// One piece of a layer's gradient, allocated by the op that computes it; appended to `pieces`.
TensorId grad_piece(LongctxStep& sb, int layer, const char* sharded_name, const char* name, std::int64_t elems,
                    Ids& pieces);
// A finished group gradient: reduce-scattered into its shard under zero2/zero3.
void finish_group_grad(LongctxStep& sb, int group, Ids pieces, Phase phase);

// ---- offload.cpp: parameter streaming's placement, gradients to the host ------------------
bool streamed(const StepBuild& sb, int group);
// An offloaded optimizer's fp32 host gradient of a group, persistent (model states).
void host_grad_buffer(LongctxStep& sb, int group);
// A group's gradient copied into its host buffer, which the optimizer step then reads;
// workspace: device scratch of the copy.
void grads_to_host(LongctxStep& sb, int group, Phase phase, std::int64_t workspace = 0);
// An offloaded optimizer's finished group gradient that is not reduce-scattered, to the host
// as soon as backward finishes it: all-reduced first across ranks (zero1: the rank's slice
// of it).
void stream_whole_grad(LongctxStep& sb, int group, Phase phase);

// ---- embedding.cpp -------------------------------------------------------------------------
TensorId embedding_forward(LongctxStep& sb);  // returns layer 0's input
void embedding_backward(LongctxStep& sb, TensorId d_x);

// ---- norm.cpp: RMSNorm of the layers, the final norm and Qwen3's q and k -----------------
void attn_norm_forward(LongctxStep& sb, int l, LayerActs& a, Phase phase, bool rc);
void mlp_norm_forward(LongctxStep& sb, int l, LayerActs& a, Phase phase, bool rc);
void final_norm_forward(LongctxStep& sb);
// qk norm of q and k in place of them: their normed copies.
void qk_norm_forward(LongctxStep& sb, int l, LayerActs& a, TensorId& q, TensorId& k, Phase phase, bool rc);
TensorId mlp_norm_backward(LongctxStep& sb, int l, const LayerActs& a, TensorId d_xn2, TensorId d_out, Ids& grad);
TensorId attn_norm_backward(LongctxStep& sb, int l, const LayerActs& a, TensorId d_xn1, TensorId d_mid, Ids& grad);
TensorId final_norm_backward(LongctxStep& sb, TensorId d_xf);
// Gradients of q and k before the norm, from the gradients after it.
void qk_norm_backward(LongctxStep& sb, int l, const LayerActs& a, TensorId& dq, TensorId& dk, Ids& grad);

// ---- attention_ulysses.cpp: attention over all local heads, Ulysses or not ---------------
void ulysses_attention_forward(LongctxStep& sb, int l, LayerActs& a, Phase phase, bool rc);
void ulysses_attention_backward(LongctxStep& sb, int l, const LayerActs& a, TensorId d_oloc, TensorId d_xn1, Ids& grad);

// ---- attention_untied.cpp: head-chunked (Untied Ulysses) attention ------------------------
void untied_attention_forward(LongctxStep& sb, int l, LayerActs& a, Phase phase, bool rc);
void untied_attention_backward(LongctxStep& sb, int l, const LayerActs& a, TensorId d_oloc, TensorId d_xn1, Ids& grad);

// ---- mlp.cpp: SwiGLU MLP, plain or tiled ----------------------------------------------------
TensorId mlp_forward(LongctxStep& sb, int l, LayerActs& a, Phase phase, bool rc);  // returns down's output
TensorId mlp_backward(LongctxStep& sb, int l, const LayerActs& a, TensorId d_out, Ids& grad);  // returns d_xn2
// The tiled MLP's ops, by their names' bases (one object each: a retile finds them by address).
inline constexpr char kTiledMlpForward[] = "mlp.tiled";
inline constexpr char kTiledMlpBackward[] = "mlp.tiled.bwd";
// `graph`, built with MLP tiles for `in` but at another count of them, made the step build_step
// writes for `in` (StackProfile::retile_mlp): each tiled MLP op's workspace and launches, the
// only things the count changes (its traffic is counted apart from the workspace). False,
// `graph` untouched, where `in` or `graph` does not tile the MLP. REQUIRES: `graph` is
// build_step of `in` at another mlp_tiles.
bool retile_mlp(StepGraph& graph, const StepInputs& in);

// ---- layer.cpp: one decoder layer ---------------------------------------------------------
void rope_tables(StepBuild& sb);
LayerActs layer_forward(LongctxStep& sb, int l, TensorId x, Phase phase, bool rc);
// Returns d_in; `compute_end` receives the layer's last op before its gradient is finished
// (reduce-scattered or streamed out), which the runtime does once the layer's backward has returned.
TensorId layer_backward(LongctxStep& sb, int l, const LayerActs& a, TensorId d_out, int& compute_end);

// ---- loss.cpp: final norm, output projection and cross-entropy, plain or tiled -----------
void loss_forward(LongctxStep& sb);
TensorId loss_backward(LongctxStep& sb);  // returns the last layer's output gradient

// ---- optimizer.cpp: gradient all-reduce, AdamW, parameter all-gather ----------------------
// A group's whole gradient summed over the ranks, in place, among the ops of `phase`.
void all_reduce_grad(LongctxStep& sb, int group, Phase phase);
void optimizer_step(LongctxStep& sb);

// ---- step.cpp -------------------------------------------------------------------------------
StepGraph build_step(const StepInputs& in);

}  // namespace longctx::step
