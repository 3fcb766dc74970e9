// The batch and the embedding: token lookup in forward, the dense embedding gradient in
// backward (runtime/src/llama_step.cpp, LlamaStep::forward: at::embedding).
#include "planner/stacks/longctx/emitters.h"
#include "planner/footprint/embedding.h"
#include "planner/footprint/zero.h"

namespace longctx::step {

using namespace footprint;

TensorId embedding_forward(LongctxStep& sb) {
  const StepShapes& s = sb.shapes;
  OuterActs& o = sb.outer;
  o.tokens = sb.graph.tensor(step_name("batch.tokens"), s.n * 8, Category::Activations);   // [n] int64
  o.targets = sb.graph.tensor(step_name("batch.targets"), s.n * 8, Category::Activations);  // [n] int64
  sb.graph.op(step_name("batch.load"), Phase::Forward, -1, {}, {o.tokens, o.targets});

  const TensorId embed_full = gather_group(sb, embed_group(s), Phase::Forward, -1);
  const TensorId x0 = sb.graph.tensor(layer_name(0, "in"), s.n * s.h * s.e, Category::Activations);  // [n, h] e
  Ids reads = {o.tokens};
  if (embed_full >= 0) reads.push_back(embed_full);
  sb.graph.op(Name{Name::kEmbed, "forward"}, Phase::Forward, -1, reads, {x0});
  return x0;
}

// A dense [V, h] gradient. Tied to the output projection, it is a second gradient of the same
// weight, which autograd then adds to the head's. The untiled loss's head gradient comes out
// of a transpose, which autograd does not add into: the sum is a new [V, h] buffer that
// replaces the old one. The tiled loss's is a plain buffer of its own, which autograd adds
// the dense gradient into in place: no new buffer. Where zero3 gathers the table for each use,
// the lookup and the head hold leaves of two gathers, each with its own gradient, and the
// reduce-scatter's send buffer is where they meet (ShardedParams::flatten_grads): no sum
// before it.
void embedding_backward(LongctxStep& sb, TensorId d_x) {
  const StepShapes& s = sb.shapes;
  const Phase B = Phase::Backward;
  const int eg_group = embed_group(s);
  const TensorId tied_grad = sb.outer.tied_grad;
  // The lookup's backward reads the token ids and the incoming gradient, never the table: zero3
  // does not gather it again (LlamaStep::forward releases it after the lookup for good).
  const TensorId grad = tied_grad >= 0 ? tied_grad : new_group_grad(sb, eg_group);
  const Ids reads = {d_x, sb.outer.tokens};
  const double flops = double(s.n * s.h);
  const std::int64_t kernel = footprint::embedding_backward_workspace(s, s.n);  // beside the output
  if (tied_grad >= 0 && gathers_group(sb, eg_group)) {
    // grad.dense [V, h] g, a piece of the group's gradient beside the head's
    const TensorId dense = sb.graph.tensor(Name{Name::kEmbed, "grad.dense"}, group_params(s, eg_group) * s.g, Category::Grads);
    sb.graph.op(Name{Name::kEmbed, "backward"}, B, -1, reads, {dense}, {.workspace = kernel, .flops = flops});
    finish_group_grad(sb, eg_group, {tied_grad, dense}, B);
    return;
  }
  if (tied_grad >= 0) {
    const std::int64_t dense_bytes = group_params(s, eg_group) * s.g;
    // grad.dense [V, h] g
    const TensorId dense = sb.graph.tensor(Name{Name::kEmbed, "grad.dense"}, dense_bytes, Category::Transient);
    sb.graph.op(Name{Name::kEmbed, "backward"}, B, -1, reads, {dense}, {.workspace = kernel, .flops = flops});
    const std::int64_t sum_bytes = sb.parallel.loss_tiles > 1 ? 0 : dense_bytes;
    sb.graph.op(Name{Name::kEmbed, "grad.accumulate"}, B, -1, {tied_grad, dense}, {}, {.workspace = sum_bytes});
  } else {
    sb.graph.op(Name{Name::kEmbed, "backward"}, B, -1, reads, {grad}, {.workspace = kernel, .flops = flops});
  }
  finish_group_grad(sb, eg_group, {grad}, B);
}

}  // namespace longctx::step
