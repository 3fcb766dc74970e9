// The hf stack under DeepSpeed ZeRO-3, as accelerate 1.15.0 (distributed_type DEEPSPEED,
// accelerator.py _prepare_deepspeed) and the Trainer run transformers' model, with DeepSpeed's
// Ulysses where parallelism_config's sp_size is above 1 (sp_backend "deepspeed":
// _prepare_deepspeed registers deepspeed/runtime/sequence_parallel/ulysses_sp.py's
// UlyssesSPAttentionHF with transformers and wraps the data loader in
// UlyssesSPDataLoaderAdapter). The blocks are the arctic stack's (ArcticTraining runs the same
// DeepSpeed classes): ZeRO-3's states, gathers, gradient buckets and step
// (blocks/deepspeed_zero3.h) and the Ulysses attention (blocks/ulysses_attention.h). Where the
// Trainer differs from ArcticTraining:
// - the config: the exported ds_config.json names no bucket sizes, so DeepSpeed's defaults
//   hold (zero/config.py: reduce_bucket_size 5e8, stage3_param_persistence_threshold 1e5), as
//   in ArcticTraining's recipes; accelerate fills hidden-size buckets only for keys set to
//   "auto" (accelerator.py _prepare_deepspeed, hidden_size_auto_keys), which it does not write;
// - checkpointing: the Trainer's gradient_checkpointing (transformers' own, reentrant or not,
//   and its offload from 5.17), not ArcticTraining's CheckpointFunctionWithCPUOffload
//   (blocks/hf_layers.h);
// - the batch: the Trainer's collator (TRL's DataCollatorForLanguageModeling: input_ids,
//   labels, attention_mask, and position_ids, which the adapter requires) on every rank;
// - the loss: transformers' ForCausalLMLoss over the rank's full logits, on the adapter's
//   shift_labels under Ulysses (the adapter pops labels, so the model returns logits and the
//   Trainer calls model.loss_function(logits, shift_labels=...): no pad of its own), on the
//   batch's labels padded and shifted on one rank;
// - a tied table's gradient reaches ZeRO's hook once, summed (deepspeed_embedding_backward).
#include "planner/stacks/blocks/deepspeed_zero3.h"
#include "planner/stacks/blocks/hf_layer.h"
#include "planner/stacks/blocks/hf_layers.h"
#include "planner/stacks/blocks/hf_model.h"
#include "planner/stacks/blocks/ulysses_attention.h"
#include "planner/stacks/hf/step_parts.h"

namespace longctx::step::hf {

using namespace blocks;

namespace {

// q_proj's pre-forward hook fetches the attention's projections (the first pass: a recompute
// runs inside its layer's backward gather); o_proj's return lets them go (hf_layer.cpp holds
// a.attn_params that long).
void gathered_project_qkv(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc) {
  if (!rc) a.attn_params = deepspeed_gather(sb, l, "attn.params.full", layer_gathered_elems(sb.shapes, true, false), phase);
  transformers_project_qkv(sb, l, a, phase, rc);
}

// The MLP's projections fetched as it starts, held until it returns.
void gathered_mlp_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool whole) {
  const TensorId w = rc ? -1 : deepspeed_gather(sb, l, "mlp.params.full", layer_gathered_elems(sb.shapes, false, true), phase);
  llama_mlp_forward(sb, l, a, phase, rc, whole);
  if (w >= 0) sb.graph.add_input(sb.graph.last_op(), w);
}

// transformers' ops with ZeRO-3's gathers; the attention DeepSpeed's Ulysses under sp_size > 1.
LayerOps deepspeed_ops(bool ulysses) {
  LayerOps ops = kTransformersOps;
  ops.project_qkv = gathered_project_qkv;
  ops.mlp_forward = gathered_mlp_forward;
  if (ulysses) {
    ops.attention_forward = ulysses_attention_forward;
    ops.attention_backward = ulysses_attention_backward;
  }
  return ops;
}
const LayerOps kDeepSpeedOps = deepspeed_ops(false);
const LayerOps kDeepSpeedUlyssesOps = deepspeed_ops(true);

// The Trainer's checkpointing around each layer (HfLayers), the layer's parameters gathered
// whole for its recompute and its backward (blocks/deepspeed_zero3.cpp: max_reuse_distance
// keeps them), released as its backward ends.
class DeepSpeedLayers final : public HfLayers {
 public:
  explicit DeepSpeedLayers(HfStep& sb) : HfLayers(sb) {}

  void before_backward(int l) override {
    HfLayers::before_backward(l);
    params_ = deepspeed_gather(sb_, l, "params.full", layer_gathered_elems(sb_.shapes, true, true), kB, true);
  }
  void after_backward(int l, const HfLayerActs& a, TensorId d_out, bool recomputed, int last) override {
    HfLayers::after_backward(l, a, d_out, recomputed, last);
    if (params_ >= 0) sb_.graph.add_input(last, params_);
  }

 private:
  TensorId params_ = -1;
};

// ForCausalLMLoss over the rank's logits, lm_head gathered by its module's hooks for its
// forward and again for its backward; the last layer's output gradient.
TensorId deepspeed_loss(HfStep& sb, TensorId final_x) {
  const StepShapes& s = sb.shapes;
  const NormActs f = final_norm_forward(sb, final_x);
  const TensorId w = deepspeed_gather(sb, -1, "head.params.full", s.V * s.h, Phase::Loss);
  cross_entropy_forward(sb, lm_head_forward(sb, w), /*shift_labels=*/s.u == 1);
  const TensorId d_logits = cross_entropy_backward(sb);
  return lm_head_backward(sb, f, d_logits, deepspeed_gather(sb, -1, "head.params.full.bwd", s.V * s.h, kB));
}

void write_ops(HfStep& sb) {
  deepspeed_model_states(sb);
  if (sb.in.states_only) return;  // StepInputs::states_only
  DeepSpeedGradients gradients(sb);
  sb.grad_hook = &gradients;
  sb.kv_cache = keeps_kv_cache(sb);
  DeepSpeedLayers layers(sb);
  std::vector<HfLayerActs> acts;
  const TensorId x0 = model_inputs(sb, nullptr, /*zero3=*/true);
  const TensorId final_x = forward_layers(layers, static_cast<int>(sb.shapes.layers), x0, acts);
  deepspeed_embedding_backward(sb, backward_layers(layers, acts, sb.graph, deepspeed_loss(sb, final_x)));
  // A prefix build (the search's cheap rejection) stops before the last reductions and the step.
  const bool prefix = sb.ends_at_prefix();
  if (!prefix) {
    gradients.flush();
    deepspeed_optimizer_step(sb);
  }
  // accelerate's DeepSpeedEngineWrapper.backward runs engine.step() too, so the Trainer's
  // training_step drops the loss and its graph after the optimizer step.
  layers.free_graph(prefix ? Phase::Backward : Phase::Optimizer);
  sb.grad_hook = nullptr;  // the hook ends with this step
}

}  // namespace

// UlyssesSPDataLoaderAdapter.refill, before every u-th step: each of the batch's four keys
// ([b, S] int64 on every rank: input_ids, labels, attention_mask, position_ids) moved to the
// device and all-gathered into u new [b, S] tensors, the labels padded and shifted into
// shift_labels, each key sliced to the rank's [b, S/u] and moved to the host; the Trainer's
// _prepare_inputs brings the slices back: input_ids, attention_mask, position_ids and
// shift_labels [b, S/u] int64 each, held until the step returns.
void ulysses_batch(HfStep& sb) {
  const StepShapes& s = sb.shapes;
  const std::int64_t keys = 4, sample = s.b * s.S * 8;
  sb.graph.op(step_name("batch.ulysses_refill"), Phase::Forward, -1, {}, {}, {.workspace = keys * (s.u + 1) * sample});
  OuterActs& o = sb.outer;
  o.tokens = sb.graph.tensor(step_name("batch.tokens"), s.n * 8, kAct);
  o.targets = sb.graph.tensor(step_name("batch.targets"), s.n * 8, kAct);  // shift_labels
  const TensorId mask = sb.graph.tensor(step_name("batch.attention_mask"), s.n * 8, kAct);
  const TensorId positions = sb.graph.tensor(step_name("batch.position_ids"), s.n * 8, kAct);
  sb.graph.op(step_name("batch.load"), Phase::Forward, -1, {}, {o.tokens, o.targets, mask, positions});
  sb.model.batch = {o.tokens, o.targets, mask, positions};
}

StepGraph build_deepspeed_step(const StepInputs& in) {
  HfStep sb(in, in.parallel.ulysses > 1 ? kDeepSpeedUlyssesOps : kDeepSpeedOps);
  return write_step(sb, &write_ops);
}

}  // namespace longctx::step::hf
