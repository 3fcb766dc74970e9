// The step graph of longctx's own runtime on one rank, composed from the techniques'
// emitters (emitters.h) in execution order: model states, the forward of the embedding and
// the layers, the loss, the backward of the layers and the embedding, the optimizer. The
// emitters size every buffer with the footprint functions (footprint/), pure functions of
// the step's shapes.
#include "planner/stacks/longctx/emitters.h"
#include "planner/stacks/step/layer_loop.h"

namespace longctx::step {

LongctxStep::LongctxStep(const StepInputs& inputs) : StepBuild(inputs), checkpoints(*this) {
  zero3 = parallel.sharding == Sharding::Zero3;
  // On one rank a gradient's shard is the whole gradient: nothing to reduce-scatter.
  shard_grads = (parallel.sharding == Sharding::Zero2 || zero3) && shapes.world > 1;
  shard_optim = parallel.sharding != Sharding::None;
}

namespace {

// The runtime's layer schedule (runtime/src/llama_step.cpp): zero3 gathers each layer's
// parameters while the layer before it runs (one rank: when the layer starts), checkpoint
// offload copies each checkpointed input out in forward and brings it back while the layer
// above it runs backward; a checkpointed layer is recomputed whole, as reentrant
// checkpointing does.
class Layers final : public LayerSchedule<LayerActs> {
 public:
  explicit Layers(LongctxStep& sb) : sb_(sb), last_(static_cast<int>(sb.shapes.layers) - 1) {}

  LayerActs forward(int l, TensorId x, Phase phase, bool recompute) override {
    return layer_forward(sb_, l, x, phase, recompute);
  }
  TensorId backward(int l, const LayerActs& a, TensorId d_out) override {
    return layer_backward(sb_, l, a, d_out, compute_end_);
  }
  bool checkpointed(int l) const override { return sb_.parallel.checkpoint.checkpoints_layer(l); }

  void begin_forward() override { next_params_ = gather_group(sb_, 0, Phase::Forward, 0); }
  void before_forward(int l, TensorId) override {
    layer_params_ = next_params_;
    if (l < last_) next_params_ = prefetch_params(sb_) ? gather_group(sb_, l + 1, Phase::Forward, l) : -1;
  }
  void after_forward(int l, const LayerActs& a) override {
    if (layer_params_ >= 0) sb_.graph.add_input(a.last_forward_op, layer_params_);
    reads_all_param_copies(sb_, l, a.last_forward_op);
    if (checkpointed(l) && sb_.parallel.offload_checkpoints) sb_.checkpoints.offload(l, a.in);
    if (!prefetch_params(sb_) && l < last_) next_params_ = gather_group(sb_, l + 1, Phase::Forward, l + 1);
  }

  void begin_backward() override {
    next_params_ = gather_group(sb_, last_, Phase::Backward, last_);
    next_checkpoint_ = sb_.checkpoints.prefetch(last_, last_);
  }
  // A prefix build stops after the last layer's backward.
  bool stops_before(int l) override { return l < last_ && sb_.ends_at_prefix(); }
  void before_backward(int l) override {
    layer_params_ = next_params_;
    checkpoint_ = next_checkpoint_;
    if (l == 0) return;
    next_params_ = prefetch_params(sb_) ? gather_group(sb_, l - 1, Phase::Backward, l) : -1;
    next_checkpoint_ = sb_.checkpoints.prefetch(l - 1, l);
  }
  TensorId recompute_input(int, const LayerActs& first) override { return checkpoint_ >= 0 ? checkpoint_ : first.in; }
  void after_recompute(int l, const LayerActs& a, TensorId, TensorId) override {
    reads_all_param_copies(sb_, l, a.last_forward_op);
  }
  void after_backward(int l, const LayerActs&, TensorId d_out, bool recomputed, int last) override {
    if (layer_params_ >= 0) sb_.graph.add_input(last, layer_params_);
    // Reentrant checkpointing backpropagates from the recomputed output with the gradient
    // it was handed: the gradient stays referenced until the layer's backward returns, and
    // no longer, since the autograd engine drops a node's inputs when the node returns; the
    // layer's gradient is finished after that, by the hook below the layer
    // (runtime/src/llama_step.cpp, on_backward_of before layer.forward). The output's bytes
    // are released once the recompute has made it (runtime/src/checkpointed_layer.cpp,
    // recompute_backward), so it dies with its producer.
    if (recomputed) sb_.graph.add_input(compute_end_, d_out);
    if (!prefetch_params(sb_) && l > 0) next_params_ = gather_group(sb_, l - 1, Phase::Backward, l - 1);
  }

 private:
  LongctxStep& sb_;
  const int last_;
  TensorId layer_params_ = -1;     // the running layer's gathered parameters
  TensorId next_params_ = -1;      // the next layer's, once gathered
  TensorId checkpoint_ = -1;       // the running layer's checkpoint, brought back from the host
  TensorId next_checkpoint_ = -1;  // the next layer's, once prefetched
  int compute_end_ = -1;           // the running layer's last op before its gradient is finished
};

void write_ops(LongctxStep& sb) {
  model_states(sb);
  if (sb.in.states_only) return;  // StepInputs::states_only
  rope_tables(sb);
  Layers schedule(sb);
  std::vector<LayerActs> acts;
  sb.outer.final_x = forward_layers(schedule, static_cast<int>(sb.shapes.layers), embedding_forward(sb), acts);
  loss_forward(sb);
  const TensorId d_embed = backward_layers(schedule, acts, sb.graph, loss_backward(sb));
  // A prefix build stops after the last layer's backward (the embedding's too, when that
  // layer is the only one).
  if (d_embed >= 0) embedding_backward(sb, d_embed);
  if (!sb.ends_at_prefix()) optimizer_step(sb);
}

}  // namespace

StepGraph build_step(const StepInputs& in) {
  LongctxStep sb(in);
  return write_step(sb, &write_ops);
}

}  // namespace longctx::step
