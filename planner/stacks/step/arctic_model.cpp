// The arctic stack's step around its decoder layers (arctic_layer.cpp), as ArcticTraining's
// SFTTrainer runs it (arctic_training/trainer/sft_trainer.py, SFTTrainer.loss, and
// Trainer.step): the batch (input_ids, labels, position_ids [b, S/u] int64; under Ulysses
// the labels pre-shifted, DeepSpeed's UlyssesSPDataLoaderAdapter), transformers 4.51's
// LlamaModel.forward with every layer checkpointed by torch.utils.checkpoint's reentrant
// implementation (modeling_utils.py gradient_checkpointing_enable's default, which
// ArcticTraining keeps) or none, its layer inputs offloaded to the host by ArcticTraining's
// CheckpointFunctionWithCPUOffload (arctic_training/monkey_patches.py), the loss (Liger's
// fused linear cross-entropy in the liger model, LigerForCausalLMLoss; else
// ForCausalLMLoss over the full logits, hf_model.cpp), DeepSpeed's backward with its
// gradient hook, and its optimizer step (arctic_zero.cpp).
#include "planner/footprint/embedding.h"
#include "planner/stacks/step/arctic_step.h"

#include "planner/footprint/hf.h"
#include "planner/footprint/liger.h"
#include "planner/core/parallel_config.h"
#include "planner/footprint/zero.h"

namespace longctx::step::arctic {

using namespace footprint;
using hf::kAct;
using hf::kB;
using hf::kTr;

namespace {

bool checkpointed(const HfStep& sb) { return sb.parallel.checkpoint.any(); }
bool liger_loss(const HfStep& sb) { return sb.in.train.stack.arctic_model == ArcticModel::Liger; }

// The batch on the device, the embedding (its table gathered), cache_position = arange(S/u)
// [S/u] int64, and LlamaRotaryEmbedding's tables from the batch's position_ids. Under
// Ulysses the adapter first all-gathered every rank's batch on the device (three int64 keys,
// u copies of [b, S/u] each and their gathers) before keeping this rank's slice.
TensorId model_inputs(HfStep& sb) {
  const StepShapes& s = sb.shapes;
  OuterActs& o = sb.outer;
  HfModelActs& m = sb.hf_model;
  if (s.u > 1) sb.graph.op(step_name("batch.ulysses_refill"), Phase::Forward, -1, {}, {}, {.workspace = 3 * 2 * s.u * s.n * 8});
  o.tokens = sb.graph.tensor(step_name("batch.tokens"), s.n * 8, kAct);    // input_ids [b, S/u] int64
  o.targets = sb.graph.tensor(step_name("batch.targets"), s.n * 8, kAct);  // labels or shift_labels [b, S/u] int64
  const TensorId position_ids = sb.graph.tensor(step_name("batch.position_ids"), s.n * 8, kAct);
  sb.graph.op(step_name("batch.load"), Phase::Forward, -1, {}, {o.tokens, o.targets, position_ids});
  const TensorId w = gather(sb, -1, "embed.params.full", s.V * s.h, Phase::Forward);
  const TensorId x0 = sb.graph.tensor(layer_name(0, "in"), s.n * s.h * s.e, kAct);  // [n, h] e
  Ids reads = {o.tokens};
  if (w >= 0) reads.push_back(w);
  sb.graph.op(Name{Name::kEmbed, "forward"}, Phase::Forward, -1, reads, {x0});
  m.positions = sb.graph.tensor(step_name("model.cache_position"), s.n / s.b * 8, kAct);
  sb.graph.op(step_name("model.cache_position"), Phase::Forward, -1, {}, {m.positions});
  m.cos = sb.graph.tensor(step_name("model.rope.cos"), footprint::hf::rope_table_bytes_per_token(s), kAct);
  m.sin = sb.graph.tensor(step_name("model.rope.sin"), footprint::hf::rope_table_bytes_per_token(s), kAct);
  sb.graph.op(step_name("model.rotary_emb"), Phase::Forward, -1, {position_ids}, {m.cos, m.sin},
              {.workspace = footprint::hf::rope_tables_workspace_per_token(s)});
  // position_ids travels to every layer (flash attention's packed-sequence check, Ulysses'
  // gather) and inputs_embeds holds the embedding's output: both until the model's forward
  // returns, as cache_position is.
  m.model_locals = {position_ids, x0};
  return x0;
}

struct Layers {
  std::vector<LayerActs> acts;
  std::vector<TensorId> inputs;  // each layer's input: held by its checkpoint unless offloaded (sb.checkpoints)
};

TensorId forward_layers(HfStep& sb, TensorId x, Layers& layers) {
  const StepShapes& s = sb.shapes;
  const int count = static_cast<int>(s.layers);
  layers.acts.resize(static_cast<std::size_t>(count));
  layers.inputs.assign(static_cast<std::size_t>(count), -1);
  for (int l = 0; l < count; ++l) {
    layers.inputs[static_cast<std::size_t>(l)] = x;
    // CheckpointFunctionWithCPUOffload.forward: the layer's input copied to pageable host
    // memory, synchronously, before the layer runs; its device copy is then held by nothing
    // but the model's loop.
    if (checkpointed(sb) && sb.parallel.offload_checkpoints) sb.checkpoints.offload(l, x);
    // A checkpointed layer runs under no_grad: its tensors die with their last reader.
    layers.acts[static_cast<std::size_t>(l)] = arctic::layer_forward(sb, l, x, Phase::Forward, false);
    x = layers.acts[static_cast<std::size_t>(l)].hf.out;
  }
  return x;
}

// Liger's lce_forward: the final norm, then fused_linear_cross_entropy_forward over the
// rank's tokens with lm_head's weight (gathered by ZeRO-3 as an external parameter: Liger
// reads it without calling lm_head, and it stays gathered until the optimizer step). Its
// gradients are computed here: grad_input [n, h] e and grad_weight [V, h] e, held until
// backward. Without pre-shifted labels (one rank) LigerForCausalLMLoss pads and shifts them,
// [b, S+1] and [b, S] int64, for the call.
hf::NormActs liger_loss_forward(HfStep& sb, TensorId final_x, TensorId& grad_input, TensorId& grad_weight) {
  const StepShapes& s = sb.shapes;
  OuterActs& o = sb.outer;
  const Phase L = Phase::Loss;
  const hf::NormActs f = hf::norm_forward(sb, hf::final_norm_spec(s), final_x, L, false);
  // LlamaModel.forward returns: cache_position, position_ids and the embedding output go.
  sb.graph.add_input(sb.graph.last_op(), sb.hf_model.positions);
  for (const TensorId t : sb.hf_model.model_locals) sb.graph.add_input(sb.graph.last_op(), t);
  o.head_full = gather(sb, -1, "head.params.full", s.V * s.h, L, false, /*module=*/false);
  grad_input = sb.graph.tensor(step_name("loss.flce.grad_input"), s.n * s.h * s.e, kAct);
  grad_weight = sb.graph.tensor(Name{Name::kHead, "grad.output"}, s.V * s.h * s.e, Category::Grads);
  const std::int64_t chunks = sb.parallel.loss_tiles;
  const std::int64_t rows = tile_split(s.n, chunks).rows;
  const std::int64_t labels = s.u == 1 ? s.b * (s.S + 1) * 8 + s.n * 8 : 0;
  Ids reads = {f.y, o.targets};
  if (o.head_full >= 0) reads.push_back(o.head_full);
  sb.graph.op(step_name("loss.flce"), L, -1, reads, {grad_input, grad_weight},
              {.workspace = liger::flce_forward_held_bytes(s) + liger::flce_chunk_workspace(s, rows) + labels,
               .flops = 3 * matmul_flops(s.n, s.h, s.V), .launches = static_cast<int>(chunks),
               .repeats = static_cast<int>(chunks)});
  return f;
}

// fused_linear_cross_entropy_backward: the saved gradients are the gradients (the loss's own
// gradient is 1); lm_head's reaches DeepSpeed's hook, then the final norm writes its input's
// gradient into grad_input in place.
TensorId liger_loss_backward(HfStep& sb, const hf::NormActs& f, TensorId grad_input, TensorId grad_weight) {
  const StepShapes& s = sb.shapes;
  sb.graph.op(step_name("loss.flce.bwd"), kB, -1, {grad_input, grad_weight}, {});
  if (sb.grad_ready) sb.grad_ready(grad_weight, s.V * s.h);
  Ids grads;
  return hf::norm_backward(sb, hf::final_norm_spec(s), f, grad_input, -1, grads);
}

void backward_layers(HfStep& sb, TensorId d_x, Layers& layers) {
  const StepShapes& s = sb.shapes;
  for (int l = static_cast<int>(s.layers) - 1; l >= 0; --l) {
    const std::size_t li = static_cast<std::size_t>(l);
    const TensorId d_out = d_x;
    // The layer's parameters gathered for its recompute and its backward.
    const TensorId w = gather(sb, l, "params.full", layer_gathered_elems(s, true, true), kB, true);
    LayerActs a = layers.acts[li];
    TensorId in = layers.inputs[li];
    if (checkpointed(sb)) {
      // CheckpointFunctionWithCPUOffload.backward: the input copied back, synchronously, as
      // the layer's backward starts.
      if (const TensorId restored = sb.checkpoints.prefetch(l, l); restored >= 0) in = restored;
      // Reentrant: the whole layer recomputed with a graph, then backpropagated from its
      // output with the gradient handed in, both held until the inner backward returns.
      a = arctic::layer_forward(sb, l, in, kB, true);
      sb.graph.add_input(sb.graph.last_op(), d_out);
    }
    d_x = arctic::layer_backward(sb, l, a, d_x);
    const int last = sb.graph.last_op();
    for (const TensorId t : {w, in, d_out}) if (t >= 0) sb.graph.add_input(last, t);
    if (checkpointed(sb)) sb.graph.add_input(last, a.hf.out);
  }
  // EmbeddingBackward0: the dense [V, h] e gradient, to DeepSpeed's hook; the module's table
  // is gathered for it.
  const TensorId w = gather(sb, -1, "embed.params.full.bwd", s.V * s.h, kB);
  Ids reads = {d_x, sb.outer.tokens};
  if (w >= 0) reads.push_back(w);
  const TensorId g = sb.graph.tensor(Name{Name::kEmbed, "grad"}, s.V * s.h * s.e, Category::Grads);
  sb.graph.op(Name{Name::kEmbed, "backward"}, kB, -1, reads, {g},
              {.workspace = footprint::embedding_backward_workspace(s, s.n), .flops = double(s.n * s.h)});
  if (sb.grad_ready) sb.grad_ready(g, s.V * s.h);
}

}  // namespace

void write_ops(HfStep& sb) {
  arctic::model_states(sb);
  const StepShapes& s = sb.shapes;
  Layers layers;
  const TensorId final_x = forward_layers(sb, model_inputs(sb), layers);
  TensorId d_x = -1;
  if (liger_loss(sb)) {
    TensorId grad_input = -1, grad_weight = -1;
    const hf::NormActs f = liger_loss_forward(sb, final_x, grad_input, grad_weight);
    d_x = liger_loss_backward(sb, f, grad_input, grad_weight);
  } else {
    // The huggingface model (one rank: validate()): ForCausalLMLoss over the full logits,
    // lm_head gathered as a module for its forward and again for its backward.
    const hf::NormActs f = hf::loss_forward(sb, final_x, gather(sb, -1, "head.params.full", s.V * s.h, Phase::Loss));
    d_x = hf::loss_backward(sb, f, gather(sb, -1, "head.params.full.bwd", s.V * s.h, kB));
  }
  backward_layers(sb, d_x, layers);
  // A prefix build (the search's cheap rejection) stops before the last reductions and the step.
  if (sb.in.prefix_only) return;
  flush_gradients(sb);
  arctic::optimizer_step(sb);
}

StepGraph build_step(const StepInputs& in) {
  HfStep sb(in);
  return write_step(sb, &write_ops);
}

}  // namespace longctx::step::arctic
