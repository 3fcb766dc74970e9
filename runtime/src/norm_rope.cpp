// RMSNorm and RoPE: each forward allocates what the planner's inventory names, and each
// backward only its outputs plus the scratch it documents.
#include "longctx/runtime/norm_rope.h"

#include <torch/torch.h>

#include "row_tiles.h"

namespace longctx::runtime {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- RMSNorm -----------------------------------------------------------------------------


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

}  // namespace longctx::runtime
