// DeepSpeed's Ulysses attention around flash attention (blocks/ulysses_attention.h;
// deepspeed/runtime/sequence_parallel/ulysses_sp.py, UlyssesSPAttentionHF.forward,
// _combine_local_sequences, _partition_global_sequence; deepspeed/sequence/layer.py
// _DimZeroAllToAll). Footprints: footprint/flash_attn.h.
#include "planner/stacks/blocks/ulysses_attention.h"

#include <numeric>
#include <utility>
#include <vector>

#include "planner/footprint/attention.h"
#include "planner/footprint/flash_attn.h"
#include "planner/stacks/blocks/hf_layer.h"

namespace longctx::step::blocks {

using namespace footprint;

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

}  // namespace

void ulysses_attention_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool /*cache*/) {
  const StepShapes& s = sb.shapes;
  const HfModelActs& m = sb.model;
  UlyssesActs& at = a.sp;
  at.q = a.q;
  at.k = a.k;
  at.v = a.v;
  if (ulysses(s)) {
    // position_ids all-gathered in every call: u copies [b, S/u] int64 and their cat [b, S].
    sb.graph.op(layer_name(l, "attn.position_ids.all_gather", rc), phase, l, {m.positions}, {},
                {.workspace = 2 * s.b * s.S * 8});
    const bool replicated = s.kvr * s.u > s.K;
    at.q = to_sequence(sb, l, "attn.a2a_q", "attn.q_sp", a.q, s.b * s.S * s.hl * s.d, false, phase, rc);
    at.k = to_sequence(sb, l, "attn.a2a_k", "attn.k_sp", a.k, s.b * s.S * s.kvr * s.d, replicated, phase, rc);
    at.v = to_sequence(sb, l, "attn.a2a_v", "attn.v_sp", a.v, s.b * s.S * s.kvr * s.d, replicated, phase, rc);
  }
  // flash_attn_func / flash_attn_varlen_func: out [b*S, hl, d] e and softmax_lse [b, hl, S]
  // fp32, saved with q, k, v (no copies: the rotated q and k are laid out [b, S, heads, d]).
  at.o = sb.graph.tensor(layer_name(l, "attn.o_sp", rc), s.b * s.S * s.hl * s.d * s.e, kAct);
  a.lse = sb.graph.tensor(layer_name(l, "attn.lse", rc), s.b * s.hl * s.S * 4, kAct);
  sb.graph.op(layer_name(l, "attn.flash", rc), phase, l, {at.q, at.k, at.v}, {at.o, a.lse},
              {.flops = attention_flops(s, s.hl), .kernel_flops = attention_kernel_flops(s, s.hl), .kind = OpKind::Attention});
  a.o = ulysses(s) ? to_heads(sb, l, "attn.a2a_out", "attn.out", at.o, s.n * s.H * s.d, phase, rc, kAct) : at.o;
}

TensorId ulysses_attention_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_o, Ids& grads) {
  const StepShapes& s = sb.shapes;
  const UlyssesActs& at = a.sp;
  const std::int64_t qw = s.H * s.d, kw = s.K * s.d;
  const TensorId d_o_sp =
      ulysses(s) ? to_heads(sb, l, "attn.a2a_out.bwd", "attn.o_sp.grad", d_o, s.b * s.S * s.hl * s.d, kB, false, kTr) : d_o;
  // FlashAttnFunc.backward: dq, dk, dv (torch.empty_like) and the kernel's scratch.
  struct {
    TensorId dq, dk, dv;
  } g;
  g.dq = sb.graph.tensor(layer_name(l, "attn.q_sp.grad"), s.b * s.S * s.hl * s.d * s.e, kTr);
  g.dk = sb.graph.tensor(layer_name(l, "attn.k_sp.grad"), s.b * s.S * s.kvr * s.d * s.e, kTr);
  g.dv = sb.graph.tensor(layer_name(l, "attn.v_sp.grad"), s.b * s.S * s.kvr * s.d * s.e, kTr);
  std::vector<std::int64_t> scratch = flash_backward_workspace_sequence(sb);
  const std::int64_t scratch_bytes = std::accumulate(scratch.begin(), scratch.end(), std::int64_t{0});
  sb.graph.op(layer_name(l, "attn.flash.bwd"), kB, l, {d_o_sp, at.q, at.k, at.v, at.o, a.lse}, {g.dq, g.dk, g.dv},
              {.workspace = scratch_bytes, .workspace_sequence = std::move(scratch),
               .flops = 2.5 * attention_flops(s, s.hl), .kernel_flops = 2.5 * attention_kernel_flops(s, s.hl), .kind = OpKind::Attention});
  if (ulysses(s)) {
    // The exchanges back to the rank's tokens; replicated kv heads' gradients summed over
    // their replicas (the received [n, u*kvr*d] beside the sum).
    const std::int64_t replicas = s.kvr * s.u > s.K ? s.n * s.u * s.kvr * s.d : 0;
    g.dv = to_heads(sb, l, "attn.a2a_v.bwd", "attn.v.grad", g.dv, s.n * kw, kB, false, kTr, replicas);
    g.dk = to_heads(sb, l, "attn.a2a_k.bwd", "attn.k_rotated.grad", g.dk, s.n * kw, kB, false, kTr, replicas);
    g.dq = to_heads(sb, l, "attn.a2a_q.bwd", "attn.q_rotated.grad", g.dq, s.n * qw, kB, false, kTr);
  }
  return project_qkv_backward(sb, l, a, g.dq, g.dk, g.dv, /*k_head_major=*/false, /*qv_head_major=*/false, grads);
}

}  // namespace longctx::step::blocks
