// The hf stack's step, as a training loop of `model(input_ids=..., labels=...).loss.backward();
// optimizer.step(); optimizer.zero_grad(set_to_none=True)` runs it (the Trainer's
// training_step does the same: the model's output, with its logits and cache, is dropped
// before backward): LlamaModel.forward (embedding, cache_position, the causal mask,
// LlamaRotaryEmbedding, the layers, the final norm), LlamaForCausalLM's lm_head and
// ForCausalLMLoss (loss/loss_utils.py) or TRL's chunked loss, autograd's backward, and
// torch.optim.AdamW. Footprints: footprint/hf.h. Across GPUs, accelerate's FSDP2 and context
// parallel around it (distributed.cpp).
#include "planner/stacks/hf/step.h"

#include "planner/footprint/hf.h"
#include "planner/footprint/zero.h"
#include "planner/stacks/blocks/deepspeed_zero3.h"
#include "planner/stacks/blocks/hf_layer.h"
#include "planner/stacks/blocks/hf_layers.h"
#include "planner/stacks/blocks/hf_model.h"
#include "planner/stacks/blocks/torch_adamw.h"
#include "planner/stacks/blocks/trl_loss.h"
#include "planner/stacks/hf/step_parts.h"

namespace longctx::step::hf {

using namespace blocks;
using namespace footprint::hf;

bool trl_chunked_loss(const HfStep& sb) { return sb.in.train.stack.loss == HfLoss::TrlChunkedNll; }

bool keeps_kv_cache(const HfStep& sb) {
  // The model's own use_cache too: request.cpp turns the setting off for such a model, and a
  // plan file's model section may still say `"use_cache": false` itself (a hand-written one;
  // longctx writes the setting only), which transformers would run.
  return sb.in.train.stack.use_cache && sb.in.model.use_cache && !trl_chunked_loss(sb) && !sb.parallel.checkpoint.any();
}

// create_causal_mask (masking_utils.py): eager attention always gets an additive mask
// [b, 1, S, S] e. sdpa gets none when the batch's attention_mask has no padding, or while the
// model keeps a cache (keeps_kv_cache): is_causal does the masking. With neither a cache nor
// an attention_mask _preprocess_mask_arguments looks for packed sequences in position_ids,
// whose find_packed_sequence_indices always returns a mask function: the causal skip is then
// not allowed and a boolean mask [b, 1, S, S] is built. flash_attention_2 gets none
// (flash_attention_mask: no padding, no mask).
namespace {

void causal_mask(HfStep& sb) {
  const StepShapes& s = sb.shapes;
  const StackSpec& st = sb.in.train.stack;
  const bool eager = st.attention == HfAttention::Eager;
  const bool sdpa = st.attention == HfAttention::Sdpa;
  if (!eager && !(sdpa && !keeps_kv_cache(sb) && !st.attention_mask)) return;
  sb.model.mask = sb.graph.tensor(step_name("model.causal_mask"), eager ? additive_mask_bytes(s) : boolean_mask_bytes(s), kAct);
  sb.graph.op(step_name("model.causal_mask"), Phase::Forward, -1, {sb.model.positions}, {sb.model.mask},
              {.workspace = eager ? eager_mask_workspace(s) : boolean_mask_workspace(s)});
}

}  // namespace

// LlamaModel.forward up to the first layer: the batch (under context parallel the Trainer's
// sharded one, under Ulysses the adapter's), the embedding (under FSDP2 in its group, under
// ZeRO-3 its table gathered by the module's hook), cache_position = arange(Sl) [Sl] int64
// (position_ids is a view of it, or the batch's own under context parallel or Ulysses), the
// causal mask, and the RoPE tables ([1, S, d] e each, or per token [b, Sl, d] e from position_ids).
TensorId model_inputs(HfStep& sb, Fsdp2* fsdp, bool zero3) {
  const StepShapes& s = sb.shapes;
  HfModelActs& m = sb.model;
  if (s.r > 1) context_parallel_batch(sb);
  else if (s.u > 1) ulysses_batch(sb);
  else load_batch(sb);
  const TensorId x0 = sb.graph.tensor(layer_name(0, "in"), s.n * s.h * s.e, kAct);  // [n, h] e
  if (fsdp != nullptr) fsdp->unshard_forward(embed_group(s), Phase::Forward);
  Ids reads = {sb.outer.tokens};
  const TensorId gathered = zero3 ? deepspeed_gather(sb, -1, "embed.params.full", s.V * s.h, Phase::Forward) : -1;
  if (gathered >= 0) reads.push_back(gathered);
  sb.graph.op(Name{Name::kEmbed, "forward"}, Phase::Forward, -1, reads, {x0});
  // accelerate groups a tied table with the final norm and lm_head (reshard_after_forward
  // False): it stays unsharded until its post-backward.
  if (fsdp != nullptr && !s.tied) fsdp->reshard(embed_group(s), Phase::Forward);
  const bool per_token = s.r > 1 || s.u > 1;  // the batch's position_ids
  m.positions = sb.graph.tensor(step_name("model.cache_position"), (per_token ? s.n / s.b : s.S) * 8, kAct);
  sb.graph.op(step_name("model.cache_position"), Phase::Forward, -1, {}, {m.positions});
  causal_mask(sb);
  const std::int64_t table = per_token ? rope_table_bytes_per_token(s) : rope_table_bytes(s);
  m.cos = sb.graph.tensor(step_name("model.rope.cos"), table, kAct);
  m.sin = sb.graph.tensor(step_name("model.rope.sin"), table, kAct);
  sb.graph.op(step_name("model.rotary_emb"), Phase::Forward, -1, {m.positions}, {m.cos, m.sin},
              {.workspace = per_token ? rope_tables_workspace_per_token(s) : rope_tables_workspace(s)});
  return x0;
}

// The loss, forward and backward: TRL's chunked loss, or lm_head and ForCausalLMLoss; under
// FSDP2 in the [final norm, lm_head] group, which stays unsharded for its backward
// (reshard_after_forward=False), its pre-backward issuing the last layer's gather (after the
// final norm's backward here: TRL reads lm_head's weight without calling it, so the group's
// output gradient is the norm's). Returns the last layer's output gradient.
TensorId loss(HfStep& sb, TensorId final_x, Fsdp2* fsdp) {
  const StepShapes& s = sb.shapes;
  if (fsdp != nullptr) fsdp->unshard_forward(head_group(s), Phase::Loss);
  TensorId d_x = -1;
  if (!trl_chunked_loss(sb)) {
    const NormActs f = causal_lm_loss_forward(sb, final_x, -1);
    if (fsdp != nullptr) fsdp->end_forward();
    d_x = causal_lm_loss_backward(sb, f, -1);
  } else {
    TrlLossActs trl;
    const NormActs f = trl_loss_forward(sb, final_x, trl);
    if (fsdp != nullptr) fsdp->end_forward();
    d_x = trl_loss_backward(sb, f, trl);
  }
  if (fsdp != nullptr) {
    fsdp->prefetch(static_cast<int>(s.layers) - 1, Phase::Backward);
    fsdp->post_backward(head_group(s));
  }
  return d_x;
}

namespace {

void write_ops(HfStep& sb) {
  adamw_model_states(sb);
  if (sb.in.states_only) return;  // StepInputs::states_only
  sb.kv_cache = keeps_kv_cache(sb);
  HfLayers layers(sb);
  std::vector<HfLayerActs> acts;
  const TensorId final_x = forward_layers(layers, static_cast<int>(sb.shapes.layers), model_inputs(sb, nullptr, false), acts);
  embedding_backward(sb, backward_layers(layers, acts, sb.graph, loss(sb, final_x, nullptr)));
  // The Trainer's training_step returns, dropping the loss and its graph, before the optimizer.
  layers.free_graph(Phase::Backward);
  if (!sb.ends_at_prefix()) adamw_step(sb, footprint::group_params);
}

}  // namespace

StepGraph build_step(const StepInputs& in) {
  if (longctx::hf::runs_deepspeed(in.parallel, in.cluster.world())) return build_deepspeed_step(in);
  if (in.cluster.world() > 1) return build_distributed_step(in);
  HfStep sb(in, kTransformersOps);
  return write_step(sb, &write_ops);
}

}  // namespace longctx::step::hf
