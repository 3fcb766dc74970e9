// The torchtitan stack's step (step.h), as torchtitan's train_step runs it: the model states
// (FSDP2's shards across GPUs), the batch (cut for context parallel), Transformer.forward's
// embedding and blocks, the final norm, output projection and cross_entropy_loss, the
// backward, and fused AdamW. Footprints: footprint/torchtitan.h, footprint/fsdp2.h.
#include "planner/stacks/torchtitan/step.h"

#include "planner/footprint/fsdp2.h"
#include "planner/footprint/torchtitan.h"
#include "planner/footprint/zero.h"
#include "planner/stacks/blocks/hf_layers.h"
#include "planner/stacks/blocks/hf_model.h"
#include "planner/stacks/blocks/torch_adamw.h"

namespace longctx::step::torchtitan {

using namespace blocks;
using footprint::embed_group;
using footprint::head_group;

TorchtitanStep::TorchtitanStep(const StepInputs& inputs)
    : HfStep(inputs, kTorchtitanOps), rope_cache_cast(static_cast<std::size_t>(shapes.layers), -1) {
  if (parallel.sharding == Sharding::Zero3 && shapes.world > 1) fsdp2.emplace(*this);
}

namespace {

// torchtitan's activation checkpointing (ptd_checkpoint_wrapper, non-reentrant with
// ACConfig.early_stop False: a recompute runs the whole block and drops its output) and FSDP2's
// hooks around each block: its pre-forward's cast of the block's inputs and all-gather, its
// reshard after forward, its pre-backward's copy-out and the next block's gather, and its
// post-backward's reduce-scatter.
class Layers final : public HfLayers {
 public:
  explicit Layers(TorchtitanStep& sb) : HfLayers(sb), tt_(sb) {}

  // Its selective mode wraps the K-th, 2K-th, ... block it visits (_apply_layer_sac counts
  // from 1); full every block.
  bool checkpointed(int l) const override {
    const CheckpointPolicy& c = sb_.parallel.checkpoint;
    if (c.kind == CheckpointPolicy::Kind::EveryK) return (l + 1) % c.every == 0;
    return c.any();
  }
  void before_forward(int l, TensorId x) override {
    const StepShapes& s = sb_.shapes;
    if (tt_.fsdp2 && s.qk_norm && s.e != 4) {
      // The block's pre-forward casts rope_cache to param_dtype (before its all-gather).
      const TensorId cast = sb_.graph.tensor(layer_name(l, "fsdp.rope_cache_cast"),
                                             footprint::torchtitan::rope_cache_cast_bytes(s), kAct);
      sb_.graph.op(layer_name(l, "fsdp.cast_forward_inputs"), Phase::Forward, l, {}, {cast});
      tt_.rope_cache_cast[static_cast<std::size_t>(l)] = cast;
    }
    if (tt_.fsdp2) tt_.fsdp2->unshard_forward(l, Phase::Forward);
    HfLayers::before_forward(l, x);
  }
  void after_forward(int l, const HfLayerActs& a) override {
    HfLayers::after_forward(l, a);
    if (tt_.fsdp2) tt_.fsdp2->reshard(l, Phase::Forward);
  }
  // The block's pre-backward: its copy-out, then the next block's gather (the embedding's
  // after layer 0).
  void before_backward(int l) override {
    if (tt_.fsdp2) {
      tt_.fsdp2->copy_out_backward(l);
      tt_.fsdp2->prefetch(l > 0 ? l - 1 : embed_group(sb_.shapes), Phase::Backward);
    }
    HfLayers::before_backward(l);
  }
  // The block's post-backward runs once its input's gradient is made.
  void after_backward(int l, const HfLayerActs& a, TensorId d_out, bool recomputed, int last) override {
    HfLayers::after_backward(l, a, d_out, recomputed, last);
    if (tt_.fsdp2) tt_.fsdp2->post_backward(l);
  }

 protected:
  LayerPass recompute_pass() const override { return LayerPass::RecomputeWhole; }
  // ptd_checkpoint_wrapper keeps the block's inputs (its hidden states, and under FSDP2 in
  // bf16 qwen3's cast rope_cache) and, under context parallel, the positions it is handed.
  Ids checkpoint_inputs(int l, const HfLayerActs& a) const override {
    return {a.in, tt_.rope_cache_cast[static_cast<std::size_t>(l)], tt_.cp_positions};
  }

 private:
  TorchtitanStep& tt_;
};

// The sharded parameters and their optimizer state (FSDP2), or whole ones (one rank); and
// the Transformer's RoPE table, a buffer for max_seq_len = training.seq_len
// (update_from_config): llama3's freqs_cis [S, d/2] complex64, qwen3's rope_cache [S, 2d] fp32.
void model_states(TorchtitanStep& sb) {
  const StepShapes& s = sb.shapes;
  if (sb.fsdp2) sb.fsdp2->model_states();
  else adamw_model_states(sb);
  if (s.qk_norm)
    sb.graph.persistent(step_name("model.rope_cache"), footprint::torchtitan::rope_cache_bytes(s), Category::Params,
                        Place::Device);
  else
    sb.graph.persistent(step_name("model.freqs_cis"), footprint::torchtitan::freqs_cis_bytes(s), Category::Params,
                        Place::Device);
}

// Transformer.forward up to the first block: the batch (the rank's shards under context
// parallel; no attention_mask), and the embedding under its FSDP2 group.
TensorId model_inputs(TorchtitanStep& sb) {
  const StepShapes& s = sb.shapes;
  if (s.r > 1) context_parallel_batch(sb);
  else load_batch(sb);
  const TensorId x0 = sb.graph.tensor(layer_name(0, "in"), s.n * s.h * s.e, kAct);  // [n, h] e
  if (sb.fsdp2) sb.fsdp2->unshard_forward(embed_group(s), Phase::Forward);
  sb.graph.op(Name{Name::kEmbed, "forward"}, Phase::Forward, -1, {sb.outer.tokens}, {x0});
  if (sb.fsdp2) sb.fsdp2->reshard(embed_group(s), Phase::Forward);
  return x0;
}

// The final norm and output projection under the head group ([norm, output], which stays
// unsharded for its backward: reshard_after_forward=False; the root's post-forward frees its
// gathered buffer), and cross_entropy_loss over the batch's labels as they are (its data
// loader shifted them); then their backward, the head group's pre-backward issuing the last
// block's gather. Returns the last block's output gradient.
TensorId loss(TorchtitanStep& sb, TensorId final_x) {
  const StepShapes& s = sb.shapes;
  if (sb.fsdp2) sb.fsdp2->unshard_forward(head_group(s), Phase::Loss);
  const NormActs f = final_norm_forward(sb, final_x);
  const TensorId logits = lm_head_forward(sb, -1);
  if (sb.fsdp2) sb.fsdp2->end_forward();
  cross_entropy_forward(sb, logits, /*shift_labels=*/false);
  const TensorId d_logits = cross_entropy_backward(sb);
  if (sb.fsdp2) sb.fsdp2->prefetch(static_cast<int>(s.layers) - 1, Phase::Backward);
  const TensorId d_x = lm_head_backward(sb, f, d_logits, -1);
  if (sb.fsdp2) sb.fsdp2->post_backward(head_group(s));
  return d_x;
}

// Under FSDP2 each rank steps its own shards.
std::int64_t sharded_elems(const StepShapes& s, int group) { return footprint::fsdp2::padded_shard_elems(s, group); }

void write_ops(TorchtitanStep& sb) {
  model_states(sb);
  if (sb.in.states_only) return;  // StepInputs::states_only
  Layers layers(sb);
  std::vector<HfLayerActs> acts;
  const TensorId final_x = forward_layers(layers, static_cast<int>(sb.shapes.layers), model_inputs(sb), acts);
  const TensorId d_x = backward_layers(layers, acts, sb.graph, loss(sb, final_x));
  if (sb.fsdp2) sb.fsdp2->copy_out_backward(embed_group(sb.shapes));
  embedding_backward(sb, d_x);
  // A tied table's gradient waits in the output's: the embedding group has no post-backward.
  if (sb.fsdp2 && !sb.shapes.tied) {
    sb.fsdp2->post_backward(embed_group(sb.shapes));
    sb.fsdp2->end_backward();
  }
  // forward_backward_step holds its inputs, labels and extra_kwargs (the context parallel
  // shards) until it returns, after backward.
  for (const TensorId t : sb.cp_shards) sb.graph.add_input(sb.graph.last_op(), t);
  if (!sb.ends_at_prefix()) adamw_step(sb, sb.fsdp2 ? sharded_elems : footprint::group_params);
}

}  // namespace

StepGraph build_step(const StepInputs& in) {
  TorchtitanStep sb(in);
  return write_step(sb, &write_ops);
}

}  // namespace longctx::step::torchtitan
