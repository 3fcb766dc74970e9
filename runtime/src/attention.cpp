// Causal GQA attention: whole (all heads at once) and head-chunked (stages of `chunk` heads).
#include <cmath>

#include <torch/torch.h>

#include "longctx/runtime/attention.h"

namespace longctx::runtime {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

FlashOut flash_forward(const Tensor& q, const Tensor& k, const Tensor& v) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  if (q.is_cuda()) {
    auto r = at::_scaled_dot_product_flash_attention(q, k, v, 0.0, /*is_causal=*/true, false, scale);
    return {std::get<0>(r), std::get<1>(r)};
  }
  auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, /*is_causal=*/true, {}, scale);
  return {out, lse};
}

std::tuple<Tensor, Tensor, Tensor> flash_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                                  const Tensor& v, const Tensor& out, const Tensor& lse) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  if (q.is_cuda()) {
    // No dropout: the RNG state is never read, but the signature wants tensors.
    Tensor zero = at::zeros({}, q.options().dtype(torch::kLong));
    return at::_scaled_dot_product_flash_attention_backward(dout, q, k, v, out, lse, Tensor(), Tensor(), q.size(2),
                                                            k.size(2), 0.0, true, zero, zero, scale);
  }
  return at::_scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, lse, 0.0, true, {}, scale);
}

Tensor expand_kv(const Tensor& k, std::int64_t group) {
  if (group == 1) return k;
  const auto b = k.size(0), S = k.size(1), K = k.size(2), d = k.size(3);
  return k.unsqueeze(3).expand({b, S, K, group, d}).reshape({b, S, K * group, d});
}

namespace {

// [b,S,K*group,d] gradient of expanded k/v -> [b,S,K,d], summed over each group.
Tensor reduce_kv(const Tensor& dk_expanded_bshd, std::int64_t group) {
  if (group == 1) return dk_expanded_bshd.contiguous();
  const auto b = dk_expanded_bshd.size(0), S = dk_expanded_bshd.size(1), H = dk_expanded_bshd.size(2),
             d = dk_expanded_bshd.size(3);
  return dk_expanded_bshd.reshape({b, S, H / group, group, d}).sum(3);
}

// b,S,H,d <-> b,H,S,d views.
Tensor bhsd(const Tensor& t) { return t.transpose(1, 2); }

class AttentionFn : public torch::autograd::Function<AttentionFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v) {
    const auto group = q.size(2) / k.size(2);
    Tensor out, lse;
    {
      Tensor ke = expand_kv(k, group), ve = expand_kv(v, group);  // scratch, freed at scope end
      auto f = flash_forward(bhsd(q), bhsd(ke), bhsd(ve));
      out = bhsd(f.out).contiguous();  // the CPU kernel already writes [b,S,H,d]: no copy
      lse = f.lse;
    }
    ctx->save_for_backward({q, k, v, out, lse});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    const Tensor &q = s[0], &k = s[1], &v = s[2], &out = s[3], &lse = s[4];
    const auto group = q.size(2) / k.size(2);
    Tensor dout = grads[0].contiguous();
    Tensor dq, dk, dv;
    {
      Tensor ke = expand_kv(k, group), ve = expand_kv(v, group);
      auto [dq_e, dk_e, dv_e] = flash_backward(bhsd(dout), bhsd(q), bhsd(ke), bhsd(ve), bhsd(out), lse);
      dq = bhsd(dq_e).contiguous();
      ke = Tensor();
      ve = Tensor();
      dk = reduce_kv(bhsd(dk_e), group);
      dk_e = Tensor();
      dv = reduce_kv(bhsd(dv_e), group);
    }
    return {dq, dk, dv};
  }
};

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v) { return AttentionFn::apply(q, k, v); }

// ---- head-chunked attention ----------------------------------------------------------------

namespace {

// Which heads a stage covers. With group = H/K query heads per kv head, a stage of c heads
// reads max(1, c/group) kv heads, each repeated c/kv_count times.
struct Stage {
  std::int64_t q_begin, q_count, kv_begin, kv_count, repeat;
};
Stage stage_of(std::int64_t s, std::int64_t chunk, const AttentionShape& sh) {
  const auto group = sh.heads / sh.kv_heads;
  const auto kv_count = std::max<std::int64_t>(1, chunk / group);
  return {s * chunk, chunk, (s * chunk) / group, kv_count, chunk / kv_count};
}

// Projects rows [begin, begin+count) heads of w for x2 [n,h]: [b,S,count,d].
Tensor project(const Tensor& x2, const Tensor& w, std::int64_t begin, std::int64_t count, std::int64_t b,
               std::int64_t S, std::int64_t d) {
  return at::mm(x2, w.narrow(0, begin * d, count * d).t()).view({b, S, count, d});
}

// The forward of q or k for some heads: projection -> optional per-head norm -> rope.
struct QkRecompute {
  Tensor pre;    // before the norm, kept for its backward; undefined without qk norm
  Tensor rstd;   // undefined without qk norm
  Tensor rotated;
};
QkRecompute q_or_k(const Tensor& x2, const Tensor& w, const Tensor& norm_w, std::int64_t begin, std::int64_t count,
                   std::int64_t b, std::int64_t S, std::int64_t d, double eps, const RopeTables& rope) {
  QkRecompute r;
  Tensor normed = project(x2, w, begin, count, b, S, d);
  if (norm_w.defined()) {
    r.pre = std::move(normed);
    auto n = rms_norm_forward(r.pre, norm_w, eps);
    normed = n.y;
    r.rstd = n.rstd;
  }
  r.rotated = rope_rotate(normed, rope, false);  // the projection dies here without qk norm
  return r;
}

// Backpropagates d(rotated) of q or k heads [begin, begin+count) into dx, dw and d(norm_w).
void q_or_k_backward(const Tensor& d_rotated, const QkRecompute& r, const Tensor& x2, const Tensor& w,
                     const Tensor& norm_w, std::int64_t begin, std::int64_t count, std::int64_t d,
                     const RopeTables& rope, Tensor& dx, Tensor& dw, Tensor& d_norm_w) {
  Tensor g = rope_rotate(d_rotated, rope, true);
  if (norm_w.defined()) {
    auto ng = rms_norm_backward(g, r.pre, norm_w, r.rstd);
    g = ng.dx;
    d_norm_w.add_(ng.dw);
  }
  Tensor g2 = g.reshape({x2.size(0), count * d});
  dw.narrow(0, begin * d, count * d).addmm_(g2.t(), x2);
  dx.addmm_(g2, w.narrow(0, begin * d, count * d));
}

class HeadChunkedAttentionFn : public torch::autograd::Function<HeadChunkedAttentionFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& wq, const Tensor& wk, const Tensor& wv,
                        const std::optional<Tensor>& q_norm_opt, const std::optional<Tensor>& k_norm_opt,
                        const AttentionShape* sh, const RopeTables* rope, std::int64_t chunk) {
    const Tensor q_norm = q_norm_opt.value_or(Tensor()), k_norm = k_norm_opt.value_or(Tensor());
    const auto b = x.size(0), S = x.size(1), d = sh->head_dim, H = sh->heads;
    Tensor x2 = x.reshape({b * S, x.size(2)});
    Tensor out = at::empty({b, S, H * d}, x.options());
    Tensor lse = at::empty({b, H, S}, x.options().dtype(torch::kFloat));
    Tensor out4 = out.view({b, S, H, d});
    Tensor ke, ve;
    std::int64_t cached_kv = -1;
    for (std::int64_t s = 0; s < H / chunk; ++s) {
      const Stage st = stage_of(s, chunk, *sh);
      if (st.kv_begin != cached_kv) {
        ke = ve = Tensor();  // the previous group's buffers die before this group's are made
        Tensor k = q_or_k(x2, wk, k_norm, st.kv_begin, st.kv_count, b, S, d, sh->norm_eps, *rope).rotated;
        ke = expand_kv(k, st.repeat);
        k = Tensor();
        ve = expand_kv(project(x2, wv, st.kv_begin, st.kv_count, b, S, d), st.repeat);
        cached_kv = st.kv_begin;
      }
      Tensor q = q_or_k(x2, wq, q_norm, st.q_begin, st.q_count, b, S, d, sh->norm_eps, *rope).rotated;
      auto f = flash_forward(bhsd(q), bhsd(ke), bhsd(ve));
      q = Tensor();
      out4.narrow(2, st.q_begin, st.q_count).copy_(bhsd(f.out));
      lse.narrow(1, st.q_begin, st.q_count).copy_(f.lse);
    }
    ctx->save_for_backward({x, wq, wk, wv, q_norm, k_norm, out, lse});
    ctx->saved_data["shape"] = reinterpret_cast<std::int64_t>(sh);
    ctx->saved_data["rope"] = reinterpret_cast<std::int64_t>(rope);
    ctx->saved_data["chunk"] = chunk;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &wq = saved[1], &wk = saved[2], &wv = saved[3], &q_norm = saved[4],
                 &k_norm = saved[5], &out = saved[6], &lse = saved[7];
    const auto* sh = reinterpret_cast<const AttentionShape*>(ctx->saved_data["shape"].toInt());
    const auto* rope = reinterpret_cast<const RopeTables*>(ctx->saved_data["rope"].toInt());
    const auto chunk = ctx->saved_data["chunk"].toInt();
    const auto b = x.size(0), S = x.size(1), d = sh->head_dim, H = sh->heads;
    Tensor x2 = x.reshape({b * S, x.size(2)});
    Tensor dout4 = grads[0].contiguous().view({b, S, H, d});
    Tensor out4 = out.view({b, S, H, d});
    Tensor dx = at::zeros_like(x2);
    Tensor dwq = at::zeros_like(wq), dwk = at::zeros_like(wk), dwv = at::zeros_like(wv);
    Tensor dqn = q_norm.defined() ? at::zeros(q_norm.sizes(), q_norm.options().dtype(torch::kFloat)) : Tensor();
    Tensor dkn = k_norm.defined() ? at::zeros(k_norm.sizes(), k_norm.options().dtype(torch::kFloat)) : Tensor();

    // The kv heads of the current group: recomputed once, their gradients accumulated over
    // the group's stages and pushed into dx and the weights when the group changes.
    QkRecompute k;
    Tensor v, ke, ve, dk_acc, dv_acc;
    Stage kv_stage{0, 0, -1, 0, 0};
    auto finish_kv = [&] {
      if (kv_stage.kv_begin < 0) return;
      ke = ve = Tensor();
      q_or_k_backward(dk_acc, k, x2, wk, k_norm, kv_stage.kv_begin, kv_stage.kv_count, d, *rope, dx, dwk, dkn);
      Tensor dv2 = dv_acc.reshape({b * S, kv_stage.kv_count * d});
      dwv.narrow(0, kv_stage.kv_begin * d, kv_stage.kv_count * d).addmm_(dv2.t(), x2);
      dx.addmm_(dv2, wv.narrow(0, kv_stage.kv_begin * d, kv_stage.kv_count * d));
      k = QkRecompute();
      v = dk_acc = dv_acc = Tensor();
    };
    for (std::int64_t s = 0; s < H / chunk; ++s) {
      const Stage st = stage_of(s, chunk, *sh);
      if (st.kv_begin != kv_stage.kv_begin) {
        finish_kv();
        kv_stage = st;
        k = q_or_k(x2, wk, k_norm, st.kv_begin, st.kv_count, b, S, d, sh->norm_eps, *rope);
        v = project(x2, wv, st.kv_begin, st.kv_count, b, S, d);
        ke = expand_kv(k.rotated, st.repeat);
        ve = expand_kv(v, st.repeat);
        dk_acc = at::zeros_like(k.rotated);
        dv_acc = at::zeros_like(v);
      }
      QkRecompute q = q_or_k(x2, wq, q_norm, st.q_begin, st.q_count, b, S, d, sh->norm_eps, *rope);
      auto [dq_e, dk_e, dv_e] =
          flash_backward(bhsd(dout4.narrow(2, st.q_begin, st.q_count)), bhsd(q.rotated), bhsd(ke), bhsd(ve),
                         bhsd(out4.narrow(2, st.q_begin, st.q_count)), lse.narrow(1, st.q_begin, st.q_count));
      dk_acc.add_(reduce_kv(bhsd(dk_e), st.repeat));
      dk_e = Tensor();
      dv_acc.add_(reduce_kv(bhsd(dv_e), st.repeat));
      dv_e = Tensor();
      q_or_k_backward(bhsd(dq_e), q, x2, wq, q_norm, st.q_begin, st.q_count, d, *rope, dx, dwq, dqn);
    }
    finish_kv();
    return {dx.view(x.sizes()),
            dwq,
            dwk,
            dwv,
            dqn.defined() ? dqn.to(q_norm.scalar_type()) : Tensor(),
            dkn.defined() ? dkn.to(k_norm.scalar_type()) : Tensor(),
            Tensor(),
            Tensor(),
            Tensor()};
  }
};

}  // namespace

// REQUIRES: s and rope outlive the backward (the model owns them).
Tensor head_chunked_attention(const Tensor& x, const AttentionWeights& w, const AttentionShape& s,
                              const RopeTables& rope, std::int64_t chunk) {
  // Autograd functions take no undefined tensors: models without qk norm pass none.
  auto opt = [](const Tensor& t) { return t.defined() ? std::optional<Tensor>(t) : std::nullopt; };
  return HeadChunkedAttentionFn::apply(x, w.wq, w.wk, w.wv, opt(w.q_norm), opt(w.k_norm), &s, &rope, chunk);
}

}  // namespace longctx::runtime
