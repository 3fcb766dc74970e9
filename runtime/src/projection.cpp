// Several projections of one input as one autograd function (projection.h).
#include "longctx/runtime/projection.h"

#include <torch/torch.h>

namespace longctx::runtime {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {
class ProjectFn : public torch::autograd::Function<ProjectFn> {
 public:
  // Biases b0..b2: present or not, one per weight (none for the third when w2 is absent).
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& w0, const Tensor& w1,
                               const std::optional<Tensor>& w2, const std::optional<Tensor>& b0,
                               const std::optional<Tensor>& b1, const std::optional<Tensor>& b2) {
    std::vector<Tensor> ws = {w0, w1};
    if (w2) ws.push_back(*w2);
    const std::optional<Tensor>* bs[] = {&b0, &b1, &b2};
    ctx->save_for_backward({x, w0, w1, w2.value_or(Tensor())});
    ctx->saved_data["biased"] = (b0 ? 1 : 0) | (b1 ? 2 : 0) | (b2 ? 4 : 0);
    auto lead = x.sizes().vec();
    lead.pop_back();
    variable_list ys;
    for (std::size_t i = 0; i < ws.size(); ++i) {
      auto shape = lead;
      shape.push_back(ws[i].size(0));
      Tensor x2 = x.reshape({-1, x.size(-1)});
      // y_i [n, out_i]: the bias is the product's initial value, so no second buffer. Made in
      // its final shape and written through a view, so that y_i is no view: a consumer may
      // overwrite it in place (SwiGLU's backward writes its gradients into gate and up).
      Tensor y = at::empty(shape, x.options());
      Tensor y2 = y.view({x2.size(0), ws[i].size(0)});
      if (*bs[i]) at::addmm_out(y2, **bs[i], x2, ws[i].t()); else at::mm_out(y2, x2, ws[i].t());
      ys.push_back(y);
    }
    return ys;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    const Tensor& x = s[0];
    Tensor x2 = x.reshape({-1, x.size(-1)});
    Tensor dx;
    const auto biased = ctx->saved_data["biased"].toInt();
    variable_list out(7);  // dx, dw0..dw2, db0..db2
    for (std::size_t i = 0; i < grads.size(); ++i) {
      const Tensor& w = s[i + 1];
      if (!grads[i].defined() || !w.defined()) continue;
      Tensor g = grads[i].reshape({-1, w.size(0)});
      if (dx.defined()) dx.addmm_(g, w); else dx = at::mm(g, w);
      out[i + 1] = at::mm(g.t(), x2);
      if (biased & (1 << i)) out[i + 4] = g.sum(0);  // db_i [out_i]
    }
    out[0] = dx.defined() ? dx.view(x.sizes()) : Tensor();
    return out;
  }
};
}  // namespace

std::vector<Tensor> project(const Tensor& x, const std::vector<Tensor>& weights, const std::vector<Tensor>& biases) {
  TORCH_CHECK(weights.size() == 2 || weights.size() == 3, "project takes 2 or 3 weights");
  TORCH_CHECK(biases.empty() || biases.size() == weights.size(), "project takes no biases or one per weight");
  // Autograd functions take no undefined tensors: a missing bias or third weight is nullopt.
  auto opt = [](const std::vector<Tensor>& v, std::size_t i) {
    return i < v.size() && v[i].defined() ? std::optional<Tensor>(v[i]) : std::nullopt;
  };
  return ProjectFn::apply(x, weights[0], weights[1], opt(weights, 2), opt(biases, 0), opt(biases, 1), opt(biases, 2));
}

}  // namespace longctx::runtime
