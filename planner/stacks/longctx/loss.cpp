// The loss: final norm, output projection and cross-entropy, plain (runtime/src/loss.cpp,
// cross_entropy_loss) or tiled over rows and recomputed per tile in backward
// (runtime/src/loss.cpp, TiledCrossEntropyFn). Forward, then backward, which produces the
// head's gradient (and, tied, the embedding's). Footprints: footprint/loss.h.
#include "planner/stacks/longctx/emitters.h"
#include "planner/footprint/loss.h"
#include "planner/footprint/zero.h"

namespace longctx::step {

using namespace footprint;

namespace {

// The step's loss summed over the ranks once forward ends (runtime/src/llama_step.cpp,
// forward_backward: Communicator::all_reduce_sum of a double), in the loss phase; its
// one-element buffer (8 bytes) is not in the inventory.
void loss_all_reduce(LongctxStep& sb) {
  if (sb.shapes.world == 1) return;
  const int o = sb.graph.op(step_name("loss.all_reduce"), Phase::Loss, -1, {}, {});
  sb.graph.set_comm(o, CommKind::AllReduce, 8.0, static_cast<int>(sb.shapes.world));
}

}  // namespace

void loss_forward(LongctxStep& sb) {
  const StepShapes& s = sb.shapes;
  OuterActs& o = sb.outer;
  const Phase L = Phase::Loss;
  o.head_full = gather_group(sb, head_group(s), L, -1);
  if (s.tied && sb.zero3) o.tied_full = gather_group(sb, embed_group(s), L, -1);
  final_norm_forward(sb);
  const double flops = matmul_flops(s.n, s.h, s.V);
  const int tiles = sb.parallel.loss_tiles;
  if (tiles > 1) {
    const int runs = static_cast<int>(tile_split(s.n, tiles).count);  // tiles that run (uneven: the last shorter)
    sb.graph.op(step_name("loss.tiled"), L, -1, {o.xf, o.targets}, {},
                {.workspace = tiled_loss_workspace(s, tiles),
                 .workspace_sequence = tiled_loss_workspace_sequence(s, tiles, /*backward=*/false),
                 .flops = flops, .kind = OpKind::Matmul,
                 .launches = 3 * runs, .repeats = runs, .traffic = tiled_loss_forward_traffic(s),
                 .transcendentals = loss_transcendentals(s, 1)});
    loss_all_reduce(sb);
    return;
  }
  TensorId logits = sb.graph.tensor(step_name("loss.logits"), s.n * s.V * s.e, Category::Transient);  // [n, V] e
  sb.graph.op(step_name("loss.logits"), L, -1, {o.xf}, {logits}, {.flops = flops});
  if (s.e != 4) {
    const TensorId up = sb.graph.tensor(step_name("loss.logits.fp32"), s.n * s.V * 4, Category::Transient);  // [n, V] fp32
    sb.graph.op(step_name("loss.upcast"), L, -1, {logits}, {up});
    logits = up;
  }
  // log_softmax saves only its output: the logits die here.
  o.logp = sb.graph.tensor(step_name("loss.log_softmax"), s.n * s.V * 4, Category::Activations);  // [n, V] fp32
  sb.graph.op(step_name("loss.log_softmax"), L, -1, {logits}, {o.logp},
              {.flops = 5.0 * double(s.n * s.V), .traffic = log_softmax_forward_traffic(s), .transcendentals = loss_transcendentals(s, 1)});
  sb.graph.op(step_name("loss.nll"), L, -1, {o.logp, o.targets}, {});
  loss_all_reduce(sb);
}

namespace {

// The untiled loss's backward down to the logits' gradient [n, V] e (fp32 in fp32).
TensorId logits_grad(LongctxStep& sb) {
  const StepShapes& s = sb.shapes;
  const Phase B = Phase::Backward;
  const Category tr = Category::Transient;
  const TensorId d_logp = sb.graph.tensor(step_name("loss.nll.grad"), s.n * s.V * 4, tr);  // [n, V] fp32
  sb.graph.op(step_name("loss.nll.bwd"), B, -1, {sb.outer.targets}, {d_logp});
  TensorId d_logits = sb.graph.tensor(step_name("loss.logits.grad.fp32"), s.n * s.V * 4, tr);  // [n, V] fp32
  sb.graph.op(step_name("loss.log_softmax.bwd"), B, -1, {d_logp, sb.outer.logp}, {d_logits},
              {.flops = 3.0 * double(s.n * s.V), .traffic = log_softmax_backward_traffic(s),
               .transcendentals = loss_transcendentals(s, 1)});
  if (s.e != 4) {
    const TensorId cast = sb.graph.tensor(step_name("loss.logits.grad"), s.n * s.V * s.e, tr);  // [n, V] e
    sb.graph.op(step_name("loss.upcast.bwd"), B, -1, {d_logits}, {cast});
    d_logits = cast;
  }
  return d_logits;
}

}  // namespace

TensorId loss_backward(LongctxStep& sb) {
  const StepShapes& s = sb.shapes;
  OuterActs& o = sb.outer;
  const int tiles = sb.parallel.loss_tiles;
  // The head gradient (or, tied, the embedding's) is produced here.
  const TensorId head_grad = new_group_grad(sb, head_group(s));
  if (s.tied) o.tied_grad = new_group_grad(sb, embed_group(s));
  // The tiled loss reads the targets in its backward; the untiled one only in nll's.
  Ids head_reads = {o.xf};
  if (tiles > 1) head_reads.push_back(o.targets);
  if (o.head_full >= 0) head_reads.push_back(o.head_full);
  if (o.tied_full >= 0) head_reads.push_back(o.tied_full);
  const TensorId d_xf = sb.graph.tensor(step_name("loss.final_norm.out.grad"), s.n * s.h * s.e, Category::Transient);  // [n, h] e
  Ids grads_out = {d_xf, head_grad};
  if (o.tied_grad >= 0) grads_out.push_back(o.tied_grad);
  const double flops = 2 * matmul_flops(s.n, s.h, s.V);
  if (tiles > 1) {
    // The tile's logits recomputed as in forward: one more projection.
    const int runs = static_cast<int>(tile_split(s.n, tiles).count);
    sb.graph.op(step_name("loss.tiled.bwd"), Phase::Backward, -1, head_reads, grads_out,
                {.workspace = tiled_loss_workspace(s, tiles),
                 .workspace_sequence = tiled_loss_workspace_sequence(s, tiles, /*backward=*/true),
                 .flops = flops + matmul_flops(s.n, s.h, s.V),
                 .kind = OpKind::Matmul, .launches = 6 * runs, .repeats = runs, .traffic = tiled_loss_backward_traffic(s),
                 .transcendentals = loss_transcendentals(s, 2)});
  } else {
    head_reads.push_back(logits_grad(sb));
    sb.graph.op(step_name("loss.logits.bwd"), Phase::Backward, -1, head_reads, grads_out, {.flops = flops});
  }
  const TensorId d_x = final_norm_backward(sb, d_xf);
  finish_group_grad(sb, head_group(s), {head_grad}, Phase::Backward);
  // zero3, as a layer's gathered parameters: the head's buffer (which holds the final norm's
  // weight its backward reads) and a tied table gathered for the output projection live
  // until the head's gradient is finished (ShardedParams::flatten_grads,
  // LlamaStep::on_backward).
  for (const TensorId full : {o.head_full, o.tied_full})
    if (full >= 0) sb.graph.add_input(sb.graph.last_op(), full);
  return d_x;
}

}  // namespace longctx::step
