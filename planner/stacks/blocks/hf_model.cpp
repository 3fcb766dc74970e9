// transformers' model around its decoder layers (blocks/hf_model.h), op by op.
#include "planner/stacks/blocks/hf_model.h"

#include "planner/footprint/embedding.h"
#include "planner/footprint/hf.h"
#include "planner/footprint/zero.h"
#include "planner/stacks/blocks/hf_layer.h"

namespace longctx::step::blocks {

using namespace footprint;

void load_batch(HfStep& sb) {
  const StepShapes& s = sb.shapes;
  OuterActs& o = sb.outer;
  o.tokens = sb.graph.tensor(step_name("batch.tokens"), s.n * 8, kAct);   // [n] int64
  o.targets = sb.graph.tensor(step_name("batch.targets"), s.n * 8, kAct);  // [n] int64
  Ids batch = {o.tokens, o.targets};
  if (sb.in.train.stack.attention_mask)
    batch.push_back(sb.graph.tensor(step_name("batch.attention_mask"), s.n * 8, kAct));  // [n] int64
  sb.graph.op(step_name("batch.load"), Phase::Forward, -1, {}, batch);
  sb.model.batch = batch;
}

void embedding_backward(HfStep& sb, TensorId d_x) {
  const StepShapes& s = sb.shapes;
  const Ids reads = {d_x, sb.outer.tokens};
  const OpCost cost = {.workspace = embedding_backward_workspace(s, s.n), .flops = double(s.n * s.h)};
  if (sb.outer.tied_grad >= 0) {
    const TensorId dense = sb.graph.tensor(Name{Name::kEmbed, "grad.dense"}, s.V * s.h * s.e, kTr);
    sb.graph.op(Name{Name::kEmbed, "backward"}, kB, -1, reads, {dense}, cost);
    grad_ready(sb, join_tied_grad(sb, dense), s.V * s.h);
    return;
  }
  const TensorId g = sb.graph.tensor(Name{Name::kEmbed, "grad"}, s.V * s.h * s.e, Category::Grads);
  sb.grads[static_cast<std::size_t>(embed_group(s))].push_back(g);
  sb.graph.op(Name{Name::kEmbed, "backward"}, kB, -1, reads, {g}, cost);
}

TensorId join_tied_grad(HfStep& sb, TensorId dense) {
  const StepShapes& s = sb.shapes;
  const TensorId first = sb.outer.tied_grad;
  const TensorId grad = sb.tied_sum == TiedSum::InPlace
                            ? first
                            : sb.graph.tensor(Name{Name::kEmbed, "grad"}, s.V * s.h * s.e, Category::Grads);
  sb.graph.op(Name{Name::kEmbed, "grad.accumulate"}, kB, -1, {first, dense}, grad == first ? Ids{} : Ids{grad});
  sb.grads[static_cast<std::size_t>(embed_group(s))].push_back(grad);
  return grad;
}

NormActs final_norm_forward(HfStep& sb, TensorId final_x) {
  OuterActs& o = sb.outer;
  const HfModelActs& m = sb.model;
  o.final_x = final_x;
  const NormActs f = sb.ops.norm_forward(sb, final_norm_spec(sb.shapes), final_x, Phase::Loss, false);
  o.xf = f.y;
  // LlamaModel.forward returns here: its cache_position and causal mask go.
  if (m.positions >= 0) sb.graph.add_input(sb.graph.last_op(), m.positions);
  if (m.mask >= 0) sb.graph.add_input(sb.graph.last_op(), m.mask);
  for (const TensorId t : m.model_locals) sb.graph.add_input(sb.graph.last_op(), t);
  return f;
}

TensorId lm_head_forward(HfStep& sb, TensorId head_weight) {
  const StepShapes& s = sb.shapes;
  const TensorId logits = sb.graph.tensor(step_name("loss.logits"), s.n * s.V * s.e, kTr);
  sb.graph.op(step_name("loss.lm_head"), Phase::Loss, -1, {sb.outer.xf}, {logits}, {.flops = matmul_flops(s.n, s.h, s.V)});
  if (head_weight >= 0) sb.graph.add_input(sb.graph.last_op(), head_weight);
  return logits;
}

void cross_entropy_forward(HfStep& sb, TensorId model_logits, bool shift_labels) {
  const StepShapes& s = sb.shapes;
  OuterActs& o = sb.outer;
  HfModelActs& m = sb.model;
  const Phase L = Phase::Loss;
  TensorId logits = model_logits;
  if (s.e != 4) {
    const TensorId up = sb.graph.tensor(step_name("loss.logits.fp32"), s.n * s.V * 4, kTr);
    sb.graph.op(step_name("loss.logits.float"), L, -1, {logits}, {up});
    logits = up;
  }
  TensorId labels = o.targets;
  if (shift_labels) {
    labels = sb.graph.tensor(step_name("loss.shift_labels"), hf::shifted_labels_bytes(s), kAct);
    sb.graph.op(step_name("loss.shift_labels"), L, -1, {o.targets}, {labels});
  }
  o.logp = sb.graph.tensor(step_name("loss.log_softmax"), s.n * s.V * 4, kAct);
  sb.graph.op(step_name("loss.log_softmax"), L, -1, {logits}, {o.logp}, {.flops = 5.0 * double(s.n * s.V)});
  // The model's output holds its logits until it is dropped, after the loss.
  sb.graph.op(step_name("loss.nll"), L, -1, {o.logp, labels, model_logits}, {});
  // The model's output is dropped: its cache lets go of each layer's k/v copies (those no
  // backward saved go now).
  for (std::size_t i = 0; i + 1 < m.cache.size(); i += 2)
    sb.graph.op(layer_name(static_cast<int>(i / 2), "attn.cache.drop"), L, -1, {m.cache[i], m.cache[i + 1]}, {});
  m.labels = labels;
}

TensorId cross_entropy_backward(HfStep& sb) {
  const StepShapes& s = sb.shapes;
  const TensorId d_logp = sb.graph.tensor(step_name("loss.nll.grad"), s.n * s.V * 4, kTr);
  sb.graph.op(step_name("loss.nll.bwd"), kB, -1, {sb.model.labels}, {d_logp});
  TensorId d_logits = sb.graph.tensor(step_name("loss.logits.grad.fp32"), s.n * s.V * 4, kTr);
  sb.graph.op(step_name("loss.log_softmax.bwd"), kB, -1, {d_logp, sb.outer.logp}, {d_logits},
              {.flops = 3.0 * double(s.n * s.V)});
  if (s.e != 4) {
    const TensorId cast = sb.graph.tensor(step_name("loss.logits.grad"), s.n * s.V * s.e, kTr);
    sb.graph.op(step_name("loss.logits.float.bwd"), kB, -1, {d_logits}, {cast});
    d_logits = cast;
  }
  return d_logits;
}

TensorId lm_head_backward(HfStep& sb, const NormActs& f, TensorId d_logits, TensorId head_weight) {
  const StepShapes& s = sb.shapes;
  OuterActs& o = sb.outer;
  // Tied, the gradient is only lm_head's part, a view the embedding's joins in a new sum
  // (TiedSum): not yet the table's .grad.
  const TensorId g_out = s.tied ? sb.graph.tensor(step_name("loss.lm_head.weight.grad"), s.V * s.h * s.e, kTr)
                                : sb.graph.tensor(Name{Name::kHead, "grad.output"}, s.V * s.h * s.e, Category::Grads);
  if (s.tied) {
    o.tied_grad = g_out;
    sb.tied_sum = TiedSum::New;
  } else {
    sb.grads[static_cast<std::size_t>(head_group(s))].push_back(g_out);
  }
  const TensorId d_xf = sb.graph.tensor(step_name("loss.final_norm.out.grad"), s.n * s.h * s.e, kTr);
  sb.graph.op(step_name("loss.lm_head.bwd"), kB, -1, {d_logits, o.xf}, {g_out, d_xf},
              {.flops = 2 * matmul_flops(s.n, s.h, s.V)});
  if (head_weight >= 0) sb.graph.add_input(sb.graph.last_op(), head_weight);
  if (!s.tied) grad_ready(sb, g_out, s.V * s.h);
  return sb.ops.norm_backward(sb, final_norm_spec(s), f, d_xf, -1, sb.grads[static_cast<std::size_t>(head_group(s))]);
}

NormActs causal_lm_loss_forward(HfStep& sb, TensorId final_x, TensorId head_weight) {
  const NormActs f = final_norm_forward(sb, final_x);
  cross_entropy_forward(sb, lm_head_forward(sb, head_weight), /*shift_labels=*/true);
  return f;
}

TensorId causal_lm_loss_backward(HfStep& sb, const NormActs& f, TensorId head_weight) {
  return lm_head_backward(sb, f, cross_entropy_backward(sb), head_weight);
}

}  // namespace longctx::step::blocks
