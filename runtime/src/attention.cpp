// Causal GQA attention: whole (all heads at once) and head-chunked (stages of `chunk` heads).
#include <cmath>

#include <fmt/format.h>
#include <torch/torch.h>

#include "longctx/runtime/attention.h"
#include "longctx/runtime/ring_attention.h"
#include "longctx/runtime/ulysses.h"

namespace longctx::runtime {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// [b,H,S,d] -> [b,H,S,to], zeros in the added columns (a copy; the input when d == to).
// Zero columns change neither q.k nor the output's first d columns, and the scale is passed
// from the real d, so the result is the unpadded attention's.
Tensor pad_head_dim(const Tensor& t, std::int64_t to) {
  const auto d = t.size(-1);
  return d == to ? t : at::constant_pad_nd(t, {0, to - d}, 0);
}
std::int64_t cuda_head_dim(std::int64_t d) {
  return (d + kCudaFlashHeadDimMultiple - 1) / kCudaFlashHeadDimMultiple * kCudaFlashHeadDimMultiple;
}

}  // namespace

void check_flash_backward_inputs(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& out, const Tensor& lse) {
  // The CUDA flash backward indexes softmax_lse as a dense [b,H,S] array (flash_api.cpp,
  // mha_bwd: no stride of it is passed), and q, k, v, out, dout by their strides with the
  // head dimension dense ("must have contiguous last dimension"). The CPU kernel reads
  // strides throughout (its own forward returns lse as a [b,S,H] buffer seen as [b,H,S]).
  if (!lse.is_contiguous())
    throw FlashLayoutError(fmt::format("flash backward: the log-sum-exp {} with strides {} is not contiguous; the CUDA "
                                       "kernel reads it as dense [b,H,S]",
                                       c10::str(lse.sizes()), c10::str(lse.strides())));
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"dout", &dout}, {"q", &q}, {"k", &k},
                                {"v", &v}, {"out", &out}})
    if (t->stride(-1) != 1)
      throw FlashLayoutError(fmt::format("flash backward: {} {} has head-dimension stride {}; the kernels need 1", name,
                                         c10::str(t->sizes()), t->stride(-1)));
}

FlashOut flash_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const auto d = q.size(-1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  if (q.is_cuda()) {
    const auto dp = cuda_head_dim(d);
    auto r = at::_scaled_dot_product_flash_attention(pad_head_dim(q, dp), pad_head_dim(k, dp), pad_head_dim(v, dp),
                                                     0.0, causal, false, scale);
    Tensor out = std::get<0>(r);
    return {dp == d ? out : out.narrow(-1, 0, d), std::get<1>(r)};
  }
  auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, {}, scale);
  return {out, lse};
}

std::tuple<Tensor, Tensor, Tensor> flash_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                                  const Tensor& v, const Tensor& out, const Tensor& lse, bool causal) {
  const auto d = q.size(-1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  if (q.is_cuda()) {
    check_flash_backward_inputs(dout, q, k, v, out, lse);
    const auto dp = cuda_head_dim(d);
    // No dropout: the RNG state is never read, but the signature wants tensors.
    Tensor zero = at::zeros({}, q.options().dtype(torch::kLong));
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_backward(
        pad_head_dim(dout, dp), pad_head_dim(q, dp), pad_head_dim(k, dp), pad_head_dim(v, dp), pad_head_dim(out, dp),
        lse, Tensor(), Tensor(), q.size(2), k.size(2), 0.0, causal, zero, zero, scale);
    if (dp == d) return {dq, dk, dv};
    return {dq.narrow(-1, 0, d), dk.narrow(-1, 0, d), dv.narrow(-1, 0, d)};
  }
  return at::_scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, lse, 0.0, causal, {}, scale);
}

Tensor expand_kv(const Tensor& k, std::int64_t group) {
  if (group == 1) return k;
  const auto b = k.size(0), S = k.size(1), K = k.size(2), d = k.size(3);
  return k.unsqueeze(3).expand({b, S, K, group, d}).reshape({b, S, K * group, d});
}

namespace {

// Whether the flash kernel of k's device takes grouped k and v (fewer kv heads than query
// heads, query head i reading kv head i / group) as they are. LibTorch's CPU kernel does
// (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp, cpu_flash_attention and
// cpu_flash_attention_backward, as at::scaled_dot_product_attention(..., enable_gqa=true) on
// the CPU calls them): its dk and dv come back over the kv heads, summed over each group in
// the kernel's fp32 accumulation. The CUDA path still expands: FlashAttention-2 takes grouped
// heads too, but its backward allocates dk and dv over the query heads internally
// (flash_api.cpp, mha_bwd: dk_expanded, dv_expanded), a layout the planner's CUDA footprint
// keeps as measured, and no GPU has run the grouped call here yet.
bool kernel_takes_grouped_kv(const Tensor& k) { return !k.is_cuda(); }

}  // namespace

Tensor kv_for_kernel(const Tensor& k, std::int64_t group) {
  return kernel_takes_grouped_kv(k) ? k : expand_kv(k, group);
}

Tensor reduce_kv(const Tensor& dk_bshd, std::int64_t kv_heads) {
  if (dk_bshd.size(2) == kv_heads) return dk_bshd.contiguous();
  const auto b = dk_bshd.size(0), S = dk_bshd.size(1), H = dk_bshd.size(2), d = dk_bshd.size(3);
  return dk_bshd.reshape({b, S, kv_heads, H / kv_heads, d}).sum(3);
}

namespace {

// b,S,H,d <-> b,H,S,d views.
Tensor bhsd(const Tensor& t) { return t.transpose(1, 2); }

class AttentionFn : public torch::autograd::Function<AttentionFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v) {
    const auto group = q.size(2) / k.size(2);
    Tensor out, lse;
    {
      // CUDA: expanded copies, scratch freed at scope end; CPU: k and v themselves.
      Tensor ke = kv_for_kernel(k, group), ve = kv_for_kernel(v, group);
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
      Tensor ke = kv_for_kernel(k, group), ve = kv_for_kernel(v, group);
      auto [dq_e, dk_e, dv_e] = flash_backward(bhsd(dout), bhsd(q), bhsd(ke), bhsd(ve), bhsd(out), lse);
      dq = bhsd(dq_e).contiguous();
      ke = Tensor();
      ve = Tensor();
      dk = reduce_kv(bhsd(dk_e), k.size(2));
      dk_e = Tensor();
      dv = reduce_kv(bhsd(dv_e), v.size(2));
    }
    return {dq, dk, dv};
  }
};

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v) { return AttentionFn::apply(q, k, v); }

// ---- head-chunked attention ----------------------------------------------------------------

namespace {

// One stage: c query heads per rank starting at local head qb, and the kv heads they read:
// local kv heads [kb, kb + kv_count), each repeated `repeat` times (GQA group = hl / kvr).
struct Stage {
  std::int64_t qb, c, kb, kv_count, repeat;
};
Stage stage_of(std::int64_t s, std::int64_t chunk, const UlyssesLayout& L) {
  const auto group = L.hl / L.kvr;
  const auto kv_count = std::max<std::int64_t>(1, chunk / group);
  return {s * chunk, chunk, (s * chunk) / group, kv_count, chunk / kv_count};
}

// Projects heads [begin, begin+count) of w for x2 [b*n,h] into out [b,n,count,d].
void project_heads(const Tensor& out, const Tensor& x2, const Tensor& w, std::int64_t begin, std::int64_t count,
                   std::int64_t d) {
  Tensor o2 = out.view({x2.size(0), count * d});
  at::mm_out(o2, x2, w.narrow(0, begin * d, count * d).t());
}

// What q or k heads bound for one rank need in backward: the projection before the
// per-head norm and its rstd (qk-norm models only).
struct QkParts {
  Tensor pre, rstd;
};

// Send buffer [u,b,n,count,d] of q or k: slice j holds heads first(j).. of this rank's tokens,
// projected, normalized (qk norm) and rotated. `keep` (backward) collects what each slice's
// backward needs.
template <class First>
Tensor qk_send(const Tensor& x2, const Tensor& w, const Tensor& norm_w, First first, std::int64_t count,
               std::int64_t b, std::int64_t n, std::int64_t d, double eps, const RopeTables& rope,
               const UlyssesLayout& L, std::vector<QkParts>* keep) {
  Tensor send = at::empty({L.u, b, n, count, d}, x2.options());
  for (std::int64_t j = 0; j < L.u; ++j) {
    Tensor pre = at::empty({b, n, count, d}, x2.options());
    project_heads(pre, x2, w, first(j), count, d);
    QkParts parts;
    Tensor normed = pre;
    if (norm_w.defined()) {
      auto nrm = rms_norm_forward(pre, norm_w, eps);
      normed = nrm.y;
      parts = {pre, nrm.rstd};
    }
    rope_rotate_out(send[j], normed, rope, false);
    if (keep) keep->push_back(std::move(parts));
  }
  return send;
}

template <class First>
Tensor v_send(const Tensor& x2, const Tensor& w, First first, std::int64_t count, std::int64_t b, std::int64_t n,
              std::int64_t d, const UlyssesLayout& L) {
  Tensor send = at::empty({L.u, b, n, count, d}, x2.options());
  for (std::int64_t j = 0; j < L.u; ++j) project_heads(send[j], x2, w, first(j), count, d);
  return send;
}

// Backpropagates d(rotated) [b,n,count,d] of heads [begin, begin+count) into dx, dw, d(norm_w).
void q_or_k_backward(const Tensor& d_rotated, const QkParts& parts, const Tensor& x2, const Tensor& w,
                     const Tensor& norm_w, std::int64_t begin, std::int64_t count, std::int64_t d,
                     const RopeTables& rope, Tensor& dx, Tensor& dw, Tensor& d_norm_w) {
  Tensor g = rope_rotate(d_rotated, rope, true);
  if (norm_w.defined()) {
    auto ng = rms_norm_backward(g, parts.pre, norm_w, parts.rstd);
    g = ng.dx;
    d_norm_w.add_(ng.dw);
  }
  Tensor g2 = g.reshape({x2.size(0), count * d});
  dw.narrow(0, begin * d, count * d).addmm_(g2.t(), x2);
  dx.addmm_(g2, w.narrow(0, begin * d, count * d));
}

// The exchanges of the staged schedule; on one rank they are views.
Tensor to_seq(const UlyssesLayout& L, const Tensor& send) {
  return to_sequence(L.u == 1 ? send : L.comm->all_to_all(send));
}
Tensor to_rank_slices(const UlyssesLayout& L, const Tensor& seq_side) {
  return L.u == 1 ? seq_side.unsqueeze(0) : L.comm->all_to_all(to_ranks(seq_side, L.u));
}
// Heads [j*hl + qb, +c) of t4 [b,n,H,d] from every rank j, as [b,S,c,d] on this rank.
Tensor stage_heads(const UlyssesLayout& L, const Tensor& t4, const Stage& st) {
  if (L.u == 1) return t4.narrow(2, st.qb, st.c);
  Tensor send = at::empty({L.u, t4.size(0), t4.size(1), st.c, t4.size(3)}, t4.options());
  for (std::int64_t j = 0; j < L.u; ++j) send[j].copy_(t4.narrow(2, j * L.hl + st.qb, st.c));
  return to_seq(L, send);
}

class HeadChunkedAttentionFn : public torch::autograd::Function<HeadChunkedAttentionFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& wq, const Tensor& wk, const Tensor& wv,
                        const std::optional<Tensor>& q_norm_opt, const std::optional<Tensor>& k_norm_opt,
                        const AttentionShape* sh, const RopeTables* rope, const UlyssesLayout* L,
                        std::int64_t chunk, const RingGroup* ring) {
    const Tensor q_norm = q_norm_opt.value_or(Tensor()), k_norm = k_norm_opt.value_or(Tensor());
    const auto b = x.size(0), n = x.size(1), d = sh->head_dim, H = sh->heads, S = n * L->u;
    // With a ring each stage's attention is ring attention over the Ulysses group's S tokens:
    // k and v stay grouped (each block expands its own), the log-sum-exp is the ring's
    // [2, b, chunk, S/2] laid in the stage's slot.
    const bool ringed = ring->size > 1;
    const double eps = sh->norm_eps;
    Tensor x2 = x.reshape({b * n, x.size(2)});
    Tensor out = at::empty({b, n, H * d}, x.options());
    // The log-sum-exp per stage [stages, b, c, S]: the bytes of one [b, hl, S], laid out so
    // each stage's is contiguous (a head slice of [b, hl, S] is not once b > 1, and the CUDA
    // backward reads it as dense).
    Tensor lse = at::empty({L->hl / chunk, b, chunk, S}, x.options().dtype(torch::kFloat));
    Tensor out4 = out.view({b, n, H, d});
    Tensor ke, ve;
    std::int64_t cached_kv = -1;
    for (std::int64_t s = 0; s < L->hl / chunk; ++s) {
      const Stage st = stage_of(s, chunk, *L);
      auto q_first = [&](std::int64_t j) { return j * L->hl + st.qb; };
      auto kv_first = [&](std::int64_t j) { return L->kv_head(j, st.kb); };
      const std::int64_t repeat = ringed ? 1 : st.repeat;
      if (st.kb != cached_kv) {
        ke = ve = Tensor();  // the previous group's buffers die before this group's are made
        ke = kv_for_kernel(
            to_seq(*L, qk_send(x2, wk, k_norm, kv_first, st.kv_count, b, n, d, eps, *rope, *L, nullptr)), repeat);
        ve = kv_for_kernel(to_seq(*L, v_send(x2, wv, kv_first, st.kv_count, b, n, d, *L)), repeat);
        cached_kv = st.kb;
      }
      Tensor q = to_seq(*L, qk_send(x2, wq, q_norm, q_first, st.c, b, n, d, eps, *rope, *L, nullptr));
      Tensor o;
      if (ringed) {
        RingResult r = ring_forward(q, ke, ve, *ring);
        q = Tensor();
        lse[s].view({2, b, chunk, S / 2}).copy_(r.lse);
        o = to_rank_slices(*L, r.out);
      } else {
        auto f = flash_forward(bhsd(q), bhsd(ke), bhsd(ve));
        q = Tensor();
        lse[s].copy_(f.lse);
        o = to_rank_slices(*L, bhsd(f.out));
      }
      for (std::int64_t j = 0; j < L->u; ++j) out4.narrow(2, q_first(j), st.c).copy_(o[j]);
    }
    ctx->save_for_backward({x, wq, wk, wv, q_norm, k_norm, out, lse});
    ctx->saved_data["shape"] = reinterpret_cast<std::int64_t>(sh);
    ctx->saved_data["rope"] = reinterpret_cast<std::int64_t>(rope);
    ctx->saved_data["layout"] = reinterpret_cast<std::int64_t>(L);
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["ring"] = reinterpret_cast<std::int64_t>(ring);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &wq = saved[1], &wk = saved[2], &wv = saved[3], &q_norm = saved[4],
                 &k_norm = saved[5], &out = saved[6], &lse = saved[7];
    const auto* sh = reinterpret_cast<const AttentionShape*>(ctx->saved_data["shape"].toInt());
    const auto* rope = reinterpret_cast<const RopeTables*>(ctx->saved_data["rope"].toInt());
    const auto& L = *reinterpret_cast<const UlyssesLayout*>(ctx->saved_data["layout"].toInt());
    const auto chunk = ctx->saved_data["chunk"].toInt();
    const auto& ring = *reinterpret_cast<const RingGroup*>(ctx->saved_data["ring"].toInt());
    const bool ringed = ring.size > 1;
    const auto b = x.size(0), n = x.size(1), d = sh->head_dim, H = sh->heads, S = n * L.u;
    const double eps = sh->norm_eps;
    Tensor x2 = x.reshape({b * n, x.size(2)});
    Tensor dout4 = grads[0].contiguous().view({b, n, H, d});
    Tensor out4 = out.view({b, n, H, d});
    Tensor dx = at::zeros_like(x2);
    Tensor dwq = at::zeros_like(wq), dwk = at::zeros_like(wk), dwv = at::zeros_like(wv);
    Tensor dqn = q_norm.defined() ? at::zeros(q_norm.sizes(), q_norm.options().dtype(torch::kFloat)) : Tensor();
    Tensor dkn = k_norm.defined() ? at::zeros(k_norm.sizes(), k_norm.options().dtype(torch::kFloat)) : Tensor();

    // The kv heads of the current group: recomputed once, their gradients accumulated over
    // the group's stages, sent back and pushed into dx and the weights when the group changes.
    std::vector<QkParts> k_parts;
    Tensor ke, ve, dk_acc, dv_acc;
    Stage kv_stage{0, 0, -1, 0, 0};
    auto kv_first = [&](std::int64_t j) { return L.kv_head(j, kv_stage.kb); };
    auto finish_kv = [&] {
      if (kv_stage.kb < 0) return;
      ke = ve = Tensor();
      Tensor dk = to_rank_slices(L, dk_acc);
      dk_acc = Tensor();
      for (std::int64_t j = 0; j < L.u; ++j)
        q_or_k_backward(dk[j], k_parts[static_cast<std::size_t>(j)], x2, wk, k_norm, kv_first(j), kv_stage.kv_count,
                        d, *rope, dx, dwk, dkn);
      dk = Tensor();
      k_parts.clear();
      Tensor dv = to_rank_slices(L, dv_acc);
      dv_acc = Tensor();
      for (std::int64_t j = 0; j < L.u; ++j) {
        Tensor dv2 = dv[j].reshape({b * n, kv_stage.kv_count * d});
        dwv.narrow(0, kv_first(j) * d, kv_stage.kv_count * d).addmm_(dv2.t(), x2);
        dx.addmm_(dv2, wv.narrow(0, kv_first(j) * d, kv_stage.kv_count * d));
      }
    };
    for (std::int64_t s = 0; s < L.hl / chunk; ++s) {
      const Stage st = stage_of(s, chunk, L);
      auto q_first = [&](std::int64_t j) { return j * L.hl + st.qb; };
      if (st.kb != kv_stage.kb) {
        finish_kv();
        kv_stage = st;
        const std::int64_t repeat = ringed ? 1 : st.repeat;
        Tensor k = to_seq(L, qk_send(x2, wk, k_norm, kv_first, st.kv_count, b, n, d, eps, *rope, L, &k_parts));
        ke = kv_for_kernel(k, repeat);
        dk_acc = at::zeros_like(k);
        k = Tensor();
        Tensor v = to_seq(L, v_send(x2, wv, kv_first, st.kv_count, b, n, d, L));
        ve = kv_for_kernel(v, repeat);
        dv_acc = at::zeros_like(v);
      }
      std::vector<QkParts> q_parts;
      Tensor q = to_seq(L, qk_send(x2, wq, q_norm, q_first, st.c, b, n, d, eps, *rope, L, &q_parts));
      Tensor d_o = stage_heads(L, dout4, st), o = stage_heads(L, out4, st);
      Tensor dq;
      if (ringed) {
        auto [dq_r, dk_r, dv_r] = ring_backward(d_o, q, ke, ve, o, lse[s].view({2, b, chunk, S / 2}), ring);
        q = d_o = o = Tensor();
        dk_acc.add_(dk_r);
        dk_r = Tensor();
        dv_acc.add_(dv_r);
        dv_r = Tensor();
        dq = to_rank_slices(L, dq_r);
      } else {
        // This stage's log-sum-exp is a slice the step made, not a kernel's output: checked on
        // every device, so a CPU run catches a layout the CUDA kernel would misread.
        check_flash_backward_inputs(bhsd(d_o), bhsd(q), bhsd(ke), bhsd(ve), bhsd(o), lse[s]);
        auto [dq_e, dk_e, dv_e] = flash_backward(bhsd(d_o), bhsd(q), bhsd(ke), bhsd(ve), bhsd(o), lse[s]);
        q = d_o = o = Tensor();
        dk_acc.add_(reduce_kv(bhsd(dk_e), st.kv_count));
        dk_e = Tensor();
        dv_acc.add_(reduce_kv(bhsd(dv_e), st.kv_count));
        dv_e = Tensor();
        dq = to_rank_slices(L, bhsd(dq_e));
      }
      for (std::int64_t j = 0; j < L.u; ++j)
        q_or_k_backward(dq[j], q_parts[static_cast<std::size_t>(j)], x2, wq, q_norm, q_first(j), st.c, d, *rope, dx,
                        dwq, dqn);
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
            Tensor(),
            Tensor(),
            Tensor()};
  }
};

}  // namespace

// REQUIRES: s, rope, layout and ring outlive the backward (the step owns them).
Tensor head_chunked_attention(const Tensor& x, const AttentionWeights& w, const AttentionShape& s,
                              const RopeTables& rope, const UlyssesLayout& layout, std::int64_t chunk,
                              const RingGroup& ring) {
  // Autograd functions take no undefined tensors: models without qk norm pass none.
  auto opt = [](const Tensor& t) { return t.defined() ? std::optional<Tensor>(t) : std::nullopt; };
  return HeadChunkedAttentionFn::apply(x, w.wq, w.wk, w.wv, opt(w.q_norm), opt(w.k_norm), &s, &rope, &layout, chunk,
                                       &ring);
}

}  // namespace longctx::runtime
