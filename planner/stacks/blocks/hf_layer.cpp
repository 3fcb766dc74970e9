// transformers' LlamaMLP and LlamaDecoderLayer around the stack's ops (blocks/hf_layer.h), and
// kTransformersOps, transformers' own ops for every variant. Footprints: footprint/hf.h.
#include "planner/stacks/blocks/hf_layer.h"

namespace longctx::step::blocks {

const LayerOps kTransformersOps = {
    .norm_forward = llama_norm_forward,
    .norm_backward = llama_norm_backward,
    .rope = transformers_rope,
    .rope_backward = transformers_rope_backward,
    .project_qkv = transformers_project_qkv,
    .attention_forward = transformers_attention_forward,
    .attention_backward = transformers_attention_backward,
    .mlp_forward = llama_mlp_forward,
    .mlp_backward = llama_mlp_backward,
};

// ---- LlamaMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x)) ---------------------------------
void llama_mlp_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool whole) {
  const StepShapes& s = sb.shapes;
  const std::int64_t ni = s.n * s.I;
  const TensorId x = a.norm2.y;
  a.gate = project(sb, l, "mlp.gate_proj", "mlp.gate", x, s.h, s.I, phase, rc);
  a.act = sb.graph.tensor(layer_name(l, "mlp.silu", rc), ni * s.e, kAct);
  sb.graph.op(layer_name(l, "mlp.silu", rc), phase, l, {a.gate}, {a.act}, {.flops = 4.0 * double(ni)});
  a.up = project(sb, l, "mlp.up_proj", "mlp.up", x, s.h, s.I, phase, rc);
  a.prod = sb.graph.tensor(layer_name(l, "mlp.prod", rc), ni * s.e, kAct);
  sb.graph.op(layer_name(l, "mlp.mul", rc), phase, l, {a.act, a.up}, {a.prod}, {.flops = double(ni)});
  // A non-reentrant recompute stops once the last saved tensor is packed: down_proj saves its
  // input before it runs, so neither it nor the residual add is recomputed.
  if (!whole) return;
  a.down = project(sb, l, "mlp.down_proj", "mlp.down", a.prod, s.I, s.h, phase, rc, kTr);
  sb.graph.add_input(sb.graph.last_op(), x);  // the layer's hidden_states, until the MLP returns
}

TensorId llama_mlp_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_out, Ids& grads) {
  const StepShapes& s = sb.shapes;
  const std::int64_t ni = s.n * s.I;
  const TensorId d_prod = project_backward(sb, l, "mlp.down_proj.bwd", "grad.mlp.down", "mlp.prod.grad", d_out, a.prod,
                                           s.I, s.h, s.mlp_bias, grads);
  const TensorId d_act = sb.graph.tensor(layer_name(l, "mlp.silu.grad"), ni * s.e, kTr);
  const TensorId d_up = sb.graph.tensor(layer_name(l, "mlp.up.grad"), ni * s.e, kTr);
  sb.graph.op(layer_name(l, "mlp.mul.bwd"), kB, l, {d_prod, a.act, a.up}, {d_act, d_up}, {.flops = 2.0 * double(ni)});
  const TensorId x = a.norm2.y;
  const TensorId d_xu = project_backward(sb, l, "mlp.up_proj.bwd", "grad.mlp.up", "mlp_norm.out.grad.up", d_up, x, s.h,
                                         s.I, s.mlp_bias, grads);
  const TensorId d_gate = sb.graph.tensor(layer_name(l, "mlp.gate.grad"), ni * s.e, kTr);
  sb.graph.op(layer_name(l, "mlp.silu.bwd"), kB, l, {d_act, a.gate}, {d_gate}, {.flops = 8.0 * double(ni)});
  const TensorId d_xg = project_backward(sb, l, "mlp.gate_proj.bwd", "grad.mlp.gate", "mlp_norm.out.grad.gate", d_gate,
                                         x, s.h, s.I, s.mlp_bias, grads);
  const TensorId d_x = sb.graph.tensor(layer_name(l, "mlp_norm.out.grad"), s.n * s.h * s.e, kTr);
  sb.graph.op(layer_name(l, "mlp.proj.grad_sum"), kB, l, {d_xu, d_xg}, {d_x});
  return d_x;
}

// ---- LlamaDecoderLayer -------------------------------------------------------------------
HfLayerActs layer_forward(HfStep& sb, int l, TensorId x, Phase phase, bool rc, LayerPass pass) {
  const StepShapes& s = sb.shapes;
  const LayerOps& ops = sb.ops;
  HfLayerActs a;
  a.in = x;
  a.norm1 = ops.norm_forward(sb, layer_norm_spec(s, l, false), x, phase, rc);
  ops.project_qkv(sb, l, a, phase, rc);
  ops.attention_forward(sb, l, a, phase, rc, pass == LayerPass::Plain && sb.kv_cache);
  const TensorId o = project(sb, l, "attn.o_proj", "attn.o_proj.out", a.o, s.H * s.d, s.h, phase, rc, kTr);
  // Python's locals outlive their last use: the decoder layer's hidden_states holds the norm's
  // output, and LlamaAttention.forward's query_states, key_states and value_states hold q, k
  // and v, until the attention returns (what a forward without a graph, checkpointed, keeps
  // longer).
  for (const TensorId t : {a.norm1.y, a.q, a.k, a.v}) sb.graph.add_input(sb.graph.last_op(), t);
  if (a.attn_params >= 0) sb.graph.add_input(sb.graph.last_op(), a.attn_params);  // ZeRO-3's gather, held as long
  a.mid = sb.graph.tensor(layer_name(l, "mid", rc), s.n * s.h * s.e, kAct);
  sb.graph.op(layer_name(l, "attn.residual", rc), phase, l, {x, o}, {a.mid});
  a.norm2 = ops.norm_forward(sb, layer_norm_spec(s, l, true), a.mid, phase, rc);
  ops.mlp_forward(sb, l, a, phase, rc, pass != LayerPass::RecomputeUntilSaved);
  if (pass == LayerPass::RecomputeUntilSaved) {
    a.last_forward_op = sb.graph.last_op();
    return a;
  }
  const Name out = l + 1 < s.layers ? layer_name(l + 1, "in", rc) : step_name("loss.final_norm.in", rc);
  a.out = sb.graph.tensor(out, s.n * s.h * s.e, kAct);
  a.last_forward_op = sb.graph.op(layer_name(l, "mlp.residual", rc), phase, l, {a.mid, a.down}, {a.out});
  // LlamaDecoderLayer.forward's `hidden_states, _ = self.self_attn(...)`: `_` holds eager
  // attention's returned weights (the probabilities in the compute dtype) until the layer
  // returns, which a forward without a graph (checkpointed) would otherwise have freed.
  if (a.probs >= 0) sb.graph.add_input(a.last_forward_op, a.probs);
  // The model's loop (`hidden_states = decoder_layer(hidden_states, ...)`, torchtitan's
  // `h = layer(h, ...)`) holds the layer's input until the layer returns, which matters where
  // nothing saves it (bf16: the norms save fp32 copies).
  sb.graph.add_input(a.last_forward_op, a.in);
  return a;
}

TensorId layer_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_out, Ids& grads) {
  const StepShapes& s = sb.shapes;
  const LayerOps& ops = sb.ops;
  const TensorId d_xn2 = ops.mlp_backward(sb, l, a, d_out, grads);
  const TensorId d_mid = ops.norm_backward(sb, layer_norm_spec(s, l, true), a.norm2, d_xn2, d_out, grads);
  const TensorId d_o = project_backward(sb, l, "attn.o_proj.bwd", "grad.attn.o", "attn.out.grad", d_mid, a.o, s.H * s.d,
                                        s.h, s.o_bias, grads);
  const TensorId d_xn1 = ops.attention_backward(sb, l, a, d_o, grads);
  return ops.norm_backward(sb, layer_norm_spec(s, l, false), a.norm1, d_xn1, d_mid, grads);
}

}  // namespace longctx::step::blocks
