// The hf stack's step around its decoder layers (hf_layer.cpp), as a training loop of
// `model(input_ids=..., labels=...).loss.backward(); optimizer.step();
// optimizer.zero_grad(set_to_none=True)` runs it (the Trainer's training_step does the same:
// the model's output, with its logits and cache, is dropped before backward):
// LlamaModel.forward (embedding, cache_position, the causal mask, LlamaRotaryEmbedding, the
// layers, the final norm), LlamaForCausalLM's lm_head and ForCausalLMLoss
// (loss/loss_utils.py), autograd's backward, and torch.optim.AdamW (optim/adamw.py:
// _fused_adamw, the Trainer's default; or _single_tensor_adamw on the CPU and
// _multi_tensor_adamw on CUDA). Footprints: footprint/hf.h.
#include <deque>

#include "planner/stacks/step/hf_step.h"

#include "planner/footprint/embedding.h"
#include "planner/footprint/fsdp2.h"
#include "planner/footprint/hf.h"
#include "planner/footprint/optimizer.h"
#include "planner/footprint/torchtitan.h"
#include "planner/footprint/zero.h"

namespace longctx::step::hf {

using namespace footprint;
using namespace footprint::hf;

bool torchtitan(const HfStep& sb) { return sb.in.train.stack.kind == StackKind::Torchtitan; }

bool layer_checkpointed(const HfStep& sb, int l) {
  const CheckpointPolicy& c = sb.parallel.checkpoint;
  if (torchtitan(sb) && c.kind == CheckpointPolicy::Kind::EveryK) return (l + 1) % c.every == 0;
  return c.any();
}

namespace {

// torchtitan's Transformer registers its RoPE table as a buffer for max_seq_len =
// training.seq_len (update_from_config): llama3's freqs_cis [S, d/2] complex64, qwen3's
// rope_cache [S, 2d] fp32 (the model with q/k norms).
void torchtitan_rope_buffer(HfStep& sb) {
  const StepShapes& s = sb.shapes;
  if (s.qk_norm)
    sb.graph.persistent(step_name("model.rope_cache"), footprint::torchtitan::rope_cache_bytes(s), Category::Params,
                        Place::Device);
  else
    sb.graph.persistent(step_name("model.freqs_cis"), footprint::torchtitan::freqs_cis_bytes(s), Category::Params,
                        Place::Device);
}

// Parameters in the model's dtype and torch AdamW's state beside them, per group.
void model_states(HfStep& sb) {
  const StepShapes& s = sb.shapes;
  if (fsdp2(sb)) {
    fsdp2_model_states(sb);
    torchtitan_rope_buffer(sb);
    return;
  }
  sb.params.resize(static_cast<std::size_t>(param_groups(s)));
  for (int g = 0; g < param_groups(s); ++g) {
    sb.params[static_cast<std::size_t>(g)] =
        sb.graph.persistent(sb.group_name(g, "params"), group_params(s, g) * s.e, Category::Params, Place::Device);
    // exp_avg, exp_avg_sq [group_params] e and a scalar fp32 `step` per parameter tensor
    sb.graph.persistent(sb.group_name(g, "optim.state"),
                        adamw_state_bytes(s, g, sb.in.train.stack.optimizer == HfOptimizer::AdamWTorchFused),
                        Category::Optimizer, Place::Device);
  }
  if (torchtitan(sb)) torchtitan_rope_buffer(sb);
  sb.grads.assign(static_cast<std::size_t>(param_groups(s)), Ids{});
}

bool checkpointed(const HfStep& sb) { return sb.parallel.checkpoint.any(); }

// torchtitan's context parallel: the whole batch [b, S] int64 each (the data loader's, held by
// train_step), cut by prepare_context_parallel_input into the rank's shards
// (footprint::torchtitan::cp_shard_workspace): its inputs and labels [b, Sl] int64 into
// o.tokens and o.targets, its positions [b, Sl] int32.
void context_parallel_batch(HfStep& sb) {
  namespace tt = footprint::torchtitan;
  const StepShapes& s = sb.shapes;
  OuterActs& o = sb.outer;
  HfModelActs& m = sb.hf_model;
  const TensorId ids = sb.graph.tensor(step_name("batch.tokens"), s.b * s.S * 8, kAct);
  const TensorId labels = sb.graph.tensor(step_name("batch.targets"), s.b * s.S * 8, kAct);
  sb.graph.op(step_name("batch.load"), Phase::Forward, -1, {}, {ids, labels});
  m.batch = {ids, labels};
  const TensorId positions = sb.graph.tensor(step_name("cp.positions"), tt::cp_positions_bytes(s), kTr);
  sb.graph.op(step_name("cp.positions"), Phase::Forward, -1, {}, {positions});
  const TensorId indices = sb.graph.tensor(step_name("cp.balance_indices"), tt::cp_indices_bytes(s), kTr);
  sb.graph.op(step_name("cp.balance_indices"), Phase::Forward, -1, {}, {indices});
  auto shard = [&](const char* name, TensorId whole, std::int64_t elem) {
    const TensorId local = sb.graph.tensor(step_name(name), s.n * elem, kAct);
    sb.graph.op(step_name(name), Phase::Forward, -1, {whole, indices, positions}, {local},
                {.workspace = tt::cp_shard_workspace(s, elem)});
    return local;
  };
  o.tokens = shard("cp.shard.inputs", ids, 8);
  o.targets = shard("cp.shard.labels", labels, 8);
  m.cp_positions = shard("cp.shard.positions", positions, 4);
  m.cp_shards = {o.tokens, o.targets, m.cp_positions};
}

// LlamaModel.forward up to the first layer: the embedding, cache_position = arange(S)
// [S] int64 (position_ids is a view of it), eager's causal mask, and the RoPE tables.
TensorId model_inputs(HfStep& sb) {
  const StepShapes& s = sb.shapes;
  OuterActs& o = sb.outer;
  HfModelActs& m = sb.hf_model;
  const bool attention_mask = sb.in.train.stack.attention_mask;
  if (torchtitan(sb) && s.r > 1) {
    context_parallel_batch(sb);
  } else {
    o.tokens = sb.graph.tensor(step_name("batch.tokens"), s.n * 8, kAct);   // [n] int64
    o.targets = sb.graph.tensor(step_name("batch.targets"), s.n * 8, kAct);  // [n] int64
    Ids batch = {o.tokens, o.targets};
    if (attention_mask) batch.push_back(sb.graph.tensor(step_name("batch.attention_mask"), s.n * 8, kAct));  // [n] int64
    sb.graph.op(step_name("batch.load"), Phase::Forward, -1, {}, batch);
    sb.hf_model.batch = batch;
  }
  const TensorId x0 = sb.graph.tensor(layer_name(0, "in"), s.n * s.h * s.e, kAct);  // [n, h] e
  if (fsdp2(sb)) fsdp2_unshard_forward(sb, embed_group(s), Phase::Forward);
  sb.graph.op(Name{Name::kEmbed, "forward"}, Phase::Forward, -1, {o.tokens}, {x0});
  if (fsdp2(sb)) fsdp2_reshard(sb, embed_group(s), Phase::Forward);
  // torchtitan's Transformer.forward: the embedding, then the layers with the freqs_cis buffer.
  if (torchtitan(sb)) return x0;
  m.positions = sb.graph.tensor(step_name("model.cache_position"), s.S * 8, kAct);
  sb.graph.op(step_name("model.cache_position"), Phase::Forward, -1, {}, {m.positions});
  // create_causal_mask (masking_utils.py): eager attention always gets an additive mask
  // [b, 1, S, S] e. sdpa gets none when the batch's attention_mask has no padding, or while
  // the model keeps a cache (use_cache, the config's default): is_causal does the masking.
  // Checkpointing turns the cache off (check_model_inputs), as TRL's chunked loss does
  // (use_cache=False to the backbone), and with neither a cache nor an
  // attention_mask _preprocess_mask_arguments looks for packed sequences in position_ids,
  // whose find_packed_sequence_indices always returns a mask function: the causal skip is
  // then not allowed and a boolean mask [b, 1, S, S] is built.
  // flash_attention_2 gets none (flash_attention_mask: no padding, no mask).
  const bool eager = sb.in.train.stack.attention == HfAttention::Eager;
  const bool sdpa = sb.in.train.stack.attention == HfAttention::Sdpa;
  if (eager || (sdpa && (checkpointed(sb) || trl_chunked_loss(sb)) && !attention_mask)) {
    m.mask = sb.graph.tensor(step_name("model.causal_mask"), eager ? additive_mask_bytes(s) : boolean_mask_bytes(s), kAct);
    sb.graph.op(step_name("model.causal_mask"), Phase::Forward, -1, {m.positions}, {m.mask},
                {.workspace = eager ? eager_mask_workspace(s) : boolean_mask_workspace(s)});
  }
  m.cos = sb.graph.tensor(step_name("model.rope.cos"), rope_table_bytes(s), kAct);
  m.sin = sb.graph.tensor(step_name("model.rope.sin"), rope_table_bytes(s), kAct);
  sb.graph.op(step_name("model.rotary_emb"), Phase::Forward, -1, {m.positions}, {m.cos, m.sin},
              {.workspace = rope_tables_workspace(s)});
  return x0;
}

bool reentrant(const HfStep& sb) { return sb.in.train.stack.checkpointing == HfCheckpointing::Reentrant; }

struct Layers {
  std::vector<HfLayerActs> acts;
  std::vector<TensorId> rng;   // checkpointed: torch.get_rng_state() kept per layer
  std::vector<TensorId> host;  // offloaded: the layer input's pinned host copy
  std::vector<std::deque<TensorId>> kept;  // per-op selective checkpointing: what each block kept
};

// Writes block l's pass. Under per-op selective checkpointing (step_build.h) `kept` receives
// what the forward keeps, or gives the recompute what it takes back.
HfLayerActs layer_pass(HfStep& sb, int l, TensorId x, Phase phase, bool rc, LayerPass pass,
                       std::deque<TensorId>& kept) {
  if (sb.parallel.checkpoint.kind != CheckpointPolicy::Kind::Ops) return layer_forward(sb, l, x, phase, rc, pass);
  sb.op_sac = {.mode = rc ? OpSac::Mode::Replay : OpSac::Mode::Keep, .mm_count = 0, .kept = std::move(kept)};
  const HfLayerActs a = layer_forward(sb, l, x, phase, rc, pass);
  kept = std::move(sb.op_sac.kept);
  sb.op_sac = {};
  return a;
}

// transformers' checkpoint offload (modeling_utils.py, `_activation_checkpointing_enable` with
// offload=True, transformers 5.17 on; TrainingArguments' `gradient_checkpointing_kwargs`
// {"offload": true}): each layer's checkpoint runs under
// torch.autograd.graph.save_on_cpu(pin_memory=True), so what the checkpoint saves for
// backward, the layer's input hidden states (its keyword arguments ride in a partial, not
// saved), is copied to pinned host memory, `packed.copy_(tensor)` on the compute stream, and
// the device input is held by the model's loop alone. Backward unpacks it,
// `tensor.to(device, non_blocking=True)`, when the layer's first saved tensor is needed.
bool offloaded(const HfStep& sb, int l) { return sb.parallel.offload_checkpoints && layer_checkpointed(sb, l); }

TensorId forward_layers(HfStep& sb, TensorId x, Layers& layers) {
  const StepShapes& s = sb.shapes;
  const int count = static_cast<int>(s.layers);
  layers.acts.resize(static_cast<std::size_t>(count));
  layers.rng.assign(static_cast<std::size_t>(count), -1);
  layers.host.assign(static_cast<std::size_t>(count), -1);
  layers.kept.assign(static_cast<std::size_t>(count), {});
  for (int l = 0; l < count; ++l) {
    if (fsdp2(sb) && s.qk_norm && s.e != 4) {
      // The block's pre-forward casts rope_cache to param_dtype (before its all-gather).
      if (sb.fsdp2.cast_inputs.empty()) sb.fsdp2.cast_inputs.assign(static_cast<std::size_t>(count), -1);
      const TensorId cast = sb.graph.tensor(layer_name(l, "fsdp.rope_cache_cast"),
                                            footprint::torchtitan::rope_cache_cast_bytes(s), kAct);
      sb.graph.op(layer_name(l, "fsdp.cast_forward_inputs"), Phase::Forward, l, {}, {cast});
      sb.fsdp2.cast_inputs[static_cast<std::size_t>(l)] = cast;
    }
    if (fsdp2(sb)) fsdp2_unshard_forward(sb, l, Phase::Forward);
    if (layer_checkpointed(sb, l)) {
      const TensorId rng = sb.graph.tensor(layer_name(l, "checkpoint.rng_state"), checkpoint_rng_state_bytes(s), kAct);
      sb.graph.op(layer_name(l, "checkpoint.save_rng"), Phase::Forward, l, {}, {rng});
      layers.rng[static_cast<std::size_t>(l)] = rng;
    }
    if (offloaded(sb, l)) {
      const std::int64_t bytes = s.n * s.h * s.e;
      const TensorId host = sb.graph.tensor(layer_name(l, "checkpoint.in.host"), bytes, kAct, Place::Host);  // [n, h] e
      const int o = sb.graph.op(layer_name(l, "checkpoint.pack"), Phase::Forward, l, {x}, {host});
      sb.graph.set_comm(o, CommKind::DeviceToHost, double(bytes), 1);
      layers.host[static_cast<std::size_t>(l)] = host;
    }
    // A checkpointed layer runs without saving anything: its tensors die with their last
    // reader in forward, as the graph writes them when nothing in backward reads them.
    const LayerPass pass = layer_checkpointed(sb, l) ? LayerPass::Checkpointed : LayerPass::Plain;
    const HfLayerActs a = layer_pass(sb, l, x, Phase::Forward, false, pass, layers.kept[static_cast<std::size_t>(l)]);
    layers.acts[static_cast<std::size_t>(l)] = a;
    if (fsdp2(sb)) fsdp2_reshard(sb, l, Phase::Forward);
    x = a.out;
  }
  return x;
}

void backward_layers(HfStep& sb, TensorId d_x, Layers& layers) {
  const StepShapes& s = sb.shapes;
  for (int l = static_cast<int>(s.layers) - 1; l >= 0; --l) {
    const std::size_t li = static_cast<std::size_t>(l);
    HfLayerActs a = layers.acts[li];
    const TensorId d_out = d_x;
    if (fsdp2(sb)) {
      // The block's pre-backward: its copy-out, then the next block's gather (the embedding's
      // after layer 0).
      fsdp2_copy_out_backward(sb, l);
      fsdp2_prefetch(sb, l > 0 ? l - 1 : embed_group(s), Phase::Backward);
    }
    const bool recomputed = layer_checkpointed(sb, l);
    if (recomputed) {
      // The recompute begins where the layer's backward first needs a saved tensor (after
      // d_out arrived): reentrant runs the whole layer and keeps its output and d_out until
      // its inner backward returns; non-reentrant stops once the last tensor is saved, unless
      // early stop is off (torchtitan's ptd_checkpoint_wrapper: ACConfig.early_stop False),
      // when it runs the whole layer and drops its output.
      TensorId in = a.in;
      if (offloaded(sb, l)) {
        // The unpacked input [n, h] e, a new device tensor.
        const std::int64_t bytes = s.n * s.h * s.e;
        in = sb.graph.tensor(layer_name(l, "checkpoint.in.unpacked"), bytes, kAct);
        const int o = sb.graph.op(layer_name(l, "checkpoint.unpack"), kB, l, {layers.host[li]}, {in});
        sb.graph.set_comm(o, CommKind::HostToDevice, double(bytes), 1);
      }
      const LayerPass pass = reentrant(sb) || torchtitan(sb) ? LayerPass::RecomputeWhole : LayerPass::RecomputeUntilSaved;
      a = layer_pass(sb, l, in, Phase::Backward, true, pass, layers.kept[li]);
      sb.graph.add_input(sb.graph.last_op(), d_out);
      // Non-reentrant: the unpacked input is the recompute's argument, held until it returns
      // (and after, by what the recompute saved of it).
      if (offloaded(sb, l)) sb.graph.add_input(sb.graph.last_op(), in);
    }
    d_x = layer_backward(sb, l, a, d_x, sb.grads[li]);
    if (recomputed) {
      // The checkpoint's node (reentrant) or frame (non-reentrant) holds its RNG state and the
      // function's keyword arguments (the mask, position_ids) until its backward is done.
      const int last = sb.graph.last_op();
      sb.graph.add_input(last, layers.rng[li]);
      // torchtitan's ptd_checkpoint_wrapper keeps the block's inputs (its hidden states, and
      // under FSDP2 in bf16 qwen3's cast rope_cache) until the block's backward is done.
      if (torchtitan(sb)) sb.graph.add_input(last, a.in);
      if (li < sb.fsdp2.cast_inputs.size() && sb.fsdp2.cast_inputs[li] >= 0) sb.graph.add_input(last, sb.fsdp2.cast_inputs[li]);
      for (const TensorId t : {sb.hf_model.mask, sb.hf_model.positions, sb.hf_model.cp_positions})
        if (t >= 0) sb.graph.add_input(last, t);
      if (reentrant(sb)) {
        sb.graph.add_input(last, a.out);
        sb.graph.add_input(last, d_out);
        // CheckpointFunction.backward holds its unpacked inputs until it returns.
        if (offloaded(sb, l)) sb.graph.add_input(last, a.in);
      }
      // The pinned copy lives as long as the checkpoint's saved inputs.
      if (offloaded(sb, l)) sb.graph.add_input(last, layers.host[li]);
    }
    // The block's post-backward runs once its input's gradient is made.
    if (fsdp2(sb)) fsdp2_post_backward(sb, l);
  }
  if (fsdp2(sb)) fsdp2_copy_out_backward(sb, embed_group(s));
  // EmbeddingBackward0: the dense [V, h] e gradient, kept as the table's .grad, or (tied)
  // added in place into the one lm_head's backward left there.
  const Ids reads = {d_x, sb.outer.tokens};
  const OpCost cost = {.workspace = footprint::embedding_backward_workspace(s, s.n), .flops = double(s.n * s.h)};
  if (sb.outer.tied_grad >= 0) {
    const TensorId dense = sb.graph.tensor(Name{Name::kEmbed, "grad.dense"}, s.V * s.h * s.e, kTr);
    sb.graph.op(Name{Name::kEmbed, "backward"}, kB, -1, reads, {dense}, cost);
    sb.graph.op(Name{Name::kEmbed, "grad.accumulate"}, kB, -1, {sb.outer.tied_grad, dense}, {});
    if (trl_chunked_loss(sb)) trl_tied_grad(sb);
    return;
  }
  const TensorId g = sb.graph.tensor(Name{Name::kEmbed, "grad"}, s.V * s.h * s.e, Category::Grads);
  sb.grads[static_cast<std::size_t>(embed_group(s))].push_back(g);
  sb.graph.op(Name{Name::kEmbed, "backward"}, kB, -1, reads, {g}, cost);
  if (fsdp2(sb)) {
    fsdp2_post_backward(sb, embed_group(s));
    fsdp2_end_backward(sb);
  }
}

// torch.optim.AdamW's step, then zero_grad(set_to_none=True), which frees every gradient.
void optimizer_step(HfStep& sb) {
  const StepShapes& s = sb.shapes;
  const int groups = param_groups(s);
  auto step_op = [&](Name name, Ids inputs, std::int64_t elems, std::int64_t workspace) {
    OpSpec o;
    o.name = name;
    o.kind = OpKind::Optimizer;
    o.phase = Phase::Optimizer;
    o.inputs = inputs;
    o.flops = adamw_flops(elems);
    o.memory_bytes = adamw_memory_bytes(s, elems);
    o.workspace_bytes = workspace;
    sb.graph.raw_op(std::move(o));
  };
  const bool fused = sb.in.train.stack.optimizer == HfOptimizer::AdamWTorchFused;
  if (s.cpu && !fused) {
    for (int g = 0; g < groups; ++g)
      step_op(sb.group_name(g, "optim.step"), sb.grads[static_cast<std::size_t>(g)], group_params(s, g),
              adamw_single_tensor_workspace(s, g));
  } else {
    // Under FSDP2 each rank steps its own shards.
    std::int64_t all = 0;
    for (int g = 0; g < groups; ++g) all += fsdp2(sb) ? footprint::fsdp2::padded_shard_elems(s, g) : group_params(s, g);
    // _fused_adamw: one kernel over every parameter, no temporaries; else _multi_tensor_adamw.
    step_op(step_name("optim.step"), {}, all, fused ? 0 : adamw_foreach_workspace(s));
  }
  for (int g = 0; g < groups; ++g)
    sb.graph.op(sb.group_name(g, "optim.zero_grad"), Phase::Optimizer, -1, sb.grads[static_cast<std::size_t>(g)], {});
  // The training loop holds its batch until the step returns: the Trainer's `inputs` through
  // optimizer.step(), torchtitan's train_step its `input_dict, labels`.
  for (const TensorId t : sb.hf_model.batch) sb.graph.add_input(sb.graph.last_op(), t);
}

}  // namespace

NormActs final_norm_forward(HfStep& sb, TensorId final_x) {
  OuterActs& o = sb.outer;
  const HfModelActs& m = sb.hf_model;
  o.final_x = final_x;
  const NormActs f = norm_forward(sb, final_norm_spec(sb.shapes), final_x, Phase::Loss, false);
  o.xf = f.y;
  // LlamaModel.forward returns here: its cache_position and causal mask go.
  if (m.positions >= 0) sb.graph.add_input(sb.graph.last_op(), m.positions);
  if (m.mask >= 0) sb.graph.add_input(sb.graph.last_op(), m.mask);
  for (const TensorId t : m.model_locals) sb.graph.add_input(sb.graph.last_op(), t);
  return f;
}

// The final norm, lm_head and ForCausalLMLoss: logits [n, V] e (`.float()` copies them to
// fp32 in bf16), the labels padded and shifted, log_softmax [n, V] fp32 (saved), nll_loss.
// The model's output, which holds the logits and the cache, is dropped after the loss.
NormActs loss_forward(HfStep& sb, TensorId final_x, TensorId head_weight) {
  if (trl_chunked_loss(sb)) return trl_loss_forward(sb, final_x);
  const StepShapes& s = sb.shapes;
  OuterActs& o = sb.outer;
  HfModelActs& m = sb.hf_model;
  const Phase L = Phase::Loss;
  if (fsdp2(sb)) fsdp2_unshard_forward(sb, head_group(s), L);
  const NormActs f = final_norm_forward(sb, final_x);
  const TensorId model_logits = sb.graph.tensor(step_name("loss.logits"), s.n * s.V * s.e, kTr);
  sb.graph.op(step_name("loss.lm_head"), L, -1, {o.xf}, {model_logits}, {.flops = matmul_flops(s.n, s.h, s.V)});
  if (head_weight >= 0) sb.graph.add_input(sb.graph.last_op(), head_weight);
  // The root's post-forward: the head group stays unsharded for its backward (torchtitan
  // gives [norm, output] reshard_after_forward=False), its gathered buffer goes.
  if (fsdp2(sb)) fsdp2_end_forward(sb);
  TensorId logits = model_logits;
  if (s.e != 4) {
    const TensorId up = sb.graph.tensor(step_name("loss.logits.fp32"), s.n * s.V * 4, kTr);
    sb.graph.op(step_name("loss.logits.float"), L, -1, {logits}, {up});
    logits = up;
  }
  // torchtitan's cross_entropy_loss takes the batch's labels as they are (its data loader
  // shifted them); transformers' ForCausalLMLoss pads and shifts them.
  TensorId labels = o.targets;
  if (!torchtitan(sb)) {
    labels = sb.graph.tensor(step_name("loss.shift_labels"), shifted_labels_bytes(s), kAct);
    sb.graph.op(step_name("loss.shift_labels"), L, -1, {o.targets}, {labels});
  }
  o.logp = sb.graph.tensor(step_name("loss.log_softmax"), s.n * s.V * 4, kAct);
  sb.graph.op(step_name("loss.log_softmax"), L, -1, {logits}, {o.logp}, {.flops = 5.0 * double(s.n * s.V)});
  // The model's output holds its logits until it is dropped, after the loss.
  sb.graph.op(step_name("loss.nll"), L, -1, {o.logp, labels, model_logits}, {});
  // The model's output is dropped: its cache lets go of each layer's k/v copies (those no
  // backward saved go now).
  for (std::size_t i = 0; i + 1 < m.cache.size(); i += 2)
    sb.graph.op(layer_name(static_cast<int>(i / 2), "attn.cache.drop"), L, -1, {m.cache[i], m.cache[i + 1]}, {});
  m.labels = labels;
  return f;
}

// NllLossBackward0 [n, V] fp32, LogSoftmaxBackward0 [n, V] fp32 (bf16: cast back [n, V] e),
// lm_head's MmBackward0: its weight's gradient [V, h] e (tied: the embedding's) and d_xf.
TensorId loss_backward(HfStep& sb, const NormActs& f, TensorId head_weight) {
  if (trl_chunked_loss(sb)) return trl_loss_backward(sb, f);
  const StepShapes& s = sb.shapes;
  OuterActs& o = sb.outer;
  const Phase B = Phase::Backward;
  const TensorId d_logp = sb.graph.tensor(step_name("loss.nll.grad"), s.n * s.V * 4, kTr);
  sb.graph.op(step_name("loss.nll.bwd"), B, -1, {sb.hf_model.labels}, {d_logp});
  TensorId d_logits = sb.graph.tensor(step_name("loss.logits.grad.fp32"), s.n * s.V * 4, kTr);
  sb.graph.op(step_name("loss.log_softmax.bwd"), B, -1, {d_logp, o.logp}, {d_logits}, {.flops = 3.0 * double(s.n * s.V)});
  if (s.e != 4) {
    const TensorId cast = sb.graph.tensor(step_name("loss.logits.grad"), s.n * s.V * s.e, kTr);
    sb.graph.op(step_name("loss.logits.float.bwd"), B, -1, {d_logits}, {cast});
    d_logits = cast;
  }
  // The head group's pre-backward issues the last block's gather.
  if (fsdp2(sb)) fsdp2_prefetch(sb, static_cast<int>(s.layers) - 1, B);
  const int out_group = s.tied ? embed_group(s) : head_group(s);
  const TensorId g_out = sb.graph.tensor(s.tied ? Name{Name::kEmbed, "grad"} : Name{Name::kHead, "grad.output"},
                                         s.V * s.h * s.e, Category::Grads);
  sb.grads[static_cast<std::size_t>(out_group)].push_back(g_out);
  if (s.tied) o.tied_grad = g_out;
  const TensorId d_xf = sb.graph.tensor(step_name("loss.final_norm.out.grad"), s.n * s.h * s.e, kTr);
  sb.graph.op(step_name("loss.lm_head.bwd"), B, -1, {d_logits, o.xf}, {g_out, d_xf}, {.flops = 2 * matmul_flops(s.n, s.h, s.V)});
  if (head_weight >= 0) sb.graph.add_input(sb.graph.last_op(), head_weight);
  if (sb.grad_ready) sb.grad_ready(g_out, s.V * s.h);
  const TensorId d_final = norm_backward(sb, final_norm_spec(s), f, d_xf, -1, sb.grads[static_cast<std::size_t>(head_group(s))]);
  if (fsdp2(sb)) fsdp2_post_backward(sb, head_group(s));
  return d_final;
}

void write_ops(HfStep& sb) {
  model_states(sb);
  Layers layers;
  const TensorId final_x = forward_layers(sb, model_inputs(sb), layers);
  const NormActs f = loss_forward(sb, final_x, -1);
  const TensorId d_x = loss_backward(sb, f, -1);
  backward_layers(sb, d_x, layers);
  // torchtitan's forward_backward_step holds its inputs, labels and extra_kwargs (the context
  // parallel shards) until it returns, after backward.
  for (const TensorId t : sb.hf_model.cp_shards) sb.graph.add_input(sb.graph.last_op(), t);
  if (!sb.in.prefix_only) optimizer_step(sb);
}

StepGraph build_step(const StepInputs& in) {
  HfStep sb(in);
  return write_step(sb, &write_ops);
}

}  // namespace longctx::step::hf
