// The step graph of one rank, composed from the techniques' emitters (step/emitters.h) in
// execution order: model states, the forward of the embedding and the layers, the loss, the
// backward of the layers and the embedding, the optimizer. The emitters size every buffer
// with the footprint functions (footprint/), pure functions of the step's shapes.
#include "planner/stacks/step_builder.h"

#include "planner/footprint/zero.h"
#include "planner/stacks/profile.h"
#include "planner/stacks/step/emitters.h"

namespace longctx {
namespace step {

StepBuild::StepBuild(const StepInputs& inputs)
    : in(inputs), parallel(inputs.parallel), shapes(footprint::step_shapes(inputs)) {
  zero3 = parallel.sharding == Sharding::Zero3;
  // On one rank a gradient's shard is the whole gradient: nothing to reduce-scatter.
  shard_grads = (parallel.sharding == Sharding::Zero2 || zero3) && shapes.world > 1;
  shard_optim = parallel.sharding != Sharding::None;
}

Name StepBuild::group_name(int group, const char* base) const {
  if (group < shapes.layers) return Name{group, base, false};
  return Name{group == footprint::embed_group(shapes) ? Name::kEmbed : Name::kHead, base, false};
}

namespace {

// The layers' forward. zero3 gathers each layer's parameters while the layer before it runs
// (one rank: when the layer starts); checkpoint offload copies each checkpointed input out.
void forward_layers(StepBuild& sb, TensorId x) {
  const int layers = static_cast<int>(sb.shapes.layers);
  sb.acts.resize(static_cast<std::size_t>(layers));
  sb.checkpoint_host.assign(static_cast<std::size_t>(layers), -1);
  TensorId next_params = gather_group(sb, 0, Phase::Forward, 0);
  for (int l = 0; l < layers; ++l) {
    const TensorId layer_params = next_params;
    if (l + 1 < layers) next_params = prefetch_params(sb) ? gather_group(sb, l + 1, Phase::Forward, l) : -1;
    const LayerActs a = layer_forward(sb, l, x, Phase::Forward, false);
    if (layer_params >= 0) sb.graph.add_input(a.last_forward_op, layer_params);
    reads_all_param_copies(sb, l, a.last_forward_op);
    if (sb.parallel.checkpoint.checkpoints_layer(l) && sb.parallel.offload_checkpoints) offload_checkpoint(sb, l, a.in);
    sb.acts[static_cast<std::size_t>(l)] = a;
    x = a.out;
    if (!prefetch_params(sb) && l + 1 < layers) next_params = gather_group(sb, l + 1, Phase::Forward, l + 1);
  }
  sb.outer.final_x = x;
}

// The layers' backward, last to first, from the loss's gradient; returns the embedding's
// output gradient, or -1 where a prefix build stops after the last layer. zero3
// prefetches the next layer's parameters, checkpoint offload the next checkpoint; a
// checkpointed layer is recomputed first.
TensorId backward_layers(StepBuild& sb, TensorId d_x) {
  const Phase B = Phase::Backward;
  const int last_layer = static_cast<int>(sb.shapes.layers) - 1;
  TensorId next_params = gather_group(sb, last_layer, B, last_layer);
  TensorId next_ckpt = prefetch_checkpoint(sb, last_layer, last_layer);
  for (int l = last_layer; l >= 0; --l) {
    if (sb.in.prefix_only && l < last_layer) return -1;
    const TensorId layer_params = next_params;
    const TensorId ckpt = next_ckpt;
    if (l > 0) {
      next_params = prefetch_params(sb) ? gather_group(sb, l - 1, B, l) : -1;
      next_ckpt = prefetch_checkpoint(sb, l - 1, l);
    }
    LayerActs a = sb.acts[static_cast<std::size_t>(l)];
    TensorId recompute_out = -1;
    if (sb.parallel.checkpoint.checkpoints_layer(l)) {
      a = layer_forward(sb, l, ckpt >= 0 ? ckpt : a.in, B, true);
      recompute_out = a.out;
      reads_all_param_copies(sb, l, a.last_forward_op);
    }
    const TensorId d_out = d_x;
    d_x = layer_backward(sb, l, a, d_x);
    const int last = sb.graph.last_op();
    if (layer_params >= 0) sb.graph.add_input(last, layer_params);
    // Reentrant checkpointing backpropagates from the recomputed output with the gradient
    // it was handed: the gradient stays referenced until the layer's backward returns; the
    // output's bytes are released once the recompute has made it
    // (runtime/src/checkpointed_layer.cpp, recompute_backward), so it dies with its producer.
    if (recompute_out >= 0) sb.graph.add_input(last, d_out);
    if (!prefetch_params(sb) && l > 0) next_params = gather_group(sb, l - 1, B, l - 1);
  }
  return d_x;
}

}  // namespace

// longctx's own runtime: the techniques' emitters in execution order.
void build_longctx_step(StepBuild& sb) {
  const StepInputs& in = sb.in;
  model_states(sb);
  rope_tables(sb);
  forward_layers(sb, embedding_forward(sb));
  loss_forward(sb);
  const TensorId d_embed = backward_layers(sb, loss_backward(sb));
  // A prefix build stops after the last layer's backward (the embedding's too, when that
  // layer is the only one).
  if (d_embed >= 0) embedding_backward(sb, d_embed);
  if (!in.prefix_only) optimizer_step(sb);
}

}  // namespace step

StepGraph build_step(const StepInputs& in) {
  step::StepBuild sb(in);
  // About 40 tensors and 30 ops a layer: reserve once instead of regrowing.
  const auto layers = static_cast<std::size_t>(in.model.layers);
  sb.graph.reserve(layers * 48 + 128, layers * 36 + 128);
  // cuBLAS workspaces [cublas_workspace] bytes each: one per (handle, stream), handles per
  // thread, and every stack's step multiplies on two threads, the forward's and autograd's
  // device thread that runs backward (torch/csrc/autograd/engine.cpp, Engine::thread_main
  // per device). Allocated at each thread's first matmul, just after its output, and kept:
  // held from the second step on, which is the one whose phases the planner predicts.
  int cublas[2] = {-1, -1};
  if (sb.shapes.cublas_workspace > 0)
    for (int& t : cublas)
      t = sb.graph.persistent(Name{Name::kNone, &t == cublas ? "cublas.workspace.forward" : "cublas.workspace.backward"},
                              sb.shapes.cublas_workspace, Category::Workspace, Place::Device);
  stack_profile(in.train.stack.kind).build_step(sb);
  // Where the first step allocates them: the first forward and the first backward matmul.
  if (cublas[0] >= 0 && !in.prefix_only) {
    sb.graph.first_allocated_at(cublas[0], sb.graph.first_cublas_op(Phase::Forward));
    sb.graph.first_allocated_at(cublas[1], sb.graph.first_cublas_op(Phase::Backward));
  }
  return sb.graph.finish();
}

}  // namespace longctx
