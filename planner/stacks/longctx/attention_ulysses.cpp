// Attention over all of a rank's heads at once (runtime/src/llama_step.cpp,
// LlamaStep::layer_forward's unchunked branch): the q, k, v projection, qk norm, RoPE, the
// Ulysses all-to-alls (runtime/src/ulysses.cpp, ulysses_to_sequence and ulysses_to_heads) and
// the flash kernel (runtime/src/attention.cpp, AttentionFn), or with a ring (r > 1) ring
// attention over the Ulysses group's tokens (runtime/src/ring_attention.cpp). Forward, then
// backward. Footprints: footprint/attention.h, footprint/ring_attention.h.
#include "planner/stacks/longctx/emitters.h"
#include "planner/footprint/zero.h"
#include "planner/footprint/attention.h"
#include "planner/footprint/ring_attention.h"

namespace longctx::step {

using namespace footprint;

namespace {

// q, k, v projected, normed (qk norm) and rotated on this rank's tokens: q [n, H*d],
// k and v [n, K*d], e bytes.
void project_qkv(LongctxStep& sb, int l, LayerActs& a, Phase phase, bool rc, TensorId& q, TensorId& k, TensorId& v) {
  const StepShapes& s = sb.shapes;
  // With qk norm, q and k before the norm are saved for its backward; without Ulysses, v
  // (like q and k after RoPE) is the kernel's input, saved for its backward.
  const Category qk_category = s.qk_norm ? Category::Activations : Category::Transient;
  const Category kernel_input = s.u == 1 ? Category::Activations : Category::Transient;
  q = sb.graph.tensor(layer_name(l, "attn.q", rc), s.n * s.H * s.d * s.e, qk_category);  // [n, H*d] e
  k = sb.graph.tensor(layer_name(l, "attn.k", rc), s.n * s.K * s.d * s.e, qk_category);  // [n, K*d] e
  v = sb.graph.tensor(layer_name(l, "attn.v", rc), s.n * s.K * s.d * s.e, kernel_input);  // [n, K*d] e
  sb.graph.op(layer_name(l, "attn.qkv", rc), phase, l, {a.xn1}, {q, k, v},
              {.flops = matmul_flops(s.n, s.h, (s.H + 2 * s.K) * s.d)});
  if (s.qk_norm) qk_norm_forward(sb, l, a, q, k, phase, rc);
  // attn.q_rope [n, H*d] e, attn.k_rope [n, K*d] e. Two ops, q's then k's (two calls of
  // rope): without a graph (a checkpointed layer's forward) q is freed before k is rotated.
  const TensorId qr = sb.graph.tensor(layer_name(l, "attn.q_rope", rc), s.n * s.H * s.d * s.e, kernel_input);
  const TensorId kr = sb.graph.tensor(layer_name(l, "attn.k_rope", rc), s.n * s.K * s.d * s.e, kernel_input);
  sb.graph.op(layer_name(l, "attn.rope.q", rc), phase, l, {q}, {qr}, {.flops = 6.0 * double(s.n * s.H * s.d), .traffic = rope_traffic(s, s.n * s.H * s.d)});
  sb.graph.op(layer_name(l, "attn.rope.k", rc), phase, l, {k}, {kr}, {.flops = 6.0 * double(s.n * s.K * s.d), .traffic = rope_traffic(s, s.n * s.K * s.d)});
  q = qr;
  k = kr;
}

}  // namespace

void ulysses_attention_forward(LongctxStep& sb, int l, LayerActs& a, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  const Category act = Category::Activations;
  TensorId q = -1, k = -1, v = -1;
  project_qkv(sb, l, a, phase, rc, q, k, v);
  if (s.u == 1) {
    a.q_sp = q;
    a.k_sp = k;
    a.v_sp = v;
  } else {
    a.q_sp = sb.graph.tensor(layer_name(l, "attn.q_sp", rc), s.n * s.H * s.d * s.e, act);  // [b*S, hl, d] e
    a.k_sp = sb.graph.tensor(layer_name(l, "attn.k_sp", rc), kv_sp_elems(s) * s.e, act);   // [b*S, kvr, d] e
    a.v_sp = sb.graph.tensor(layer_name(l, "attn.v_sp", rc), kv_sp_elems(s) * s.e, act);   // [b*S, kvr, d] e
    const std::int64_t send = ulysses_qkv_send_bytes(s);
    const int o = sb.graph.op(layer_name(l, "attn.a2a_qkv", rc), phase, l, {q, k, v}, {a.q_sp, a.k_sp, a.v_sp},
                              {.workspace = ulysses_exchange_workspace(s, send)});
    sb.graph.set_comm(o, CommKind::AllToAll, ulysses_sent_bytes(s, send), static_cast<int>(s.u));
    sb.graph.set_calls(o, 3);  // q, k and v each their own (runtime/src/ulysses.cpp)
  }
  a.o_sp = sb.graph.tensor(layer_name(l, "attn.flash.out", rc), s.n * s.H * s.d * s.e, act);  // [b*S, hl, d] e
  a.lse = sb.graph.tensor(layer_name(l, "attn.flash.lse", rc), s.n * s.H * 4, act);          // [b, hl, S/r] fp32
  if (s.r > 1) {
    const int o = sb.graph.op(layer_name(l, "attn.ring", rc), phase, l, {a.q_sp, a.k_sp, a.v_sp}, {a.o_sp, a.lse},
                              {.workspace = ring_forward_workspace(s), .flops = attention_flops(s, s.hl), .kernel_flops = attention_kernel_flops(s, s.hl),
                               .kind = OpKind::Attention, .launches = ring_forward_calls(s)});
    // Every k/v hop travels beside the attention of the block before it (all-gather: the
    // gather beside the rank's own blocks, not credited: ring_forward_overlapped_bytes).
    sb.graph.set_comm(o, CommKind::SendRecv, ring_forward_sent_bytes(s), static_cast<int>(s.u * s.r),
                      ring_forward_overlapped_bytes(s));
  } else {
    sb.graph.op(layer_name(l, "attn.flash", rc), phase, l, {a.q_sp, a.k_sp, a.v_sp}, {a.o_sp, a.lse},
                {.workspace = flash_op_forward_workspace(s), .workspace_sequence = flash_op_forward_workspace_sequence(s),
                 .flops = attention_flops(s, s.hl), .kernel_flops = attention_kernel_flops(s, s.hl), .kind = OpKind::Attention});
  }
  if (s.u == 1) {
    a.o_loc = a.o_sp;
    return;
  }
  a.o_loc = sb.graph.tensor(layer_name(l, "attn.out", rc), s.n * s.H * s.d * s.e, act);  // [n, H*d] e
  const std::int64_t send = ulysses_out_send_bytes(s);
  const int o = sb.graph.op(layer_name(l, "attn.a2a_out", rc), phase, l, {a.o_sp}, {a.o_loc},
                            {.workspace = ulysses_exchange_workspace(s, send)});
  sb.graph.set_comm(o, CommKind::AllToAll, ulysses_sent_bytes(s, send), static_cast<int>(s.u));
}

namespace {

// The all-to-all of dq, dk, dv back to this rank's tokens (u > 1): dq [n, H*d], dk and dv
// [n, K*d], e bytes.
void exchange_qkv_grads(LongctxStep& sb, int l, TensorId& dq, TensorId& dk, TensorId& dv) {
  const StepShapes& s = sb.shapes;
  const Category tr = Category::Transient;
  const TensorId dq_loc = sb.graph.tensor(layer_name(l, "attn.q_rope.grad"), s.n * s.H * s.d * s.e, tr);
  const TensorId dk_loc = sb.graph.tensor(layer_name(l, "attn.k_rope.grad"), s.n * s.K * s.d * s.e, tr);
  const TensorId dv_loc = sb.graph.tensor(layer_name(l, "attn.v.grad"), s.n * s.K * s.d * s.e, tr);
  const int o = sb.graph.op(layer_name(l, "attn.a2a_qkv.bwd"), Phase::Backward, l, {dq, dk, dv}, {dq_loc, dk_loc, dv_loc},
                            {.workspace = ulysses_qkv_backward_workspace(s)});
  sb.graph.set_comm(o, CommKind::AllToAll, ulysses_sent_bytes(s, ulysses_qkv_send_bytes(s)), static_cast<int>(s.u));
  sb.graph.set_calls(o, 3);  // dq, dk and dv each their own
  dq = dq_loc;
  dk = dk_loc;
  dv = dv_loc;
}

}  // namespace

void ulysses_attention_backward(LongctxStep& sb, int l, const LayerActs& a, TensorId d_oloc, TensorId d_xn1, Ids& grad) {
  const StepShapes& s = sb.shapes;
  const Phase B = Phase::Backward;
  const Category tr = Category::Transient;
  TensorId d_osp = d_oloc;
  if (s.u > 1) {
    d_osp = sb.graph.tensor(layer_name(l, "attn.flash.out.grad"), s.n * s.H * s.d * s.e, tr);  // [b*S, hl, d] e
    const std::int64_t send = ulysses_out_send_bytes(s);
    const int o = sb.graph.op(layer_name(l, "attn.a2a_out.bwd"), B, l, {d_oloc}, {d_osp},
                              {.workspace = ulysses_exchange_workspace(s, send)});
    sb.graph.set_comm(o, CommKind::AllToAll, ulysses_sent_bytes(s, send), static_cast<int>(s.u));
  }
  TensorId dq = sb.graph.tensor(layer_name(l, "attn.q_sp.grad"), s.n * s.H * s.d * s.e, tr);  // [b*S, hl, d] e
  TensorId dk = sb.graph.tensor(layer_name(l, "attn.k_sp.grad"), kv_sp_elems(s) * s.e, tr);   // [b*S, kvr, d] e
  TensorId dv = sb.graph.tensor(layer_name(l, "attn.v_sp.grad"), kv_sp_elems(s) * s.e, tr);   // [b*S, kvr, d] e
  if (s.r > 1) {
    const int o = sb.graph.op(layer_name(l, "attn.ring.bwd"), B, l, {d_osp, a.q_sp, a.k_sp, a.v_sp, a.o_sp, a.lse},
                              {dq, dk, dv},
                              {.workspace = ring_backward_workspace(s), .flops = 2.5 * attention_flops(s, s.hl), .kernel_flops = 2.5 * attention_kernel_flops(s, s.hl),
                               .kind = OpKind::Attention, .launches = ring_backward_calls(s)});
    // The k/v hops travel beside the blocks' gradients; the accumulators' follow them.
    sb.graph.set_comm(o, CommKind::SendRecv, ring_backward_sent_bytes(s), static_cast<int>(s.u * s.r),
                      ring_forward_overlapped_bytes(s));
  } else {
    sb.graph.op(layer_name(l, "attn.flash.bwd"), B, l, {d_osp, a.q_sp, a.k_sp, a.v_sp, a.o_sp, a.lse}, {dq, dk, dv},
                {.workspace = flash_op_backward_workspace(s), .flops = 2.5 * attention_flops(s, s.hl), .kernel_flops = 2.5 * attention_kernel_flops(s, s.hl),
                 .kind = OpKind::Attention});
  }
  if (s.u > 1) exchange_qkv_grads(sb, l, dq, dk, dv);
  // attn.q.grad [n, H*d] e, attn.k.grad [n, K*d] e: before RoPE.
  TensorId dq_r = sb.graph.tensor(layer_name(l, "attn.q.grad"), s.n * s.H * s.d * s.e, tr);
  TensorId dk_r = sb.graph.tensor(layer_name(l, "attn.k.grad"), s.n * s.K * s.d * s.e, tr);
  sb.graph.op(layer_name(l, "attn.rope.bwd"), B, l, {dq, dk}, {dq_r, dk_r}, {.flops = 6.0 * double(s.n * (s.H + s.K) * s.d),
                                                                              .traffic = rope_traffic(s, s.n * (s.H + s.K) * s.d)});
  if (s.qk_norm) qk_norm_backward(sb, l, a, dq_r, dk_r, grad);
  // wq, wk, wv's gradient (and their biases') [h * (H + 2K) * d (+ (H + 2K) * d)] g
  const std::int64_t elems = s.h * (s.H + 2 * s.K) * s.d + footprint::bias_params(s, {ParamRole::Bq, ParamRole::Bk, ParamRole::Bv});
  const TensorId g_qkv = grad_piece(sb, l, "grad.full.attn.qkv", "grad.attn.qkv", elems, grad);
  const int o = sb.graph.op(layer_name(l, "attn.qkv.bwd"), B, l, {dq_r, dk_r, dv, a.xn1}, {d_xn1, g_qkv},
                            {.flops = 2 * matmul_flops(s.n, s.h, (s.H + 2 * s.K) * s.d)});
  frees_param_copies(sb, l, o, {ParamRole::Wq, ParamRole::Wk, ParamRole::Wv});  // ProjectFn saves the weights only
}

}  // namespace longctx::step
