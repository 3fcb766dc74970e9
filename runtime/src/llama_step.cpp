// The Llama step: the embedding, the layers through their executors, the loss.
#include "longctx/runtime/llama_step.h"

#include <fmt/format.h>

#include "planner/core/phase_names.h"
#include "longctx/runtime/adamw.h"
#include "longctx/runtime/layer_executors.h"
#include "longctx/runtime/loss.h"
#include "longctx/runtime/memory_meter.h"
#include "longctx/runtime/mlp.h"
#include "longctx/runtime/projection.h"

namespace longctx::runtime {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

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

// ---- the step --------------------------------------------------------------------------------

LlamaStep::LlamaStep(const ModelConfig& m, const ParallelConfig& p, std::int64_t seq, LlamaWeights& weights,
                     torch::Device device, Communicator* comm)
    : m_(m),
      p_(p),
      w_(weights),
      device_(device),
      comm_(comm),
      seq_(seq),
      layout_(UlyssesLayout::make(m, comm)),
      ring_(comm ? comm->ring() : RingGroup{}),
      rope_(RopeTables::make(sequence_shard(seq, p, ring_.rank, layout_.rank).positions(), rope_inverse_frequencies(m),
                             weights.embed.scalar_type(), device)),
      attn_shape_{m.heads, m.kv_heads, m.head_dim, m.rms_norm_eps},
      checkpoints_(std::make_unique<CheckpointStore>(p.offload_checkpoints)) {
  ring_.exchange = p.ring_exchange;
  checkpoint_prefetch_.store = checkpoints_.get();
  choose_executors();
}

LlamaStep::~LlamaStep() = default;

void LlamaStep::use_shards(ShardedParams* shards) {
  shards_ = shards;
  choose_executors();
}

void LlamaStep::choose_executors() {
  executors_.clear();
  const bool gathered = shards_ && shards_->gathers();
  // Parameter offload without zero3's shards: the layers' parameters live in the host pool.
  const ParamHome home(p_.offload_params, device_, device_.is_cuda());
  auto body = [this](const LayerWeights& w, const Tensor& x) { return layer_body(w, x); };
  for (std::int64_t l = 0; l < m_.layers; ++l) {
    const LayerWeights& w = w_.layers[static_cast<std::size_t>(l)];
    std::unique_ptr<LayerExecutor> e = gathered              ? gathered_layer(body, *shards_, l, m_)
                                       : p_.offload_params ? streamed_layer(body, w, home)
                                                           : plain_layer(body, w);
    if (p_.checkpoint.checkpoints_layer(l)) {
      auto prefetch_below = [this, l] { executors_[static_cast<std::size_t>(l - 1)]->prefetch(); };
      e = checkpointed_layer(std::move(e), *checkpoints_, l, prefetch_below);
    }
    executors_.push_back(std::move(e));
  }
}

Tensor LlamaStep::layer_body(const LayerWeights& w, const Tensor& x) const {
  const auto b = x.size(0), S = x.size(1), H = m_.heads, K = m_.kv_heads, d = m_.head_dim;
  const double eps = m_.rms_norm_eps;

  Tensor xn1 = rms_norm(x, w.attn_norm, eps);
  Tensor o;  // attention output [b, S, H*d]
  if (p_.head_chunk > 0) {
    TORCH_CHECK(!w.bq.defined(), "head-chunked attention has no q/k/v biases (validate() refuses such a plan)");
    o = head_chunked_attention(xn1, {w.wq, w.wk, w.wv, w.q_norm, w.k_norm}, attn_shape_, rope_, layout_,
                               p_.head_chunk, ring_);
  } else {
    auto qkv = project(xn1, {w.wq, w.wk, w.wv}, {w.bq, w.bk, w.bv});
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
    // With a ring, attention over the ring group's tokens (the Ulysses group's, here).
    Tensor o_sp = ring_.size > 1 ? ring_attention(sp[0], sp[1], sp[2], ring_) : attention(sp[0], sp[1], sp[2]);
    sp.clear();  // without a graph (a checkpointed layer's forward) nothing else holds them
    o = ulysses_to_heads(o_sp, layout_).view({b, S, H * d});
    o_sp = Tensor();
  }
  xn1 = Tensor();
  Tensor attn_out = at::linear(o, w.wo, w.bo);
  o = Tensor();
  Tensor mid = at::add(x, attn_out);
  attn_out = Tensor();

  Tensor xn2 = rms_norm(mid, w.mlp_norm, eps);
  Tensor down;
  if (p_.mlp_tiles > 1) {
    down = tiled_mlp(xn2, w.w_gate, w.w_up, w.w_down, p_.mlp_tiles, {w.b_gate, w.b_up, w.b_down});
  } else {
    auto gate_up = project(xn2, {w.w_gate, w.w_up}, {w.b_gate, w.b_up});
    xn2 = Tensor();
    Tensor act = swiglu(gate_up[0], gate_up[1]);
    gate_up.clear();
    down = at::linear(act, w.w_down, w.b_down);
  }
  xn2 = Tensor();
  Tensor out = at::add(mid, down);
  return out;
}

bool LlamaStep::streams_gradients() const { return host_grads_ && !shards_; }

void LlamaStep::on_backward(std::int64_t group) {
  if (shards_) {
    shards_->finish_grads(static_cast<int>(group));
    // A tied head's table was gathered again for the loss; the loss's backward is over, so
    // its memory goes now (the embedding's own backward reads only the token ids).
    if (group == m_.layers + 1 && m_.tie_embeddings && shards_->gathers()) shards_->release_all(shards_->embed_group());
    return;
  }
  // One parameter at a time: summed over the ranks in place (every rank's gradient is its
  // tokens' share), then its device gradient is freed before the next one is copied.
  torch::NoGradGuard no_grad;
  for (Tensor* p : w_.group(group))
    if (p->defined() && p->grad().defined()) {
      Tensor grad = p->grad();
      p->mutable_grad().reset();
      if (comm_ && comm_->world() > 1) comm_->all_reduce_sum(grad);
      host_grads_->gradient_to_host(*p, grad);
    }
}

Tensor LlamaStep::forward(const Tensor& tokens, const Tensor& targets) {
  checkpoints_->clear();
  set_phase(phase_name(StepPhase::ForwardEmbed));
  const bool gathered = shards_ && shards_->gathers();
  // Where a group's gradient is finished when its backward ends (on_backward).
  const bool shard_grads =
      ((shards_ && shards_->finishes_grads()) || streams_gradients()) && torch::GradMode::is_enabled();
  Tensor x = at::embedding(gathered ? shards_->gather(shards_->embed_group())[0] : w_.embed, tokens);
  // The embedding's backward reads only the token ids: the gathered table's memory goes now
  // (its leaf stays, to receive the gradient).
  if (gathered && torch::GradMode::is_enabled()) shards_->release(shards_->embed_group());
  x = mark_backward_phase(x, phase_name(StepPhase::BackwardEmbed));
  for (std::int64_t l = 0; l < m_.layers; ++l) {
    set_phase(phase_name(StepPhase::ForwardLayer, l));
    LayerExecutor& layer = *executors_[static_cast<std::size_t>(l)];
    if (l == 0) layer.prefetch();
    if (l + 1 < m_.layers) executors_[static_cast<std::size_t>(l + 1)]->prefetch();  // beside this layer's forward
    if (shard_grads) x = on_backward_of(x, *this, l);  // the layer's backward has ended: its gradient
    x = layer.forward(x);
    // A layer that is not checkpointed, above one whose input was offloaded (every:K), starts
    // bringing that input back when its own backward begins (planner order).
    if (l > 0 && !p_.checkpoint.checkpoints_layer(l) && p_.checkpoint.checkpoints_layer(l - 1) && p_.offload_checkpoints &&
        torch::GradMode::is_enabled())
      x = on_backward_of(x, checkpoint_prefetch_, l - 1);
    x = mark_backward_phase(x, phase_name(StepPhase::BackwardLayer, l));
  }
  set_phase(phase_name(StepPhase::Loss));
  if (shard_grads) x = on_backward_of(x, *this, m_.layers + 1);  // the head group
  return head_loss(std::move(x), targets);
}

Tensor LlamaStep::head_loss(Tensor x, const Tensor& targets) {
  Tensor final_norm = w_.final_norm, head = w_.head();
  if (shards_ && shards_->gathers()) {
    auto h = shards_->gather(shards_->head_group());
    final_norm = h[0];
    head = m_.tie_embeddings ? shards_->gather(shards_->embed_group())[0] : h[1];
  }
  Tensor xf = rms_norm(x, final_norm, m_.rms_norm_eps);
  x = Tensor();
  // The batch's real tokens: b samples of seq_ on each data-parallel rank; padding is not
  // counted (its targets are kIgnoreIndex). The ranks' shares sum to the batch's mean.
  const double dp = comm_ ? static_cast<double>(comm_->dp_size()) : 1.0;
  const double real_tokens = static_cast<double>(targets.size(0)) * static_cast<double>(seq_) * dp;
  Tensor loss = p_.loss_tiles > 1 ? tiled_cross_entropy(xf, head, targets, p_.loss_tiles, real_tokens)
                                  : runtime::cross_entropy_loss(xf, head, targets, real_tokens);
  return mark_backward_phase(loss, phase_name(StepPhase::BackwardLoss));
}

double LlamaStep::forward_backward(Tensor tokens, Tensor targets) {
  Tensor loss = forward(tokens, targets);
  tokens = targets = Tensor();
  double value = loss.item<double>();
  if (comm_ && comm_->world() > 1) value = comm_->all_reduce_sum(value);  // on the rank's device (NCCL: CUDA)
  loss.backward();
  if (shards_ || streams_gradients()) on_backward(m_.layers);  // the embedding group
  checkpoints_->clear();
  return value;
}

}  // namespace longctx::runtime
