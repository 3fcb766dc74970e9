// TRL's chunked cross-entropy in place of lm_head and ForCausalLMLoss (the hf stack with
// `--hf-loss trl-chunked-nll`), as SFTTrainer's `loss_type="chunked_nll"` runs it (TRL 1.10
// to 1.14.2, trl/trainer/sft_trainer.py): `_patch_chunked_ce_lm_head` replaces the model's
// forward by the backbone's (use_cache=False, so no DynamicCache copies) and
// `_chunked_cross_entropy_loss` over its last hidden state:
//
//   hidden = hidden_states[..., :-1, :].reshape(-1, h)   # [N, h] e, N = b*(S-1): a view for
//   labels = labels[..., 1:].reshape(-1)                 # one sample, a copy for more
//   valid = labels != -100                               # [N] bool
//   order = valid.to(int8).argsort(descending, stable)   # [N] int64, saved by IndexBackward0
//   hidden, labels = hidden[order], labels[order]        # [N, h] e, [N] int64
//   for each 256 rows: checkpoint(_chunk, h_chunk, w, None, lbl_chunk, use_reentrant=False)
//
// `_chunk` computes logits, log_softmax, nll_loss and two metrics (the accuracy's argmax and
// the entropy's exp and product) with nothing saved; the checkpoint's frame holds its inputs,
// views of the gathered rows, so those live until the first chunk's backward. The output is
// dropped before backward (SFTTrainer.compute_loss returns the loss alone), so when a chunk's
// backward recomputes it only the tensors its loss branch saved are kept (log_p); the
// metrics' are recomputed and freed. Autograd then runs the chunks last first: nll's and
// log_softmax's gradients [c, V] fp32 (the cast back [c, V] e in bf16), the matmul's
// gradients: the rows' [c, h] e, and the weight's through `w.t()`, a [V, h] e view that the
// weight's input buffer cannot add to in place (TiedSum, hf_step.h): the second chunk's joins
// the first's in a new sum, three [V, h] alive at the add, and the chunks after are added
// into that sum in place. The parameter's AccumulateGrad takes what the buffer holds as it is
// (contiguous [V, h], which obeys the gradient layout contract: no copy); tied, the
// embedding's dense gradient joins it first, in place into a sum, into a new one where a single
// chunk left the view; the slice's backward scatters each chunk's rows into
// a new zeroed [N, h] e, summed in place into the gather's input buffer; IndexBackward0
// scatters them back through `order` and the shift's SliceBackward0 pads them to [b, S, h].
// Footprints: footprint/trl.h.
#include "planner/stacks/blocks/trl_loss.h"

#include "planner/footprint/hf.h"
#include "planner/footprint/trl.h"
#include "planner/footprint/zero.h"
#include "planner/stacks/blocks/hf_layer.h"
#include "planner/stacks/blocks/hf_model.h"

namespace longctx::step::blocks {

using namespace footprint;
using namespace footprint::trl;

namespace {

// One chunk of c rows in forward: the matmul, log_softmax and nll, and the metrics'.
double chunk_flops(const StepShapes& s, std::int64_t c) { return matmul_flops(c, s.h, s.V) + 12.0 * double(c * s.V); }

// Chunks alike in the order their backward runs: `rows` each, `repeats` of them (one set of
// ops stands for them), and whether the first chunk is among them (its end frees the
// checkpoint frames' inputs).
struct ChunkGroup {
  std::int64_t rows, repeats;
  bool first_chunk;
};

// The chunks' running sums: lm_head's weight gradient [V, h] e (while it is one chunk's, a
// view no sum goes into in place) and the gathered rows' [N, h] e.
struct ChunkSums {
  TensorId weight = -1;
  bool weight_is_view = false;
  TensorId hidden = -1;
};

// The weight's gradient as the parameter's .grad takes it: lm_head's (in sb.grads), or tied
// the table's once the embedding's joins it (join_tied_grad puts it in sb.grads).
TensorId weight_grad_tensor(HfStep& sb) {
  const StepShapes& s = sb.shapes;
  if (s.tied) return sb.graph.tensor(Name{Name::kEmbed, "grad"}, s.V * s.h * s.e, Category::Grads);
  const TensorId grad = sb.graph.tensor(Name{Name::kHead, "grad.output"}, s.V * s.h * s.e, Category::Grads);
  sb.grads[static_cast<std::size_t>(head_group(s))].push_back(grad);
  return grad;
}

// One group of chunks' backward: the recompute (only the loss branch's saved tensors stay),
// nll's and log_softmax's gradients, lm_head's, and the slice's scatter into [N, h].
void chunk_backward(HfStep& sb, const TrlLossActs& t, const ChunkGroup& g, bool first_group, ChunkSums& sums) {
  const StepShapes& s = sb.shapes;
  const std::int64_t N = loss_rows(s), c = g.rows;
  const double r = double(g.repeats);
  // The recompute runs when nll's backward unpacks log_p; of what it makes only the tensors
  // the loss branch saved stay.
  const TensorId logp = sb.graph.tensor(step_name("loss.trl.chunk.log_softmax"), c * s.V * 4, kTr);  // [c, V] fp32
  sb.graph.op(step_name("loss.trl.chunk.recompute"), kB, -1, {t.gathered, t.labels}, {logp},
              {.workspace = chunk_recompute_workspace(s, c), .flops = r * chunk_flops(s, c)});
  if (first_group) sb.graph.add_input(sb.graph.last_op(), t.rng_last);
  const TensorId d_logp = sb.graph.tensor(step_name("loss.trl.chunk.nll.grad"), c * s.V * 4, kTr);
  sb.graph.op(step_name("loss.trl.chunk.nll.bwd"), kB, -1, {logp, t.labels}, {d_logp});
  TensorId d_logits = sb.graph.tensor(step_name("loss.trl.chunk.logits.grad.fp32"), c * s.V * 4, kTr);
  sb.graph.op(step_name("loss.trl.chunk.log_softmax.bwd"), kB, -1, {d_logp, logp}, {d_logits},
              {.flops = r * 3.0 * double(c * s.V)});
  if (s.e != 4) {
    const TensorId cast = sb.graph.tensor(step_name("loss.trl.chunk.logits.grad"), c * s.V * s.e, kTr);
    sb.graph.op(step_name("loss.trl.chunk.logits.float.bwd"), kB, -1, {d_logits}, {cast});
    d_logits = cast;
  }
  const TensorId dh = sb.graph.tensor(step_name("loss.trl.chunk.hidden.grad"), c * s.h * s.e, kTr);  // [c, h] e
  // [V, h] e; a single untied chunk's is the parameter's .grad as it is.
  const bool only_chunk = first_group && g.first_chunk;
  const TensorId dw = only_chunk && !s.tied ? weight_grad_tensor(sb)
                                            : sb.graph.tensor(step_name("loss.trl.chunk.weight.grad"), s.V * s.h * s.e, kTr);
  sb.graph.op(step_name("loss.trl.chunk.lm_head.bwd"), kB, -1, {d_logits, t.gathered}, {dh, dw},
              {.flops = r * 2 * matmul_flops(c, s.h, s.V)});
  // The first chunk's frame dies with its last saved tensor: the gathered rows and labels
  // and the RNG states go.
  if (g.first_chunk) {
    sb.graph.add_input(sb.graph.last_op(), t.labels);
    sb.graph.add_input(sb.graph.last_op(), t.rng_rest >= 0 ? t.rng_rest : t.rng_last);
  }
  if (sums.weight < 0) {
    sums.weight = dw;
    sums.weight_is_view = true;
  } else if (sums.weight_is_view) {
    // The group's first chunk makes the sum; its others (one set of ops stands for them) add
    // into it in place.
    const TensorId sum = weight_grad_tensor(sb);
    sb.graph.op(step_name("loss.trl.chunk.weight.grad.sum"), kB, -1, {sums.weight, dw}, {sum});
    sums.weight = sum;
    sums.weight_is_view = false;
  } else {
    sb.graph.op(step_name("loss.trl.chunk.weight.grad.accumulate"), kB, -1, {sums.weight, dw}, {});
  }
  // Its last gradient in, lm_head.weight's AccumulateGrad (run before anything else ready).
  if (g.first_chunk && !s.tied) grad_ready(sb, sums.weight, s.V * s.h);
  const TensorId slice = sb.graph.tensor(step_name("loss.trl.chunk.slice.grad"), N * s.h * s.e, kTr);  // [N, h] e
  sb.graph.op(step_name("loss.trl.chunk.slice.bwd"), kB, -1, {dh}, {slice});
  if (sums.hidden < 0) sums.hidden = slice;
  else sb.graph.op(step_name("loss.trl.chunk.hidden.grad.accumulate"), kB, -1, {sums.hidden, slice}, {});
}

}  // namespace

NormActs trl_loss_forward(HfStep& sb, TensorId final_x, TrlLossActs& t) {
  const StepShapes& s = sb.shapes;
  OuterActs& o = sb.outer;
  const Phase L = Phase::Loss;
  const std::int64_t N = loss_rows(s), k = chunk_count(s);
  const NormActs f = final_norm_forward(sb, final_x);  // the backbone returns
  TensorId hidden = o.xf, labels = o.targets;
  if (s.b > 1 && s.r == 1) {
    // The [b, S-1, h] slice is not contiguous: reshape copies it, and the labels. (Under
    // context parallel the rows are the whole [b, Sl, h], a view.)
    hidden = sb.graph.tensor(step_name("loss.trl.hidden"), N * s.h * s.e, kTr);  // [N, h] e
    labels = sb.graph.tensor(step_name("loss.trl.labels"), N * 8, kTr);        // [N] int64
    sb.graph.op(step_name("loss.trl.shift"), L, -1, {o.xf, o.targets}, {hidden, labels});
  }
  const TensorId valid = sb.graph.tensor(step_name("loss.trl.valid"), N, kAct);  // [N] bool
  sb.graph.op(step_name("loss.trl.valid"), L, -1, {labels}, {valid});
  t.order = sb.graph.tensor(step_name("loss.trl.order"), N * 8, kAct);  // [N] int64
  sb.graph.op(step_name("loss.trl.argsort"), L, -1, {valid}, {t.order}, {.workspace = argsort_workspace(s)});
  t.gathered = sb.graph.tensor(step_name("loss.trl.hidden.gathered"), N * s.h * s.e, kAct);  // [N, h] e
  t.labels = sb.graph.tensor(step_name("loss.trl.labels.gathered"), N * 8, kAct);          // [N] int64
  sb.graph.op(step_name("loss.trl.gather"), L, -1, {hidden, labels, t.order}, {t.gathered, t.labels});
  t.rng_last = sb.graph.tensor(step_name("loss.trl.chunk.rng_state"), rng_states_bytes(s, 1), kAct);
  Ids rng = {t.rng_last};
  if (k > 1) {
    t.rng_rest = sb.graph.tensor(step_name("loss.trl.chunks.rng_state"), rng_states_bytes(s, k - 1), kAct);
    rng.push_back(t.rng_rest);
  }
  // Every chunk's `_chunk` frees all it made; the largest chunk's are the op's scratch. The
  // function returns after the loop: `valid` and the backbone's output (its hidden states) go.
  const double flops = double(k - 1) * chunk_flops(s, full_chunk_rows(s)) + chunk_flops(s, last_chunk_rows(s));
  sb.graph.op(step_name("loss.trl.chunks"), L, -1, {t.gathered, t.labels, o.xf, valid}, rng,
              {.workspace = chunk_forward_bytes(s, full_chunk_rows(s)), .flops = flops});
  return f;
}

TensorId trl_loss_backward(HfStep& sb, const NormActs& f, const TrlLossActs& t) {
  const StepShapes& s = sb.shapes;
  OuterActs& o = sb.outer;
  const std::int64_t N = loss_rows(s), k = chunk_count(s);
  // The chunks in the order their backward runs: the last (its rows what is left), those
  // between (alike: one set of ops stands for them), and the first.
  std::vector<ChunkGroup> groups;
  if (k == 1) groups.push_back({N, 1, true});
  else {
    groups.push_back({last_chunk_rows(s), 1, false});
    if (k > 2) groups.push_back({kChunkRows, k - 2, false});
    groups.push_back({kChunkRows, 1, true});
  }
  ChunkSums sums;
  for (std::size_t gi = 0; gi < groups.size(); ++gi) chunk_backward(sb, t, groups[gi], gi == 0, sums);
  // Tied: the sum waits in the table's input buffer for the embedding's dense gradient
  // (embedding_backward): in place, or a new sum where one chunk's view is all there is.
  if (s.tied) {
    o.tied_grad = sums.weight;
    sb.tied_sum = sums.weight_is_view ? TiedSum::New : TiedSum::InPlace;
  }
  // IndexBackward0: zeros [N, h] e with the rows put back through `order`; then the shift's
  // SliceBackward0 pads them to the final norm's output, [b, S, h] e.
  const TensorId unsorted = sb.graph.tensor(step_name("loss.trl.gather.grad"), N * s.h * s.e, kTr);
  sb.graph.op(step_name("loss.trl.gather.bwd"), kB, -1, {sums.hidden, t.order}, {unsorted});
  // (Under context parallel no slice was taken: the unsorted rows are the gradient.)
  TensorId d_xf = unsorted;
  if (s.r == 1) {
    d_xf = sb.graph.tensor(step_name("loss.final_norm.out.grad"), s.n * s.h * s.e, kTr);
    sb.graph.op(step_name("loss.trl.shift.bwd"), kB, -1, {unsorted}, {d_xf});
  }
  return sb.ops.norm_backward(sb, final_norm_spec(s), f, d_xf, -1, sb.grads[static_cast<std::size_t>(head_group(s))]);
}

}  // namespace longctx::step::blocks
