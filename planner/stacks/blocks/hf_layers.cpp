// The layer schedule of transformers' decoder layers under torch.utils.checkpoint
// (blocks/hf_layers.h).
#include "planner/stacks/blocks/hf_layers.h"

#include <algorithm>

#include "planner/footprint/hf.h"
#include "planner/stacks/blocks/hf_layer.h"

namespace longctx::step::blocks {

namespace {

bool reentrant(const HfStep& sb) { return sb.in.train.stack.checkpointing == HfCheckpointing::Reentrant; }

}  // namespace

HfLayers::HfLayers(HfStep& sb)
    : sb_(sb),
      rng_(static_cast<std::size_t>(sb.shapes.layers), -1),
      host_(static_cast<std::size_t>(sb.shapes.layers), -1),
      kept_(static_cast<std::size_t>(sb.shapes.layers)) {}

bool HfLayers::checkpointed(int) const { return sb_.parallel.checkpoint.any(); }

LayerPass HfLayers::recompute_pass() const {
  return reentrant(sb_) ? LayerPass::RecomputeWhole : LayerPass::RecomputeUntilSaved;
}

// transformers' checkpoint offload (modeling_utils.py, `_activation_checkpointing_enable` with
// offload=True, transformers 5.17 on; TrainingArguments' `gradient_checkpointing_kwargs`
// {"offload": true}): each layer's checkpoint runs under
// torch.autograd.graph.save_on_cpu(pin_memory=True), so what the checkpoint saves for
// backward, the layer's input hidden states (its keyword arguments ride in a partial, not
// saved), is copied to pinned host memory, `packed.copy_(tensor)` on the compute stream, and
// the device input is held by the model's loop alone. Backward unpacks it,
// `tensor.to(device, non_blocking=True)`, when the layer's first saved tensor is needed.
bool HfLayers::offloaded(int l) const { return sb_.parallel.offload_checkpoints && checkpointed(l); }

void HfLayers::before_forward(int l, TensorId x) {
  const StepShapes& s = sb_.shapes;
  // accelerate's checkpoint_wrapper(preserve_rng_state=False) saves none. The state is a CPU
  // tensor: device bytes on the CPU virtual device only (footprint/hf.h), so written there only.
  if (s.cpu && checkpointed(l) && sb_.in.train.stack.checkpointing != HfCheckpointing::Accelerate) {
    const TensorId rng =
        sb_.graph.tensor(layer_name(l, "checkpoint.rng_state"), footprint::hf::checkpoint_rng_state_bytes(s), kAct);
    sb_.graph.op(layer_name(l, "checkpoint.save_rng"), Phase::Forward, l, {}, {rng});
    rng_[static_cast<std::size_t>(l)] = rng;
  }
  if (offloaded(l)) {
    const std::int64_t bytes = s.n * s.h * s.e;
    const TensorId host = sb_.graph.tensor(layer_name(l, "checkpoint.in.host"), bytes, kAct, Place::Host);  // [n, h] e
    const int o = sb_.graph.op(layer_name(l, "checkpoint.pack"), Phase::Forward, l, {x}, {host});
    sb_.graph.set_comm(o, CommKind::DeviceToHost, double(bytes), 1);
    host_[static_cast<std::size_t>(l)] = host;
  }
}

// A checkpointed layer's first pass runs without saving anything: its tensors die with their
// last reader in forward, as the graph writes them when nothing in backward reads them. Under
// per-op selective checkpointing (OpSac) the block's first pass keeps what the policy saves,
// and its recompute takes those back.
HfLayerActs HfLayers::forward(int l, TensorId x, Phase phase, bool recompute) {
  const LayerPass pass = recompute ? recompute_pass() : checkpointed(l) ? LayerPass::Checkpointed : LayerPass::Plain;
  if (sb_.parallel.checkpoint.kind != CheckpointPolicy::Kind::Ops) return layer_forward(sb_, l, x, phase, recompute, pass);
  std::deque<TensorId>& kept = kept_[static_cast<std::size_t>(l)];
  sb_.op_sac = {.mode = recompute ? OpSac::Mode::Replay : OpSac::Mode::Keep, .mm_count = 0, .kept = std::move(kept)};
  const HfLayerActs a = layer_forward(sb_, l, x, phase, recompute, pass);
  kept = std::move(sb_.op_sac.kept);
  sb_.op_sac = {};
  return a;
}

TensorId HfLayers::backward(int l, const HfLayerActs& a, TensorId d_out) {
  return layer_backward(sb_, l, a, d_out, sb_.grads[static_cast<std::size_t>(l)]);
}

// The recompute begins where the layer's backward first needs a saved tensor (after d_out
// arrived); an offloaded input is unpacked first, a new device tensor [n, h] e. The recompute
// then runs under torch.random.fork_rng (torch/utils/checkpoint.py: CheckpointFunction.backward,
// and non-reentrant's recompute_fn), which keeps the RNG state it restores on exit,
// torch.get_rng_state(), until the recompute returns: device bytes on the CPU virtual device
// only (footprint/hf.h), so the op is written there only.
TensorId HfLayers::recompute_input(int l, const HfLayerActs& first) {
  TensorId in = first.in;
  if (offloaded(l)) {
    const std::int64_t bytes = sb_.shapes.n * sb_.shapes.h * sb_.shapes.e;
    in = sb_.graph.tensor(layer_name(l, "checkpoint.in.unpacked"), bytes, kAct);
    const int o = sb_.graph.op(layer_name(l, "checkpoint.unpack"), kB, l, {host_[static_cast<std::size_t>(l)]}, {in});
    sb_.graph.set_comm(o, CommKind::HostToDevice, double(bytes), 1);
  }
  fork_rng_ = -1;
  if (sb_.shapes.cpu && rng_[static_cast<std::size_t>(l)] >= 0) {
    fork_rng_ = sb_.graph.tensor(layer_name(l, "checkpoint.fork_rng"), footprint::hf::checkpoint_rng_state_bytes(sb_.shapes), kAct);
    sb_.graph.op(layer_name(l, "checkpoint.fork_rng"), kB, l, {}, {fork_rng_});
  }
  return in;
}

// Reentrant keeps the recompute's output and d_out until its inner backward returns;
// non-reentrant stops once the last tensor is saved, unless early stop is off (torchtitan's),
// when it runs the whole layer and drops its output.
void HfLayers::after_recompute(int l, const HfLayerActs&, TensorId in, TensorId d_out) {
  sb_.graph.add_input(sb_.graph.last_op(), d_out);
  if (fork_rng_ >= 0) sb_.graph.add_input(sb_.graph.last_op(), fork_rng_);
  // Non-reentrant: the unpacked input is the recompute's argument, held until it returns
  // (and after, by what the recompute saved of it).
  if (offloaded(l)) sb_.graph.add_input(sb_.graph.last_op(), in);
}

Ids HfLayers::checkpoint_inputs(int, const HfLayerActs&) const { return {sb_.model.mask, sb_.model.positions}; }

// The checkpoint's node (reentrant) or frame (non-reentrant) holds its RNG state and its
// inputs until its backward is done.
void HfLayers::after_backward(int l, const HfLayerActs& a, TensorId d_out, bool recomputed, int last) {
  if (!recomputed) return;
  // None saved by accelerate's checkpoint_wrapper (preserve_rng_state=False).
  if (const TensorId rng = rng_[static_cast<std::size_t>(l)]; rng >= 0) {
    if (reentrant(sb_)) held_by_graph_.push_back(rng);
    else sb_.graph.add_input(last, rng);
  }
  Ids held = checkpoint_inputs(l, a);
  // The checkpoint keeps the layer's input (its positional argument) until its backward
  // returns, the layer's last op: reentrant, CheckpointFunction's saved tensors (the unpacked
  // copy where offloaded); non-reentrant, its _NoopSaveInputs node, which saved the pinned copy
  // instead where offloaded (below). In fp32 the first norm saves that input anyway; in bf16 it
  // saves an fp32 copy, and the input lives on only through the checkpoint.
  const bool holds_input = reentrant(sb_) || !offloaded(l);
  if (holds_input && std::find(held.begin(), held.end(), a.in) == held.end()) held.push_back(a.in);
  for (const TensorId t : held)
    if (t >= 0) sb_.graph.add_input(last, t);
  if (reentrant(sb_)) {
    sb_.graph.add_input(last, a.out);
    sb_.graph.add_input(last, d_out);
  }
  // The pinned copy lives as long as the checkpoint's saved inputs.
  if (offloaded(l)) sb_.graph.add_input(last, host_[static_cast<std::size_t>(l)]);
}

void HfLayers::free_graph(Phase phase) {
  for (std::size_t first = 0; first < held_by_graph_.size(); first += Ids::kCapacity) {
    Ids held;
    for (std::size_t k = first; k < std::min(held_by_graph_.size(), first + Ids::kCapacity); ++k) held.push_back(held_by_graph_[k]);
    sb_.graph.op(step_name("autograd.graph_freed"), phase, -1, held, {});
  }
  held_by_graph_.clear();
}

}  // namespace longctx::step::blocks
