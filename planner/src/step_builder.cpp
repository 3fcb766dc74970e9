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
    shard_grads_ = p_.sharding == Sharding::Zero2 || zero3_;
    shard_optim_ = p_.sharding != Sharding::None;
  }

  StepGraph build() {
    persistent_state();
    forward();
    loss();
    backward();
    optimizer();
    graph_.finalize();
    return std::move(graph_);
  }

 private:
  // ---- helpers ---------------------------------------------------------------------------
  int tensor(std::string name, std::int64_t bytes, Category c, Place place = Place::Device) {
    TensorSpec t;
    t.name = std::move(name);
    t.bytes = bytes;
    t.category = c;
    t.place = place;
    return graph_.add_tensor(std::move(t));
  }
  int persistent(std::string name, std::int64_t bytes, Category c, Place place) {
    TensorSpec t;
    t.name = std::move(name);
    t.bytes = bytes;
    t.category = c;
    t.place = place;
    t.persistent = true;
    return graph_.add_tensor(std::move(t));
  }
  int op(std::string name, Phase phase, int layer, std::vector<int> inputs, std::vector<int> outputs,
         std::int64_t workspace = 0, double flops = 0) {
    OpSpec o;
    o.name = std::move(name);
    o.phase = phase;
    o.layer = layer;
    o.inputs = std::move(inputs);
    o.outputs = std::move(outputs);
    o.workspace_bytes = workspace;
    o.flops = flops;
    for (int t : o.inputs) o.memory_bytes += double(graph_.tensor(t).bytes);
    for (int t : o.outputs) o.memory_bytes += double(graph_.tensor(t).bytes);
    return graph_.add_op(std::move(o));
  }
  void set_comm(int op_index, CommKind kind, double bytes, int group) {
    auto& o = const_cast<OpSpec&>(graph_.op(op_index));
    o.comm = kind;
    o.comm_bytes = bytes;
    o.comm_group = group;
  }
  std::string L(int l) const { return fmt::format("layer.{}.", l); }
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
  std::string group_name(int gi) const {
    if (gi < m_.layers) return fmt::format("layer.{}", gi);
    return gi == embed_group() ? "embed" : "head";
  }
  std::int64_t shard_elems(int gi) const { return ceil_div(group_params(gi), N_); }

  // ---- model states ----------------------------------------------------------------------
  void persistent_state() {
    const Place param_place = p_.offload_params ? Place::Host : Place::Device;
    const Place optim_place = p_.offload_optimizer ? Place::Host : Place::Device;
    params_.resize(static_cast<std::size_t>(groups()));
    for (int gi = 0; gi < groups(); ++gi) {
      const std::int64_t elems = zero3_ ? shard_elems(gi) : group_params(gi);
      params_[static_cast<std::size_t>(gi)] =
          persistent(group_name(gi) + (zero3_ ? ".params.shard" : ".params"), elems * e_, Category::Params, param_place);
      const std::int64_t opt = shard_optim_ ? shard_elems(gi) : group_params(gi);
      if (master_) persistent(group_name(gi) + ".optim.master", opt * 4, Category::Optimizer, optim_place);
      persistent(group_name(gi) + ".optim.exp_avg", opt * 4, Category::Optimizer, optim_place);
      persistent(group_name(gi) + ".optim.exp_avg_sq", opt * 4, Category::Optimizer, optim_place);
    }
    grads_.assign(static_cast<std::size_t>(groups()), -1);
  }

  // zero3: all-gathers a group's parameters into a full buffer (offloaded shards are first
  // copied to the device through a staging buffer of one shard).
  int gather(int gi, Phase phase) {
    if (!zero3_) return -1;
    const std::int64_t full = group_params(gi) * e_;
    const int t = tensor(group_name(gi) + ".params.full", full, Category::Params);
    const std::int64_t staging = p_.offload_params ? shard_elems(gi) * e_ : 0;
    const int o = op(group_name(gi) + ".gather", phase, gi < m_.layers ? gi : -1,
                     {params_[static_cast<std::size_t>(gi)]}, {t}, staging);
    set_comm(o, CommKind::AllGather, double(shard_elems(gi) * e_) * double(N_ - 1), static_cast<int>(N_));
    return t;
  }

  // ---- forward ---------------------------------------------------------------------------
  void forward() {
    tokens_ = tensor("batch.tokens", n_ * 8, Category::Activations);
    targets_ = tensor("batch.targets", n_ * 8, Category::Activations);
    op("batch.load", Phase::Forward, -1, {}, {tokens_, targets_});

    const int embed_full = gather(embed_group(), Phase::Forward);
    const int x0 = tensor("layer.0.in", n_ * h_ * e_, Category::Activations);
    std::vector<int> ins = {tokens_};
    if (embed_full >= 0) ins.push_back(embed_full);
    op("embed", Phase::Forward, -1, ins, {x0});

    acts_.resize(static_cast<std::size_t>(m_.layers));
    ckpt_host_.assign(static_cast<std::size_t>(m_.layers), -1);
    int x = x0;
    int next_params = gather(0, Phase::Forward);
    for (int l = 0; l < m_.layers; ++l) {
      const int layer_params = next_params;
      if (l + 1 < m_.layers) next_params = gather(l + 1, Phase::Forward);  // prefetch
      LayerActs a = layer_forward(l, x, Phase::Forward, "");
      if (layer_params >= 0) const_cast<OpSpec&>(graph_.op(a.last_forward_op)).inputs.push_back(layer_params);
      if (p_.checkpoint.checkpoints_layer(l) && p_.offload_checkpoints) {
        ckpt_host_[static_cast<std::size_t>(l)] =
            tensor(L(l) + "in.host", n_ * h_ * e_, Category::Activations, Place::Host);
        const int o = op(L(l) + "checkpoint.offload", Phase::Forward, l, {a.in}, {ckpt_host_[static_cast<std::size_t>(l)]});
        set_comm(o, CommKind::DeviceToHost, double(n_ * h_ * e_), 1);
      }
      acts_[static_cast<std::size_t>(l)] = a;
      x = a.out;
    }
    final_x_ = x;
  }

  // The ops of one layer's forward. suffix "" for the first pass, ".recompute" in backward.
  LayerActs layer_forward(int l, int x, Phase phase, const std::string& suffix) {
    const std::string p = L(l);
    const Category act = Category::Activations;
    LayerActs a;
    a.in = x;
    a.rstd1 = tensor(p + "attn_norm.rstd" + suffix, n_ * 4, act);
    a.xn1 = tensor(p + "attn_norm.out" + suffix, n_ * h_ * e_, act);
    op(p + "attn_norm" + suffix, phase, l, {x}, {a.xn1, a.rstd1}, 0, 4.0 * double(n_ * h_));

    if (p_.head_chunk > 0) {
      untied_attention_forward(l, a, phase, suffix);
    } else {
      ulysses_attention_forward(l, a, phase, suffix);
    }

    const int o = tensor(p + "attn.o_proj.out" + suffix, n_ * h_ * e_, Category::Transient);
    op(p + "attn.o_proj" + suffix, phase, l, {a.o_loc}, {o}, 0, mm(n_, H_ * d_, h_));
    a.mid = tensor(p + "mid" + suffix, n_ * h_ * e_, act);
    op(p + "attn.residual" + suffix, phase, l, {x, o}, {a.mid});

    a.rstd2 = tensor(p + "mlp_norm.rstd" + suffix, n_ * 4, act);
    a.xn2 = tensor(p + "mlp_norm.out" + suffix, n_ * h_ * e_, act);
    op(p + "mlp_norm" + suffix, phase, l, {a.mid}, {a.xn2, a.rstd2}, 0, 4.0 * double(n_ * h_));

    const int down = tensor(p + "mlp.down.out" + suffix, n_ * h_ * e_, Category::Transient);
    const double mlp_flops = mm(n_, h_, I_) * 3;
    if (p_.mlp_tiles > 1) {
      const std::int64_t t = n_ / p_.mlp_tiles;
      // Per tile: gate, up, silu(gate), act = silu*up (4 x t x I), and the tile's output rows.
      op(p + "mlp.tiled" + suffix, phase, l, {a.xn2}, {down}, 4 * t * I_ * e_ + t * h_ * e_, mlp_flops);
    } else {
      a.gate = tensor(p + "mlp.gate" + suffix, n_ * I_ * e_, act);
      a.up = tensor(p + "mlp.up" + suffix, n_ * I_ * e_, act);
      op(p + "mlp.gate_up" + suffix, phase, l, {a.xn2}, {a.gate, a.up}, 0, mm(n_, h_, I_) * 2);
      a.act = tensor(p + "mlp.act" + suffix, n_ * I_ * e_, act);
      // silu(gate) is a temporary of the op; backward recomputes it from gate.
      op(p + "mlp.swiglu" + suffix, phase, l, {a.gate, a.up}, {a.act}, n_ * I_ * e_, 4.0 * double(n_ * I_));
      op(p + "mlp.down" + suffix, phase, l, {a.act}, {down}, 0, mm(n_, I_, h_));
    }
    a.out = tensor((l + 1 < m_.layers ? fmt::format("layer.{}.in", l + 1) : std::string("loss.final_norm.in")) + suffix,
                   n_ * h_ * e_, act);
    a.last_forward_op = op(p + "mlp.residual" + suffix, phase, l, {a.mid, down}, {a.out});
    return a;
  }

  // Kv heads one Ulysses all-to-all carries per rank, and the elements of k (or v) around it:
  // before it [n, u*kvr, d] (kv heads replicated to u when u > K), after it [b*S, kvr, d].
  std::int64_t kv_sp_elems() const { return n_ * u_ * kvr_ * d_; }

  // Flash attention's scratch on the CPU backend: k and v expanded to the query heads of
  // their group (the CUDA kernels read GQA natively).
  std::int64_t gqa_expansion(std::int64_t q_heads, std::int64_t kv_heads, int copies) const {
    if (!cpu_ || q_heads == kv_heads) return 0;
    return copies * (b_ * S_) * q_heads * d_ * e_;
  }

  double attention_flops(std::int64_t heads) const {
    // QK^T and PV over the causal half: 2 matmuls x 2 flops x S^2/2 per head.
    return 2.0 * double(b_) * double(S_) * double(S_) * double(d_) * double(heads);
  }

  void ulysses_attention_forward(int l, LayerActs& a, Phase phase, const std::string& suffix) {
    const std::string p = L(l);
    const Category act = Category::Activations;
    int q = tensor(p + "attn.q" + suffix, n_ * H_ * d_ * e_, Category::Transient);
    int k = tensor(p + "attn.k" + suffix, n_ * K_ * d_ * e_, Category::Transient);
    int v = tensor(p + "attn.v" + suffix, n_ * K_ * d_ * e_, Category::Transient);
    op(p + "attn.qkv" + suffix, phase, l, {a.xn1}, {q, k, v}, 0, mm(n_, h_, (H_ + 2 * K_) * d_));
    if (m_.qk_norm) {
      // q and k before the per-head norm are saved for its backward.
      graph_.tensor(q).category = act;
      graph_.tensor(k).category = act;
      a.q_pre = q;
      a.k_pre = k;
      a.rstd_q = tensor(p + "attn.q_norm.rstd" + suffix, n_ * H_ * 4, act);
      a.rstd_k = tensor(p + "attn.k_norm.rstd" + suffix, n_ * K_ * 4, act);
      const int qn = tensor(p + "attn.q_norm.out" + suffix, n_ * H_ * d_ * e_, Category::Transient);
      const int kn = tensor(p + "attn.k_norm.out" + suffix, n_ * K_ * d_ * e_, Category::Transient);
      op(p + "attn.qk_norm" + suffix, phase, l, {q, k}, {qn, kn, a.rstd_q, a.rstd_k});
      q = qn;
      k = kn;
    }
    const int qr = tensor(p + "attn.q_rope" + suffix, n_ * H_ * d_ * e_, Category::Transient);
    const int kr = tensor(p + "attn.k_rope" + suffix, n_ * K_ * d_ * e_, Category::Transient);
    op(p + "attn.rope" + suffix, phase, l, {q, k}, {qr, kr}, 0, 6.0 * double(n_ * (H_ + K_) * d_));
    if (u_ == 1) {
      a.q_sp = qr;
      a.k_sp = kr;
      a.v_sp = v;
    } else {
      a.q_sp = tensor(p + "attn.q_sp" + suffix, n_ * H_ * d_ * e_, act);
      a.k_sp = tensor(p + "attn.k_sp" + suffix, kv_sp_elems() * e_, act);
      a.v_sp = tensor(p + "attn.v_sp" + suffix, kv_sp_elems() * e_, act);
      // Send buffers: q, and k/v laid out per destination (replicated when u > K).
      const std::int64_t send = (n_ * H_ * d_ + 2 * kv_sp_elems()) * e_;
      const int o = op(p + "attn.a2a_qkv" + suffix, phase, l, {qr, kr, v}, {a.q_sp, a.k_sp, a.v_sp}, send);
      set_comm(o, CommKind::AllToAll, double(send) * double(u_ - 1) / double(u_), static_cast<int>(u_));
    }
    graph_.tensor(a.q_sp).category = act;
    graph_.tensor(a.k_sp).category = act;
    graph_.tensor(a.v_sp).category = act;
    a.o_sp = tensor(p + "attn.flash.out" + suffix, n_ * H_ * d_ * e_, act);
    a.lse = tensor(p + "attn.flash.lse" + suffix, n_ * H_ * 4, act);
    op(p + "attn.flash" + suffix, phase, l, {a.q_sp, a.k_sp, a.v_sp}, {a.o_sp, a.lse},
       gqa_expansion(hl_, kvr_, 2), attention_flops(hl_));
    if (u_ == 1) {
      a.o_loc = a.o_sp;
    } else {
      a.o_loc = tensor(p + "attn.out" + suffix, n_ * H_ * d_ * e_, act);
      const int o = op(p + "attn.a2a_out" + suffix, phase, l, {a.o_sp}, {a.o_loc}, n_ * H_ * d_ * e_);
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
  std::int64_t untied_forward_workspace() const {
    const std::int64_t c = p_.head_chunk, kvs = stage_kv_heads();
    const std::int64_t kv = 4 * n_ * u_ * kvs * d_ * e_;  // k and v, before and after the all-to-all
    const std::int64_t q = 2 * n_ * u_ * c * d_ * e_;     // stage q, before and after
    const std::int64_t o = 2 * n_ * u_ * c * d_ * e_;     // stage out, before and after
    return kv + q + o + gqa_expansion(c, kvs, 2);
  }
  std::int64_t untied_backward_workspace() const {
    const std::int64_t c = p_.head_chunk, kvs = stage_kv_heads();
    const std::int64_t kv = 4 * n_ * u_ * kvs * d_ * e_;     // recomputed k, v around the all-to-all
    const std::int64_t dkv = 4 * n_ * u_ * kvs * d_ * e_;    // their gradients, after and before
    const std::int64_t stage = 8 * n_ * u_ * c * d_ * e_;    // q, out, d_out, dq: each before and after
    const std::int64_t flash = cpu_ ? gqa_expansion(c, kvs, 4) : n_ * u_ * c * d_ * 4;
    return kv + dkv + stage + flash;
  }

  void untied_attention_forward(int l, LayerActs& a, Phase phase, const std::string& suffix) {
    const std::string p = L(l);
    a.o_loc = tensor(p + "attn.out" + suffix, n_ * H_ * d_ * e_, Category::Activations);
    a.lse = tensor(p + "attn.flash.lse" + suffix, n_ * H_ * 4, Category::Activations);
    const double flops = mm(n_, h_, (H_ + 2 * K_) * d_) + attention_flops(hl_);
    const int o = op(p + "attn.untied" + suffix, phase, l, {a.xn1}, {a.o_loc, a.lse}, untied_forward_workspace(), flops);
    const double sent = double((n_ * H_ * d_ * 2 + 2 * kv_sp_elems()) * e_) * double(u_ - 1) / double(u_);
    if (u_ > 1) set_comm(o, CommKind::AllToAll, sent, static_cast<int>(u_));
  }

  // ---- loss ------------------------------------------------------------------------------
  void loss() {
    head_full_ = gather(head_group(), Phase::Loss);
    if (m_.tie_embeddings && zero3_) tied_full_ = gather(embed_group(), Phase::Loss);
    rstd_f_ = tensor("loss.final_norm.rstd", n_ * 4, Category::Activations);
    xf_ = tensor("loss.final_norm.out", n_ * h_ * e_, Category::Activations);
    op("loss.final_norm", Phase::Loss, -1, {final_x_}, {xf_, rstd_f_}, 0, 4.0 * double(n_ * h_));
    const double flops = mm(n_, h_, V_);
    if (p_.loss_tiles > 1) {
      const std::int64_t t = n_ / p_.loss_tiles;
      op("loss.tiled", Phase::Loss, -1, {xf_, targets_}, {}, t * V_ * (e_ == 4 ? 4 : e_ + 4), flops);
      return;
    }
    int logits = tensor("loss.logits", n_ * V_ * e_, Category::Transient);
    op("loss.logits", Phase::Loss, -1, {xf_}, {logits}, 0, flops);
    if (e_ != 4) {
      const int up = tensor("loss.logits.fp32", n_ * V_ * 4, Category::Transient);
      op("loss.upcast", Phase::Loss, -1, {logits}, {up});
      logits = up;
    }
    logp_ = tensor("loss.log_softmax", n_ * V_ * 4, Category::Activations);
    op("loss.log_softmax", Phase::Loss, -1, {logits}, {logp_}, 0, 5.0 * double(n_ * V_));
    op("loss.nll", Phase::Loss, -1, {logp_, targets_}, {});
  }

  // ---- backward --------------------------------------------------------------------------
  // The layer's (or group's) gradient buffer, produced by its first backward op.
  int new_grad(int gi) {
    return tensor(group_name(gi) + (shard_grads_ ? ".grad.full" : ".grad"), group_params(gi) * g_, Category::Grads);
  }

  // zero2/zero3: reduce-scatter a finished group gradient into its shard; with the optimizer
  // offloaded the shard then goes to host memory.
  void finish_grad(int gi, int full, Phase phase) {
    if (!shard_grads_) {
      grads_[static_cast<std::size_t>(gi)] = full;
      return;
    }
    const int shard = tensor(group_name(gi) + ".grad.shard", shard_elems(gi) * g_, Category::Grads);
    const int o = op(group_name(gi) + ".grad.reduce_scatter", phase, gi < m_.layers ? gi : -1, {full}, {shard});
    set_comm(o, CommKind::ReduceScatter, double(shard_elems(gi) * g_) * double(N_ - 1), static_cast<int>(N_));
    grads_[static_cast<std::size_t>(gi)] = shard;
    if (p_.offload_optimizer) to_host(gi, phase);
  }
  void to_host(int gi, Phase phase) {
    const int dev = grads_[static_cast<std::size_t>(gi)];
    const std::int64_t elems = graph_.tensor(dev).bytes / g_;
    const int host = tensor(group_name(gi) + ".grad.host", elems * 4, Category::Grads, Place::Host);
    const int o = op(group_name(gi) + ".grad.to_host", phase, gi < m_.layers ? gi : -1, {dev}, {host});
    set_comm(o, CommKind::DeviceToHost, double(graph_.tensor(dev).bytes), 1);
    grads_[static_cast<std::size_t>(gi)] = host;
  }

  void backward() {
    const Phase B = Phase::Backward;
    // Loss backward: the head gradient (or, tied, the embedding's) is produced here.
    const int head_grad = new_grad(head_group());
    int tied_grad = -1;
    if (m_.tie_embeddings) tied_grad = new_grad(embed_group());
    std::vector<int> head_reads = {xf_, targets_};
    if (head_full_ >= 0) head_reads.push_back(head_full_);
    if (tied_full_ >= 0) head_reads.push_back(tied_full_);
    const int d_xf = tensor("loss.final_norm.out.grad", n_ * h_ * e_, Category::Transient);
    std::vector<int> grads_out = {d_xf, head_grad};
    if (tied_grad >= 0) grads_out.push_back(tied_grad);
    const double flops = 2 * mm(n_, h_, V_);
    if (p_.loss_tiles > 1) {
      const std::int64_t t = n_ / p_.loss_tiles;
      op("loss.tiled.bwd", B, -1, head_reads, grads_out, t * V_ * (e_ == 4 ? 4 : e_ + 4), flops + mm(n_, h_, V_));
    } else {
      const int d_logp = tensor("loss.nll.grad", n_ * V_ * 4, Category::Transient);
      op("loss.nll.bwd", B, -1, {targets_}, {d_logp});
      int d_logits = tensor("loss.logits.grad.fp32", n_ * V_ * 4, Category::Transient);
      op("loss.log_softmax.bwd", B, -1, {d_logp, logp_}, {d_logits}, 0, 3.0 * double(n_ * V_));
      if (e_ != 4) {
        const int dl = tensor("loss.logits.grad", n_ * V_ * e_, Category::Transient);
        op("loss.upcast.bwd", B, -1, {d_logits}, {dl});
        d_logits = dl;
      }
      head_reads.push_back(d_logits);
      op("loss.logits.bwd", B, -1, head_reads, grads_out, 0, flops);
    }
    int d_x = tensor("loss.final_norm.in.grad", n_ * h_ * e_, Category::Transient);
    op("loss.final_norm.bwd", B, -1, {d_xf, final_x_, rstd_f_}, {d_x}, 0, 8.0 * double(n_ * h_));
    finish_grad(head_group(), head_grad, B);

    // Layers, last to first; zero3 prefetches the next layer's parameters, checkpoint offload
    // prefetches the next checkpoint.
    int next_params = gather(static_cast<int>(m_.layers) - 1, B);
    int next_ckpt = prefetch_checkpoint(static_cast<int>(m_.layers) - 1);
    for (int l = static_cast<int>(m_.layers) - 1; l >= 0; --l) {
      const int layer_params = next_params;
      const int ckpt = next_ckpt;
      if (l > 0) {
        next_params = gather(l - 1, B);
        next_ckpt = prefetch_checkpoint(l - 1);
      }
      LayerActs a = acts_[static_cast<std::size_t>(l)];
      int recompute_out = -1;
      if (p_.checkpoint.checkpoints_layer(l)) {
        const int x = ckpt >= 0 ? ckpt : a.in;
        a = layer_forward(l, x, B, ".recompute");
        recompute_out = a.out;
      }
      d_x = layer_backward(l, a, d_x);
      auto& last = const_cast<OpSpec&>(graph_.ops().back());
      if (layer_params >= 0) last.inputs.push_back(layer_params);
      if (recompute_out >= 0) last.inputs.push_back(recompute_out);  // held until the layer's backward ends
    }

    // Embedding backward: a dense [V, h] gradient.
    const int embed_full = m_.tie_embeddings ? -1 : gather(embed_group(), B);
    const int eg = tied_grad >= 0 ? tied_grad : new_grad(embed_group());
    std::vector<int> reads = {d_x, tokens_};
    if (embed_full >= 0) reads.push_back(embed_full);
    if (tied_grad >= 0) reads.push_back(tied_grad);
    op("embed.bwd", B, -1, reads, tied_grad >= 0 ? std::vector<int>{} : std::vector<int>{eg}, 0, double(n_ * h_));
    finish_grad(embed_group(), eg, B);
  }

  int prefetch_checkpoint(int l) {
    const int host = ckpt_host_[static_cast<std::size_t>(l)];
    if (host < 0) return -1;
    const int dev = tensor(L(l) + "in.prefetched", n_ * h_ * e_, Category::Activations);
    const int o = op(L(l) + "checkpoint.prefetch", Phase::Backward, l, {host}, {dev});
    set_comm(o, CommKind::HostToDevice, double(n_ * h_ * e_), 1);
    return dev;
  }

  // Returns the gradient of the layer's input.
  int layer_backward(int l, const LayerActs& a, int d_out) {
    const std::string p = L(l);
    const Phase B = Phase::Backward;
    const Category tr = Category::Transient;
    const int grad = new_grad(l);
    int d_xn2 = tensor(p + "mlp_norm.out.grad", n_ * h_ * e_, tr);
    if (p_.mlp_tiles > 1) {
      const std::int64_t t = n_ / p_.mlp_tiles;
      // Per tile: gate, up, act recomputed, d_act, d_gate, d_up (6 x t x I), and the tile's d_out rows.
      op(p + "mlp.tiled.bwd", B, l, {d_out, a.xn2}, {d_xn2, grad}, 6 * t * I_ * e_ + t * h_ * e_, mm(n_, h_, I_) * 9);
    } else {
      const int d_act = tensor(p + "mlp.act.grad", n_ * I_ * e_, tr);
      op(p + "mlp.down.bwd", B, l, {d_out, a.act}, {d_act, grad}, 0, mm(n_, I_, h_) * 2);
      const int d_gate = tensor(p + "mlp.gate.grad", n_ * I_ * e_, tr);
      const int d_up = tensor(p + "mlp.up.grad", n_ * I_ * e_, tr);
      op(p + "mlp.swiglu.bwd", B, l, {d_act, a.gate, a.up}, {d_gate, d_up}, n_ * I_ * e_, 8.0 * double(n_ * I_));
      op(p + "mlp.gate_up.bwd", B, l, {d_gate, d_up, a.xn2, grad}, {d_xn2}, 0, mm(n_, h_, I_) * 4);
    }
    const int d_mid = tensor(p + "mid.grad", n_ * h_ * e_, tr);
    op(p + "mlp_norm.bwd", B, l, {d_xn2, a.mid, a.rstd2, d_out}, {d_mid}, 0, 8.0 * double(n_ * h_));
    const int d_oloc = tensor(p + "attn.out.grad", n_ * H_ * d_ * e_, tr);
    op(p + "attn.o_proj.bwd", B, l, {d_mid, a.o_loc, grad}, {d_oloc}, 0, mm(n_, H_ * d_, h_) * 2);
    const int d_xn1 = tensor(p + "attn_norm.out.grad", n_ * h_ * e_, tr);
    if (p_.head_chunk > 0) {
      const double flops = 2 * mm(n_, h_, (H_ + 2 * K_) * d_) + mm(n_, h_, (H_ + 2 * K_) * d_) + 3.5 * attention_flops(hl_);
      const int o = op(p + "attn.untied.bwd", B, l, {d_oloc, a.xn1, a.o_loc, a.lse, grad}, {d_xn1}, untied_backward_workspace(), flops);
      if (u_ > 1)
        set_comm(o, CommKind::AllToAll, double((n_ * H_ * d_ * 4 + 4 * kv_sp_elems()) * e_) * double(u_ - 1) / double(u_),
                 static_cast<int>(u_));
    } else {
      ulysses_attention_backward(l, a, d_oloc, d_xn1, grad);
    }
    const int d_in = tensor(l == 0 ? "layer.0.in.grad" : fmt::format("layer.{}.in.grad", l), n_ * h_ * e_, tr);
    op(p + "attn_norm.bwd", B, l, {d_xn1, a.in, a.rstd1, d_mid, grad}, {d_in}, 0, 8.0 * double(n_ * h_));
    finish_grad(l, grad, B);
    return d_in;
  }

  void ulysses_attention_backward(int l, const LayerActs& a, int d_oloc, int d_xn1, int grad) {
    const std::string p = L(l);
    const Phase B = Phase::Backward;
    const Category tr = Category::Transient;
    int d_osp = d_oloc;
    if (u_ > 1) {
      d_osp = tensor(p + "attn.flash.out.grad", n_ * H_ * d_ * e_, tr);
      const int o = op(p + "attn.a2a_out.bwd", B, l, {d_oloc}, {d_osp}, n_ * H_ * d_ * e_);
      set_comm(o, CommKind::AllToAll, double(n_ * H_ * d_ * e_) * double(u_ - 1) / double(u_), static_cast<int>(u_));
    }
    const int dq_sp = tensor(p + "attn.q_sp.grad", n_ * H_ * d_ * e_, tr);
    const int dk_sp = tensor(p + "attn.k_sp.grad", kv_sp_elems() * e_, tr);
    const int dv_sp = tensor(p + "attn.v_sp.grad", kv_sp_elems() * e_, tr);
    // CPU: k, v and their gradients expanded to the group's query heads. CUDA: the fp32 dq
    // accumulator. Both: the fp32 row sums of dO * O.
    const std::int64_t ws = (cpu_ ? gqa_expansion(hl_, kvr_, 4) : n_ * H_ * d_ * 4) + n_ * H_ * 4;
    op(p + "attn.flash.bwd", B, l, {d_osp, a.q_sp, a.k_sp, a.v_sp, a.o_sp, a.lse}, {dq_sp, dk_sp, dv_sp}, ws,
       2.5 * attention_flops(hl_));
    int dq = dq_sp, dk = dk_sp, dv = dv_sp;
    if (u_ > 1) {
      dq = tensor(p + "attn.q_rope.grad", n_ * H_ * d_ * e_, tr);
      dk = tensor(p + "attn.k_rope.grad", n_ * K_ * d_ * e_, tr);
      dv = tensor(p + "attn.v.grad", n_ * K_ * d_ * e_, tr);
      // Send buffers, and with kv replication the received copies before they are summed.
      const std::int64_t send = (n_ * H_ * d_ + 2 * kv_sp_elems()) * e_;
      const std::int64_t replicas = kvr_ * u_ > K_ ? 2 * kv_sp_elems() * e_ : 0;
      const int o = op(p + "attn.a2a_qkv.bwd", B, l, {dq_sp, dk_sp, dv_sp}, {dq, dk, dv}, send + replicas);
      set_comm(o, CommKind::AllToAll, double(send) * double(u_ - 1) / double(u_), static_cast<int>(u_));
    }
    const int dq_r = tensor(p + "attn.q.grad", n_ * H_ * d_ * e_, tr);
    const int dk_r = tensor(p + "attn.k.grad", n_ * K_ * d_ * e_, tr);
    op(p + "attn.rope.bwd", B, l, {dq, dk}, {dq_r, dk_r}, 0, 6.0 * double(n_ * (H_ + K_) * d_));
    int dq_in = dq_r, dk_in = dk_r;
    if (m_.qk_norm) {
      dq_in = tensor(p + "attn.q_pre.grad", n_ * H_ * d_ * e_, tr);
      dk_in = tensor(p + "attn.k_pre.grad", n_ * K_ * d_ * e_, tr);
      op(p + "attn.qk_norm.bwd", B, l, {dq_r, dk_r, a.q_pre, a.k_pre, a.rstd_q, a.rstd_k}, {dq_in, dk_in});
    }
    op(p + "attn.qkv.bwd", B, l, {dq_in, dk_in, dv, a.xn1, grad}, {d_xn1}, 0, 2 * mm(n_, h_, (H_ + 2 * K_) * d_));
  }

  // ---- optimizer -------------------------------------------------------------------------
  void optimizer() {
    const Phase P = Phase::Optimizer;
    if (!shard_grads_ && p_.offload_optimizer) {
      for (int gi = 0; gi < groups(); ++gi) {
        if (p_.sharding == Sharding::Zero1) {
          const int o = op(group_name(gi) + ".grad.all_reduce", P, -1, {grads_[static_cast<std::size_t>(gi)]}, {});
          set_comm(o, CommKind::AllReduce, 2.0 * double(group_params(gi) * g_) * double(N_ - 1) / double(N_), static_cast<int>(N_));
        }
        to_host(gi, P);
      }
    }
    for (int gi = 0; gi < groups(); ++gi) {
      const int grad = grads_[static_cast<std::size_t>(gi)];
      if (p_.sharding == Sharding::Zero1 && !p_.offload_optimizer) {
        const int o = op(group_name(gi) + ".grad.all_reduce", P, -1, {grad}, {});
        set_comm(o, CommKind::AllReduce, 2.0 * double(group_params(gi) * g_) * double(N_ - 1) / double(N_), static_cast<int>(N_));
      } else if (p_.sharding == Sharding::None && N_ > 1 && !p_.offload_optimizer) {
        const int o = op(group_name(gi) + ".grad.all_reduce", P, -1, {grad}, {});
        set_comm(o, CommKind::AllReduce, 2.0 * double(group_params(gi) * g_) * double(N_ - 1) / double(N_), static_cast<int>(N_));
      }
      const std::int64_t elems = shard_optim_ ? shard_elems(gi) : group_params(gi);
      OpSpec o;
      o.name = group_name(gi) + ".optim.step";
      o.phase = P;
      o.inputs = {grad};
      o.flops = 12.0 * double(elems);
      o.memory_bytes = double(elems) * (master_ ? 16 : 12) * 2;
      // One fp32 temporary of the shard (the update before it is applied).
      if (p_.offload_optimizer) {
        o.host_compute = true;
        o.host_workspace_bytes = elems * 4;
        o.workspace_bytes = elems * e_;  // staging of the updated parameters back to the device
        o.comm = CommKind::HostToDevice;
        o.comm_bytes = double(elems * e_);
      } else {
        o.workspace_bytes = elems * 4;
      }
      graph_.add_op(std::move(o));
      if (p_.sharding == Sharding::Zero1 || p_.sharding == Sharding::Zero2) {
        const int g = op(group_name(gi) + ".params.all_gather", P, -1, {}, {});
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
  std::vector<int> params_, grads_, ckpt_host_;
  std::vector<LayerActs> acts_;
  int tokens_ = -1, targets_ = -1, final_x_ = -1, xf_ = -1, rstd_f_ = -1, logp_ = -1;
  int head_full_ = -1, tied_full_ = -1;
};

}  // namespace

StepGraph build_step(const StepInputs& in) { return Builder(in).build(); }

}  // namespace longctx
