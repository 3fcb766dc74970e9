// The arctic stack's decoder layer: transformers' LlamaDecoderLayer (blocks/hf_layer.h; Liger's
// RMSNorm, RoPE and SwiGLU in the liger model, blocks/liger.h) with the attention DeepSpeed's
// UlyssesSPAttentionHF wraps around flash attention (blocks/ulysses_attention.h), ArcticTraining's TiledMLP (arctic_training/model/tiled_compute.py,
// tiled_mlp_forward_common, running DeepSpeed's TiledMLP), and ZeRO-3's gathers of the
// layer's parameters (blocks/deepspeed_zero3.h).
//
// Shapes: n = b*S/u tokens of the rank; the attention runs on b*S tokens of hl query heads
// and kvr kv heads (Ulysses' degree u; 1: no exchange).
#include "planner/core/parallel_config.h"
#include "planner/footprint/attention.h"
#include "planner/stacks/arctic/step.h"
#include "planner/stacks/blocks/deepspeed_zero3.h"
#include "planner/stacks/blocks/hf_layer.h"
#include "planner/stacks/blocks/ulysses_attention.h"

namespace longctx::step::arctic {

using namespace footprint;
using namespace blocks;

namespace {

void attention_forward(HfStep& sb, int l, LayerActs& a, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  const std::int64_t qw = s.H * s.d;
  // The first pass gathers the projections here; a recompute runs inside its layer's gather.
  const TensorId w = rc ? -1 : deepspeed_gather(sb, l, "attn.params.full", layer_gathered_elems(s, true, false), phase);
  sb.ops.project_qkv(sb, l, a, phase, rc);
  ulysses_attention_forward(sb, l, a, phase, rc, /*cache=*/false);
  const TensorId o = project(sb, l, "attn.o_proj", "attn.o_proj.out", a.o, qw, s.h, phase, rc, kTr);
  // LlamaAttention.forward's locals (the norm's output, q, k, v) outlive their last use until it returns.
  for (const TensorId t : {a.norm1.y, a.q, a.k, a.v, w})
    if (t >= 0) sb.graph.add_input(sb.graph.last_op(), t);
  a.mid = sb.graph.tensor(layer_name(l, "mid", rc), s.n * s.h * s.e, kAct);
  sb.graph.op(layer_name(l, "attn.residual", rc), phase, l, {a.in, o}, {a.mid});
}

TensorId attention_backward(HfStep& sb, int l, const LayerActs& a, TensorId d_mid, Ids& grads) {
  const StepShapes& s = sb.shapes;
  const TensorId d_o = project_backward(sb, l, "attn.o_proj.bwd", "grad.attn.o", "attn.out.grad", d_mid, a.o, s.H * s.d,
                                        s.h, s.o_bias, grads);
  return ulysses_attention_backward(sb, l, a, d_o, grads);
}

// TiledMLP.forward over `shards` row tiles of c rows (torch.chunk): each under no_grad,
// gate [c, I], silu [c, I] (gate freed), up [c, I], their product [c, I], down [c, h]; the
// shards' outputs kept in a list and concatenated into a new [n, h]. It saves its input.
void tiled_mlp_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, TensorId w) {
  const StepShapes& s = sb.shapes;
  const std::int64_t c = tile_split(s.n, sb.parallel.mlp_tiles).rows;
  a.down = sb.graph.tensor(layer_name(l, "mlp.down", rc), s.n * s.h * s.e, kTr);
  Ids reads = {a.norm2.y};
  if (w >= 0) reads.push_back(w);
  sb.graph.op(layer_name(l, "mlp.tiled", rc), phase, l, reads, {a.down},
              {.workspace = s.n * s.h * s.e + 3 * c * s.I * s.e, .flops = 3 * matmul_flops(s.n, s.h, s.I),
               .launches = sb.parallel.mlp_tiles, .repeats = sb.parallel.mlp_tiles});
}

// TiledMLP.backward: x_grad = zeros_like(x) [n, h]; per shard the MLP recomputed with its four
// [c, I] saved, its backward (at most six [c, I] at once), the three weights' full gradients
// accumulated across the shards (each shard's new one beside them) and handed to ZeRO after
// the last shard.
TensorId tiled_mlp_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_out) {
  const StepShapes& s = sb.shapes;
  const std::int64_t c = tile_split(s.n, sb.parallel.mlp_tiles).rows;
  const TensorId d_x = sb.graph.tensor(layer_name(l, "mlp_norm.out.grad"), s.n * s.h * s.e, kTr);
  const TensorId g_gate = sb.graph.tensor(layer_name(l, "grad.mlp.gate"), s.I * s.h * s.e, Category::Grads);
  const TensorId g_up = sb.graph.tensor(layer_name(l, "grad.mlp.up"), s.I * s.h * s.e, Category::Grads);
  const TensorId g_down = sb.graph.tensor(layer_name(l, "grad.mlp.down"), s.I * s.h * s.e, Category::Grads);
  sb.graph.op(layer_name(l, "mlp.tiled.bwd"), kB, l, {d_out, a.norm2.y}, {d_x, g_gate, g_up, g_down},
              {.workspace = 6 * c * s.I * s.e + s.I * s.h * s.e, .flops = 9 * matmul_flops(s.n, s.h, s.I),
               .launches = sb.parallel.mlp_tiles, .repeats = sb.parallel.mlp_tiles});
  for (const TensorId g : {g_down, g_up, g_gate}) grad_ready(sb, g, s.I * s.h);
  return d_x;
}

}  // namespace

LayerActs layer_forward(HfStep& sb, int l, TensorId x, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  LayerActs a;
  a.in = x;
  a.norm1 = sb.ops.norm_forward(sb, layer_norm_spec(s, l, false), x, phase, rc);
  attention_forward(sb, l, a, phase, rc);
  a.norm2 = sb.ops.norm_forward(sb, layer_norm_spec(s, l, true), a.mid, phase, rc);
  const TensorId w = rc ? -1 : deepspeed_gather(sb, l, "mlp.params.full", layer_gathered_elems(s, false, true), phase);
  if (sb.parallel.mlp_tiles > 1) {
    tiled_mlp_forward(sb, l, a, phase, rc, w);
  } else {
    sb.ops.mlp_forward(sb, l, a, phase, rc, /*whole=*/true);
    if (w >= 0) sb.graph.add_input(sb.graph.last_op(), w);
  }
  const Name out = l + 1 < s.layers ? layer_name(l + 1, "in", rc) : step_name("loss.final_norm.in", rc);
  a.out = sb.graph.tensor(out, s.n * s.h * s.e, kAct);
  a.last_forward_op = sb.graph.op(layer_name(l, "mlp.residual", rc), phase, l, {a.mid, a.down}, {a.out});
  return a;
}

TensorId layer_backward(HfStep& sb, int l, const LayerActs& a, TensorId d_out) {
  const StepShapes& s = sb.shapes;
  Ids grads;  // DeepSpeed's hook takes each gradient as it is made (sb.grad_hook)
  const TensorId d_xn2 =
      sb.parallel.mlp_tiles > 1 ? tiled_mlp_backward(sb, l, a, d_out) : sb.ops.mlp_backward(sb, l, a, d_out, grads);
  const TensorId d_mid = sb.ops.norm_backward(sb, layer_norm_spec(s, l, true), a.norm2, d_xn2, d_out, grads);
  const TensorId d_xn1 = attention_backward(sb, l, a, d_mid, grads);
  return sb.ops.norm_backward(sb, layer_norm_spec(s, l, false), a.norm1, d_xn1, d_mid, grads);
}

}  // namespace longctx::step::arctic
