#pragma once
// The emitters of the step's ops, one source file per technique with its forward and its
// backward ops; step_builder.cpp composes them in execution order.
#include "planner/stacks/step/step_build.h"

namespace longctx::step {

// ---- zero.cpp: model states, ZeRO gathers and gradient reduction -------------------------
void model_states(StepBuild& sb);
// zero3: whether a group's parameters are gathered into a buffer of their own for each use
// (across ranks, or from the host); one rank otherwise uses its shard in place.
bool gathers_group(const StepBuild& sb, int group);
// zero3: gathers a group's parameters among the ops of `at_layer`; -1 when nothing is gathered.
TensorId gather_group(StepBuild& sb, int group, Phase phase, int at_layer);
// One rank, streamed layers: op is the last backward node that saved the device copies of
// `roles` (footprint/zero.h, param_copy_bytes), which go after it. No-op where the layer's
// parameters are one gathered buffer or live on the device.
void frees_param_copies(StepBuild& sb, int layer, int op, std::initializer_list<ParamRole> roles);
// Every device copy of the layer's parameters read by op: the end of a forward (the
// executor parks them all there, StreamedLayer::forward).
void reads_all_param_copies(StepBuild& sb, int layer, int op);
// Whether a layer's parameters are gathered while the layer before it runs.
bool prefetch_params(const StepBuild& sb);
// The embedding's or the head's whole gradient buffer.
TensorId new_group_grad(StepBuild& sb, int group);
// One piece of a layer's gradient, allocated by the op that computes it; appended to `pieces`.
TensorId grad_piece(StepBuild& sb, int layer, const char* sharded_name, const char* name, std::int64_t elems,
                    Ids& pieces);
// A finished group gradient: reduce-scattered into its shard under zero2/zero3.
void finish_group_grad(StepBuild& sb, int group, Ids pieces, Phase phase);

// ---- offload.cpp: checkpoint offload and prefetch, gradients to the host ------------------
bool streamed(const StepBuild& sb, int group);
// Layer `layer`'s input `x` copied to the host (sb.checkpoint_host); prefetch_checkpoint brings
// it back, among the ops of layer `at_layer`.
void offload_checkpoint(StepBuild& sb, int layer, TensorId x);
TensorId prefetch_checkpoint(StepBuild& sb, int layer, int at_layer);
// An offloaded optimizer's fp32 host gradient of a group, persistent (model states).
void host_grad_buffer(StepBuild& sb, int group);
// A group's gradient copied into its host buffer, which the optimizer step then reads;
// workspace: device scratch of the copy.
void grads_to_host(StepBuild& sb, int group, Phase phase, std::int64_t workspace = 0);
// An offloaded optimizer's finished group gradient that is not reduce-scattered, to the host
// as soon as backward finishes it: all-reduced first across ranks (zero1: the rank's slice
// of it).
void stream_whole_grad(StepBuild& sb, int group, Phase phase);

// ---- embedding.cpp -------------------------------------------------------------------------
TensorId embedding_forward(StepBuild& sb);  // returns layer 0's input
void embedding_backward(StepBuild& sb, TensorId d_x);

// ---- norm.cpp: RMSNorm of the layers, the final norm and Qwen3's q and k -----------------
void attn_norm_forward(StepBuild& sb, int l, LayerActs& a, Phase phase, bool rc);
void mlp_norm_forward(StepBuild& sb, int l, LayerActs& a, Phase phase, bool rc);
void final_norm_forward(StepBuild& sb);
// qk norm of q and k in place of them: their normed copies.
void qk_norm_forward(StepBuild& sb, int l, LayerActs& a, TensorId& q, TensorId& k, Phase phase, bool rc);
TensorId mlp_norm_backward(StepBuild& sb, int l, const LayerActs& a, TensorId d_xn2, TensorId d_out, Ids& grad);
TensorId attn_norm_backward(StepBuild& sb, int l, const LayerActs& a, TensorId d_xn1, TensorId d_mid, Ids& grad);
TensorId final_norm_backward(StepBuild& sb, TensorId d_xf);
// Gradients of q and k before the norm, from the gradients after it.
void qk_norm_backward(StepBuild& sb, int l, const LayerActs& a, TensorId& dq, TensorId& dk, Ids& grad);

// ---- attention_ulysses.cpp: attention over all local heads, Ulysses or not ---------------
void ulysses_attention_forward(StepBuild& sb, int l, LayerActs& a, Phase phase, bool rc);
void ulysses_attention_backward(StepBuild& sb, int l, const LayerActs& a, TensorId d_oloc, TensorId d_xn1, Ids& grad);

// ---- attention_untied.cpp: head-chunked (Untied Ulysses) attention ------------------------
void untied_attention_forward(StepBuild& sb, int l, LayerActs& a, Phase phase, bool rc);
void untied_attention_backward(StepBuild& sb, int l, const LayerActs& a, TensorId d_oloc, TensorId d_xn1, Ids& grad);

// ---- mlp.cpp: SwiGLU MLP, plain or tiled ----------------------------------------------------
TensorId mlp_forward(StepBuild& sb, int l, LayerActs& a, Phase phase, bool rc);  // returns down's output
TensorId mlp_backward(StepBuild& sb, int l, const LayerActs& a, TensorId d_out, Ids& grad);  // returns d_xn2

// ---- layer.cpp: one decoder layer ---------------------------------------------------------
void rope_tables(StepBuild& sb);
LayerActs layer_forward(StepBuild& sb, int l, TensorId x, Phase phase, bool rc);
TensorId layer_backward(StepBuild& sb, int l, const LayerActs& a, TensorId d_out);  // returns d_in

// ---- loss.cpp: final norm, output projection and cross-entropy, plain or tiled -----------
void loss_forward(StepBuild& sb);
TensorId loss_backward(StepBuild& sb);  // returns the last layer's output gradient

// ---- optimizer.cpp: gradient all-reduce, AdamW, parameter all-gather ----------------------
// A group's whole gradient summed over the ranks, in place, among the ops of `phase`.
void all_reduce_grad(StepBuild& sb, int group, Phase phase);
void optimizer_step(StepBuild& sb);

}  // namespace longctx::step
