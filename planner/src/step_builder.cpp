// The step graph of one rank. Shapes use these names (docs/memory-model.md):
//   b micro-batch, S sequence, u Ulysses degree, n = b*S/u tokens on this rank,
//   h hidden, I intermediate, V vocab, H query heads, K kv heads, d head_dim,
//   hl = H/u heads per rank after the all-to-all, kvr kv heads per rank after it,
//   e bytes per activation element, g bytes per gradient element, N ranks.
#include "longctx/planner/step_builder.h"

#include <algorithm>
#include <fmt/format.h>

namespace longctx {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Tensors of one layer's forward that its backward reads.
struct LayerActs {
  int in = -1;  // layer input (residual stream)
  int rstd1 = -1, xn1 = -1;
  int q_pre = -1, k_pre = -1, rstd_q = -1, rstd_k = -1;  // q/k norm inputs (Qwen3)
  int q_sp = -1, k_sp = -1, v_sp = -1, o_sp = -1, lse = -1;
  int o_loc = -1;  // attention output on this rank's tokens, all heads: o_proj's input
  int mid = -1, rstd2 = -1, xn2 = -1;
  int gate = -1, up = -1, act = -1;
  int out = -1;
  int last_forward_op = -1;
};

class Builder {
 public:
  explicit Builder(const StepInputs& in) : in_(in), m_(in.model), p_(in.parallel) {
    b_ = in.train.micro_batch;
    S_ = in.train.seq;
    u_ = p_.ulysses;
    n_ = b_ * S_ / u_;
    N_ = in.cluster.world();
    h_ = m_.hidden;
    I_ = m_.intermediate;
    V_ = m_.vocab;
    H_ = m_.heads;
    K_ = m_.kv_heads;
    d_ = m_.head_dim;
    hl_ = H_ / u_;
    kvr_ = kv_heads_per_rank(m_, p_.ulysses);
    e_ = bytes_of(in.train.dtype);
    g_ = bytes_of(in.train.grad_dtype);
    master_ = in.train.dtype != DType::FP32;
    cpu_ = in.backend == Backend::Cpu;
    zero3_ = p_.sharding == Sharding::Zero3;
    // On one rank a gradient's shard is the whole gradient: nothing to reduce-scatter.
    shard_grads_ = (p_.sharding == Sharding::Zero2 || zero3_) && N_ > 1;
    shard_optim_ = p_.sharding != Sharding::None;
  }

  StepGraph build() {
    // About 40 tensors and 30 ops a layer: reserve once instead of regrowing.
    graph_.reserve(static_cast<std::size_t>(m_.layers) * 48 + 128, static_cast<std::size_t>(m_.layers) * 36 + 128);
    persistent_state();
    forward();
    loss();
    backward();
    if (!in_.prefix_only) optimizer();
    graph_.finalize();
    return std::move(graph_);
  }

 private:
  // ---- helpers ---------------------------------------------------------------------------
  int tensor(Name name, std::int64_t bytes, Category c, Place place = Place::Device) {
    TensorSpec t;
    t.name = name;
    t.bytes = bytes;
    t.category = c;
    t.place = place;
    return graph_.add_tensor(std::move(t));
  }
  int persistent(Name name, std::int64_t bytes, Category c, Place place) {
    const int t = tensor(name, bytes, c, place);
    graph_.tensor(t).persistent = true;
    return t;
  }
  // Memory traffic counts the activations an op reads and writes and its workspace written
  // and read once per repeat (tile or stage); weights and gradients are left out, so a tiled
  // or staged op moves the same bytes as the plain ops it replaces and differs in launches.
  int op(Name name, Phase phase, int layer, Ids inputs, Ids outputs, std::int64_t workspace = 0,
         double flops = 0, OpKind kind = OpKind::Memory, int launches = 1, int repeats = 1) {
    OpSpec o;
    o.name = name;
    o.phase = phase;
    o.layer = layer;
    o.inputs = inputs;
    o.outputs = outputs;
    o.workspace_bytes = workspace;
    o.flops = flops;
    o.kind = flops > 0 && kind == OpKind::Memory ? OpKind::Matmul : kind;
    o.launches = launches;
    auto traffic = [&](int t) {
      const auto& ts = graph_.tensor(t);
      if (ts.category != Category::Params && ts.category != Category::Grads) o.memory_bytes += double(ts.bytes);
    };
    for (int t : o.inputs) traffic(t);
    for (int t : o.outputs) traffic(t);
    o.memory_bytes += 2.0 * double(workspace) * repeats;
    return graph_.add_op(std::move(o));
  }
  void set_comm(int op_index, CommKind kind, double bytes, int group) {
    auto& o = const_cast<OpSpec&>(graph_.op(op_index));
    o.comm = kind;
    o.comm_bytes = bytes;
    o.comm_group = group;
    if (o.flops == 0) o.kind = OpKind::Comm;
  }
  static Name N(int scope, const char* base, bool rc = false) { return Name{scope, base, rc}; }
  double mm(std::int64_t m, std::int64_t k, std::int64_t n) const { return 2.0 * double(m) * double(k) * double(n); }

  // Parameter elements of each group: layers 0..L-1, then the embedding, then the head
  // (final norm, and the output projection unless tied).
  std::int64_t group_params(int group) const {
    if (group < m_.layers) return m_.params_per_layer();
    if (group == embed_group()) return m_.embedding_params();
    return m_.hidden + m_.output_params();
  }
  int embed_group() const { return static_cast<int>(m_.layers); }
  int head_group() const { return static_cast<int>(m_.layers) + 1; }
  int groups() const { return static_cast<int>(m_.layers) + 2; }
  int scope(int gi) const {
    if (gi < m_.layers) return gi;
    return gi == embed_group() ? Name::kEmbed : Name::kHead;
  }
  Name G(int gi, const char* base) const { return Name{scope(gi), base, false}; }
  std::int64_t shard_elems(int gi) const { return ceil_div(group_params(gi), N_); }
  // The group's parameters in the runtime's order (LlamaWeights::all()): a layer's attention
  // norm, wq, wk, wv, wo, (q and k norms,) MLP norm, gate, up, down; the embedding; the final
  // norm and the output projection.
  std::vector<std::int64_t> param_sizes(int gi) const {
    const std::int64_t h = h_, q = H_ * d_, kv = K_ * d_;
    if (gi == embed_group()) return {V_ * h};
    if (gi == head_group()) return m_.tie_embeddings ? std::vector<std::int64_t>{h} : std::vector<std::int64_t>{h, V_ * h};
    std::vector<std::int64_t> v = {h, q * h, kv * h, kv * h, h * q};
    if (m_.qk_norm) v.insert(v.end(), {d_, d_});
    v.insert(v.end(), {h, I_ * h, I_ * h, h * I_});
    return v;
  }
  // Scratch of a step that walks the group parameter by parameter, needing `temp(elems)` for
  // each and releasing each one's `freed` bytes per element after it: the most it holds
  // beyond what the group held at the start.
  template <class Temp>
  std::int64_t per_param_peak(int gi, Temp temp, std::int64_t freed) const {
    std::int64_t done = 0, peak = 0;
    for (std::int64_t elems : param_sizes(gi)) {
      peak = std::max(peak, temp(elems) - done);
      done += elems * freed;
    }
    return peak;
  }

  // ---- model states ----------------------------------------------------------------------
  // offload-params streams the layers' parameters from the host (runtime: LlamaStep::fetch_layer);
  // the embedding and the head stay on the device.
  bool streamed(int gi) const { return p_.offload_params && gi < m_.layers; }

  void persistent_state() {
    const Place optim_place = p_.offload_optimizer ? Place::Host : Place::Device;
    params_.resize(static_cast<std::size_t>(groups()));
    for (int gi = 0; gi < groups(); ++gi) {
      const std::int64_t elems = zero3_ ? shard_elems(gi) : group_params(gi);
      params_[static_cast<std::size_t>(gi)] = persistent(G(gi, zero3_ ? "params.shard" : "params"), elems * e_,
                                                         Category::Params, streamed(gi) ? Place::Host : Place::Device);
      const std::int64_t opt = shard_optim_ ? shard_elems(gi) : group_params(gi);
      if (master_) persistent(G(gi, "optim.master"), opt * 4, Category::Optimizer, optim_place);
      persistent(G(gi, "optim.exp_avg"), opt * 4, Category::Optimizer, optim_place);
      persistent(G(gi, "optim.exp_avg_sq"), opt * 4, Category::Optimizer, optim_place);
    }
    grads_.assign(static_cast<std::size_t>(groups()), Ids{});
    // RoPE's cos and sin tables for this rank's S/u positions [S/u, d/2], built once for the run.
    persistent(N(Name::kNone, "rope.tables"), 2 * (S_ / u_) * (d_ / 2) * e_, Category::Activations, Place::Device);
  }

  // zero3: all-gathers a group's parameters into a full buffer (offloaded shards are first
  // copied to the device through a staging buffer of one shard). `at_layer`: the layer whose
  // ops it runs among (-1 outside the layers), for the phase it is counted in.
  int gather(int gi, Phase phase, int at_layer) {
    // On one rank the shard is the whole group: used in place, unless it lives on the host.
    if (!zero3_ || (N_ == 1 && !streamed(gi))) return -1;
    const std::int64_t full = group_params(gi) * e_;
    const int t = tensor(G(gi, "params.full"), full, Category::Params);
    // On one rank there is nothing to gather: the copy from the host is the full buffer.
    const std::int64_t staging = streamed(gi) && N_ > 1 ? shard_elems(gi) * e_ : 0;
    const int o = op(G(gi, "gather"), phase, at_layer, {params_[static_cast<std::size_t>(gi)]}, {t}, staging);
    set_comm(o, CommKind::AllGather, double(shard_elems(gi) * e_) * double(N_ - 1), static_cast<int>(N_));
    return t;
  }

  // Whether a layer's parameters are gathered while the layer before it runs. One rank has
  // nothing to exchange: it copies a streamed layer from the host when the layer starts.
  bool prefetch_params() const { return N_ > 1; }

  // ---- forward ---------------------------------------------------------------------------
  void forward() {
    tokens_ = tensor(N(Name::kNone, "batch.tokens"), n_ * 8, Category::Activations);
    targets_ = tensor(N(Name::kNone, "batch.targets"), n_ * 8, Category::Activations);
    op(N(Name::kNone, "batch.load"), Phase::Forward, -1, {}, {tokens_, targets_});

    const int embed_full = gather(embed_group(), Phase::Forward, -1);
    const int x0 = tensor(N(0, "in"), n_ * h_ * e_, Category::Activations);
    Ids ins = {tokens_};
    if (embed_full >= 0) ins.push_back(embed_full);
    op(N(Name::kEmbed, "forward"), Phase::Forward, -1, ins, {x0});

    acts_.resize(static_cast<std::size_t>(m_.layers));
    ckpt_host_.assign(static_cast<std::size_t>(m_.layers), -1);
    int x = x0;
    int next_params = gather(0, Phase::Forward, 0);
    for (int l = 0; l < m_.layers; ++l) {
      const int layer_params = next_params;
      if (l + 1 < m_.layers) next_params = prefetch_params() ? gather(l + 1, Phase::Forward, l) : -1;
      LayerActs a = layer_forward(l, x, Phase::Forward, false);
      if (layer_params >= 0) const_cast<OpSpec&>(graph_.op(a.last_forward_op)).inputs.push_back(layer_params);
      if (p_.checkpoint.checkpoints_layer(l) && p_.offload_checkpoints) {
        ckpt_host_[static_cast<std::size_t>(l)] =
            tensor(N(l, "in.host"), n_ * h_ * e_, Category::Activations, Place::Host);
        const int o = op(N(l, "checkpoint.offload"), Phase::Forward, l, {a.in}, {ckpt_host_[static_cast<std::size_t>(l)]});
        set_comm(o, CommKind::DeviceToHost, double(n_ * h_ * e_), 1);
      }
      acts_[static_cast<std::size_t>(l)] = a;
      x = a.out;
      if (!prefetch_params() && l + 1 < m_.layers) next_params = gather(l + 1, Phase::Forward, l + 1);
    }
    final_x_ = x;
  }

  // The ops of one layer's forward: the first pass, or its recompute in backward (rc).
  LayerActs layer_forward(int l, int x, Phase phase, bool rc) {
    const Category act = Category::Activations;
    LayerActs a;
    a.in = x;
    a.rstd1 = tensor(N(l, "attn_norm.rstd", rc), n_ * 4, act);
    a.xn1 = tensor(N(l, "attn_norm.out", rc), n_ * h_ * e_, act);
    op(N(l, "attn_norm", rc), phase, l, {x}, {a.xn1, a.rstd1}, norm_forward_workspace(n_, h_), 4.0 * double(n_ * h_));

    if (p_.head_chunk > 0) {
      untied_attention_forward(l, a, phase, rc);
    } else {
      ulysses_attention_forward(l, a, phase, rc);
    }

    const int o = tensor(N(l, "attn.o_proj.out", rc), n_ * h_ * e_, Category::Transient);
    op(N(l, "attn.o_proj", rc), phase, l, {a.o_loc}, {o}, 0, mm(n_, H_ * d_, h_));
    a.mid = tensor(N(l, "mid", rc), n_ * h_ * e_, act);
    op(N(l, "attn.residual", rc), phase, l, {x, o}, {a.mid});

    a.rstd2 = tensor(N(l, "mlp_norm.rstd", rc), n_ * 4, act);
    a.xn2 = tensor(N(l, "mlp_norm.out", rc), n_ * h_ * e_, act);
    op(N(l, "mlp_norm", rc), phase, l, {a.mid}, {a.xn2, a.rstd2}, norm_forward_workspace(n_, h_), 4.0 * double(n_ * h_));

    // A recompute runs the whole layer, as reentrant checkpointing does: the recomputed
    // output is the root the layer's backward starts from, held until that backward ends.
    const double mlp_flops = mm(n_, h_, I_) * 3;
    const int down = tensor(N(l, "mlp.down.out", rc), n_ * h_ * e_, Category::Transient);
    if (p_.mlp_tiles > 1) {
      const std::int64_t t = n_ / p_.mlp_tiles;
      // Per tile: gate, which silu and then the product with up overwrite in place, and up
      // (2 x t x I); the tile's rows of the output are written into the output directly.
      op(N(l, "mlp.tiled", rc), phase, l, {a.xn2}, {down}, 2 * t * I_ * e_, mlp_flops, OpKind::Matmul, 4 * p_.mlp_tiles,
         p_.mlp_tiles);
    } else {
      a.gate = tensor(N(l, "mlp.gate", rc), n_ * I_ * e_, act);
      a.up = tensor(N(l, "mlp.up", rc), n_ * I_ * e_, act);
      op(N(l, "mlp.gate_up", rc), phase, l, {a.xn2}, {a.gate, a.up}, 0, mm(n_, h_, I_) * 2);
      a.act = tensor(N(l, "mlp.act", rc), n_ * I_ * e_, act);
      // silu(gate) * up is computed without a temporary; backward recomputes silu from gate.
      op(N(l, "mlp.swiglu", rc), phase, l, {a.gate, a.up}, {a.act}, 0, 4.0 * double(n_ * I_));
      op(N(l, "mlp.down", rc), phase, l, {a.act}, {down}, 0, mm(n_, I_, h_));
    }
    a.out = tensor(l + 1 < m_.layers ? N(l + 1, "in", rc) : N(Name::kNone, "loss.final_norm.in", rc), n_ * h_ * e_, act);
    a.last_forward_op = op(N(l, "mlp.residual", rc), phase, l, {a.mid, down}, {a.out});
    return a;
  }

  // Kv heads one Ulysses all-to-all carries per rank, and the elements of k (or v) around it:
  // before it [n, u*kvr, d] (kv heads replicated to u when u > K), after it [b*S, kvr, d].
  std::int64_t kv_sp_elems() const { return n_ * u_ * kvr_ * d_; }

  // GQA inside the attention op: LibTorch's flash kernels (CPU, and the FlashAttention-2 that
  // at::scaled_dot_product_attention runs on CUDA) take as many kv heads as query heads, so k
  // and v are expanded to the query heads, [b*S, q_heads, d] each: a copy, except that one kv
  // head expands as a view with stride 0. In backward the kernel's dk and dv are over the
  // query heads too and are summed back over each group.
  std::int64_t kv_expansion(std::int64_t q_heads, std::int64_t kv_heads) const {
    if (q_heads == kv_heads || kv_heads == 1) return 0;
    return 2 * (b_ * S_) * q_heads * d_ * e_;
  }
  // FlashAttention-2's fp32 dq accumulator on CUDA; the CPU kernel accumulates in place.
  std::int64_t dq_accumulator(std::int64_t q_heads) const { return cpu_ ? 0 : (b_ * S_) * q_heads * d_ * 4; }

  // LibTorch's CPU flash attention kernel (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp)
  // works in blocks of qs query rows by ks keys, qs = 256 from 768 rows up, 64 from 192,
  // else 32, and ks = min(512, S), with buffers of its own for each intra-op thread (T), in
  // fp32 and, for bf16 inputs, in bf16 beside them.
  std::int64_t cpu_q_block() const { return S_ >= 768 ? 256 : S_ >= 192 ? 64 : 32; }
  std::int64_t cpu_kv_block() const { return std::min<std::int64_t>(512, S_); }
  // Forward: a block's scores, its rows' running max and sum, and its output accumulator,
  // T x (qs*ks + 2*qs + qs*d) x 4 (bf16: the scores in bf16 too, T x qs*ks*2). On CUDA,
  // nothing beyond the outputs.
  std::int64_t flash_forward_scratch(std::int64_t /*q_heads*/) const {
    if (!cpu_) return 0;
    const std::int64_t qs = std::min(cpu_q_block(), S_), ks = cpu_kv_block();
    return in_.cpu_threads * ((qs * ks + 2 * qs + qs * d_) * 4 + (e_ == 4 ? 0 : qs * ks * e_));
  }
  // Backward: a block's probabilities and their gradient, T x 2*qs*ks*4 (bf16: in bf16 too,
  // T x 2*qs*ks*2), and the rows' sums of dO*O, T x qs*4. On CUDA: FlashAttention-2's fp32 dq
  // accumulator and its row sums of dO*O [b, heads, S] fp32.
  std::int64_t flash_backward_scratch(std::int64_t q_heads) const {
    if (!cpu_) return dq_accumulator(q_heads) + (b_ * S_) * q_heads * 4;
    const std::int64_t qs = std::min(cpu_q_block(), S_), ks = cpu_kv_block();
    return in_.cpu_threads * (2 * qs * ks * 4 + (e_ == 4 ? 0 : 2 * qs * ks * e_) + qs * 4);
  }

  // RMSNorm over `rows` rows of `width` (runtime/src/layers.cpp). Forward, bf16: the norm is
  // reduced from an fp32 copy of the input, [rows, width] x 4, freed before the output is
  // made, so rows*width*(4 - e) beyond it. Backward: the rows' dot products [rows] fp32; in bf16
  // also fp32 copies of the input and of the incoming gradient, which becomes the fp32 input
  // gradient before its cast ([rows, width] x 4 each), and of the weight and its gradient
  // ([width] x 4 each). In fp32 the gradient is computed in its own output buffer.
  std::int64_t norm_forward_workspace(std::int64_t rows, std::int64_t width) const {
    return e_ == 4 ? 0 : rows * width * (4 - e_);
  }
  std::int64_t norm_backward_workspace(std::int64_t rows, std::int64_t width) const {
    // The weight's gradient is cast to the weight's dtype after the [rows, width] copies are
    // freed: of its two fp32 [width] buffers, one becomes that output at the peak.
    return rows * 4 + (e_ == 4 ? 0 : rows * width * 8 + width * (8 - e_));
  }

  double attention_flops(std::int64_t heads) const {
    // QK^T and PV over the causal half: 2 matmuls x 2 flops x S^2/2 per head.
    return 2.0 * double(b_) * double(S_) * double(S_) * double(d_) * double(heads);
  }

  void ulysses_attention_forward(int l, LayerActs& a, Phase phase, bool rc) {
    const Category act = Category::Activations;
    int q = tensor(N(l, "attn.q", rc), n_ * H_ * d_ * e_, Category::Transient);
    int k = tensor(N(l, "attn.k", rc), n_ * K_ * d_ * e_, Category::Transient);
    int v = tensor(N(l, "attn.v", rc), n_ * K_ * d_ * e_, Category::Transient);
    op(N(l, "attn.qkv", rc), phase, l, {a.xn1}, {q, k, v}, 0, mm(n_, h_, (H_ + 2 * K_) * d_));
    if (m_.qk_norm) {
      // q and k before the per-head norm are saved for its backward.
      graph_.tensor(q).category = act;
      graph_.tensor(k).category = act;
      a.q_pre = q;
      a.k_pre = k;
      a.rstd_q = tensor(N(l, "attn.q_norm.rstd", rc), n_ * H_ * 4, act);
      a.rstd_k = tensor(N(l, "attn.k_norm.rstd", rc), n_ * K_ * 4, act);
      const int qn = tensor(N(l, "attn.q_norm.out", rc), n_ * H_ * d_ * e_, Category::Transient);
      const int kn = tensor(N(l, "attn.k_norm.out", rc), n_ * K_ * d_ * e_, Category::Transient);
      // q's norm, then k's: q's scratch comes before k's outputs exist, k's beside q's.
      const std::int64_t k_outputs = n_ * K_ * d_ * e_ + n_ * K_ * 4;
      op(N(l, "attn.qk_norm", rc), phase, l, {q, k}, {qn, kn, a.rstd_q, a.rstd_k},
         std::max(norm_forward_workspace(n_ * H_, d_) - k_outputs, norm_forward_workspace(n_ * K_, d_)));
      q = qn;
      k = kn;
    }
    const int qr = tensor(N(l, "attn.q_rope", rc), n_ * H_ * d_ * e_, Category::Transient);
    const int kr = tensor(N(l, "attn.k_rope", rc), n_ * K_ * d_ * e_, Category::Transient);
    op(N(l, "attn.rope", rc), phase, l, {q, k}, {qr, kr}, 0, 6.0 * double(n_ * (H_ + K_) * d_));
    if (u_ == 1) {
      a.q_sp = qr;
      a.k_sp = kr;
      a.v_sp = v;
    } else {
      a.q_sp = tensor(N(l, "attn.q_sp", rc), n_ * H_ * d_ * e_, act);
      a.k_sp = tensor(N(l, "attn.k_sp", rc), kv_sp_elems() * e_, act);
      a.v_sp = tensor(N(l, "attn.v_sp", rc), kv_sp_elems() * e_, act);
      // Send buffers: q, and k/v laid out per destination (replicated when u > K).
      const std::int64_t send = (n_ * H_ * d_ + 2 * kv_sp_elems()) * e_;
      const int o = op(N(l, "attn.a2a_qkv", rc), phase, l, {qr, kr, v}, {a.q_sp, a.k_sp, a.v_sp}, send);
      set_comm(o, CommKind::AllToAll, double(send) * double(u_ - 1) / double(u_), static_cast<int>(u_));
    }
    graph_.tensor(a.q_sp).category = act;
    graph_.tensor(a.k_sp).category = act;
    graph_.tensor(a.v_sp).category = act;
    a.o_sp = tensor(N(l, "attn.flash.out", rc), n_ * H_ * d_ * e_, act);
    a.lse = tensor(N(l, "attn.flash.lse", rc), n_ * H_ * 4, act);
    op(N(l, "attn.flash", rc), phase, l, {a.q_sp, a.k_sp, a.v_sp}, {a.o_sp, a.lse},
       kv_expansion(hl_, kvr_) + flash_forward_scratch(hl_), attention_flops(hl_), OpKind::Attention);
    if (u_ == 1) {
      a.o_loc = a.o_sp;
    } else {
      a.o_loc = tensor(N(l, "attn.out", rc), n_ * H_ * d_ * e_, act);
      const int o = op(N(l, "attn.a2a_out", rc), phase, l, {a.o_sp}, {a.o_loc}, n_ * H_ * d_ * e_);
      set_comm(o, CommKind::AllToAll, double(n_ * H_ * d_ * e_) * double(u_ - 1) / double(u_), static_cast<int>(u_));
    }
  }

  // Untied Ulysses: stages of c heads per rank, buffers sized for one stage and reused.
  // kv heads per stage kvs = max(1, c / group); K/V are projected and exchanged once per
  // kv load and reused by the stages of their group.
  std::int64_t stage_kv_heads() const {
    const std::int64_t group = hl_ / kvr_;
    return std::max<std::int64_t>(1, p_.head_chunk / group);
  }
  // One [b*S, heads, d] buffer: the size of a stage tensor on either side of an all-to-all
  // ([n, u*heads, d] before it, [b*S, heads, d] after it).
  std::int64_t stage_unit(std::int64_t heads) const { return n_ * u_ * heads * d_ * e_; }
  // q or k of `heads` heads from the projection to after RoPE (runtime/src/attention.cpp,
  // q_or_k): the projection and the rotated copy; with qk norm the projection is kept for the
  // norm's backward beside the normed copy and its rstd [rows] fp32 (bf16: the norm's fp32
  // copy of the projection, 2 units, is freed before the normed copy is made).
  std::int64_t qk_projection_peak(std::int64_t heads) const {
    const std::int64_t U = stage_unit(heads);
    return m_.qk_norm ? 3 * U + n_ * u_ * heads * 4 : 2 * U;
  }
  // What a group keeps across its stages in forward: k after RoPE and v, or k and v expanded
  // to the stage's heads instead when that takes a copy (kv_expansion; the unexpanded ones
  // are freed once expanded).
  std::int64_t untied_group_forward() const {
    const std::int64_t c = p_.head_chunk, kvs = stage_kv_heads();
    const std::int64_t expanded = kv_expansion(c, kvs);
    return expanded > 0 ? expanded : 2 * stage_unit(kvs);
  }
  // Buffers on the other side of each all-to-all (u > 1): one more of each exchanged tensor.
  std::int64_t other_sides(std::int64_t units) const { return u_ > 1 ? units : 0; }

  // Forward, per stage: q is projected and rotated (its projection freed, or with qk norm
  // held until q's rotation is done), then the kernel writes the stage's output [b*S, c, d]
  // and log-sum-exp [b, c, S] fp32 with its block buffers, which the output and log-sum-exp
  // of the whole op receive.
  std::int64_t untied_forward_workspace() const {
    const std::int64_t c = p_.head_chunk;
    const std::int64_t kernel = 2 * stage_unit(c) + (b_ * S_) * c * 4 + flash_forward_scratch(c);
    // u > 1: the exchanges' send and receive buffers (q's; the output's beside the kernel's
    // output and log-sum-exp) are never more than the kernel's own moment holds.
    return untied_group_forward() + std::max(qk_projection_peak(c), kernel);
  }
  // Backward, with the input gradient [n, h] and the weight gradients allocated before the
  // first stage (the op's outputs). A group keeps k (after RoPE; with qk norm also its
  // projection and rstd) and v, or instead their expanded copies where expanding copies
  // (kv_expansion), and the accumulated gradients of k and v. A stage recomputes q (its projection too
  // with qk norm), then the kernel allocates dq, and dk and dv over the stage's heads, and a
  // contiguous copy of the stage's slice of the output gradient when the stage does not span
  // every head, beside its block buffers. After it, dk and dv are reduced over the group (one
  // [b*S, kvs, d] sum) into the accumulators; then RoPE's backward of dq, [b*S, c, d], and
  // with qk norm the norm's backward, whose input gradient is one more unit, are pushed into
  // the input and weight gradients with in-place matmuls.
  std::int64_t untied_backward_workspace() const {
    const std::int64_t c = p_.head_chunk, kvs = stage_kv_heads();
    const std::int64_t Uc = stage_unit(c), Ukv = stage_unit(kvs);
    const std::int64_t norm_kv = m_.qk_norm ? Ukv + n_ * u_ * kvs * 4 : 0;
    // Where expanding copies, k and v themselves are freed once expanded.
    const std::int64_t expanded = kv_expansion(c, kvs);
    const std::int64_t group = (expanded > 0 ? 2 : 4) * Ukv + norm_kv + expanded;
    const std::int64_t q = Uc + (m_.qk_norm ? Uc + n_ * u_ * c * 4 : 0);
    const std::int64_t kernel = q + 3 * Uc + (c < hl_ ? Uc : 0) + flash_backward_scratch(c);
    const std::int64_t reduce = q + 3 * Uc + (c > kvs ? Ukv : 0);
    const std::int64_t q_back = q + 2 * Uc + (m_.qk_norm ? norm_backward_workspace(n_ * u_ * c, d_) + Uc : 0);
    // u > 1: the stage's output and its gradient arrive as contiguous [b*S, c, d] copies
    // (no slice copy for the kernel), q arrives beside its send buffer, and dq leaves
    // through a send and a receive buffer.
    const std::int64_t exchanged = other_sides(2 * Uc - (c < hl_ ? Uc : 0));
    const std::int64_t q_exchange = other_sides(q + Uc), dq_exchange = other_sides(3 * Uc);
    return group + std::max({kernel + exchanged, reduce, q_back, q_exchange, dq_exchange});
  }

  // Kernel launches and collective rounds of the staged schedule: `per_stage` of each stage.
  int untied_stages() const { return static_cast<int>(hl_ / p_.head_chunk); }
  int untied_stage_launches(int per_stage) const { return per_stage * untied_stages(); }

  void untied_attention_forward(int l, LayerActs& a, Phase phase, bool rc) {
    a.o_loc = tensor(N(l, "attn.out", rc), n_ * H_ * d_ * e_, Category::Activations);
    a.lse = tensor(N(l, "attn.flash.lse", rc), n_ * H_ * 4, Category::Activations);
    const double flops = mm(n_, h_, (H_ + 2 * K_) * d_) + attention_flops(hl_);
    const int o = op(N(l, "attn.untied", rc), phase, l, {a.xn1}, {a.o_loc, a.lse}, untied_forward_workspace(), flops,
                     OpKind::Attention, untied_stage_launches(4), untied_stages());
    const double sent = double((n_ * H_ * d_ * 2 + 2 * kv_sp_elems()) * e_) * double(u_ - 1) / double(u_);
    if (u_ > 1) set_comm(o, CommKind::AllToAll, sent, static_cast<int>(u_));
  }

  // ---- loss ------------------------------------------------------------------------------
  // One loss tile of t rows (runtime/src/layers.cpp, TiledCrossEntropyFn): its fp32 logits
  // [t, V], and inside logsumexp exp(logits - max) [t, V] fp32 with the rows' maxima and sums
  // [t] fp32. In bf16 the tile's bf16 logits [t, V] are freed once upcast, before logsumexp.
  std::int64_t tiled_loss_workspace() const {
    const std::int64_t t = n_ / p_.loss_tiles;
    return t * V_ * 8 + t * 8;
  }

  void loss() {
    head_full_ = gather(head_group(), Phase::Loss, -1);
    if (m_.tie_embeddings && zero3_) tied_full_ = gather(embed_group(), Phase::Loss, -1);
    rstd_f_ = tensor(N(Name::kNone, "loss.final_norm.rstd"), n_ * 4, Category::Activations);
    xf_ = tensor(N(Name::kNone, "loss.final_norm.out"), n_ * h_ * e_, Category::Activations);
    op(N(Name::kNone, "loss.final_norm"), Phase::Loss, -1, {final_x_}, {xf_, rstd_f_}, norm_forward_workspace(n_, h_),
       4.0 * double(n_ * h_));
    const double flops = mm(n_, h_, V_);
    if (p_.loss_tiles > 1) {
      // One tile's fp32 logits and logsumexp's exp(logits - max) beside them, with its row
      // maxima and sums [t] fp32 (bf16: the tile's bf16 logits are freed once upcast).
      op(N(Name::kNone, "loss.tiled"), Phase::Loss, -1, {xf_, targets_}, {}, tiled_loss_workspace(), flops,
         OpKind::Matmul, 3 * p_.loss_tiles, p_.loss_tiles);
      return;
    }
    int logits = tensor(N(Name::kNone, "loss.logits"), n_ * V_ * e_, Category::Transient);
    op(N(Name::kNone, "loss.logits"), Phase::Loss, -1, {xf_}, {logits}, 0, flops);
    if (e_ != 4) {
      const int up = tensor(N(Name::kNone, "loss.logits.fp32"), n_ * V_ * 4, Category::Transient);
      op(N(Name::kNone, "loss.upcast"), Phase::Loss, -1, {logits}, {up});
      logits = up;
    }
    logp_ = tensor(N(Name::kNone, "loss.log_softmax"), n_ * V_ * 4, Category::Activations);
    op(N(Name::kNone, "loss.log_softmax"), Phase::Loss, -1, {logits}, {logp_}, 0, 5.0 * double(n_ * V_));
    op(N(Name::kNone, "loss.nll"), Phase::Loss, -1, {logp_, targets_}, {});
  }

  // ---- backward --------------------------------------------------------------------------
  // The embedding's or the head's gradient buffer.
  int new_grad(int gi) {
    return tensor(G(gi, shard_grads_ ? "grad.full" : "grad"), group_params(gi) * g_, Category::Grads);
  }
  // One piece of a layer's gradient, allocated by the op that computes it, as autograd
  // allocates each parameter's gradient when it is first produced. `elems` parameters.
  int grad_piece(int l, const char* full_name, const char* name, std::int64_t elems, Ids& pieces) {
    const int t = tensor(N(l, shard_grads_ ? full_name : name), elems * g_, Category::Grads);
    pieces.push_back(t);
    return t;
  }

  // zero2/zero3: reduce-scatter a finished group gradient into its shard; with the optimizer
  // offloaded the shard then goes to host memory.
  void finish_grad(int gi, Ids full, Phase phase) {
    if (!shard_grads_) {
      grads_[static_cast<std::size_t>(gi)] = full;
      return;
    }
    const int shard = tensor(G(gi, "grad.shard"), shard_elems(gi) * g_, Category::Grads);
    // Across ranks the pieces are first summed into one flat send buffer of the padded group.
    const std::int64_t send = N_ > 1 ? shard_elems(gi) * N_ * g_ : 0;
    const int o = op(G(gi, "grad.reduce_scatter"), phase, gi < m_.layers ? gi : -1, full, {shard}, send);
    set_comm(o, CommKind::ReduceScatter, double(shard_elems(gi) * g_) * double(N_ - 1), static_cast<int>(N_));
    grads_[static_cast<std::size_t>(gi)] = {shard};
    if (p_.offload_optimizer) to_host(gi, phase);
  }
  void to_host(int gi, Phase phase) {
    const Ids dev = grads_[static_cast<std::size_t>(gi)];
    std::int64_t bytes = 0;
    for (int t : dev) bytes += graph_.tensor(t).bytes;
    // zero1: the rank's optimizer takes only its shard of the all-reduced gradient.
    const std::int64_t host_elems = p_.sharding == Sharding::Zero1 ? shard_elems(gi) : bytes / g_;
    const int host = tensor(G(gi, "grad.host"), host_elems * 4, Category::Grads, Place::Host);
    const int o = op(G(gi, "grad.to_host"), phase, gi < m_.layers ? gi : -1, dev, {host});
    set_comm(o, CommKind::DeviceToHost, double(bytes), 1);
    grads_[static_cast<std::size_t>(gi)] = {host};
  }

  void backward() {
    const Phase B = Phase::Backward;
    // Loss backward: the head gradient (or, tied, the embedding's) is produced here.
    const int head_grad = new_grad(head_group());
    int tied_grad = -1;
    if (m_.tie_embeddings) tied_grad = new_grad(embed_group());
    // The tiled loss reads the targets in its backward; the untiled one only in nll's.
    Ids head_reads = {xf_};
    if (p_.loss_tiles > 1) head_reads.push_back(targets_);
    if (head_full_ >= 0) head_reads.push_back(head_full_);
    if (tied_full_ >= 0) head_reads.push_back(tied_full_);
    const int d_xf = tensor(N(Name::kNone, "loss.final_norm.out.grad"), n_ * h_ * e_, Category::Transient);
    Ids grads_out = {d_xf, head_grad};
    if (tied_grad >= 0) grads_out.push_back(tied_grad);
    const double flops = 2 * mm(n_, h_, V_);
    if (p_.loss_tiles > 1) {
      // The tile's logits recomputed as in forward, logsumexp beside them; the softmax
      // gradient then overwrites the logits (bf16: cast to bf16, t x V x 2, after logsumexp's
      // buffer is gone).
      op(N(Name::kNone, "loss.tiled.bwd"), B, -1, head_reads, grads_out, tiled_loss_workspace(),
         flops + mm(n_, h_, V_), OpKind::Matmul, 6 * p_.loss_tiles, p_.loss_tiles);
    } else {
      const int d_logp = tensor(N(Name::kNone, "loss.nll.grad"), n_ * V_ * 4, Category::Transient);
      op(N(Name::kNone, "loss.nll.bwd"), B, -1, {targets_}, {d_logp});
      int d_logits = tensor(N(Name::kNone, "loss.logits.grad.fp32"), n_ * V_ * 4, Category::Transient);
      op(N(Name::kNone, "loss.log_softmax.bwd"), B, -1, {d_logp, logp_}, {d_logits}, 0, 3.0 * double(n_ * V_));
      if (e_ != 4) {
        const int dl = tensor(N(Name::kNone, "loss.logits.grad"), n_ * V_ * e_, Category::Transient);
        op(N(Name::kNone, "loss.upcast.bwd"), B, -1, {d_logits}, {dl});
        d_logits = dl;
      }
      head_reads.push_back(d_logits);
      op(N(Name::kNone, "loss.logits.bwd"), B, -1, head_reads, grads_out, 0, flops);
    }
    int d_x = tensor(N(Name::kNone, "loss.final_norm.in.grad"), n_ * h_ * e_, Category::Transient);
    op(N(Name::kNone, "loss.final_norm.bwd"), B, -1, {d_xf, final_x_, rstd_f_}, {d_x}, norm_backward_workspace(n_, h_),
       8.0 * double(n_ * h_));
    finish_grad(head_group(), {head_grad}, B);

    // Layers, last to first; zero3 prefetches the next layer's parameters, checkpoint offload
    // prefetches the next checkpoint.
    const int last_layer = static_cast<int>(m_.layers) - 1;
    int next_params = gather(last_layer, B, last_layer);
    int next_ckpt = prefetch_checkpoint(last_layer, last_layer);
    for (int l = last_layer; l >= 0; --l) {
      if (in_.prefix_only && l < last_layer) return;
      const int layer_params = next_params;
      const int ckpt = next_ckpt;
      if (l > 0) {
        next_params = prefetch_params() ? gather(l - 1, B, l) : -1;
        next_ckpt = prefetch_checkpoint(l - 1, l);
      }
      LayerActs a = acts_[static_cast<std::size_t>(l)];
      int recompute_out = -1;
      if (p_.checkpoint.checkpoints_layer(l)) {
        const int x = ckpt >= 0 ? ckpt : a.in;
        a = layer_forward(l, x, B, true);
        recompute_out = a.out;
      }
      const int d_out = d_x;
      d_x = layer_backward(l, a, d_x);
      auto& last = const_cast<OpSpec&>(graph_.ops().back());
      if (layer_params >= 0) last.inputs.push_back(layer_params);
      // Reentrant checkpointing backpropagates from the recomputed output with the gradient
      // it was handed: both stay referenced until the layer's backward returns.
      if (recompute_out >= 0) {
        last.inputs.push_back(recompute_out);
        last.inputs.push_back(d_out);
      }
      if (!prefetch_params() && l > 0) next_params = gather(l - 1, B, l - 1);
    }

    // Embedding backward: a dense [V, h] gradient. Tied to the output projection, it is a
    // second gradient of the same weight, which autograd then adds to the head's: the sum is
    // a new [V, h] buffer that replaces the old one.
    const int embed_full = m_.tie_embeddings ? -1 : gather(embed_group(), B, -1);
    const int eg = tied_grad >= 0 ? tied_grad : new_grad(embed_group());
    Ids reads = {d_x, tokens_};
    if (embed_full >= 0) reads.push_back(embed_full);
    if (tied_grad >= 0) {
      const int dense = tensor(N(Name::kEmbed, "grad.dense"), group_params(embed_group()) * g_, Category::Transient);
      op(N(Name::kEmbed, "backward"), B, -1, reads, {dense}, 0, double(n_ * h_));
      op(N(Name::kEmbed, "grad.accumulate"), B, -1, {tied_grad, dense}, {}, group_params(embed_group()) * g_);
    } else {
      op(N(Name::kEmbed, "backward"), B, -1, reads, {eg}, 0, double(n_ * h_));
    }
    finish_grad(embed_group(), {eg}, B);
  }

  // Brings layer l's checkpoint back, among the ops of layer `at_layer` (the one above it,
  // while it recomputes, or l itself for the last layer).
  int prefetch_checkpoint(int l, int at_layer) {
    const int host = ckpt_host_[static_cast<std::size_t>(l)];
    if (host < 0) return -1;
    const int dev = tensor(N(l, "in.prefetched"), n_ * h_ * e_, Category::Activations);
    const int o = op(N(l, "checkpoint.prefetch"), Phase::Backward, at_layer, {host}, {dev});
    set_comm(o, CommKind::HostToDevice, double(n_ * h_ * e_), 1);
    return dev;
  }

  // Returns the gradient of the layer's input.
  int layer_backward(int l, const LayerActs& a, int d_out) {
    const bool rc = false;
    const Phase B = Phase::Backward;
    const Category tr = Category::Transient;
    Ids grad;  // the layer's gradient, piece by piece
    int d_xn2 = tensor(N(l, "mlp_norm.out.grad", rc), n_ * h_ * e_, tr);
    if (p_.mlp_tiles > 1) {
      const std::int64_t t = n_ / p_.mlp_tiles;
      // Per tile: gate, up and their product recomputed, the product's gradient, and the
      // gradients of gate and up, one of which reuses a buffer (5 x t x I).
      const int g_mlp = grad_piece(l, "grad.full.mlp", "grad.mlp", 3 * h_ * I_, grad);
      op(N(l, "mlp.tiled.bwd", rc), B, l, {d_out, a.xn2}, {d_xn2, g_mlp}, 5 * t * I_ * e_, mm(n_, h_, I_) * 9,
         OpKind::Matmul, 10 * p_.mlp_tiles, p_.mlp_tiles);
    } else {
      const int d_act = tensor(N(l, "mlp.act.grad", rc), n_ * I_ * e_, tr);
      const int g_down = grad_piece(l, "grad.full.mlp.down", "grad.mlp.down", h_ * I_, grad);
      op(N(l, "mlp.down.bwd", rc), B, l, {d_out, a.act}, {d_act, g_down}, 0, mm(n_, I_, h_) * 2);
      const int d_gate = tensor(N(l, "mlp.gate.grad", rc), n_ * I_ * e_, tr);
      const int d_up = tensor(N(l, "mlp.up.grad", rc), n_ * I_ * e_, tr);
      op(N(l, "mlp.swiglu.bwd", rc), B, l, {d_act, a.gate, a.up}, {d_gate, d_up}, n_ * I_ * e_, 8.0 * double(n_ * I_));
      const int g_gate_up = grad_piece(l, "grad.full.mlp.gate_up", "grad.mlp.gate_up", 2 * h_ * I_, grad);
      op(N(l, "mlp.gate_up.bwd", rc), B, l, {d_gate, d_up, a.xn2}, {d_xn2, g_gate_up}, 0, mm(n_, h_, I_) * 4);
    }
    const int d_mid = tensor(N(l, "mid.grad", rc), n_ * h_ * e_, tr);
    const int g_mlp_norm = grad_piece(l, "grad.full.mlp_norm", "grad.mlp_norm", h_, grad);
    op(N(l, "mlp_norm.bwd", rc), B, l, {d_xn2, a.mid, a.rstd2, d_out}, {d_mid, g_mlp_norm}, norm_backward_workspace(n_, h_),
       8.0 * double(n_ * h_));
    const int d_oloc = tensor(N(l, "attn.out.grad", rc), n_ * H_ * d_ * e_, tr);
    const int g_o = grad_piece(l, "grad.full.attn.o", "grad.attn.o", H_ * d_ * h_, grad);
    op(N(l, "attn.o_proj.bwd", rc), B, l, {d_mid, a.o_loc}, {d_oloc, g_o}, 0, mm(n_, H_ * d_, h_) * 2);
    const int d_xn1 = tensor(N(l, "attn_norm.out.grad", rc), n_ * h_ * e_, tr);
    if (p_.head_chunk > 0) {
      const double flops = 2 * mm(n_, h_, (H_ + 2 * K_) * d_) + mm(n_, h_, (H_ + 2 * K_) * d_) + 3.5 * attention_flops(hl_);
      const int g_qkv = grad_piece(l, "grad.full.attn.qkv", "grad.attn.qkv", h_ * (H_ + 2 * K_) * d_ + (m_.qk_norm ? 2 * d_ : 0), grad);
      const int o = op(N(l, "attn.untied.bwd", rc), B, l, {d_oloc, a.xn1, a.o_loc, a.lse}, {d_xn1, g_qkv},
                       untied_backward_workspace(), flops, OpKind::Attention, untied_stage_launches(10), untied_stages());
      if (u_ > 1)
        set_comm(o, CommKind::AllToAll, double((n_ * H_ * d_ * 4 + 4 * kv_sp_elems()) * e_) * double(u_ - 1) / double(u_),
                 static_cast<int>(u_));
    } else {
      ulysses_attention_backward(l, a, d_oloc, d_xn1, grad);
    }
    const int d_in = tensor(N(l, "in.grad"), n_ * h_ * e_, tr);
    const int g_attn_norm = grad_piece(l, "grad.full.attn_norm", "grad.attn_norm", h_, grad);
    op(N(l, "attn_norm.bwd", rc), B, l, {d_xn1, a.in, a.rstd1, d_mid}, {d_in, g_attn_norm}, norm_backward_workspace(n_, h_),
       8.0 * double(n_ * h_));
    finish_grad(l, grad, B);
    return d_in;
  }

  void ulysses_attention_backward(int l, const LayerActs& a, int d_oloc, int d_xn1, Ids& grad) {
    const bool rc = false;
    const Phase B = Phase::Backward;
    const Category tr = Category::Transient;
    int d_osp = d_oloc;
    if (u_ > 1) {
      d_osp = tensor(N(l, "attn.flash.out.grad", rc), n_ * H_ * d_ * e_, tr);
      const int o = op(N(l, "attn.a2a_out.bwd", rc), B, l, {d_oloc}, {d_osp}, n_ * H_ * d_ * e_);
      set_comm(o, CommKind::AllToAll, double(n_ * H_ * d_ * e_) * double(u_ - 1) / double(u_), static_cast<int>(u_));
    }
    const int dq_sp = tensor(N(l, "attn.q_sp.grad", rc), n_ * H_ * d_ * e_, tr);
    const int dk_sp = tensor(N(l, "attn.k_sp.grad", rc), kv_sp_elems() * e_, tr);
    const int dv_sp = tensor(N(l, "attn.v_sp.grad", rc), kv_sp_elems() * e_, tr);
    // Under GQA the kernel writes dk and dv over the query heads, beside the expanded k and v
    // and its own scratch; once it returns the expanded k and v are freed and dk, then dv, are
    // summed over their groups into this op's outputs (one [b*S, kvr, d] at a time beside the
    // kernel's two). So at the kernel only dq of the outputs exists, and at the first sum dq
    // and dk.
    std::int64_t ws = flash_backward_scratch(hl_);
    if (hl_ != kvr_) {
      const std::int64_t full = 2 * (b_ * S_) * hl_ * d_ * e_, kv = kv_sp_elems() * e_;
      ws = std::max(kv_expansion(hl_, kvr_) + full + ws, full + kv) - 2 * kv;
    }
    op(N(l, "attn.flash.bwd", rc), B, l, {d_osp, a.q_sp, a.k_sp, a.v_sp, a.o_sp, a.lse}, {dq_sp, dk_sp, dv_sp}, ws,
       2.5 * attention_flops(hl_), OpKind::Attention);
    int dq = dq_sp, dk = dk_sp, dv = dv_sp;
    if (u_ > 1) {
      dq = tensor(N(l, "attn.q_rope.grad", rc), n_ * H_ * d_ * e_, tr);
      dk = tensor(N(l, "attn.k_rope.grad", rc), n_ * K_ * d_ * e_, tr);
      dv = tensor(N(l, "attn.v.grad", rc), n_ * K_ * d_ * e_, tr);
      // Send buffers, and with kv replication the received copies before they are summed.
      const std::int64_t send = (n_ * H_ * d_ + 2 * kv_sp_elems()) * e_;
      const std::int64_t replicas = kvr_ * u_ > K_ ? 2 * kv_sp_elems() * e_ : 0;
      const int o = op(N(l, "attn.a2a_qkv.bwd", rc), B, l, {dq_sp, dk_sp, dv_sp}, {dq, dk, dv}, send + replicas);
      set_comm(o, CommKind::AllToAll, double(send) * double(u_ - 1) / double(u_), static_cast<int>(u_));
    }
    const int dq_r = tensor(N(l, "attn.q.grad", rc), n_ * H_ * d_ * e_, tr);
    const int dk_r = tensor(N(l, "attn.k.grad", rc), n_ * K_ * d_ * e_, tr);
    op(N(l, "attn.rope.bwd", rc), B, l, {dq, dk}, {dq_r, dk_r}, 0, 6.0 * double(n_ * (H_ + K_) * d_));
    int dq_in = dq_r, dk_in = dk_r;
    if (m_.qk_norm) {
      dq_in = tensor(N(l, "attn.q_pre.grad", rc), n_ * H_ * d_ * e_, tr);
      dk_in = tensor(N(l, "attn.k_pre.grad", rc), n_ * K_ * d_ * e_, tr);
      const int g_qk = grad_piece(l, "grad.full.attn.qk_norm", "grad.attn.qk_norm", 2 * d_, grad);
      op(N(l, "attn.qk_norm.bwd", rc), B, l, {dq_r, dk_r, a.q_pre, a.k_pre, a.rstd_q, a.rstd_k}, {dq_in, dk_in, g_qk},
         norm_backward_workspace(n_ * H_, d_));
    }
    const int g_qkv = grad_piece(l, "grad.full.attn.qkv", "grad.attn.qkv", h_ * (H_ + 2 * K_) * d_, grad);
    op(N(l, "attn.qkv.bwd", rc), B, l, {dq_in, dk_in, dv, a.xn1}, {d_xn1, g_qkv}, 0, 2 * mm(n_, h_, (H_ + 2 * K_) * d_));
  }

  // ---- optimizer -------------------------------------------------------------------------
  void optimizer() {
    const Phase P = Phase::Optimizer;
    if (!shard_grads_ && p_.offload_optimizer) {
      for (int gi = 0; gi < groups(); ++gi) {
        if (p_.sharding == Sharding::Zero1) {
          const int o = op(G(gi, "grad.all_reduce"), P, -1, grads_[static_cast<std::size_t>(gi)], {});
          set_comm(o, CommKind::AllReduce, 2.0 * double(group_params(gi) * g_) * double(N_ - 1) / double(N_), static_cast<int>(N_));
        }
        to_host(gi, P);
      }
    }
    for (int gi = 0; gi < groups(); ++gi) {
      const Ids grad = grads_[static_cast<std::size_t>(gi)];
      if (p_.sharding == Sharding::Zero1 && !p_.offload_optimizer) {
        const int o = op(G(gi, "grad.all_reduce"), P, -1, grad, {});
        set_comm(o, CommKind::AllReduce, 2.0 * double(group_params(gi) * g_) * double(N_ - 1) / double(N_), static_cast<int>(N_));
      } else if (p_.sharding == Sharding::None && N_ > 1 && !p_.offload_optimizer) {
        const int o = op(G(gi, "grad.all_reduce"), P, -1, grad, {});
        set_comm(o, CommKind::AllReduce, 2.0 * double(group_params(gi) * g_) * double(N_ - 1) / double(N_), static_cast<int>(N_));
      }
      const std::int64_t elems = shard_optim_ ? shard_elems(gi) : group_params(gi);
      OpSpec o;
      o.name = G(gi, "optim.step");
      o.kind = OpKind::Optimizer;
      o.phase = P;
      o.inputs = grad;
      o.flops = 12.0 * double(elems);
      o.memory_bytes = double(elems) * (master_ ? 16 : 12) * 2;
      // The update's fp32 temporary, sqrt(v)/sqrt(bc2) + eps. A flat shard is updated at once;
      // whole parameters (unsharded gradients, or one rank) one at a time, as the runtime's
      // AdamW does, each gradient released once its parameter is updated: what the step
      // holds beyond the group's gradients is the largest of each parameter's temporaries
      // less the gradients released before it.
      // zero1 updates the flat shard too (its gradient copied out of the all-reduced ones).
      const bool whole = !shard_optim_ || N_ == 1;
      if (p_.offload_optimizer) {
        // On the host, beside fp32 gradients; fp32 parameters are updated in a host copy too.
        // The update is copied straight into the device parameters.
        o.host_compute = true;
        const std::int64_t temps = master_ ? 1 : 2;
        o.host_workspace_bytes =
            whole ? per_param_peak(gi, [&](std::int64_t n) { return n * 4 * temps; }, 4) : elems * 4 * temps;
        o.comm = CommKind::HostToDevice;
        o.comm_bytes = double(elems * e_);
      } else {
        // Gradients other than fp32 are first upcast, one more fp32 temporary each.
        const std::int64_t temps = g_ == 4 ? 1 : 2;
        o.workspace_bytes = whole ? per_param_peak(gi, [&](std::int64_t n) { return n * 4 * temps; }, g_) : elems * 4 * temps;
      }
      graph_.add_op(std::move(o));
      if (p_.sharding == Sharding::Zero1 || p_.sharding == Sharding::Zero2) {
        const int g = op(G(gi, "params.all_gather"), P, -1, {}, {});
        set_comm(g, CommKind::AllGather, double(shard_elems(gi) * e_) * double(N_ - 1), static_cast<int>(N_));
      }
    }
  }

  const StepInputs& in_;
  const ModelConfig& m_;
  const ParallelConfig& p_;
  std::int64_t b_, S_, u_, n_, N_, h_, I_, V_, H_, K_, d_, hl_, kvr_, e_, g_;
  bool master_, cpu_, zero3_, shard_grads_, shard_optim_;

  StepGraph graph_;
  std::vector<int> params_, ckpt_host_;
  std::vector<Ids> grads_;  // per group: what the optimizer step reads
  std::vector<LayerActs> acts_;
  int tokens_ = -1, targets_ = -1, final_x_ = -1, xf_ = -1, rstd_f_ = -1, logp_ = -1;
  int head_full_ = -1, tied_full_ = -1;
};

}  // namespace

StepGraph build_step(const StepInputs& in) { return Builder(in).build(); }

}  // namespace longctx
