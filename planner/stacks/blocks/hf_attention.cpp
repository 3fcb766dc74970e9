// transformers' attention kernels (models/llama/modeling_llama.py, sdpa_attention_forward,
// eager_attention_forward; integrations/flash_attention.py) between the rotated q, k, v and
// o_proj's input, op by op, forward then backward. Footprints: footprint/hf.h.
//
// Shapes below: n = b*S tokens; "q unit" [n, H*d] e, "kv unit" [n, K*d] e.
#include "planner/footprint/attention.h"
#include "planner/footprint/hf.h"
#include "planner/stacks/blocks/hf_layer.h"

namespace longctx::step::blocks {

using namespace footprint;
using namespace footprint::hf;

namespace {

// What sdpa's kernel computes: with the model's additive mask it is not told the attention is
// causal (is_causal=False) and computes every pair, twice the causal work; without one, the
// causal kernel's blocks (footprint::attention_kernel_flops).
double sdpa_kernel_flops(const StepShapes& s, bool masked) {
  return masked ? 2.0 * attention_flops(s, s.H) : attention_kernel_flops(s, s.H);
}

bool eager(const HfStep& sb) { return sb.in.train.stack.attention == HfAttention::Eager; }

// repeat_kv (modeling_llama.py): k and v copied to the query heads, [n, H*d] e each, into
// a.k_rep and a.v_rep. With one key/value head the reshape of the expanded [b, 1, H, S, d]
// view merges a size-1 dimension with a stride-0 one, which aten's reshape does as a view
// (computeStride succeeds), so nothing is copied: a.k_rep and a.v_rep are k and v, read by
// the kernels through stride-0 heads. Their gradients still come back over the query heads
// and are summed (repeat_kv_backward), as the profiler shows.
void repeat_kv(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  if (s.K == 1) {
    a.k_rep = a.k;
    a.v_rep = a.v;
    return;
  }
  a.k_rep = sb.graph.tensor(layer_name(l, "attn.k_repeated", rc), s.n * s.H * s.d * s.e, kAct);
  sb.graph.op(layer_name(l, "attn.repeat_k", rc), phase, l, {a.k}, {a.k_rep});
  a.v_rep = sb.graph.tensor(layer_name(l, "attn.v_repeated", rc), s.n * s.H * s.d * s.e, kAct);
  sb.graph.op(layer_name(l, "attn.repeat_v", rc), phase, l, {a.v}, {a.v_rep});
}

// torch.matmul on 4-D operands (_matmul_impl, aten/src/ATen/native/LinearAlgebra.cpp) folds
// [b, H] into bmm's one batch dimension with reshape, a view only where the two dimensions
// merge: q (and k, v where repeat_kv copied nothing) are transposed views of their
// projection's [b, S, heads, d], so with b > 1 and more than one head the fold is a
// contiguous copy [b*H, S, d] e, which the bmm saves for its backward. `strided` says `t`
// is laid out that way; repeat_kv's copies and the softmax's output fold as views.
TensorId eager_matmul_operand(HfStep& sb, int l, const char* name, TensorId t, bool strided, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  if (!strided || s.b == 1 || s.H == 1) return t;
  const TensorId folded = sb.graph.tensor(layer_name(l, name, rc), s.n * s.H * s.d * s.e, kAct);
  sb.graph.op(layer_name(l, name, rc), phase, l, {t}, {folded});
  return folded;
}

// Its ExpandBackward0s: v's gradient summed over each group, then k's, [n, K*d] e each.
void repeat_kv_backward(HfStep& sb, int l, TensorId& dk, TensorId& dv) {
  const StepShapes& s = sb.shapes;
  const TensorId dv_sum = sb.graph.tensor(layer_name(l, "attn.v.grad"), s.n * s.K * s.d * s.e, kTr);
  sb.graph.op(layer_name(l, "attn.repeat_v.bwd"), kB, l, {dv}, {dv_sum});
  const TensorId dk_sum = sb.graph.tensor(layer_name(l, "attn.k_rotated.grad"), s.n * s.K * s.d * s.e, kTr);
  sb.graph.op(layer_name(l, "attn.repeat_k.bwd"), kB, l, {dk}, {dk_sum});
  dv = dv_sum;
  dk = dk_sum;
}

// use_cache (no checkpointing): DynamicLayer.update concatenates k and v onto the empty
// cache, copies [b, K, S, d] e each that replace them (the cache holds them until the model's
// output is dropped, after the loss).
void cache_update(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  const std::int64_t kw = s.K * s.d;
  const TensorId kc = sb.graph.tensor(layer_name(l, "attn.cache.k", rc), s.n * kw * s.e, kAct);
  const TensorId vc = sb.graph.tensor(layer_name(l, "attn.cache.v", rc), s.n * kw * s.e, kAct);
  sb.graph.op(layer_name(l, "attn.cache_update", rc), phase, l, {a.k, a.v}, {kc, vc});
  a.k = kc;
  a.v = vc;
  sb.model.cache.push_back(kc);
  sb.model.cache.push_back(vc);
}

// flash_attention_2 (integrations/flash_attention.py, flash_attn_func on the [b, S, H, d]
// views; no mask without padding) allocates as sdpa's flash kernel does without one.
// sdpa_attention_forward: without a mask, scaled_dot_product_attention(q, k, v,
// is_causal=True, enable_gqa=True): the flash kernel takes grouped k, v as they are. With the
// model's boolean mask (no cache: model_inputs) use_gqa_in_sdpa is false, repeat_kv copies k
// and v to the query heads [n, H*d] e each, and sdpa turns the mask into an additive one
// [b, 1, S, S] e (convert_boolean_attn_mask), which its backward saves. The output is laid
// out [b, S, H, d]: `.transpose(1, 2).contiguous()` copies nothing. `kept`: per-op selective
// checkpointing keeps its output and log-sum-exp.
void sdpa_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool kept) {
  const StepShapes& s = sb.shapes;
  const TensorId mask = sb.model.mask;
  Ids reads = {a.q, a.k, a.v};
  if (mask >= 0) {
    if (s.H != s.K) {
      repeat_kv(sb, l, a, phase, rc);
      reads = {a.q, a.k_rep, a.v_rep};
    }
    a.mask = sb.graph.tensor(layer_name(l, "attn.mask.additive", rc), additive_mask_bytes(s), kAct);
    sb.graph.op(layer_name(l, "attn.mask.convert", rc), phase, l, {mask}, {a.mask});
    reads.push_back(a.mask);
  }
  a.lse = sb.graph.tensor(layer_name(l, "attn.lse", rc), s.b * s.H * s.S * 4, kAct);  // [b, H, S] fp32
  if (kept) {
    sb.op_sac.kept.push_back(a.o);
    sb.op_sac.kept.push_back(a.lse);
  }
  // LlamaAttention.forward's key_states and value_states hold the unrepeated k, v until it returns.
  if (a.k_rep >= 0 && a.k_rep != a.k) {
    reads.push_back(a.k);
    reads.push_back(a.v);
  }
  sb.graph.op(layer_name(l, "attn.sdpa", rc), phase, l, reads, {a.o, a.lse},
              {.workspace = flash_forward_scratch(s), .flops = attention_flops(s, s.H),
               .kernel_flops = sdpa_kernel_flops(s, a.mask >= 0), .kind = OpKind::Attention});
}

// eager_attention_forward: repeat_kv copies k and v to the query heads (none for one group,
// none for one key/value head), scores = q @ k^T * scaling + mask [b, H, S, S] e, softmax in
// fp32 (saved), cast back in bf16 (saved by the matmul), @ v, and the output made contiguous
// [b, S, H, d] e (a copy unless there is one head).
void eager_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool cache) {
  const StepShapes& s = sb.shapes;
  const double flops = attention_flops(s, s.H);
  a.k_rep = a.k;
  a.v_rep = a.v;
  if (s.H != s.K) repeat_kv(sb, l, a, phase, rc);
  a.q_mm = eager_matmul_operand(sb, l, "attn.q.matmul_fold", a.q, true, phase, rc);
  // k and v fold as views where they are contiguous: repeat_kv's copies, or (unrepeated) the
  // cache's torch.cat copies. One key/value head repeats as a stride-0 view, which never folds.
  const bool kv_strided = s.K == 1 || (s.K == s.H && !cache);
  a.k_mm = eager_matmul_operand(sb, l, "attn.k.matmul_fold", a.k_rep, kv_strided, phase, rc);
  const TensorId sc = sb.graph.tensor(layer_name(l, "attn.scores", rc), eager_scores_bytes(s), kTr);
  sb.graph.op(layer_name(l, "attn.qk", rc), phase, l, {a.q_mm, a.k_mm}, {sc}, {.flops = flops});
  const TensorId scaled = sb.graph.tensor(layer_name(l, "attn.scores.scaled", rc), eager_scores_bytes(s), kTr);
  sb.graph.op(layer_name(l, "attn.scale", rc), phase, l, {sc}, {scaled});
  const TensorId masked = sb.graph.tensor(layer_name(l, "attn.scores.masked", rc), eager_scores_bytes(s), kTr);
  sb.graph.op(layer_name(l, "attn.mask", rc), phase, l, {scaled, sb.model.mask}, {masked});
  a.probs32 = sb.graph.tensor(layer_name(l, "attn.probs.fp32", rc), eager_probs_bytes(s), kAct);
  // softmax(dtype=float32) of bf16 scores upcasts them first: [b, H, S, S] fp32 beside them.
  sb.graph.op(layer_name(l, "attn.softmax", rc), phase, l, {masked}, {a.probs32},
              {.workspace = s.e == 4 ? 0 : eager_probs_bytes(s)});
  a.probs = a.probs32;
  if (s.e != 4) {
    a.probs = sb.graph.tensor(layer_name(l, "attn.probs", rc), eager_scores_bytes(s), kAct);
    sb.graph.op(layer_name(l, "attn.probs.to_dtype", rc), phase, l, {a.probs32}, {a.probs});
  }
  a.v_mm = eager_matmul_operand(sb, l, "attn.v.matmul_fold", a.v_rep, kv_strided, phase, rc);
  // One head: the product transposed is contiguous already (size-1 dimensions do not count),
  // so it is the output, uncopied.
  const bool one_head = s.H == 1;
  const TensorId pv =
      one_head ? a.o : sb.graph.tensor(layer_name(l, "attn.pv", rc), s.n * s.H * s.d * s.e, kTr);  // [b, H, S, d] e
  sb.graph.op(layer_name(l, "attn.pv", rc), phase, l, {a.probs, a.v_mm}, {pv}, {.flops = flops});
  // eager_attention_forward's locals hold the repeated k, v until it returns.
  sb.graph.op(layer_name(l, "attn.out.contiguous", rc), phase, l, {pv, a.k_rep, a.v_rep}, one_head ? Ids{} : Ids{a.o});
}

// sdpa's (and flash_attention_2's) backward: dq, and dk, dv over the kv heads (the query
// heads where repeat_kv copied them, then summed back).
QkvGrads sdpa_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_o) {
  const StepShapes& s = sb.shapes;
  const std::int64_t qw = s.H * s.d, kw = s.K * s.d;
  const bool repeated = a.k_rep >= 0;
  QkvGrads g;
  g.dq = sb.graph.tensor(layer_name(l, "attn.q_rotated.grad"), s.n * qw * s.e, kTr);
  g.dk = sb.graph.tensor(layer_name(l, repeated ? "attn.k_repeated.grad" : "attn.k_rotated.grad"),
                         s.n * (repeated ? qw : kw) * s.e, kTr);
  g.dv = sb.graph.tensor(layer_name(l, repeated ? "attn.v_repeated.grad" : "attn.v.grad"), s.n * (repeated ? qw : kw) * s.e,
                         kTr);
  Ids reads = {d_o, a.q, repeated ? a.k_rep : a.k, repeated ? a.v_rep : a.v, a.o, a.lse};
  if (a.mask >= 0) reads.push_back(a.mask);
  sb.graph.op(layer_name(l, "attn.sdpa.bwd"), kB, l, reads, {g.dq, g.dk, g.dv},
              {.workspace = sdpa_backward_workspace(s), .flops = 2.5 * attention_flops(s, s.H),
               .kernel_flops = 2.5 * sdpa_kernel_flops(s, a.mask >= 0), .kind = OpKind::Attention});
  if (repeated) repeat_kv_backward(sb, l, g.dk, g.dv);
  // k's gradient reaches its projection head-major [b, K, S, d], and ViewBackward0's reshape
  // copies it, when the kernel ran with a mask (as under eager); without one it arrives in
  // the projection's layout (both as the profiler shows them, tests/stacks).
  g.k_head_major = a.mask >= 0;
  return g;
}

// The probabilities' gradient through SoftmaxBackward0 [b, H, S, S] fp32 (cast back to the
// scores' dtype in bf16), then the scaling's: the scores' gradient. The mask's add passes the
// gradient on; the scaling's mul makes a new one.
TensorId eager_scores_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_probs) {
  const StepShapes& s = sb.shapes;
  TensorId d_masked = sb.graph.tensor(layer_name(l, "attn.scores.masked.grad.fp32"), eager_probs_bytes(s), kTr);
  sb.graph.op(layer_name(l, "attn.softmax.bwd"), kB, l, {d_probs, a.probs32}, {d_masked});
  if (s.e != 4) {
    const TensorId cast = sb.graph.tensor(layer_name(l, "attn.scores.masked.grad"), eager_scores_bytes(s), kTr);
    sb.graph.op(layer_name(l, "attn.softmax.upcast.bwd"), kB, l, {d_masked}, {cast});
    d_masked = cast;
  }
  const TensorId d_sc = sb.graph.tensor(layer_name(l, "attn.scores.grad"), eager_scores_bytes(s), kTr);
  sb.graph.op(layer_name(l, "attn.scale.bwd"), kB, l, {d_masked}, {d_sc});
  return d_sc;
}

// eager's backward: the output's gradient reaches the bmm through the transpose's view
// [b, H, S, d] of [b, S, H, d]; UnsafeViewBackward0 folds it to [b*H, S, d], a copy where q's
// fold is one. BmmBackward0 of probs @ v: d_v_rep [b, H, S, d] e and d_probs [b, H, S, S] e;
// then the scores', and BmmBackward0 of q @ k^T: dq and d_k_rep.
QkvGrads eager_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_o) {
  const StepShapes& s = sb.shapes;
  const std::int64_t qw = s.H * s.d;
  const double flops = attention_flops(s, s.H);
  TensorId d_pv = d_o;
  if (a.q_mm != a.q) {
    d_pv = sb.graph.tensor(layer_name(l, "attn.pv.grad.matmul_fold"), s.n * qw * s.e, kTr);
    sb.graph.op(layer_name(l, "attn.pv.matmul_fold.bwd"), kB, l, {d_o}, {d_pv});
  }
  const TensorId d_vrep = sb.graph.tensor(layer_name(l, "attn.v_repeated.grad"), s.n * qw * s.e, kTr);
  TensorId d_probs = sb.graph.tensor(layer_name(l, "attn.probs.grad"), eager_scores_bytes(s), kTr);
  sb.graph.op(layer_name(l, "attn.pv.bwd"), kB, l, {d_pv, a.probs, a.v_mm}, {d_vrep, d_probs}, {.flops = 2 * flops});
  if (s.e != 4) {
    const TensorId up = sb.graph.tensor(layer_name(l, "attn.probs.grad.fp32"), eager_probs_bytes(s), kTr);
    sb.graph.op(layer_name(l, "attn.probs.to_dtype.bwd"), kB, l, {d_probs}, {up});
    d_probs = up;
  }
  const TensorId d_sc = eager_scores_backward(sb, l, a, d_probs);
  QkvGrads g;
  g.dq = sb.graph.tensor(layer_name(l, "attn.q_rotated.grad"), s.n * qw * s.e, kTr);
  const TensorId d_krep = sb.graph.tensor(layer_name(l, "attn.k_repeated.grad"), s.n * qw * s.e, kTr);
  sb.graph.op(layer_name(l, "attn.qk.bwd"), kB, l, {d_sc, a.q_mm, a.k_mm}, {g.dq, d_krep}, {.flops = 2 * flops});
  g.dv = d_vrep;
  g.dk = d_krep;
  if (s.H != s.K) repeat_kv_backward(sb, l, g.dk, g.dv);
  g.k_head_major = true;
  return g;
}

}  // namespace

void transformers_attention_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc, bool cache) {
  const StepShapes& s = sb.shapes;
  if (cache) cache_update(sb, l, a, phase, rc);
  // Per-op selective checkpointing on a GPU keeps the attention kernel's output and
  // log-sum-exp; its recompute takes them and runs no attention (OpSac). The CPU's kernel is
  // not on the save list: recomputed.
  OpSac& sac = sb.op_sac;
  const bool kept = sac.mode != OpSac::Mode::Off && !s.cpu && !eager(sb);
  if (kept && sac.mode == OpSac::Mode::Replay) {
    a.o = sac.take();
    a.lse = sac.take();
    return;
  }
  a.o = sb.graph.tensor(layer_name(l, "attn.out", rc), s.n * s.H * s.d * s.e, kAct);  // [b, S, H, d] e
  if (eager(sb)) {
    eager_forward(sb, l, a, phase, rc, cache);
  } else {
    sdpa_forward(sb, l, a, phase, rc, kept);
  }
}

QkvGrads attention_kernel_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_o) {
  return eager(sb) ? eager_backward(sb, l, a, d_o) : sdpa_backward(sb, l, a, d_o);
}

// sdpa's and eager's gradients of q and v arrive head-major [b, H, S, d] and are copied back
// to the projections' layout (ViewBackward0's reshape).
TensorId transformers_attention_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_o, Ids& grads) {
  const QkvGrads g = attention_kernel_backward(sb, l, a, d_o);
  return project_qkv_backward(sb, l, a, g.dq, g.dk, g.dv, g.k_head_major, /*qv_head_major=*/true, grads);
}

}  // namespace longctx::step::blocks
