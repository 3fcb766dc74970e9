// SwiGLU and the tiled MLP: each forward allocates what the planner's inventory names, and
// each backward only its outputs plus the scratch it documents.
#include "longctx/runtime/mlp.h"

#include <torch/torch.h>

#include "planner/core/parallel_config.h"
#include "row_tiles.h"

namespace longctx::runtime {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- SwiGLU ------------------------------------------------------------------------------

// The gradients of act = silu(g) * u for the act gradient da, written into the buffers of g
// and u, which are dead after it: d_gate = da * u * sig(g) * (1 + g - silu(g)) lands in u's
// buffer and d_up = da * silu(g) in g's. As Liger-Kernel's SwiGLU backward stores its
// gradients over its saved inputs (src/liger_kernel/ops/swiglu.py, _swiglu_backward_kernel),
// but with LibTorch's elementwise ops: a chunk of rows at a time (row_chunk.h, rows of I
// elements), beside one scratch [chunk, I] (planner: footprint/mlp.h, swiglu_backward_workspace).
// Every element goes through the same ops in the same order whatever the chunk.
std::pair<Tensor, Tensor> swiglu_backward_in_place(const Tensor& da, const Tensor& g, const Tensor& u,
                                                   std::int64_t chunk_rows) {
  TORCH_CHECK(g.is_contiguous() && u.is_contiguous(), "swiglu_backward_in_place writes into contiguous gate and up");
  const auto I = g.size(-1);
  const auto n = g.numel() / I;
  Tensor g2 = g.view({n, I}), u2 = u.view({n, I}), da2 = da.reshape({n, I});
  const auto chunk = rows_per_chunk(n, I * g.element_size(), chunk_rows);
  Tensor sc = at::empty({chunk, I}, g.options());  // [chunk, I] e
  for (std::int64_t b = 0; b < n; b += chunk) {
    const auto len = std::min(chunk, n - b);
    Tensor gc = g2.narrow(0, b, len), uc = u2.narrow(0, b, len), dac = da2.narrow(0, b, len);
    Tensor s = sc.narrow(0, 0, len);
    at::silu_out(s, gc);
    uc.mul_(dac);                  // da * u
    s.neg_().add_(gc).add_(1.0);   // 1 + g - silu(g)
    uc.mul_(s);
    at::sigmoid_out(s, gc);
    uc.mul_(s);                    // d_gate
    at::silu_(gc);
    gc.mul_(dac);                  // d_up = da * silu(g)
  }
  return {u, g};
}

namespace {

class SwiGluFn : public torch::autograd::Function<SwiGluFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& gate, const Tensor& up) {
    ctx->save_for_backward({gate, up});
    // Leaves (a caller's own tensors) are never overwritten by the backward.
    ctx->saved_data["in_place"] = !gate.is_leaf() && !up.is_leaf() && gate.is_contiguous() && up.is_contiguous();
    return at::silu(gate).mul_(up);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    // gate and up die with this node: their buffers receive the gradients (a second backward
    // through a retained graph fails LibTorch's saved-tensor version check, never reads them).
    Tensor g = s[0], u = s[1];
    if (!ctx->saved_data["in_place"].toBool()) {
      g = g.clone(at::MemoryFormat::Contiguous);
      u = u.clone(at::MemoryFormat::Contiguous);
    }
    s.clear();
    auto [d_gate, d_up] = swiglu_backward_in_place(grads[0], g, u, 0);
    return {d_gate, d_up};
  }
};


// x [t, h] w^T (+ b) -> [t, out]: one buffer, the bias its initial value.
Tensor linear_rows(const Tensor& x, const Tensor& w, const Tensor& b) {
  return b.defined() ? at::addmm(b, x, w.t()) : at::mm(x, w.t());
}

class TiledMlpFn : public torch::autograd::Function<TiledMlpFn> {
 public:
  // bg, bu [I], bd [h]: the mlp_bias model's biases, all present or all absent.
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& wg, const Tensor& wu, const Tensor& wd,
                        std::int64_t tiles, const std::optional<Tensor>& bg, const std::optional<Tensor>& bu,
                        const std::optional<Tensor>& bd) {
    ctx->save_for_backward({x, wg, wu, wd, bg.value_or(Tensor()), bu.value_or(Tensor())});
    ctx->saved_data["tiles"] = tiles;
    const auto h = x.size(-1);
    Tensor x2 = x.reshape({-1, h});
    const auto n = x2.size(0);
    const TileSplit split = tile_split(n, tiles);  // uneven: the last tile shorter
    Tensor out = at::empty({n, h}, x.options());
    for (std::int64_t i = 0; i < split.count; ++i) {
      const std::int64_t t = tile_rows(split, i);
      Tensor xt = rows(x2, i * split.rows, t);                 // [t, h]
      Tensor a = linear_rows(xt, wg, bg.value_or(Tensor()));  // [t, I]
      at::silu_(a);
      a.mul_(linear_rows(xt, wu, bu.value_or(Tensor())));
      Tensor ot = rows(out, i * split.rows, t);  // [t, h]
      if (bd) at::addmm_out(ot, *bd, a, wd.t()); else at::mm_out(ot, a, wd.t());
    }
    return out.view(x.sizes());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    const Tensor &x = s[0], &wg = s[1], &wu = s[2], &wd = s[3], &bg = s[4], &bu = s[5];
    const bool biased = bg.defined();
    const auto tiles = ctx->saved_data["tiles"].toInt();
    const auto h = x.size(-1);
    Tensor x2 = x.reshape({-1, h});
    Tensor dy = grads[0].reshape({-1, h});
    const auto n = x2.size(0);
    const TileSplit split = tile_split(n, tiles);
    Tensor dx = at::empty({n, h}, x.options());
    Tensor dwg = at::zeros_like(wg), dwu = at::zeros_like(wu), dwd = at::zeros_like(wd);
    // db_gate, db_up [I], db_down [h]: summed over the tiles' rows.
    Tensor dbg = biased ? at::zeros_like(bg) : Tensor(), dbu = biased ? at::zeros_like(bu) : Tensor();
    Tensor dbd = biased ? at::zeros({h}, bg.options()) : Tensor();
    for (std::int64_t i = 0; i < split.count; ++i) {
      const std::int64_t t = tile_rows(split, i), first = i * split.rows;
      Tensor xt = rows(x2, first, t), dyt = rows(dy, first, t);  // [t, h]
      Tensor g = linear_rows(xt, wg, bg);  // [t, I]
      Tensor u = linear_rows(xt, wu, bu);  // [t, I]
      Tensor a = at::silu(g);              // [t, I]
      a.mul_(u);
      dwd.addmm_(dyt.t(), a);
      Tensor da = a;  // the activation's buffer receives its gradient
      at::mm_out(da, dyt, wd);
      a = Tensor();
      // d_gate into u's buffer, d_up into g's, one chunk's scratch beside (as the plain MLP).
      auto [d_gate, d_up] = swiglu_backward_in_place(da, g, u, 0);
      da = Tensor();
      dwg.addmm_(d_gate.t(), xt);
      dwu.addmm_(d_up.t(), xt);
      if (biased) {
        dbg.add_(d_gate.sum(0));
        dbu.add_(d_up.sum(0));
        dbd.add_(dyt.sum(0));
      }
      Tensor dxt = rows(dx, first, t);
      at::mm_out(dxt, d_gate, wg);
      dxt.addmm_(d_up, wu);
    }
    return {dx.view(x.sizes()), dwg, dwu, dwd, Tensor(), dbg, dbu, dbd};
  }
};
}  // namespace

Tensor swiglu(const Tensor& gate, const Tensor& up) { return SwiGluFn::apply(gate, up); }

Tensor tiled_mlp(const Tensor& x, const Tensor& w_gate, const Tensor& w_up, const Tensor& w_down, std::int64_t tiles,
                 const MlpBiases& b) {
  TORCH_CHECK(b.gate.defined() == b.up.defined() && b.up.defined() == b.down.defined(),
              "tiled_mlp takes all three biases or none");
  auto opt = [](const Tensor& t) { return t.defined() ? std::optional<Tensor>(t) : std::nullopt; };
  return TiledMlpFn::apply(x, w_gate, w_up, w_down, tiles, opt(b.gate), opt(b.up), opt(b.down));
}

}  // namespace longctx::runtime
