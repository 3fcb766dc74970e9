// RMSNorm, RoPE, SwiGLU, tiled MLP and the loss: each forward allocates what the planner's
// inventory names, and each backward only its outputs plus the scratch it documents.
#include <torch/torch.h>

#include "planner/core/parallel_config.h"
#include "planner/core/row_chunk.h"
#include "longctx/runtime/loss.h"
#include "longctx/runtime/mlp.h"
#include "longctx/runtime/norm_rope.h"
#include "longctx/runtime/projection.h"

namespace longctx::runtime {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- RMSNorm -----------------------------------------------------------------------------

namespace {
// Rows of one chunk over `rows` rows of `row_bytes` scratch each (row_chunk.h: the planner
// sizes the scratch with the same function), or the caller's `chunk_rows` when it gives one.
std::int64_t rows_per_chunk(std::int64_t rows, std::int64_t row_bytes, std::int64_t chunk_rows) {
  if (rows < 1) return 1;
  return chunk_rows > 0 ? std::min(chunk_rows, rows) : row_chunk(rows, row_bytes);
}
}  // namespace

NormOut rms_norm_forward(const Tensor& x, const Tensor& w, double eps, std::int64_t chunk_rows) {
  const auto h = x.size(-1);
  const auto rows = x.numel() / h;
  const auto chunk = rows_per_chunk(rows, h * 4, chunk_rows);  // fp32 rows
  Tensor x2 = x.reshape({rows, h});
  auto rstd_shape = x.sizes().vec();
  rstd_shape.back() = 1;
  Tensor rstd = at::empty({rows, 1}, x.options().dtype(torch::kFloat));
  Tensor y = at::empty(x.sizes(), x.options());
  Tensor y2 = y.view({rows, h});
  const bool fp32 = x.scalar_type() == torch::kFloat;
  for (std::int64_t b = 0; b < rows; b += chunk) {
    const auto len = std::min(chunk, rows - b);
    Tensor xc = x2.narrow(0, b, len), r = rstd.narrow(0, b, len), yc = y2.narrow(0, b, len);
    // ||x||^2 / h + eps per row, reduced in fp32: in bf16 LibTorch reduces an fp32 copy of
    // the chunk (the planner's norm forward workspace), never of all of x.
    at::linalg_vector_norm_out(r, xc, 2, {-1}, /*keepdim=*/true, torch::kFloat);
    r.pow_(2).div_(static_cast<double>(h)).add_(eps).rsqrt_();
    // y = x * rstd * w; bf16 multiplies by rstd rounded to bf16.
    at::mul_out(yc, xc, fp32 ? r : r.to(x.scalar_type()));
    yc.mul_(w);
  }
  return {y, rstd.view(rstd_shape)};
}

NormGrads rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                            std::int64_t chunk_rows) {
  // With r = rstd, g = dy·w and s = Σ_j g·x per row:
  //   dx = r·g − x·(r³·s/h),   dw = Σ_rows dy·x·r.
  // A chunk of rows at a time, as Liger-Kernel's RMSNorm backward takes blocks of rows and
  // sums the weight's gradient over them in fp32 (src/liger_kernel/ops/rms_norm.py,
  // _rms_norm_backward_kernel): each chunk goes through one fp32 [chunk, h] buffer that ends
  // as its rows of dx (fp32: dx's own rows); bf16 also holds an fp32 copy of the chunk of x,
  // and casts the buffer into dx. dw accumulates in fp32 over the chunks. No op mixes dtypes:
  // LibTorch would upcast its bf16 input into a hidden temporary.
  const auto h = x.size(-1);
  const auto rows = x.numel() / h;
  const auto chunk = rows_per_chunk(rows, h * 4, chunk_rows);  // fp32 rows
  const bool fp32 = x.scalar_type() == torch::kFloat;
  Tensor x2 = x.reshape({rows, h}), dy2 = dy.reshape({rows, h}), r2 = rstd.reshape({rows, 1});
  Tensor dx = at::empty(x.sizes(), x.options());
  Tensor dx2 = dx.view({rows, h});
  Tensor wf = fp32 ? w : w.to(torch::kFloat);                  // [h] fp32
  Tensor dw = at::zeros({h}, x.options().dtype(torch::kFloat));  // [h] fp32
  for (std::int64_t b = 0; b < rows; b += chunk) {
    const auto len = std::min(chunk, rows - b);
    Tensor xc = x2.narrow(0, b, len), dyc = dy2.narrow(0, b, len), rc = r2.narrow(0, b, len);
    Tensor xf = fp32 ? xc : xc.to(torch::kFloat);  // bf16: an fp32 copy of the chunk of x
    Tensor buf = fp32 ? dx2.narrow(0, b, len) : at::empty({len, h}, dw.options());
    if (fp32) {
      at::mul_out(buf, dyc, xf);
    } else {
      buf.copy_(dyc);
      buf.mul_(xf);
    }
    buf.mul_(rc);
    dw.add_(buf.sum(0));
    if (fp32) {
      at::mul_out(buf, dyc, w);
    } else {
      buf.copy_(dyc);
      buf.mul_(wf);
    }
    // Row dot products as a batch of [1, h] x [h, 1] products: no [chunk, h] temporary.
    Tensor s = at::bmm(buf.view({len, 1, h}), xf.view({len, h, 1})).view({len, 1});
    s.mul_(rc).mul_(rc).mul_(rc).div_(static_cast<double>(h));
    buf.mul_(rc);
    buf.addcmul_(xf, s, -1.0);
    if (!fp32) dx2.narrow(0, b, len).copy_(buf);
  }
  return {dx, dw};
}

namespace {
class RmsNormFn : public torch::autograd::Function<RmsNormFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& w, double eps) {
    auto out = rms_norm_forward(x, w, eps);
    ctx->save_for_backward({x, w, out.rstd});
    return out.y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    auto g = rms_norm_backward(grads[0], s[0], s[1], s[2]);
    return {g.dx, g.dw.to(s[1].scalar_type()), Tensor()};
  }
};
}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& w, double eps) { return RmsNormFn::apply(x, w, eps); }

// ---- RoPE --------------------------------------------------------------------------------

RopeTables RopeTables::make(std::int64_t seq, std::int64_t head_dim, double theta, torch::ScalarType dtype,
                            torch::Device device, std::int64_t first_position) {
  const auto half = head_dim / 2;
  auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  Tensor i = torch::arange(half, f64);
  Tensor inv_freq = torch::pow(theta, -2.0 * i / static_cast<double>(head_dim));
  return make(seq, std::vector<double>(inv_freq.data_ptr<double>(), inv_freq.data_ptr<double>() + half), dtype, device,
              first_position);
}

RopeTables RopeTables::make(std::int64_t seq, const std::vector<double>& inv_freq_values, torch::ScalarType dtype,
                            torch::Device device, std::int64_t first_position) {
  auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  Tensor inv_freq = torch::tensor(inv_freq_values, f64);  // [d/2]
  Tensor pos = torch::arange(first_position, first_position + seq, f64);
  Tensor angle = torch::outer(pos, inv_freq);  // [S, d/2]
  return {angle.cos().to(device, dtype), angle.sin().to(device, dtype)};
}

RopeTables RopeTables::make(const std::vector<std::int64_t>& positions, const std::vector<double>& inv_freq_values,
                            torch::ScalarType dtype, torch::Device device) {
  auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  Tensor inv_freq = torch::tensor(inv_freq_values, f64);                   // [d/2]
  Tensor pos = torch::tensor(positions, torch::TensorOptions().dtype(torch::kLong)).to(torch::kDouble);
  Tensor angle = torch::outer(pos, inv_freq);  // [S, d/2]
  return {angle.cos().to(device, dtype), angle.sin().to(device, dtype)};
}

Tensor rope_rotate(const Tensor& x, const RopeTables& t, bool inverse) {
  Tensor out = at::empty(x.sizes(), x.options());
  rope_rotate_out(out, x, t, inverse);
  return out;
}

void rope_rotate_out(const Tensor& out, const Tensor& x, const RopeTables& t, bool inverse) {
  const auto d = x.size(-1), half = d / 2, S = x.size(1);
  Tensor cos = t.cos.narrow(0, 0, S).view({1, S, 1, half});
  Tensor sin = t.sin.narrow(0, 0, S).view({1, S, 1, half});
  Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  Tensor o1 = out.narrow(-1, 0, half), o2 = out.narrow(-1, half, half);
  const double sign = inverse ? -1.0 : 1.0;
  // o1 = x1 cos - x2 sin, o2 = x2 cos + x1 sin (inverse: sin -> -sin).
  at::mul_out(o1, x1, cos);
  o1.addcmul_(x2, sin, -sign);
  at::mul_out(o2, x2, cos);
  o2.addcmul_(x1, sin, sign);
}

namespace {
class RopeFn : public torch::autograd::Function<RopeFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const RopeTables* t) {
    ctx->saved_data["tables"] = reinterpret_cast<std::int64_t>(t);
    return rope_rotate(x, *t, false);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto* t = reinterpret_cast<const RopeTables*>(ctx->saved_data["tables"].toInt());
    return {rope_rotate(grads[0], *t, true), Tensor()};
  }
};
}  // namespace

// REQUIRES: t outlives the backward (the model owns the tables for the whole run).
Tensor rope(const Tensor& x, const RopeTables& t) { return RopeFn::apply(x, &t); }

// ---- projections ------------------------------------------------------------------------

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

// Rows [begin, begin+len) of a [n, ...] tensor.
Tensor rows(const Tensor& t, std::int64_t begin, std::int64_t len) { return t.narrow(0, begin, len); }
// Rows of tile i of a split (the planner's tile_split): all `rows`, the last one `last`.
std::int64_t tile_rows(const TileSplit& s, std::int64_t i) { return i + 1 < s.count ? s.rows : s.last; }

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

// ---- loss --------------------------------------------------------------------------------

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
