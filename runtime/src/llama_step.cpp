// The Llama forward with the plan's techniques, the checkpoint store, the weights and AdamW.
#include "longctx/runtime/llama_step.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <fmt/format.h>

#include "longctx/planner/phase_names.h"
#include "longctx/runtime/adamw.h"
#include "longctx/runtime/loss.h"
#include "longctx/runtime/memory_meter.h"
#include "longctx/runtime/mlp.h"
#include "longctx/runtime/projection.h"

namespace longctx::runtime {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- weights -------------------------------------------------------------------------------

std::vector<Tensor> LayerWeights::all() const {
  std::vector<Tensor> v = {attn_norm, wq, wk, wv, wo};
  if (q_norm.defined()) v.push_back(q_norm);
  if (k_norm.defined()) v.push_back(k_norm);
  for (const auto& t : {mlp_norm, w_gate, w_up, w_down}) v.push_back(t);
  return v;
}

std::vector<Tensor> LlamaWeights::all() const {
  std::vector<Tensor> v;
  for (const auto& l : layers)
    for (auto& t : l.all()) v.push_back(t);
  v.push_back(embed);
  v.push_back(final_norm);
  if (output.defined()) v.push_back(output);
  return v;
}

LlamaWeights init_weights(const ModelConfig& m, std::uint64_t seed, const WeightPlacement& where) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat);
  auto place = [&](Tensor cpu, bool host_pool) {
    Tensor t;
    if (host_pool) {
      t = host_empty(cpu.sizes(), where.dtype, where.pinned);
      t.copy_(cpu);
    } else {
      t = cpu.to(where.device, where.dtype);
    }
    return t.detach().requires_grad_(true);
  };
  auto matrix = [&](std::int64_t rows, std::int64_t cols, bool host_pool) {
    return place(at::normal(0.0, 0.02, {rows, cols}, gen, f32), host_pool);
  };
  auto norm = [&](std::int64_t n, bool host_pool) {
    return place(at::normal(1.0, 0.1, {n}, gen, f32), host_pool);
  };
  const bool hp = where.layers_in_host_pool;
  LlamaWeights w;
  w.embed = matrix(m.vocab, m.hidden, false);
  for (std::int64_t l = 0; l < m.layers; ++l) {
    LayerWeights lw;
    lw.attn_norm = norm(m.hidden, hp);
    lw.wq = matrix(m.q_dim(), m.hidden, hp);
    lw.wk = matrix(m.kv_dim(), m.hidden, hp);
    lw.wv = matrix(m.kv_dim(), m.hidden, hp);
    lw.wo = matrix(m.hidden, m.q_dim(), hp);
    if (m.qk_norm) {
      lw.q_norm = norm(m.head_dim, hp);
      lw.k_norm = norm(m.head_dim, hp);
    }
    lw.mlp_norm = norm(m.hidden, hp);
    lw.w_gate = matrix(m.intermediate, m.hidden, hp);
    lw.w_up = matrix(m.intermediate, m.hidden, hp);
    lw.w_down = matrix(m.hidden, m.intermediate, hp);
    w.layers.push_back(std::move(lw));
  }
  w.final_norm = norm(m.hidden, false);
  if (!m.tie_embeddings) w.output = matrix(m.vocab, m.hidden, false);
  return w;
}

LlamaWeights clone_weights(const LlamaWeights& w) {
  auto c = [](const Tensor& t) { return t.defined() ? t.detach().clone().requires_grad_(true) : Tensor(); };
  LlamaWeights o;
  o.embed = c(w.embed);
  for (const auto& l : w.layers)
    o.layers.push_back({c(l.attn_norm), c(l.wq), c(l.wk), c(l.wv), c(l.wo), c(l.q_norm), c(l.k_norm), c(l.mlp_norm),
                        c(l.w_gate), c(l.w_up), c(l.w_down)});
  o.final_norm = c(w.final_norm);
  o.output = c(w.output);
  return o;
}

// ---- phases ---------------------------------------------------------------------------------

void set_phase(const std::string& name) {
  if (auto* m = active_meter()) m->set_phase(name);
}

namespace {
class PhaseMarkFn : public torch::autograd::Function<PhaseMarkFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const std::string& name) {
    ctx->saved_data["phase"] = name;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    set_phase(ctx->saved_data["phase"].toStringRef());
    return {grads[0], Tensor()};
  }
};
}  // namespace

Tensor mark_backward_phase(const Tensor& x, const std::string& name) { return PhaseMarkFn::apply(x, name); }

// ---- checkpoint store ------------------------------------------------------------------------

namespace {
struct CudaSide {
  c10::cuda::CUDAStream stream;
};
}  // namespace

CheckpointStore::CheckpointStore(bool offload) : offload_(offload) {}
CheckpointStore::~CheckpointStore() = default;

void CheckpointStore::keep(std::int64_t layer, const Tensor& x) {
  Entry e;
  Tensor d = x.detach();
  if (!offload_) {
    e.device = d;
  } else if (d.is_cuda()) {
    if (!side_stream_) side_stream_ = std::make_shared<CudaSide>(CudaSide{c10::cuda::getStreamFromPool()});
    auto& side = static_cast<CudaSide*>(side_stream_.get())->stream;
    e.host = host_empty(d.sizes(), d.scalar_type(), /*pinned=*/true);
    // The copy waits for the producer on the compute stream, then runs beside compute.
    at::cuda::CUDAEvent produced;
    produced.record(c10::cuda::getCurrentCUDAStream());
    produced.block(side);
    c10::cuda::CUDAStreamGuard guard(side);
    e.host.copy_(d, /*non_blocking=*/true);
    d.record_stream(side);
    auto ev = std::make_shared<at::cuda::CUDAEvent>();
    ev->record(side);
    e.ready = ev;
  } else {
    e.host = host_empty(d.sizes(), d.scalar_type(), /*pinned=*/false);
    e.host.copy_(d);
  }
  entries_[layer] = std::move(e);
}

void CheckpointStore::prefetch(std::int64_t layer) {
  auto it = entries_.find(layer);
  if (it == entries_.end() || it->second.device.defined()) return;
  Entry& e = it->second;
  if (side_stream_) {
    auto& side = static_cast<CudaSide*>(side_stream_.get())->stream;
    if (e.ready) static_cast<at::cuda::CUDAEvent*>(e.ready.get())->block(side);  // the offload finished
    c10::cuda::CUDAStreamGuard guard(side);
    e.device = at::empty(e.host.sizes(), e.host.options().device(c10::Device(c10::kCUDA, side.device_index())));
    e.device.copy_(e.host, /*non_blocking=*/true);
    auto ev = std::make_shared<at::cuda::CUDAEvent>();
    ev->record(side);
    e.ready = ev;
  } else {
    e.device = at::empty(e.host.sizes(), e.host.options());  // the CPU allocator: the device pool
    e.device.copy_(e.host);
  }
  e.host = Tensor();  // the host copy is released once the device copy exists
}

Tensor CheckpointStore::take(std::int64_t layer) {
  prefetch(layer);
  auto it = entries_.find(layer);
  TORCH_CHECK(it != entries_.end(), "no checkpoint kept for layer ", layer);
  Entry e = std::move(it->second);
  entries_.erase(it);
  if (side_stream_ && e.ready) {
    static_cast<at::cuda::CUDAEvent*>(e.ready.get())->block(c10::cuda::getCurrentCUDAStream());
    e.device.record_stream(c10::cuda::getCurrentCUDAStream());
  }
  return e.device;
}

void CheckpointStore::clear() { entries_.clear(); }

// ---- the step --------------------------------------------------------------------------------

namespace {

// Runs a checkpointed layer: forward without a graph, keeping only the input; backward
// fetches the input, recomputes the layer with a graph and backpropagates through it.
class CheckpointFn : public torch::autograd::Function<CheckpointFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, LlamaStep* step, std::int64_t layer) {
    ctx->saved_data["step"] = reinterpret_cast<std::int64_t>(step);
    ctx->saved_data["layer"] = layer;
    step->checkpoints().keep(layer, x);
    torch::NoGradGuard no_grad;
    return step->layer_forward(layer, x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* step = reinterpret_cast<LlamaStep*>(ctx->saved_data["step"].toInt());
    const auto layer = ctx->saved_data["layer"].toInt();
    Tensor x = step->checkpoints().take(layer).detach().requires_grad_(true);
    // The next layer down (its input, its parameters) starts coming back while this one
    // recomputes (planner order).
    if (layer > 0) {
      step->checkpoints().prefetch(layer - 1);
      step->prefetch_layer(layer - 1);
    }
    Tensor dx;
    {
      torch::AutoGradMode grad_on(true);
      Tensor out = step->layer_forward(layer, x);
      torch::autograd::backward({out}, {grads[0]});
    }
    dx = x.grad();
    return {dx, Tensor(), Tensor()};
  }
};

}  // namespace

LlamaStep::LlamaStep(const ModelConfig& m, const ParallelConfig& p, std::int64_t seq, LlamaWeights& weights,
                     torch::Device device, Communicator* comm)
    : m_(m),
      p_(p),
      w_(weights),
      device_(device),
      comm_(comm),
      layout_(UlyssesLayout::make(m, comm)),
      rope_(RopeTables::make(seq / layout_.u, m.head_dim, m.rope_theta, weights.embed.scalar_type(), device,
                             layout_.rank * (seq / layout_.u))),
      attn_shape_{m.heads, m.kv_heads, m.head_dim, m.rms_norm_eps},
      checkpoints_(std::make_unique<CheckpointStore>(p.offload_checkpoints)) {}

void LlamaStep::prefetch_layer(std::int64_t layer) {
  if (shards_ && shards_->gathers() && layer >= 0 && layer < m_.layers) shards_->prefetch(static_cast<int>(layer));
}

LayerWeights LlamaStep::fetch_layer(std::int64_t layer) {
  if (shards_ && shards_->gathers()) {
    auto v = shards_->gather(static_cast<int>(layer));
    std::size_t i = 0;
    LayerWeights w;
    for (Tensor* t : {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.wo}) *t = v[i++];
    if (m_.qk_norm) {
      w.q_norm = v[i++];
      w.k_norm = v[i++];
    }
    for (Tensor* t : {&w.mlp_norm, &w.w_gate, &w.w_up, &w.w_down}) *t = v[i++];
    return w;
  }
  const LayerWeights& w = w_.layers[static_cast<std::size_t>(layer)];
  if (!p_.offload_params) return w;
  // Parameter offload: the layer's weights come from the host pool for this use only; the
  // copy is differentiable, so gradients flow back to the host-resident leaves.
  last_fetched_.clear();
  auto fetch = [&](const Tensor& t) {
    if (!t.defined()) return t;
    Tensor d = device_.is_cuda() ? t.to(device_, /*non_blocking=*/true) : t.clone();
    if (record_fetches_) last_fetched_.push_back({d, t, d.storage().nbytes()});
    return d;
  };
  return {fetch(w.attn_norm), fetch(w.wq), fetch(w.wk), fetch(w.wv), fetch(w.wo), fetch(w.q_norm),
          fetch(w.k_norm), fetch(w.mlp_norm), fetch(w.w_gate), fetch(w.w_up), fetch(w.w_down)};
}

Tensor LlamaStep::layer_forward(std::int64_t layer, const Tensor& x) {
  LayerWeights w = fetch_layer(layer);
  const auto b = x.size(0), S = x.size(1), H = m_.heads, K = m_.kv_heads, d = m_.head_dim;
  const double eps = m_.rms_norm_eps;

  Tensor xn1 = rms_norm(x, w.attn_norm, eps);
  Tensor o;  // attention output [b, S, H*d]
  if (p_.head_chunk > 0) {
    o = head_chunked_attention(xn1, {w.wq, w.wk, w.wv, w.q_norm, w.k_norm}, attn_shape_, rope_, layout_,
                               p_.head_chunk);
  } else {
    auto qkv = project(xn1, {w.wq, w.wk, w.wv});
    xn1 = Tensor();  // without a graph (a checkpointed layer's forward) nothing else reads it
    Tensor q = qkv[0].view({b, S, H, d});
    Tensor k = qkv[1].view({b, S, K, d});
    Tensor v = qkv[2].view({b, S, K, d});
    qkv.clear();
    if (m_.qk_norm) {
      q = rms_norm(q, w.q_norm, eps);
      k = rms_norm(k, w.k_norm, eps);
    }
    q = rope(q, rope_);
    k = rope(k, rope_);
    auto sp = ulysses_to_sequence(q, k, v, layout_);
    q = k = v = Tensor();
    Tensor o_sp = attention(sp[0], sp[1], sp[2]);
    sp.clear();  // without a graph (a checkpointed layer's forward) nothing else holds them
    o = ulysses_to_heads(o_sp, layout_).view({b, S, H * d});
    o_sp = Tensor();
  }
  xn1 = Tensor();
  Tensor attn_out = at::linear(o, w.wo);
  o = Tensor();
  Tensor mid = at::add(x, attn_out);
  attn_out = Tensor();

  Tensor xn2 = rms_norm(mid, w.mlp_norm, eps);
  Tensor down;
  if (p_.mlp_tiles > 1) {
    down = tiled_mlp(xn2, w.w_gate, w.w_up, w.w_down, p_.mlp_tiles);
  } else {
    auto gate_up = project(xn2, {w.w_gate, w.w_up});
    xn2 = Tensor();
    Tensor act = swiglu(gate_up[0], gate_up[1]);
    gate_up.clear();
    down = at::linear(act, w.w_down);
  }
  xn2 = Tensor();
  Tensor out = at::add(mid, down);
  return out;
}

namespace {
// Identity in forward; when the gradient reaches it, tells the step which event that is
// (LlamaStep::on_backward): where a layer's or group's backward begins or has ended.
class OnBackwardFn : public torch::autograd::Function<OnBackwardFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, LlamaStep* step, std::int64_t event,
                        std::int64_t index) {
    ctx->saved_data["step"] = reinterpret_cast<std::int64_t>(step);
    ctx->saved_data["event"] = event;
    ctx->saved_data["index"] = index;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    reinterpret_cast<LlamaStep*>(ctx->saved_data["step"].toInt())
        ->on_backward(static_cast<LlamaStep::BackwardEvent>(ctx->saved_data["event"].toInt()),
                      ctx->saved_data["index"].toInt());
    return {grads[0], Tensor(), Tensor(), Tensor()};
  }
};
}  // namespace

Tensor LlamaStep::on_backward_of(const Tensor& x, BackwardEvent event, std::int64_t index) {
  return OnBackwardFn::apply(x, this, static_cast<std::int64_t>(event), index);
}

void LlamaStep::on_backward(BackwardEvent event, std::int64_t index) {
  const int group = static_cast<int>(index);
  switch (event) {
    case BackwardEvent::GroupGradsReady:
      shards_->finish_grads(group);
      break;
    case BackwardEvent::RegatherLayer:
      shards_->restore(group);
      shards_->prefetch(group - 1);  // the layer below, beside this one's backward
      break;
    case BackwardEvent::RestoreStreamedLayer:
      restore_streamed(index);
      break;
  }
}

void LlamaStep::release_streamed(std::int64_t layer) {
  torch::NoGradGuard no_grad;
  for (auto& s : last_fetched_) resize_storage(s.device, 0);
  streamed_[layer] = std::move(last_fetched_);
  last_fetched_.clear();
}

void LlamaStep::restore_streamed(std::int64_t layer) {
  auto it = streamed_.find(layer);
  if (it == streamed_.end()) return;
  torch::NoGradGuard no_grad;
  for (auto& s : it->second) {
    resize_storage(s.device, s.bytes);
    // Refill through an alias with its own version counter: the tensors autograd saved
    // must not look modified in place.
    Tensor alias = at::empty({0}, s.device.options());
    alias.set_(s.device.storage(), s.device.storage_offset(), s.device.sizes(), s.device.strides());
    alias.copy_(s.host, /*non_blocking=*/s.device.is_cuda());
  }
  streamed_.erase(it);  // the saved tensors keep the memory until their nodes have run
}

Tensor LlamaStep::forward(const Tensor& tokens, const Tensor& targets) {
  checkpoints_->clear();
  streamed_.clear();
  set_phase(phase_name(StepPhase::ForwardEmbed));
  const bool gathered = shards_ && shards_->gathers();
  const bool shard_grads = shards_ && shards_->shards_grads() && torch::GradMode::is_enabled();
  Tensor x = at::embedding(gathered ? shards_->gather(shards_->embed_group())[0] : w_.embed, tokens);
  // The embedding's backward reads only the token ids: the gathered table's memory goes now
  // (its leaf stays, to receive the gradient).
  if (gathered && torch::GradMode::is_enabled()) shards_->release(shards_->embed_group());
  x = mark_backward_phase(x, phase_name(StepPhase::BackwardEmbed));
  for (std::int64_t l = 0; l < m_.layers; ++l) {
    set_phase(phase_name(StepPhase::ForwardLayer, l));
    if (l == 0) prefetch_layer(0);
    prefetch_layer(l + 1);  // beside this layer's forward
    if (shard_grads) x = on_backward_of(x, BackwardEvent::GroupGradsReady, l);
    if (p_.checkpoint.checkpoints_layer(l)) {
      x = CheckpointFn::apply(x, this, l);
    } else if (gathered && torch::GradMode::is_enabled()) {
      x = layer_forward(l, x);
      shards_->release(static_cast<int>(l));
      x = on_backward_of(x, BackwardEvent::RegatherLayer, l);
    } else {
      record_fetches_ = p_.offload_params && torch::GradMode::is_enabled();
      x = layer_forward(l, x);
      if (record_fetches_) {
        record_fetches_ = false;
        release_streamed(l);
        x = on_backward_of(x, BackwardEvent::RestoreStreamedLayer, l);
      }
    }
    last_fetched_.clear();
    x = mark_backward_phase(x, phase_name(StepPhase::BackwardLayer, l));
  }
  set_phase(phase_name(StepPhase::Loss));
  if (shard_grads) x = on_backward_of(x, BackwardEvent::GroupGradsReady, shards_->head_group());
  Tensor final_norm = w_.final_norm, head = w_.head();
  if (gathered) {
    auto h = shards_->gather(shards_->head_group());
    final_norm = h[0];
    head = m_.tie_embeddings ? shards_->gather(shards_->embed_group())[0] : h[1];
  }
  Tensor xf = rms_norm(x, final_norm, m_.rms_norm_eps);
  x = Tensor();
  Tensor loss = p_.loss_tiles > 1 ? tiled_cross_entropy(xf, head, targets, p_.loss_tiles)
                                  : cross_entropy_loss(xf, head, targets);
  // Every rank holds as many tokens: the whole batch's token mean is the sum of these.
  if (comm_ && comm_->world() > 1) loss = at::div(loss, comm_->world());
  return mark_backward_phase(loss, phase_name(StepPhase::BackwardLoss));
}

double LlamaStep::forward_backward(Tensor tokens, Tensor targets) {
  Tensor loss = forward(tokens, targets);
  tokens = targets = Tensor();
  double value = loss.item<double>();
  if (comm_ && comm_->world() > 1) {
    Tensor sum = at::full({1}, value, torch::TensorOptions().dtype(torch::kDouble));
    comm_->all_reduce_sum(sum);
    value = sum.item<double>();
  }
  loss.backward();
  if (shards_) shards_->finish_grads(shards_->embed_group());
  checkpoints_->clear();
  return value;
}

// ---- AdamW ---------------------------------------------------------------------------------

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o, bool offload, bool pinned)
    : params_(std::move(params)), o_(o), offload_(offload), pinned_(pinned) {
  for (const auto& p : params_) {
    State s;
    auto fp32_state = [&](const Tensor& init) {
      Tensor t;
      if (offload_) {
        t = host_empty(p.sizes(), torch::kFloat, pinned_);
        if (init.defined()) t.copy_(init); else t.zero_();
      } else {
        t = init.defined() ? init.detach().to(torch::kFloat).clone() : at::zeros(p.sizes(), p.options().dtype(torch::kFloat));
      }
      return t;
    };
    if (p.scalar_type() != torch::kFloat) s.master = fp32_state(p.detach());
    s.exp_avg = fp32_state({});
    s.exp_avg_sq = fp32_state({});
    states_.push_back(std::move(s));
  }
}

void AdamW::update(Tensor& target, const Tensor& g, State& s) {
  const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t_));
  s.exp_avg.lerp_(g, 1.0 - o_.beta1);
  s.exp_avg_sq.mul_(o_.beta2).addcmul_(g, g, 1.0 - o_.beta2);
  // The one fp32 temporary: sqrt(v / bc2) + eps, beside the state it is computed from (an
  // offloaded state's in the host pool: the CPU allocator would count it on the device).
  Tensor denom = offload_ ? host_empty(s.exp_avg_sq.sizes(), torch::kFloat, pinned_) : at::empty_like(s.exp_avg_sq);
  at::sqrt_out(denom, s.exp_avg_sq);
  denom.div_(std::sqrt(bc2)).add_(o_.eps);
  target.mul_(1.0 - o_.lr * o_.weight_decay);
  target.addcdiv_(s.exp_avg, denom, -o_.lr / bc1);
}

void AdamW::step() {
  ++t_;
  torch::NoGradGuard no_grad;
  if (!offload_) {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      Tensor g = p.grad().scalar_type() == torch::kFloat ? p.grad() : p.grad().to(torch::kFloat);
      State& s = states_[i];
      Tensor target = s.master.defined() ? s.master : p.detach();
      update(target, g, s);
      if (s.master.defined()) p.detach().copy_(s.master);
      p.mutable_grad().reset();
    }
    return;
  }
  // Offloaded: every gradient goes to the host pool first (freeing the device's), then the
  // update runs on the host and the parameter is copied back.
  std::vector<Tensor> host_grads(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    if (grads_on_host_) {
      host_grads[i] = p.grad();
    } else {
      host_grads[i] = host_empty(p.sizes(), torch::kFloat, pinned_);
      host_grads[i].copy_(p.grad());
    }
    p.mutable_grad().reset();
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!host_grads[i].defined()) continue;
    Tensor& p = params_[i];
    State& s = states_[i];
    if (s.master.defined()) {
      update(s.master, host_grads[i], s);
      p.detach().copy_(s.master);
    } else {
      // fp32 parameters are their own master: update a host copy (the planner's host
      // temporary of the step) and copy it back.
      Tensor host_p = host_empty(p.sizes(), torch::kFloat, pinned_);
      host_p.copy_(p.detach());
      update(host_p, host_grads[i], s);
      p.detach().copy_(host_p);
    }
    host_grads[i] = Tensor();
  }
}

}  // namespace longctx::runtime
