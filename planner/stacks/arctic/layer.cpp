// The arctic stack's decoder layer: transformers' LlamaDecoderLayer (blocks/hf_layer.h; Liger's
// RMSNorm, RoPE and SwiGLU in the liger model, blocks/liger.h) with the attention DeepSpeed's
// UlyssesSPAttentionHF wraps around flash attention (deepspeed/runtime/sequence_parallel/
// ulysses_sp.py), ArcticTraining's TiledMLP (arctic_training/model/tiled_compute.py,
// tiled_mlp_forward_common, running DeepSpeed's TiledMLP), and ZeRO-3's gathers of the
// layer's parameters (blocks/deepspeed_zero3.h).
//
// Shapes: n = b*S/u tokens of the rank; the attention runs on b*S tokens of hl query heads
// and kvr kv heads (Ulysses' degree u; 1: no exchange).
#include <algorithm>
#include <numeric>
#include <utility>

#include "planner/core/parallel_config.h"
#include "planner/footprint/attention.h"
#include "planner/footprint/flash_attn.h"
#include "planner/stacks/arctic/step.h"
#include "planner/stacks/blocks/deepspeed_zero3.h"
#include "planner/stacks/blocks/hf_layer.h"

namespace longctx::step::arctic {

using namespace footprint;
using namespace blocks;

namespace {

bool ulysses(const StepShapes& s) { return s.u > 1; }

// The kernel's scratch blocks in the order mha_bwd asks for them, all held until it returns
// (flash_attn.h): the workspace is their sum.
std::vector<std::int64_t> flash_backward_workspace_sequence(const HfStep& sb) {
  const StepShapes& s = sb.shapes;
  return sb.in.train.stack.attention == HfAttention::FlashAttention3
             ? flash::fa3_backward_workspace_sequence(s, s.hl, s.kvr)
             : flash::fa2_backward_workspace_sequence(s, s.hl, s.kvr);
}

// UlyssesSPAttentionHF._combine_local_sequences on q (heads = H) or k, v: the local
// [b, S/u, heads, d] made contiguous per destination rank, exchanged into a new buffer of the
// same size, and (more than one head per rank) rearranged into a third, [b*S, heads/u, d],
// which flash attention reads; k and v repeated first when u exceeds the kv heads. At most
// two of them at once beside the input.
TensorId to_sequence(HfStep& sb, int l, const char* name, const char* out_name, TensorId x, std::int64_t elems,
                     bool repeated, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  const TensorId y = sb.graph.tensor(layer_name(l, out_name, rc), elems * s.e, kAct);
  const int o = sb.graph.op(layer_name(l, name, rc), phase, l, {x}, {y}, {.workspace = (repeated ? 2 : 1) * elems * s.e});
  sb.graph.set_comm(o, CommKind::AllToAll, double(elems * s.e), static_cast<int>(s.u));
  return y;
}

// _partition_global_sequence and its backward alike: the exchange's output and its copy
// into [n, heads*d] (the exchange's freed on return).
// `received`: elements received beyond `elems` (kv heads replicated over the ranks: their
// gradients arrive per replica and are summed).
TensorId to_heads(HfStep& sb, int l, const char* name, const char* out_name, TensorId x, std::int64_t elems,
                  Phase phase, bool rc, Category category, std::int64_t received = 0) {
  const StepShapes& s = sb.shapes;
  const TensorId y = sb.graph.tensor(layer_name(l, out_name, rc), elems * s.e, category);
  const int o = sb.graph.op(layer_name(l, name, rc), phase, l, {x}, {y}, {.workspace = (elems + received) * s.e});
  sb.graph.set_comm(o, CommKind::AllToAll, double(elems * s.e), static_cast<int>(s.u));
  return y;
}

void attention_forward(HfStep& sb, int l, LayerActs& la, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  HfLayerActs& a = la;
  const HfModelActs& m = sb.model;
  const std::int64_t qw = s.H * s.d;
  // The first pass gathers the projections here; a recompute runs inside its layer's gather.
  const TensorId w = rc ? -1 : deepspeed_gather(sb, l, "attn.params.full", layer_gathered_elems(s, true, false), phase);
  sb.ops.project_qkv(sb, l, a, phase, rc);
  Attention& at = la.attn;
  at.q_sp = a.q;
  at.k_sp = a.k;
  at.v_sp = a.v;
  if (ulysses(s)) {
    // position_ids all-gathered in every call: u copies [b, S/u] int64 and their cat [b, S].
    sb.graph.op(layer_name(l, "attn.position_ids.all_gather", rc), phase, l, {m.positions}, {},
                {.workspace = 2 * s.b * s.S * 8});
    const bool replicated = s.kvr * s.u > s.K;
    at.q_sp = to_sequence(sb, l, "attn.a2a_q", "attn.q_sp", a.q, s.b * s.S * s.hl * s.d, false, phase, rc);
    at.k_sp = to_sequence(sb, l, "attn.a2a_k", "attn.k_sp", a.k, s.b * s.S * s.kvr * s.d, replicated, phase, rc);
    at.v_sp = to_sequence(sb, l, "attn.a2a_v", "attn.v_sp", a.v, s.b * s.S * s.kvr * s.d, replicated, phase, rc);
  }
  // flash_attn_func / flash_attn_varlen_func: out [b*S, hl, d] e and softmax_lse [b, hl, S]
  // fp32, saved with q, k, v (no copies: the rotated q and k are laid out [b, S, heads, d]).
  at.o_sp = sb.graph.tensor(layer_name(l, "attn.o_sp", rc), s.b * s.S * s.hl * s.d * s.e, kAct);
  a.lse = sb.graph.tensor(layer_name(l, "attn.lse", rc), s.b * s.hl * s.S * 4, kAct);
  sb.graph.op(layer_name(l, "attn.flash", rc), phase, l, {at.q_sp, at.k_sp, at.v_sp}, {at.o_sp, a.lse},
              {.flops = attention_flops(s, s.hl), .kernel_flops = attention_kernel_flops(s, s.hl), .kind = OpKind::Attention});
  a.o = ulysses(s) ? to_heads(sb, l, "attn.a2a_out", "attn.out", at.o_sp, s.n * qw, phase, rc, kAct) : at.o_sp;
  const TensorId o = project(sb, l, "attn.o_proj", "attn.o_proj.out", a.o, qw, s.h, phase, rc, kTr);
  // LlamaAttention.forward's locals (the norm's output, q, k, v) outlive their last use until it returns.
  for (const TensorId t : {a.norm1.y, a.q, a.k, a.v, w})
    if (t >= 0) sb.graph.add_input(sb.graph.last_op(), t);
  a.mid = sb.graph.tensor(layer_name(l, "mid", rc), s.n * s.h * s.e, kAct);
  sb.graph.op(layer_name(l, "attn.residual", rc), phase, l, {a.in, o}, {a.mid});
}

TensorId attention_backward(HfStep& sb, int l, const LayerActs& la, TensorId d_mid, Ids& grads) {
  const StepShapes& s = sb.shapes;
  const HfLayerActs& a = la;
  const Attention& at = la.attn;
  const std::int64_t qw = s.H * s.d, kw = s.K * s.d;
  const TensorId d_o = project_backward(sb, l, "attn.o_proj.bwd", "grad.attn.o", "attn.out.grad", d_mid, a.o, qw,
                                            s.h, s.o_bias, grads);
  const TensorId d_o_sp =
      ulysses(s) ? to_heads(sb, l, "attn.a2a_out.bwd", "attn.o_sp.grad", d_o, s.b * s.S * s.hl * s.d, kB, false, kTr) : d_o;
  // FlashAttnFunc.backward: dq, dk, dv (torch.empty_like) and the kernel's scratch.
  TensorId dq = sb.graph.tensor(layer_name(l, "attn.q_sp.grad"), s.b * s.S * s.hl * s.d * s.e, kTr);
  TensorId dk = sb.graph.tensor(layer_name(l, "attn.k_sp.grad"), s.b * s.S * s.kvr * s.d * s.e, kTr);
  TensorId dv = sb.graph.tensor(layer_name(l, "attn.v_sp.grad"), s.b * s.S * s.kvr * s.d * s.e, kTr);
  std::vector<std::int64_t> scratch = flash_backward_workspace_sequence(sb);
  const std::int64_t scratch_bytes = std::accumulate(scratch.begin(), scratch.end(), std::int64_t{0});
  sb.graph.op(layer_name(l, "attn.flash.bwd"), kB, l, {d_o_sp, at.q_sp, at.k_sp, at.v_sp, at.o_sp, a.lse}, {dq, dk, dv},
              {.workspace = scratch_bytes, .workspace_sequence = std::move(scratch),
               .flops = 2.5 * attention_flops(s, s.hl), .kernel_flops = 2.5 * attention_kernel_flops(s, s.hl), .kind = OpKind::Attention});
  if (ulysses(s)) {
    // The exchanges back to the rank's tokens; replicated kv heads' gradients summed over
    // their replicas (the received [n, u*kvr*d] beside the sum).
    const std::int64_t replicas = s.kvr * s.u > s.K ? s.n * s.u * s.kvr * s.d : 0;
    dv = to_heads(sb, l, "attn.a2a_v.bwd", "attn.v.grad", dv, s.n * kw, kB, false, kTr, replicas);
    dk = to_heads(sb, l, "attn.a2a_k.bwd", "attn.k_rotated.grad", dk, s.n * kw, kB, false, kTr, replicas);
    dq = to_heads(sb, l, "attn.a2a_q.bwd", "attn.q_rotated.grad", dq, s.n * qw, kB, false, kTr);
  }
  // Flash attention's gradients are laid out as its inputs were, [b, S, heads, d]: no copies.
  return project_qkv_backward(sb, l, a, dq, dk, dv, /*k_head_major=*/false, /*qv_head_major=*/false, grads);
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
  LayerActs la;
  HfLayerActs& a = la;
  a.in = x;
  a.norm1 = sb.ops.norm_forward(sb, layer_norm_spec(s, l, false), x, phase, rc);
  attention_forward(sb, l, la, phase, rc);
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
  return la;
}

TensorId layer_backward(HfStep& sb, int l, const LayerActs& la, TensorId d_out) {
  const StepShapes& s = sb.shapes;
  const HfLayerActs& a = la;
  Ids grads;  // DeepSpeed's hook takes each gradient as it is made (sb.grad_hook)
  const TensorId d_xn2 =
      sb.parallel.mlp_tiles > 1 ? tiled_mlp_backward(sb, l, a, d_out) : sb.ops.mlp_backward(sb, l, a, d_out, grads);
  const TensorId d_mid = sb.ops.norm_backward(sb, layer_norm_spec(s, l, true), a.norm2, d_xn2, d_out, grads);
  const TensorId d_xn1 = attention_backward(sb, l, la, d_mid, grads);
  return sb.ops.norm_backward(sb, layer_norm_spec(s, l, false), a.norm1, d_xn1, d_mid, grads);
}

}  // namespace longctx::step::arctic
