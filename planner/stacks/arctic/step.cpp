// The arctic stack's step around its decoder layers (layer.cpp), as ArcticTraining's
// SFTTrainer runs it (arctic_training/trainer/sft_trainer.py, SFTTrainer.loss, and
// Trainer.step): the batch (input_ids, labels, position_ids [b, S/u] int64; under Ulysses
// the labels pre-shifted, DeepSpeed's UlyssesSPDataLoaderAdapter), transformers 4.51's
// LlamaModel.forward with every layer checkpointed by torch.utils.checkpoint's reentrant
// implementation (modeling_utils.py gradient_checkpointing_enable's default, which
// ArcticTraining keeps) or none, its layer inputs offloaded to the host by ArcticTraining's
// CheckpointFunctionWithCPUOffload (arctic_training/monkey_patches.py), the loss (Liger's
// fused linear cross-entropy in the liger model, LigerForCausalLMLoss; else
// ForCausalLMLoss over the full logits, blocks/hf_model.h), DeepSpeed's backward with its
// gradient hook, and its optimizer step (blocks/deepspeed_zero3.h).
#include "planner/stacks/arctic/step.h"

#include "planner/footprint/embedding.h"
#include "planner/footprint/hf.h"
#include "planner/footprint/liger.h"
#include "planner/footprint/zero.h"
#include "planner/stacks/blocks/checkpoint_offload.h"
#include "planner/stacks/blocks/deepspeed_zero3.h"
#include "planner/stacks/blocks/hf_layer.h"
#include "planner/stacks/blocks/hf_model.h"
#include "planner/stacks/blocks/liger.h"
#include "planner/stacks/step/layer_loop.h"

namespace longctx::step::arctic {

using namespace footprint;
using namespace blocks;

namespace {

bool liger_model(const StepInputs& in) { return in.train.stack.arctic_model == ArcticModel::Liger; }

// The batch on the device, the embedding (its table gathered), cache_position = arange(S/u)
// [S/u] int64, and LlamaRotaryEmbedding's tables from the batch's position_ids. Under
// Ulysses the adapter first all-gathered every rank's batch on the device (three int64 keys,
// u copies of [b, S/u] each and their gathers) before keeping this rank's slice.
TensorId model_inputs(HfStep& sb) {
  const StepShapes& s = sb.shapes;
  OuterActs& o = sb.outer;
  HfModelActs& m = sb.model;
  if (s.u > 1) sb.graph.op(step_name("batch.ulysses_refill"), Phase::Forward, -1, {}, {}, {.workspace = 3 * 2 * s.u * s.n * 8});
  o.tokens = sb.graph.tensor(step_name("batch.tokens"), s.n * 8, kAct);    // input_ids [b, S/u] int64
  o.targets = sb.graph.tensor(step_name("batch.targets"), s.n * 8, kAct);  // labels or shift_labels [b, S/u] int64
  const TensorId position_ids = sb.graph.tensor(step_name("batch.position_ids"), s.n * 8, kAct);
  sb.graph.op(step_name("batch.load"), Phase::Forward, -1, {}, {o.tokens, o.targets, position_ids});
  const TensorId w = deepspeed_gather(sb, -1, "embed.params.full", s.V * s.h, Phase::Forward);
  const TensorId x0 = sb.graph.tensor(layer_name(0, "in"), s.n * s.h * s.e, kAct);  // [n, h] e
  Ids reads = {o.tokens};
  if (w >= 0) reads.push_back(w);
  sb.graph.op(Name{Name::kEmbed, "forward"}, Phase::Forward, -1, reads, {x0});
  m.positions = sb.graph.tensor(step_name("model.cache_position"), s.n / s.b * 8, kAct);
  sb.graph.op(step_name("model.cache_position"), Phase::Forward, -1, {}, {m.positions});
  m.cos = sb.graph.tensor(step_name("model.rope.cos"), hf::rope_table_bytes_per_token(s), kAct);
  m.sin = sb.graph.tensor(step_name("model.rope.sin"), hf::rope_table_bytes_per_token(s), kAct);
  sb.graph.op(step_name("model.rotary_emb"), Phase::Forward, -1, {position_ids}, {m.cos, m.sin},
              {.workspace = hf::rope_tables_workspace_per_token(s)});
  // position_ids travels to every layer (flash attention's packed-sequence check, Ulysses'
  // gather) and inputs_embeds holds the embedding's output: both until the model's forward
  // returns, as cache_position is.
  m.model_locals = {position_ids, x0};
  return x0;
}

// The layers' schedule: every layer or none checkpointed (reentrant), its input copied to
// pageable host memory before the layer runs (CheckpointFunctionWithCPUOffload.forward; its
// device copy is then held by nothing but the model's loop) and back as its backward starts;
// the layer's parameters gathered whole for its recompute and its backward.
class Layers final : public LayerSchedule<LayerActs> {
 public:
  explicit Layers(HfStep& sb) : sb_(sb), offload_(sb) {}

  // A checkpointed layer's first pass runs under no_grad: its tensors die with their last reader.
  LayerActs forward(int l, TensorId x, Phase phase, bool recompute) override {
    return layer_forward(sb_, l, x, phase, recompute);
  }
  TensorId backward(int l, const LayerActs& a, TensorId d_out) override { return layer_backward(sb_, l, a, d_out); }
  bool checkpointed(int) const override { return sb_.parallel.checkpoint.any(); }

  void before_forward(int l, TensorId x) override {
    if (checkpointed(l) && sb_.parallel.offload_checkpoints) offload_.offload(l, x);
  }
  void before_backward(int l) override {
    params_ = deepspeed_gather(sb_, l, "params.full", layer_gathered_elems(sb_.shapes, true, true), kB, true);
  }
  TensorId recompute_input(int l, const LayerActs& first) override {
    const TensorId restored = offload_.prefetch(l, l);
    return restored >= 0 ? restored : first.in;
  }
  // Reentrant: the whole layer recomputed with a graph, then backpropagated from its output
  // with the gradient handed in, both held until the inner backward returns.
  void after_recompute(int, const LayerActs&, TensorId, TensorId d_out) override {
    sb_.graph.add_input(sb_.graph.last_op(), d_out);
  }
  void after_backward(int, const LayerActs& a, TensorId d_out, bool recomputed, int last) override {
    for (const TensorId t : {params_, a.in, d_out})
      if (t >= 0) sb_.graph.add_input(last, t);
    if (recomputed) sb_.graph.add_input(last, a.out);
  }

 private:
  HfStep& sb_;
  CheckpointOffload offload_;
  TensorId params_ = -1;  // the running layer's gathered parameters, in backward
};

// Liger's lce_forward: the final norm, then fused_linear_cross_entropy_forward over the
// rank's tokens with lm_head's weight (gathered by ZeRO-3 as an external parameter: Liger
// reads it without calling lm_head, and it stays gathered until the optimizer step). Its
// gradients are computed here: grad_input [n, h] e and grad_weight [V, h] e, held until
// backward. Without pre-shifted labels (one rank) LigerForCausalLMLoss pads and shifts them,
// [b, S+1] and [b, S] int64, for the call. Then fused_linear_cross_entropy_backward: the saved
// gradients are the gradients (the loss's own gradient is 1); lm_head's reaches DeepSpeed's
// hook, then the final norm writes its input's gradient into grad_input in place. Tied, the
// weight's is the table's, which waits for the embedding's to be added into it in place (the
// node has released its saved tensors by then, so the buffer holds the only reference:
// TiedSum) and reaches the hook once, summed. Returns the last layer's output gradient.
TensorId liger_loss(HfStep& sb, TensorId final_x) {
  const StepShapes& s = sb.shapes;
  OuterActs& o = sb.outer;
  const Phase L = Phase::Loss;
  const NormActs f = sb.ops.norm_forward(sb, final_norm_spec(s), final_x, L, false);
  // LlamaModel.forward returns: cache_position, position_ids and the embedding output go.
  sb.graph.add_input(sb.graph.last_op(), sb.model.positions);
  for (const TensorId t : sb.model.model_locals) sb.graph.add_input(sb.graph.last_op(), t);
  o.head_full = deepspeed_gather(sb, -1, "head.params.full", s.V * s.h, L, false, /*module=*/false);
  const TensorId grad_input = sb.graph.tensor(step_name("loss.flce.grad_input"), s.n * s.h * s.e, kAct);
  const TensorId grad_weight =
      sb.graph.tensor(s.tied ? Name{Name::kEmbed, "grad"} : Name{Name::kHead, "grad.output"}, s.V * s.h * s.e, Category::Grads);
  const std::int64_t chunks = sb.parallel.loss_tiles;
  const std::int64_t rows = tile_split(s.n, chunks).rows;
  const std::int64_t labels = s.u == 1 ? s.b * (s.S + 1) * 8 + s.n * 8 : 0;
  Ids reads = {f.y, o.targets};
  if (o.head_full >= 0) reads.push_back(o.head_full);
  sb.graph.op(step_name("loss.flce"), L, -1, reads, {grad_input, grad_weight},
              {.workspace = liger::flce_forward_held_bytes(s) + liger::flce_chunk_workspace(s, rows) + labels,
               .flops = 3 * matmul_flops(s.n, s.h, s.V), .launches = static_cast<int>(chunks),
               .repeats = static_cast<int>(chunks)});
  sb.graph.op(step_name("loss.flce.bwd"), kB, -1, {grad_input, grad_weight}, {});
  if (s.tied) {
    o.tied_grad = grad_weight;
    sb.tied_sum = TiedSum::InPlace;
  } else {
    grad_ready(sb, grad_weight, s.V * s.h);
  }
  Ids grads;
  return sb.ops.norm_backward(sb, final_norm_spec(s), f, grad_input, -1, grads);
}

// The huggingface model (one rank: validate()): ForCausalLMLoss over the full logits,
// lm_head gathered as a module for its forward and again for its backward.
TensorId causal_lm_loss(HfStep& sb, TensorId final_x) {
  const StepShapes& s = sb.shapes;
  const NormActs f = causal_lm_loss_forward(sb, final_x, deepspeed_gather(sb, -1, "head.params.full", s.V * s.h, Phase::Loss));
  return causal_lm_loss_backward(sb, f, deepspeed_gather(sb, -1, "head.params.full.bwd", s.V * s.h, kB));
}

void write_ops(HfStep& sb) {
  deepspeed_model_states(sb);
  if (sb.in.states_only) return;  // StepInputs::states_only
  DeepSpeedGradients gradients(sb);
  sb.grad_hook = &gradients;
  Layers layers(sb);
  std::vector<LayerActs> acts;
  const TensorId final_x = forward_layers(layers, static_cast<int>(sb.shapes.layers), model_inputs(sb), acts);
  const TensorId d_x = liger_model(sb.in) ? liger_loss(sb, final_x) : causal_lm_loss(sb, final_x);
  deepspeed_embedding_backward(sb, backward_layers(layers, acts, sb.graph, d_x));
  // A prefix build (the search's cheap rejection) stops before the last reductions and the step.
  if (!sb.ends_at_prefix()) {
    gradients.flush();
    deepspeed_optimizer_step(sb);
  }
  sb.grad_hook = nullptr;  // the hook ends with this step
}

}  // namespace

StepGraph build_step(const StepInputs& in) {
  HfStep sb(in, liger_model(in) ? kLigerOps : kTransformersOps);
  return write_step(sb, &write_ops);
}

}  // namespace longctx::step::arctic
