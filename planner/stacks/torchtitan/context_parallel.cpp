// torchtitan's context parallel (parallelism.context_parallel_degree): the batch cut into the
// rank's shards by its head-tail load balancer, and the block's attention handed to torch's
// ring attention (apply_cp_to_attention_module). Footprints: footprint/torchtitan.h,
// footprint/torch_ring_attention.h.
#include "planner/footprint/attention.h"
#include "planner/footprint/torchtitan.h"
#include "planner/stacks/blocks/hf_layer.h"
#include "planner/stacks/torchtitan/step.h"

namespace longctx::step::torchtitan {

using namespace blocks;
namespace tt = footprint::torchtitan;

// The whole batch [b, S] int64 each (the data loader's, held by train_step), cut by
// prepare_context_parallel_input into the rank's shards (tt::cp_shard_workspace): its inputs
// and labels [b, Sl] int64 into outer.tokens and outer.targets, its positions [b, Sl] int32.
void context_parallel_batch(TorchtitanStep& sb) {
  const StepShapes& s = sb.shapes;
  OuterActs& o = sb.outer;
  const TensorId ids = sb.graph.tensor(step_name("batch.tokens"), s.b * s.S * 8, kAct);
  const TensorId labels = sb.graph.tensor(step_name("batch.targets"), s.b * s.S * 8, kAct);
  sb.graph.op(step_name("batch.load"), Phase::Forward, -1, {}, {ids, labels});
  sb.model.batch = {ids, labels};
  const TensorId positions = sb.graph.tensor(step_name("cp.positions"), tt::cp_positions_bytes(s), kTr);
  sb.graph.op(step_name("cp.positions"), Phase::Forward, -1, {}, {positions});
  const TensorId indices = sb.graph.tensor(step_name("cp.balance_indices"), tt::cp_indices_bytes(s), kTr);
  sb.graph.op(step_name("cp.balance_indices"), Phase::Forward, -1, {}, {indices});
  auto shard = [&](const char* name, TensorId whole, std::int64_t elem) {
    const TensorId local = sb.graph.tensor(step_name(name), s.n * elem, kAct);
    sb.graph.op(step_name(name), Phase::Forward, -1, {whole, indices, positions}, {local},
                {.workspace = tt::cp_shard_workspace(s, elem)});
    return local;
  };
  o.tokens = shard("cp.shard.inputs", ids, 8);
  o.targets = shard("cp.shard.labels", labels, 8);
  sb.cp_positions = shard("cp.shard.positions", positions, 4);
  sb.cp_shards = {o.tokens, o.targets, sb.cp_positions};
}

// The block's scaled_dot_product_attention on DTensors sharded on the sequence, which torch's
// dispatcher hands to its ring attention (tt::ring_forward_workspace). Under load balancing the
// ring's output is merged [b, H, Sl, d] (its torch.cat) on every rank but the last, the
// plan's, so `output.transpose(1, 2).contiguous()` copies it [n, H*d] e for wo; the ring's own
// output is saved for its backward. With one head the transposed output is contiguous already
// (size-1 dimensions do not count: TensorImpl's is_contiguous), and wo reads the ring's.
void ring_attention_forward(HfStep& sb, int l, HfLayerActs& a, Phase phase, bool rc) {
  const StepShapes& s = sb.shapes;
  const std::int64_t qw = s.H * s.d;
  a.o_heads = sb.graph.tensor(layer_name(l, "attn.out.heads", rc), s.n * qw * s.e, kAct);  // [b, H, Sl, d] e
  a.lse = sb.graph.tensor(layer_name(l, "attn.lse", rc), s.n * s.H * 4, kAct);             // [b, H, Sl] fp32
  const int o = sb.graph.op(layer_name(l, "attn.ring", rc), phase, l, {a.q, a.k, a.v}, {a.o_heads, a.lse},
                            {.workspace = tt::ring_forward_workspace(s), .flops = footprint::attention_flops(s, s.H),
                             .kernel_flops = footprint::attention_kernel_flops(s, s.H), .kind = OpKind::Attention});
  sb.graph.set_comm(o, CommKind::AllGather, tt::ring_forward_sent_bytes(s), static_cast<int>(s.r));
  if (s.H == 1) {
    a.o = a.o_heads;
    return;
  }
  a.o = sb.graph.tensor(layer_name(l, "attn.out", rc), s.n * qw * s.e, kAct);  // [b, Sl, H, d] e
  sb.graph.op(layer_name(l, "attn.out.contiguous", rc), phase, l, {a.o_heads}, {a.o});
}

namespace {

// torch's ring backward returns dq [b, H, Sl, d] and dk, dv as views of one pair
// [2, b, K, Sl, d], all laid out head-major. The rotations' backward (ViewAsRealBackward0)
// first copies k's and then q's gradient to the [b, Sl, heads, d] layout it works in; v's view
// (ViewBackward0) copies v's, which frees the pair; then the engine runs the projections, v's
// first (created last).
TensorId ring_project_qkv_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId dq, TensorId pair, Ids& grads) {
  const StepShapes& s = sb.shapes;
  const std::int64_t qw = s.H * s.d, kw = s.K * s.d;
  const TensorId dk = head_major_copy(sb, l, "attn.k.view_as_real.bwd", "attn.k_rotated.grad.contiguous", pair, s.K);
  const TensorId dk_pre = complex_rope_backward(sb, l, "attn.rope_k.bwd", "attn.k.grad.rotated", dk, s.K, a.rope_table);
  const TensorId dq_c = head_major_copy(sb, l, "attn.q.view_as_real.bwd", "attn.q_rotated.grad.contiguous", dq, s.H);
  const TensorId dq_pre = complex_rope_backward(sb, l, "attn.rope_q.bwd", "attn.q.grad.rotated", dq_c, s.H, a.rope_table);
  const TensorId dv = head_major_copy(sb, l, "attn.v.view.bwd", "attn.v.grad.contiguous", pair, s.K);
  const TensorId x = a.norm1.y;
  const TensorId d_xv = project_backward(sb, l, "attn.v_proj.bwd", "grad.attn.v", "attn_norm.out.grad.v", dv, x, s.h,
                                         kw, s.qkv_bias, grads);
  const TensorId d_xk = project_backward(sb, l, "attn.k_proj.bwd", "grad.attn.k", "attn_norm.out.grad.k", dk_pre, x, s.h,
                                         kw, s.qkv_bias, grads);
  const TensorId d_x = sb.graph.tensor(layer_name(l, "attn_norm.out.grad"), s.n * s.h * s.e, kTr);
  sb.graph.op(layer_name(l, "attn.proj.grad_sum"), kB, l, {d_xv, d_xk}, {d_x});
  project_backward(sb, l, "attn.q_proj.bwd", "grad.attn.q", "", dq_pre, x, s.h, qw, s.qkv_bias, grads, d_x);
  return d_x;
}

}  // namespace

RingGrads ring_attention_kernel_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_o) {
  const StepShapes& s = sb.shapes;
  const TensorId dq = sb.graph.tensor(layer_name(l, "attn.q_rotated.grad"), s.n * s.H * s.d * s.e, kTr);
  const TensorId pair = sb.graph.tensor(layer_name(l, "attn.kv_rotated.grad"), 2 * s.n * s.K * s.d * s.e, kTr);
  const int o = sb.graph.op(layer_name(l, "attn.ring.bwd"), kB, l, {d_o, a.q, a.k, a.v, a.o_heads, a.lse}, {dq, pair},
                            {.workspace = tt::ring_backward_workspace(s), .flops = 2.5 * footprint::attention_flops(s, s.H),
                             .kernel_flops = 2.5 * footprint::attention_kernel_flops(s, s.H), .kind = OpKind::Attention});
  sb.graph.set_comm(o, CommKind::AllToAll, tt::ring_backward_sent_bytes(s), static_cast<int>(s.r));
  return {dq, pair};
}

TensorId ring_attention_backward(HfStep& sb, int l, const HfLayerActs& a, TensorId d_o, Ids& grads) {
  const RingGrads g = ring_attention_kernel_backward(sb, l, a, d_o);
  return ring_project_qkv_backward(sb, l, a, g.dq, g.kv_pair, grads);
}

}  // namespace longctx::step::torchtitan
