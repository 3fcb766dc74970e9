// The output projection and the token cross-entropy, whole or a tile of rows at a time: the
// forward allocates what the planner's inventory names, the backward only its outputs.
#include "longctx/runtime/loss.h"

#include <torch/torch.h>

#include "planner/core/parallel_config.h"
#include "row_tiles.h"

namespace longctx::runtime {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Tensor cross_entropy_loss(const Tensor& x, const Tensor& w_out, const Tensor& targets, std::optional<double> denominator) {
  Tensor logits = at::linear(x.reshape({-1, x.size(-1)}), w_out);  // [n, V] e
  if (logits.scalar_type() != torch::kFloat) logits = logits.to(torch::kFloat);
  Tensor logp = at::log_softmax(logits, -1);  // [n, V] fp32
  logits = Tensor();  // dies here, as in the planner: log_softmax saves only its output
  // The sum over the tokens that are not padding, over the denominator; in place on the
  // 0-dim sum (nll_loss's backward does not read its output).
  return at::nll_loss(logp, targets.reshape({-1}), {}, at::Reduction::Sum, kIgnoreIndex)
      .div_(denominator.value_or(static_cast<double>(targets.numel())));
}

namespace {
class TiledCrossEntropyFn : public torch::autograd::Function<TiledCrossEntropyFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& w, const Tensor& targets,
                        std::int64_t tiles, double denominator) {
    ctx->save_for_backward({x, w, targets});
    ctx->saved_data["tiles"] = tiles;
    ctx->saved_data["denominator"] = denominator;
    Tensor x2 = x.reshape({-1, x.size(-1)});
    Tensor tg = targets.reshape({-1});
    const TileSplit split = tile_split(x2.size(0), tiles);  // uneven: the last tile shorter
    Tensor total = at::zeros({}, x.options().dtype(torch::kFloat));
    for (std::int64_t i = 0; i < split.count; ++i) {
      const std::int64_t t = tile_rows(split, i), first = i * split.rows;
      Tensor logits = at::mm(rows(x2, first, t), w.t());  // [t, V] e
      if (logits.scalar_type() != torch::kFloat) logits = logits.to(torch::kFloat);
      // sum over the rows that are not padding of logsumexp - logit[target]
      Tensor lse = at::logsumexp(logits, {1});  // [t] fp32
      Tensor tgt = rows(tg, first, t);          // [t] int64
      lse.masked_fill_(tgt.eq(kIgnoreIndex), 0.0);
      total.add_(lse.sum());
      lse = Tensor();
      // nll_loss over the raw logits: minus the target logits' sum, padding skipped.
      total.add_(at::nll_loss(logits, tgt, {}, at::Reduction::Sum, kIgnoreIndex));
    }
    return total.div_(denominator);  // fp32, as the untiled loss
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    const Tensor &x = s[0], &w = s[1], &targets = s[2];
    const auto tiles = ctx->saved_data["tiles"].toInt();
    Tensor x2 = x.reshape({-1, x.size(-1)});
    Tensor tg = targets.reshape({-1});
    const TileSplit split = tile_split(x2.size(0), tiles);
    const double scale = grads[0].to(torch::kFloat).item<double>() / ctx->saved_data["denominator"].toDouble();
    Tensor dx = at::empty_like(x2);
    Tensor dw = at::zeros_like(w);
    for (std::int64_t i = 0; i < split.count; ++i) {
      const std::int64_t t = tile_rows(split, i), first = i * split.rows;
      Tensor xt = rows(x2, first, t);      // [t, h]
      Tensor logits = at::mm(xt, w.t());  // [t, V] e
      if (logits.scalar_type() != torch::kFloat) logits = logits.to(torch::kFloat);
      // d logits = (softmax - onehot(target)) * scale, computed in the logits' buffer; rows
      // of padding (target = the ignore index) get none.
      Tensor lse = at::logsumexp(logits, {1}, /*keepdim=*/true);  // [t, 1] fp32
      logits.sub_(lse).exp_();
      Tensor tgt = rows(tg, first, t);
      Tensor padding = tgt.eq(kIgnoreIndex);                                // [t] bool
      Tensor minus_one = padding.to(torch::kFloat).sub_(1.0).unsqueeze(1);  // [t, 1] fp32: -1, 0 on padding
      logits.scatter_add_(1, tgt.clamp_min(0).unsqueeze(1), minus_one);
      logits.masked_fill_(padding.unsqueeze(1), 0.0);
      logits.mul_(scale);
      Tensor dl = logits.scalar_type() == x.scalar_type() ? logits : logits.to(x.scalar_type());
      Tensor dxt = rows(dx, first, t);
      at::mm_out(dxt, dl, w);
      dw.addmm_(dl.t(), xt);
    }
    return {dx.view(x.sizes()), dw, Tensor(), Tensor(), Tensor()};
  }
};
}  // namespace

Tensor tiled_cross_entropy(const Tensor& x, const Tensor& w_out, const Tensor& targets, std::int64_t tiles,
                           std::optional<double> denominator) {
  return TiledCrossEntropyFn::apply(x, w_out, targets, tiles, denominator.value_or(static_cast<double>(targets.numel())));
}

}  // namespace longctx::runtime
