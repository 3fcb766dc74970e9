// The SwiGLU MLP, plain (runtime/src/llama_step.cpp, LlamaStep::layer_forward: project,
// then runtime/src/mlp.cpp, SwiGluFn, and the down projection) or tiled over rows and
// recomputed per tile in backward (runtime/src/mlp.cpp, TiledMlpFn). Forward, then
// backward. Footprints: footprint/mlp.h.
#include "planner/stacks/longctx/emitters.h"
#include "planner/footprint/zero.h"
#include "planner/footprint/mlp.h"

namespace longctx::step {

using namespace footprint;

namespace {
// Kernels per tile (runtime/src/mlp.cpp, TiledMlpFn): forward gate/up, SiLU, product, down;
// backward the recompute, down's and SwiGLU's gradients and the three projections' two each.
constexpr int kTiledMlpForwardLaunches = 4, kTiledMlpBackwardLaunches = 10;
}  // namespace

TensorId mlp_forward(LongctxStep& sb, int l, LayerActs& a, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  const int tiles = sb.parallel.mlp_tiles;
  const int runs = static_cast<int>(tile_split(s.n, tiles).count);  // tiles that run (uneven: the last shorter)
  const Category act = Category::Activations;
  const TensorId down = sb.graph.tensor(layer_name(l, "mlp.down.out", rc), s.n * s.h * s.e, Category::Transient);  // [n, h] e
  if (tiles > 1) {
    sb.graph.op(layer_name(l, kTiledMlpForward, rc), phase, l, {a.xn2}, {down},
                {.workspace = tiled_mlp_forward_workspace(s, tiles), .flops = matmul_flops(s.n, s.h, s.I) * 3,
                 .kind = OpKind::Matmul, .launches = kTiledMlpForwardLaunches * runs, .repeats = runs, .traffic = tiled_mlp_forward_traffic(s),
                 .transcendentals = swiglu_transcendentals(s, 1)});
    return down;
  }
  a.gate = sb.graph.tensor(layer_name(l, "mlp.gate", rc), s.n * s.I * s.e, act);  // [n, I] e
  a.up = sb.graph.tensor(layer_name(l, "mlp.up", rc), s.n * s.I * s.e, act);      // [n, I] e
  sb.graph.op(layer_name(l, "mlp.gate_up", rc), phase, l, {a.xn2}, {a.gate, a.up}, {.flops = matmul_flops(s.n, s.h, s.I) * 2});
  a.act = sb.graph.tensor(layer_name(l, "mlp.act", rc), s.n * s.I * s.e, act);  // [n, I] e
  // silu(gate) * up is computed without a temporary; backward recomputes silu from gate.
  sb.graph.op(layer_name(l, "mlp.swiglu", rc), phase, l, {a.gate, a.up}, {a.act},
              {.flops = 4.0 * double(s.n * s.I), .traffic = swiglu_forward_traffic(s), .transcendentals = swiglu_transcendentals(s, 1)});
  sb.graph.op(layer_name(l, "mlp.down", rc), phase, l, {a.act}, {down}, {.flops = matmul_flops(s.n, s.I, s.h)});
  return down;
}

TensorId mlp_backward(LongctxStep& sb, int l, const LayerActs& a, TensorId d_out, Ids& grad) {
  const StepShapes& s = sb.shapes;
  const int tiles = sb.parallel.mlp_tiles;
  const int runs = static_cast<int>(tile_split(s.n, tiles).count);
  const Phase B = Phase::Backward;
  const Category tr = Category::Transient;
  const TensorId d_xn2 = sb.graph.tensor(layer_name(l, "mlp_norm.out.grad"), s.n * s.h * s.e, tr);  // [n, h] e
  if (tiles > 1) {
    // gate, up, down's gradients [3 * h * I (+ 2I + h biases)] g
    const std::int64_t elems = 3 * s.h * s.I + footprint::bias_params(s, {ParamRole::BGate, ParamRole::BUp, ParamRole::BDown});
    const TensorId g_mlp = grad_piece(sb, l, "grad.full.mlp", "grad.mlp", elems, grad);
    const int o = sb.graph.op(layer_name(l, kTiledMlpBackward), B, l, {d_out, a.xn2}, {d_xn2, g_mlp},
                              {.workspace = tiled_mlp_backward_workspace(s, tiles), .flops = matmul_flops(s.n, s.h, s.I) * 9,
                               .kind = OpKind::Matmul, .launches = kTiledMlpBackwardLaunches * runs, .repeats = runs,
                               .traffic = tiled_mlp_backward_traffic(s), .transcendentals = swiglu_transcendentals(s, 4)});
    // TiledMlpFn saves the three weights and the gate's and up's biases.
    frees_param_copies(sb, l, o, {ParamRole::Gate, ParamRole::Up, ParamRole::Down, ParamRole::BGate, ParamRole::BUp});
    return d_xn2;
  }
  const TensorId d_act = sb.graph.tensor(layer_name(l, "mlp.act.grad"), s.n * s.I * s.e, tr);  // [n, I] e
  const TensorId g_down = grad_piece(sb, l, "grad.full.mlp.down", "grad.mlp.down",
                                     s.h * s.I + footprint::bias_params(s, {ParamRole::BDown}), grad);  // [h * I (+ h)] g
  const int down = sb.graph.op(layer_name(l, "mlp.down.bwd"), B, l, {d_out, a.act}, {d_act, g_down},
                               {.flops = matmul_flops(s.n, s.I, s.h) * 2});
  frees_param_copies(sb, l, down, {ParamRole::Down});  // at::linear's node saves the weight, not the bias
  // SwiGLU's backward writes d_gate and d_up into gate's and up's buffers: no new tensor, and
  // gate and up live until the projection's backward has read the gradients in them.
  sb.graph.op(layer_name(l, "mlp.swiglu.bwd"), B, l, {d_act, a.gate, a.up}, {},
              {.workspace = swiglu_backward_workspace(s), .flops = 8.0 * double(s.n * s.I), .traffic = swiglu_backward_traffic(s),
               .transcendentals = swiglu_transcendentals(s, 3)});
  const TensorId g_gate_up =
      grad_piece(sb, l, "grad.full.mlp.gate_up", "grad.mlp.gate_up",
                 2 * s.h * s.I + footprint::bias_params(s, {ParamRole::BGate, ParamRole::BUp}), grad);  // [2 * h * I (+ 2I)] g
  const int gate_up = sb.graph.op(layer_name(l, "mlp.gate_up.bwd"), B, l, {a.gate, a.up, a.xn2}, {d_xn2, g_gate_up},
                                  {.flops = matmul_flops(s.n, s.h, s.I) * 4});
  frees_param_copies(sb, l, gate_up, {ParamRole::Gate, ParamRole::Up});  // ProjectFn saves the weights only
  return d_xn2;
}

bool retile_mlp(StepGraph& graph, const StepInputs& in) {
  const int tiles = in.parallel.mlp_tiles;
  if (tiles < 2) return false;  // a plain MLP is other ops
  const StepShapes s = step_shapes(in);
  const int runs = static_cast<int>(tile_split(s.n, tiles).count);
  const std::int64_t forward = tiled_mlp_forward_workspace(s, tiles), backward = tiled_mlp_backward_workspace(s, tiles);
  int amended = 0;  // none: a graph of an untiled MLP, which no count's workspaces make tiled
  for (int i = 0; i < static_cast<int>(graph.ops().size()); ++i) {
    const char* base = graph.op(i).name.base;
    if (base != kTiledMlpForward && base != kTiledMlpBackward) continue;
    OpSpec& op = amend_finished_op(graph, i);
    const bool is_forward = base == kTiledMlpForward;
    op.workspace_bytes = is_forward ? forward : backward;
    op.launches = (is_forward ? kTiledMlpForwardLaunches : kTiledMlpBackwardLaunches) * runs;
    ++amended;
  }
  return amended > 0;
}

}  // namespace longctx::step
