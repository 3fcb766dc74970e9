// The hf stack across GPUs, as accelerate 1.15.0 and the Trainer (transformers 4.57.1) run
// transformers' model: FSDP2 (fsdp_version 2, utils/fsdp_utils.py fsdp2_prepare_model:
// fully_shard on each decoder layer, the auto-wrap policy's _no_split_modules; the embedding
// alone, or tied in one group with the final norm and lm_head; [final norm, lm_head] with
// reshard_after_forward=False), its mixed precision (utils/dataclasses.py
// FullyShardedDataParallelPlugin.set_mixed_precision: param_dtype and reduce_dtype bf16, the
// shards upcast to fp32), and torch's context parallel as accelerate applies it
// (accelerator.py _prepare_cp, maybe_context_parallel; big_modeling.py
// _attach_context_parallel_hooks: no mask, is_causal; torch's ring attention with k/v
// all-gathered, load balanced), with TRL's chunked loss on the rank's shift_labels.
// Footprints: footprint/fsdp2.h, footprint/torchtitan.h (torch's context-parallel buffers and
// ring, as torchtitan also runs them), footprint/hf.h.
#include "planner/footprint/fsdp2.h"
#include "planner/footprint/torchtitan.h"
#include "planner/footprint/zero.h"
#include "planner/stacks/blocks/hf_layer.h"
#include "planner/stacks/blocks/hf_layers.h"
#include "planner/stacks/blocks/hf_model.h"
#include "planner/stacks/blocks/torch_adamw.h"
#include "planner/stacks/blocks/trl_loss.h"
#include "planner/stacks/hf/step_parts.h"
#include "planner/stacks/torchtitan/step.h"

namespace longctx::step::hf {

using namespace blocks;
using footprint::embed_group;
using footprint::head_group;
namespace tt = footprint::torchtitan;

namespace {

// FSDP2 over the ranks, reducing in the parameters' dtype (bf16 mixed precision). A tied
// table is wrapped in one group with the final norm (accelerate's fsdp2_prepare_model:
// fully_shard([norm, embed_tokens, lm_head])): the norm is gathered at the embedding's
// forward, its forward gathers nothing (so the last layer's gathered buffer, FSDPParamGroup's
// all_gather_state, lives until the root's post-forward, after the loss), and both are
// reduced at backward's final callback.
struct FsdpStep : HfStep {
  FsdpStep(const StepInputs& inputs, const LayerOps& layer_ops) : HfStep(inputs, layer_ops), fsdp2(*this, shapes.e) {
    if (shapes.tied) fsdp2.join(head_group(shapes), embed_group(shapes));
  }
  Fsdp2 fsdp2;
};

// FSDP2's hooks around each decoder layer (as around torchtitan's blocks): the pre-forward's
// gather and copy-out, the reshard after forward, the pre-backward's copy-out and the next
// group's gather, the post-backward's reduce-scatter; transformers' checkpointing inside.
class FsdpLayers final : public HfLayers {
 public:
  explicit FsdpLayers(FsdpStep& sb) : HfLayers(sb), fsdp_(sb.fsdp2) {}

  // The Trainer's checkpoint wraps the layer's call (transformers' GradientCheckpointingLayer
  // .__call__), so it saves its RNG state (and, offloaded, packs its input) before the
  // module's FSDP pre-forward gathers; accelerate's checkpoint_wrapper is inside the FSDP
  // module (fsdp2_apply_ac runs before fsdp2_prepare_model), so it packs after the gather.
  void before_forward(int l, TensorId x) override {
    const bool wrapper_inside = sb_.in.train.stack.checkpointing == HfCheckpointing::Accelerate;
    if (wrapper_inside) fsdp_.unshard_forward(l, Phase::Forward);
    HfLayers::before_forward(l, x);
    if (!wrapper_inside) fsdp_.unshard_forward(l, Phase::Forward);
  }
  void after_forward(int l, const HfLayerActs& a) override {
    HfLayers::after_forward(l, a);
    fsdp_.reshard(l, Phase::Forward);
  }
  // The layer's pre-backward copies out its parameters and gathers the next group's (layer
  // 0's: the embedding's again, unless it is the tied one, never resharded). A reentrant
  // checkpoint recomputes the layer first, under its forward hooks (Fsdp2::copy_out_recompute),
  // and the pre-backward runs after.
  void before_backward(int l) override {
    if (recomputes_under_hooks(l)) {
      fsdp_.copy_out_recompute(l);
    } else {
      fsdp_.copy_out_backward(l);
      prefetch_before(l);
    }
    HfLayers::before_backward(l);
  }
  void after_recompute(int l, const HfLayerActs& a, TensorId in, TensorId d_out) override {
    HfLayers::after_recompute(l, a, in, d_out);
    if (!recomputes_under_hooks(l)) return;
    fsdp_.end_recompute(l);
    prefetch_before(l);
  }
  void after_backward(int l, const HfLayerActs& a, TensorId d_out, bool recomputed, int last) override {
    HfLayers::after_backward(l, a, d_out, recomputed, last);
    fsdp_.post_backward(l);
  }

 private:
  // torch.utils.checkpoint's CheckpointFunction reruns the layer's module call (its FSDP
  // hooks) before the inner backward; non-reentrant recomputes inside the layer's backward,
  // where FSDP's pre-forward sees the pre-backward state and does nothing.
  bool recomputes_under_hooks(int l) const {
    return checkpointed(l) && sb_.in.train.stack.checkpointing == HfCheckpointing::Reentrant;
  }
  void prefetch_before(int l) {
    if (l > 0) fsdp_.prefetch(l - 1, Phase::Backward);
    else if (!sb_.shapes.tied) fsdp_.prefetch(embed_group(sb_.shapes), Phase::Backward);
  }

  Fsdp2& fsdp_;
};

// The layer's attention under context parallel: torch's ring over the rank's shard (the sdpa
// call on DTensors sharded on the sequence, accelerate's hook having dropped the mask), its
// dq and dk/dv pair head-major, then transformers' rotations and projections.
void ring_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool /*cache: off, validate.cpp*/) {
  torchtitan::ring_attention_forward(sb, l, a, phase, rc);
}

TensorId ring_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_o, Ids& grads) {
  const torchtitan::RingGrads g = torchtitan::ring_attention_kernel_backward(sb, l, a, d_o);
  return project_qkv_backward(sb, l, a, g.dq, g.kv_pair, g.kv_pair, /*k_head_major=*/true, /*qv_head_major=*/true, grads);
}

// transformers' ops with the ring in place of the attention kernel.
const LayerOps kRingOps = {
    .norm_forward = llama_norm_forward,
    .norm_backward = llama_norm_backward,
    .rope = transformers_rope,
    .rope_backward = transformers_rope_backward,
    .project_qkv = transformers_project_qkv,
    .attention_forward = ring_forward,
    .attention_backward = ring_backward,
    .mlp_forward = llama_mlp_forward,
    .mlp_backward = llama_mlp_backward,
};

std::int64_t sharded_elems(const StepShapes& s, int group) { return footprint::fsdp2::padded_shard_elems(s, group); }

// The model states as FSDP2 shards them (AdamW on the shards, created after wrapping), the
// layers under their groups, the loss, the embedding's backward and the last reductions.
void write_ops(FsdpStep& sb) {
  const StepShapes& s = sb.shapes;
  sb.fsdp2.model_states();
  if (sb.in.states_only) return;  // StepInputs::states_only
  sb.kv_cache = keeps_kv_cache(sb);
  FsdpLayers layers(sb);
  std::vector<HfLayerActs> acts;
  const TensorId final_x = forward_layers(layers, static_cast<int>(s.layers), model_inputs(sb, &sb.fsdp2, false), acts);
  const TensorId d_x = backward_layers(layers, acts, sb.graph, loss(sb, final_x, &sb.fsdp2));
  if (!s.tied) sb.fsdp2.copy_out_backward(embed_group(s));
  // A tied table's gradients, the loss's and the embedding's, meet as HfStep::tied_sum says.
  embedding_backward(sb, d_x);
  sb.fsdp2.post_backward(embed_group(s));
  sb.fsdp2.end_backward();
  if (sb.model.context_locals.size() > 0)
    sb.graph.op(step_name("cp.context_exit"), Phase::Backward, -1, sb.model.context_locals, {});
  // The Trainer's training_step returns, dropping the loss and its graph, before the optimizer.
  layers.free_graph(Phase::Backward);
  if (!sb.ends_at_prefix()) adamw_step(sb, sharded_elems);
}

}  // namespace

// transformers' Trainer._prepare_context_parallel_inputs adds position_ids =
// arange(S).expand(b, -1) (storage [S] int64) and shift_labels = pad(labels, (0, 1),
// -100)[:, 1:] ([b, S+1] int64 for one sample, whose view it is; a [b, S] copy for more), then
// torch's context_parallel shards each buffer (input_ids, labels, shift_labels, the
// attention_mask, position_ids) in place: the balancer's indices [1, S] int32;
// _context_parallel_buffers shards every buffer first (the gather [b, S] with its int64 index,
// tt::cp_shard_workspace, then the rank's [b, Sl] clone), then each shard is cloned again
// (`shard = shard.clone()`), and buffer.resize_(shard) and copy_ keep the buffer's whole storage
// (no restore: every buffer is in no_restore_buffers). context_parallel is a generator: its
// frame holds the `shards` list and the last clone from its `yield` until the context exits
// after backward (the Trainer's training_step; cp.context_exit). The
// Trainer's loop holds the batch until the step returns.
void context_parallel_batch(HfStep& sb) {
  const StepShapes& s = sb.shapes;
  const std::int64_t whole = s.b * s.S * 8;  // [b, S] int64
  const TensorId ids = sb.graph.tensor(step_name("batch.tokens"), whole, kAct);
  const TensorId labels = sb.graph.tensor(step_name("batch.targets"), whole, kAct);
  const TensorId mask = sb.graph.tensor(step_name("batch.attention_mask"), whole, kAct);
  sb.graph.op(step_name("batch.load"), Phase::Forward, -1, {}, {ids, labels, mask});
  const TensorId positions = sb.graph.tensor(step_name("cp.position_ids"), s.S * 8, kAct);
  const TensorId shift = sb.graph.tensor(step_name("cp.shift_labels"), s.b * (s.b == 1 ? s.S + 1 : s.S) * 8, kAct);
  sb.graph.op(step_name("cp.prepare_inputs"), Phase::Forward, -1, {labels}, {positions, shift},
              {.workspace = s.b > 1 ? s.b * (s.S + 1) * 8 : 0});
  const TensorId indices = sb.graph.tensor(step_name("cp.balance_indices"), tt::cp_indices_bytes(s), kTr);
  sb.graph.op(step_name("cp.balance_indices"), Phase::Forward, -1, {}, {indices});
  struct Buffer {
    const char* op;
    const char* shard;
    TensorId whole;
  };
  const Buffer buffers[] = {{"cp.shard.input_ids", "cp.shard.input_ids.local", ids},
                            {"cp.shard.labels", "cp.shard.labels.local", labels},
                            {"cp.shard.shift_labels", "cp.shard.shift_labels.local", shift},
                            {"cp.shard.attention_mask", "cp.shard.attention_mask.local", mask},
                            {"cp.shard.position_ids", "cp.shard.position_ids.local", positions}};
  Ids& frame = sb.model.context_locals;
  for (const Buffer& b : buffers) {
    const TensorId shard = sb.graph.tensor(step_name(b.shard), s.n * 8, kAct);  // [b, Sl] int64
    sb.graph.op(step_name(b.op), Phase::Forward, -1, {b.whole, indices}, {shard},
                {.workspace = tt::cp_shard_workspace(s, 8)});
    frame.push_back(shard);
  }
  // The clones into the buffers, one at a time; the last one stays bound in the frame.
  const TensorId last = sb.graph.tensor(step_name("cp.shard.clone"), s.n * 8, kAct);
  sb.graph.op(step_name("cp.resize_buffers"), Phase::Forward, -1, frame, {last}, {.workspace = s.n * 8});
  frame.push_back(last);
  sb.outer.tokens = ids;
  sb.outer.targets = shift;
  sb.model.batch = {ids, labels, mask, positions, shift};
}

StepGraph build_distributed_step(const StepInputs& in) {
  FsdpStep sb(in, in.parallel.ring > 1 ? kRingOps : kTransformersOps);
  return write_step(sb, &write_ops);
}

}  // namespace longctx::step::hf
