#include "planner/core/parallel_config.h"

#include <algorithm>
#include <charconv>
#include <utility>

#include <fmt/format.h>

#include "planner/stacks/stack_tiles.h"
#include "planner/stacks/torchtitan_models.h"

#include "planner/core/limits.h"

namespace longctx {

std::string to_string(Sharding s) {
  switch (s) {
    case Sharding::None: return "none";
    case Sharding::Zero1: return "zero1";
    case Sharding::Zero2: return "zero2";
    case Sharding::Zero3: return "zero3";
  }
  return "none";
}

Result<Sharding> parse_sharding(const std::string& text, const std::string& field) {
  if (text == "none") return Sharding::None;
  if (text == "zero1") return Sharding::Zero1;
  if (text == "zero2") return Sharding::Zero2;
  if (text == "zero3" || text == "fsdp") return Sharding::Zero3;
  return Error::bad_input(field, fmt::format("'{}' is unknown; use none, zero1, zero2 or zero3", text));
}

std::string to_string(const CheckpointPolicy& c) {
  switch (c.kind) {
    case CheckpointPolicy::Kind::None: return "none";
    case CheckpointPolicy::Kind::Full: return "full";
    case CheckpointPolicy::Kind::EveryK: return fmt::format("every:{}", c.every);
    case CheckpointPolicy::Kind::Ops: return "op";
  }
  return "none";
}

Result<CheckpointPolicy> parse_checkpoint(const std::string& text, const std::string& field) {
  if (text == "none") return CheckpointPolicy::none();
  if (text == "full") return CheckpointPolicy::full();
  if (text == "op") return CheckpointPolicy::ops();
  if (text.rfind("every:", 0) == 0) {
    int k = 0;
    const char* b = text.data() + 6;
    const char* e = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(b, e, k);
    if (ec == std::errc() && ptr == e && k >= 1)
      return k == 1 ? CheckpointPolicy::full() : CheckpointPolicy::every_k(k);
  }
  return Error::bad_input(field, fmt::format("'{}' is unknown; use none, full, every:K (K >= 1) or op (--stack torchtitan)", text));
}

std::string to_string(RingExchange e) { return e == RingExchange::AllGather ? "allgather" : "p2p"; }

Result<RingExchange> parse_ring_exchange(const std::string& text, const std::string& field) {
  if (text == "p2p") return RingExchange::P2p;
  if (text == "allgather") return RingExchange::AllGather;
  return Error::bad_input(field, fmt::format("'{}' is unknown; use p2p or allgather", text));
}

int bytes_of(DType t) { return t == DType::BF16 ? 2 : 4; }
std::string to_string(DType t) { return t == DType::BF16 ? "bf16" : "fp32"; }
Result<DType> parse_dtype(const std::string& text, const std::string& field) {
  if (text == "bf16") return DType::BF16;
  if (text == "fp32") return DType::FP32;
  return Error::bad_input(field, fmt::format("'{}' is unknown; use bf16 or fp32", text));
}

std::int64_t padded_seq(std::int64_t seq, std::int64_t multiple) { return (seq + multiple - 1) / multiple * multiple; }
std::int64_t padding_tokens(std::int64_t seq, std::int64_t multiple) { return padded_seq(seq, multiple) - seq; }
std::int64_t tokens_per_rank(const TrainConfig& t, std::int64_t ulysses) {
  return t.micro_batch * (padded_seq(t.seq, ulysses) / ulysses);
}

std::int64_t sequence_ranks(const ParallelConfig& p) { return std::int64_t{p.ulysses} * p.ring; }
std::int64_t sequence_multiple(const ParallelConfig& p) {
  return p.ring > 1 ? 2 * sequence_ranks(p) : std::int64_t{p.ulysses};
}
std::int64_t padded_seq(std::int64_t seq, const ParallelConfig& p) { return padded_seq(seq, sequence_multiple(p)); }
std::int64_t padding_tokens(std::int64_t seq, const ParallelConfig& p) { return padding_tokens(seq, sequence_multiple(p)); }
std::int64_t tokens_per_rank(const TrainConfig& t, const ParallelConfig& p) {
  return t.micro_batch * (padded_seq(t.seq, p) / sequence_ranks(p));
}

TileSplit tile_split(std::int64_t n, std::int64_t tiles) {
  TileSplit s;
  s.rows = (n + tiles - 1) / tiles;
  s.count = (n + s.rows - 1) / s.rows;
  s.last = n - (s.count - 1) * s.rows;
  return s;
}

std::int64_t kv_heads_per_rank(const ModelConfig& m, int ulysses) {
  return m.kv_heads >= ulysses ? m.kv_heads / ulysses : 1;
}

namespace {

// A knob the plan's stack cannot express, refused naming the stack.
Error refuse(const TrainConfig& t, const char* field, const std::string& what) {
  return Error::bad_input(field, fmt::format("--stack {} {}; use --stack longctx for it", to_string(t.stack.kind), what));
}

// What a stack other than longctx's own runtime can express (stack.h). The hf stack is one
// process training a transformers model with torch.optim's AdamW: no sharding, sequence
// parallelism, tiling or offload of longctx's, every layer checkpointed or none
// (`gradient_checkpointing_enable` wraps each decoder layer), and autograd's gradients in the
// parameters' dtype. The arctic stack is ArcticTraining: DeepSpeed ZeRO-3 always, Ulysses,
// offloads and checkpoint offload as longctx's knobs say, but tiles only in the counts
// DeepSpeed's TiledMLP and Liger pick (stack_tiles.h), every layer checkpointed or none, no
// head-chunked attention, flash attention in bf16, and bf16 gradients.
Result<bool> validate_arctic(const ModelConfig& m, const TrainConfig& t, const ParallelConfig& p) {
  if (t.stack.attention != HfAttention::FlashAttention2 && t.stack.attention != HfAttention::FlashAttention3)
    return refuse(t, "--attention", "runs flash attention (its Ulysses needs it): give flash_attention_2 or flash_attention_3");
  if (p.sharding != Sharding::Zero3) return refuse(t, "--sharding", "runs DeepSpeed ZeRO-3: give zero3");
  if (t.dtype != DType::BF16) return refuse(t, "--dtype", "trains in bf16 (flash attention): give bf16");
  if (t.grad_dtype != t.dtype) return refuse(t, "--grad-dtype", "reduces bf16 gradients: leave --grad-dtype out or give bf16");
  const std::int64_t shards = *stack_tile_count(m, t, p.ulysses, false);
  if (p.mlp_tiles != 1 && p.mlp_tiles != shards)
    return refuse(t, "--mlp-tiles", fmt::format("runs DeepSpeed's TiledMLP in ceil(tokens per rank / hidden) = {} shards: "
                                                "give {} or 1 (untiled)", shards, shards));
  const std::int64_t chunks = *stack_tile_count(m, t, p.ulysses, true);
  if (stack_always_tiles_loss(t) && p.loss_tiles != chunks)
    return refuse(t, "--loss-tiles", fmt::format("with the liger model computes the loss with Liger's fused linear "
                                                 "cross-entropy in {} chunks here: give {}", chunks, chunks));
  if (t.stack.arctic_model == ArcticModel::HuggingFace && p.ulysses > 1)
    return refuse(t, "--ulysses", "with the huggingface model tiles its loss over the sequence (sequence_tiled_compute), "
                                  "which is not modelled: give 1, or --arctic-model liger");
  if (!stack_always_tiles_loss(t) && p.loss_tiles != 1)
    return refuse(t, "--loss-tiles", "with the huggingface model computes the loss over the full logits: give 1, or "
                                     "--arctic-model liger for a chunked loss");
  return true;
}

// What a stack keeps of the knobs below: the dtype of its gradients (and why), and whether
// checkpoint offload is its own (transformers 5.17's).
struct StackKeeps {
  DType grads;
  const char* grads_why;  // " (FSDP2's sharded gradients)"
  bool checkpoint_offload = false;
};

// The knobs of longctx's runtime that neither transformers alone nor torchtitan has: Ulysses,
// tiles, checkpoint offload (unless the stack's own) and state offload, gradients in another
// dtype than the stack keeps.
Result<bool> refuse_runtime_knobs(const TrainConfig& t, const ParallelConfig& p, const StackKeeps& keeps) {
  if (p.ulysses != 1) return refuse(t, "--ulysses", "has no sequence parallelism of its own: give 1");
  if (p.mlp_tiles != 1) return refuse(t, "--mlp-tiles", "has no tiled MLP: give 1");
  if (p.loss_tiles != 1) return refuse(t, "--loss-tiles", "computes the loss over the full logits: give 1");
  if (p.offload_checkpoints && !keeps.checkpoint_offload)
    return refuse(t, "--offload-checkpoints", "does not offload checkpoints: leave it out");
  if (p.offload_optimizer || p.offload_params)
    return refuse(t, p.offload_optimizer ? "--offload-optimizer" : "--offload-params", "keeps its model states on the GPU");
  if (t.grad_dtype != keeps.grads)
    return refuse(t, "--grad-dtype", fmt::format("keeps {} gradients{}: leave --grad-dtype out or give {}",
                                                 to_string(keeps.grads), keeps.grads_why, to_string(keeps.grads)));
  return true;
}

Result<bool> validate_hf(const ModelConfig& m, const Cluster& c, const TrainConfig& t, const ParallelConfig& p) {
  if (t.stack.attention == HfAttention::FlashAttention3)
    return refuse(t, "--attention", "models sdpa, eager and flash_attention_2: give one of them (flash_attention_3 is "
                                    "modelled for --stack arctic)");
  if (c.world() != 1) return refuse(t, "--gpus", "is modelled on one GPU (one process) so far: give --gpus 1");
  if (p.sharding != Sharding::None) return refuse(t, "--sharding", "runs without ZeRO sharding: give none");
  LONGCTX_TRY(auto plain, refuse_runtime_knobs(t, p, {t.dtype, " (the parameters' dtype)", /*checkpoint_offload=*/true}));
  (void)plain;
  // Eager attention materializes [b, H, S, S] scores a few times over, and a batch without an
  // attention_mask may get a [b, 1, S, S] mask: bound them as validate() bounds the rest.
  if (t.stack.attention == HfAttention::Eager || !t.stack.attention_mask) {
    const double scores = double(t.micro_batch) * double(m.heads) * double(t.seq) * double(t.seq) * 4.0 * 8.0;
    if (scores > double(limits::kMaxStepBytes))
      return Error::bad_input("--seq", fmt::format("{} tokens would need on the order of {:.3g} bytes for the attention's "
                                                   "[S, S] scores or mask, beyond longctx's bound of {:.3g}; use --attention "
                                                   "sdpa with an attention_mask, or shorten --seq", t.seq, scores,
                                                   double(limits::kMaxStepBytes)));
  }
  return true;
}

// torchtitan's training (torchtitan 0.2.2) of its llama3 model (models/llama3: no biases, no
// q/k norms, no tied embeddings, heads of hidden/heads) or, for a model with q/k norms, its
// qwen3 model (models/qwen3: any head_dim, embeddings tied or not, no biases); the
// checkpointing policies are its `activation_checkpoint` modes (full, selective every K
// layers: --checkpoint every:K, or selective per op: --checkpoint op). Across GPUs it shards
// with FSDP2 (data_parallel_shard_degree = the ranks: --sharding zero3) in the plan's dtype as
// param_dtype; DDP and its CPU offload are not modelled. One GPU runs without FSDP, and there
// torchtitan trains under torch.autocast when mixed_precision_param is bf16 (distributed/utils.py,
// maybe_enable_amp), which is not modelled: fp32 only.
Result<bool> validate_torchtitan(const ModelConfig& m, const Cluster& c, const TrainConfig& t, const ParallelConfig& p) {
  if (const auto no = torchtitan_model_refusal(m, c.world())) return refuse(t, no->about_gpus ? "--gpus" : "--model", no->reason);
  if (c.world() > 1 && p.sharding != Sharding::Zero3)
    return refuse(t, "--sharding", "shards across GPUs with FSDP2 (its data-parallel replication is not modelled): "
                                   "give zero3");
  if (c.world() == 1 && p.sharding != Sharding::None)
    return refuse(t, "--sharding", "applies no FSDP on one GPU: give none");
  if (c.world() == 1 && t.dtype != DType::FP32)
    return refuse(t, "--dtype", "on one GPU trains bf16 under torch.autocast, which is not modelled: give fp32, or "
                                "shard across GPUs with FSDP2 (its param_dtype)");
  // Its selective mode wraps layers K-1, 2K-1, ...: none of a model with fewer than K layers.
  if (p.checkpoint.kind == CheckpointPolicy::Kind::EveryK && p.checkpoint.every > m.layers)
    return refuse(t, "--checkpoint", fmt::format("checkpoints every K-th of the model's {} layers, none for every:{}: "
                                                 "give K of at most {}, or none",
                                                 m.layers, p.checkpoint.every, m.layers));
  // Context parallel (parallelism.context_parallel_degree): torch's ring attention under
  // FSDP2 over the dp_shard x cp mesh, the batch cut by its head-tail load balancer into
  // 2 x cp chunks (torchtitan does not pad), k/v exchanged by all-gather (the trainer never
  // calls set_rotate_method: context_parallel_rotate_method reaches only its validator).
  if (p.ring > 1) {
    if (c.world() == 1) return refuse(t, "--ring", "needs more than one GPU for context parallel: give 1");
    if (p.ring_exchange != RingExchange::AllGather)
      return refuse(t, "--ring-exchange", "trains context parallel with torch's all-gather of k/v (its "
                                          "context_parallel_rotate_method reaches only validation): give allgather");
    if (m.qk_norm)
      return refuse(t, "--ring", "runs context parallel here for its llama3 model only (qwen3's rope_cache indexed by "
                                 "positions is not modelled): give 1");
    if (p.checkpoint.kind == CheckpointPolicy::Kind::Ops)
      return refuse(t, "--checkpoint", "under context parallel with per-op selective checkpointing is not modelled: "
                                       "give full, every:K or none");
    if (t.seq % (2 * std::int64_t{p.ring}) != 0)
      return refuse(t, "--seq", fmt::format("cuts each sample into 2 x ring = {} chunks and pads nothing: give a "
                                            "--seq divisible by {}", 2 * p.ring, 2 * p.ring));
  }
  // FSDP2's gradients are its sharded parameters' dtype, fp32 (the unsharded bf16 ones are
  // reduce-scattered into them); on one GPU autograd's, the parameters'.
  const StackKeeps keeps = c.world() > 1 ? StackKeeps{DType::FP32, " (FSDP2's sharded gradients)"}
                                         : StackKeeps{t.dtype, " (the parameters' dtype)"};
  return refuse_runtime_knobs(t, p, keeps);
}

Result<bool> validate_stack(const ModelConfig& m, const Cluster& c, const TrainConfig& t, const ParallelConfig& p) {
  if (t.stack.kind == StackKind::Longctx) return true;
  // Each wraps decoder layers whole: no head-chunked attention.
  if (p.head_chunk != 0) return refuse(t, "--head-chunk", "has no head-chunked attention: give 0");
  if (t.stack.kind == StackKind::Torchtitan) return validate_torchtitan(m, c, t, p);
  if (p.ring != 1) return refuse(t, "--ring", "has no ring attention modelled: give 1 (--stack torchtitan has its context parallel)");
  if (p.checkpoint.kind == CheckpointPolicy::Kind::EveryK)
    return refuse(t, "--checkpoint", "checkpoints every decoder layer or none: give full or none");
  return t.stack.kind == StackKind::Arctic ? validate_arctic(m, t, p) : validate_hf(m, c, t, p);
}

}  // namespace

Result<bool> validate(const ModelConfig& m, const Cluster& c, const TrainConfig& t,
                      const ParallelConfig& p) {
  using namespace limits;
  const std::int64_t u = p.ulysses;
  LONGCTX_TRY(auto model_ok, validate_model(m));
  (void)model_ok;
  // Bounds first: every product below (world, tokens) must not overflow.
  if (c.nodes < 1 || c.gpus_per_node < 1)
    return Error::bad_input("--gpus", "the cluster needs at least one GPU");
  if (c.gpus_per_node > kMaxGpusPerNode)
    return Error::bad_input("--gpus-per-node", fmt::format("{} is above longctx's bound of {} GPUs per node", c.gpus_per_node, kMaxGpusPerNode));
  if (c.nodes > kMaxGpus / c.gpus_per_node)
    return Error::bad_input("--gpus", fmt::format("{} nodes of {} GPUs are above longctx's bound of {} GPUs", c.nodes, c.gpus_per_node, kMaxGpus));
  if (t.micro_batch < 1) return Error::bad_input("--micro-batch", "must be at least 1");
  if (t.micro_batch > kMaxMicroBatch)
    return Error::bad_input("--micro-batch", fmt::format("{} is above longctx's bound of {}", t.micro_batch, kMaxMicroBatch));
  if (t.seq > kMaxSeq)
    return Error::bad_input("--seq", fmt::format("{} tokens are above longctx's bound of {} (2^40)", t.seq, kMaxSeq));
  if (t.dtype != DType::BF16 && t.dtype != DType::FP32) return Error::bad_input("train.dtype", "use bf16 or fp32");
  if (t.grad_dtype != DType::BF16 && t.grad_dtype != DType::FP32) return Error::bad_input("train.grad_dtype", "use bf16 or fp32");
  if (u < 1) return Error::bad_input("--ulysses", "must be at least 1");
  if (c.world() % u != 0)
    return Error::bad_input("--ulysses", fmt::format("{} does not divide the {} GPUs (world = dp x ulysses)", u, c.world()));
  if (m.heads % u != 0)
    return Error::bad_input("--ulysses", fmt::format("{} does not divide the {} query heads (rule: q_heads % u == 0)", u, m.heads));
  if (m.kv_heads % u != 0 && u % m.kv_heads != 0)
    return Error::bad_input("--ulysses",
                            fmt::format("{} and the {} kv heads divide neither way (rule: kv % u == 0, or "
                                        "u % kv == 0 with kv heads replicated u/kv times)",
                                        u, m.kv_heads));
  if (p.ring < 1) return Error::bad_input("--ring", "must be at least 1");
  if (p.ring > kMaxGpus || c.world() % (u * p.ring) != 0)
    return Error::bad_input("--ring", fmt::format("{} x ulysses {} does not divide the {} GPUs (world = dp x ring x ulysses)",
                                                  p.ring, u, c.world()));
  if (p.ring_exchange != RingExchange::P2p && p.ring == 1)
    return Error::bad_input("--ring-exchange", "chooses how ring attention exchanges k/v: give --ring above 1, or leave it out");
  if (t.seq < 1) return Error::bad_input("--seq", "must be at least 1 token");
  const std::int64_t local_heads = m.heads / u;
  if (p.head_chunk < 0 || p.head_chunk > local_heads)
    return Error::bad_input("--head-chunk",
                            fmt::format("{} is outside 1..{} (q_heads/u); 0 turns head chunking off", p.head_chunk, local_heads));
  if (p.head_chunk > 0) {
    const std::int64_t group = local_heads / kv_heads_per_rank(m, p.ulysses);  // q heads per kv head on a rank
    if (local_heads % p.head_chunk != 0)
      return Error::bad_input("--head-chunk", fmt::format("{} does not divide the {} heads per rank (q_heads/u)", p.head_chunk, local_heads));
    if (group % p.head_chunk != 0 && p.head_chunk % group != 0)
      return Error::bad_input("--head-chunk",
                              fmt::format("{} neither divides nor is a multiple of the {} query heads that share a kv head on a rank",
                                          p.head_chunk, group));
  }
  // The head-chunked projection (runtime/src/attention.cpp) has no q/k/v bias.
  if (p.head_chunk > 0 && m.qkv_bias)
    return Error::bad_input("--head-chunk", "not available for a model with q/k/v biases (attention_bias, qwen2); use 0");
  LONGCTX_TRY(auto window, check_model_for_seq(m, t.seq));
  (void)window;
  if (p.checkpoint.kind == CheckpointPolicy::Kind::EveryK && p.checkpoint.every < 1)
    return Error::bad_input("--checkpoint", "every:K needs K >= 1");
  // Per-op selective checkpointing keeps what torchtitan's save list names; no other stack
  // (longctx's runtime included) has one.
  if (p.checkpoint.kind == CheckpointPolicy::Kind::Ops && t.stack.kind != StackKind::Torchtitan)
    return Error::bad_input("--checkpoint", fmt::format("op (per-op selective checkpointing) is torchtitan's policy, not "
                                                        "--stack {}'s: give full or every:K, or --stack torchtitan",
                                                        to_string(t.stack.kind)));
  if (p.offload_checkpoints && !p.checkpoint.any())
    return Error::bad_input("--offload-checkpoints", "needs checkpointing (--checkpoint full or every:K): only checkpointed layer inputs are offloaded");
  // zero1 and zero2 shard optimizer state and gradients over the ranks and exchange them
  // with collectives; one rank has nothing to shard or exchange with (zero3 there is the
  // parameter-offload path: shards streamed from the host).
  if (c.world() == 1 && (p.sharding == Sharding::Zero1 || p.sharding == Sharding::Zero2))
    return Error::bad_input("--sharding", t.stack.kind == StackKind::Longctx
                                              ? fmt::format("{} shards over several ranks; use none (or zero3 with "
                                                            "--offload-params) for one GPU",
                                                            to_string(p.sharding))
                                              : fmt::format("{} shards over several ranks; use none for one GPU",
                                                            to_string(p.sharding)));
  if (p.offload_params && p.sharding != Sharding::Zero3)
    return Error::bad_input("--offload-params", "needs --sharding zero3: only parameter shards are offloaded");
  // Tiles may be uneven (tile_split), but each needs a row: at most the tokens per rank.
  const std::int64_t tokens = tokens_per_rank(t, p);
  // Launch counts are int multiples of the tile count (planner/stacks/step/mlp.cpp, planner/stacks/step/loss.cpp).
  for (const auto& [flag, tiles] : {std::pair{"--mlp-tiles", p.mlp_tiles}, std::pair{"--loss-tiles", p.loss_tiles}}) {
    if (tiles > kMaxTiles)
      return Error::bad_input(flag, fmt::format("{} is above longctx's bound of {} tiles", tiles, kMaxTiles));
    if (tiles < 1 || tiles > tokens)
      return Error::bad_input(flag, fmt::format("{} must be between 1 and the {} tokens per rank", tiles, tokens));
  }
  // Upper estimates of one rank's step bytes, in double so they cannot overflow: per layer
  // at most ~32 rows of the widest per-token row saved or live (about 17 saved, a layer's
  // transients on top), the loss's rows of the vocabulary, and 20 bytes a parameter of
  // model states; on the host, offloaded checkpoints and model states. Within these bounds
  // every int64 sum of the step graph and simulator, and the host bytes times the GPUs of a
  // node, stays far from overflow.
  const double width = std::max({double(m.hidden), double(m.intermediate), double(m.heads + 2 * m.kv_heads) * double(m.head_dim)});
  const double params = double(m.layers) * (4.0 * double(m.hidden) * double(m.heads + m.kv_heads) * double(m.head_dim) +
                                            3.0 * double(m.hidden) * double(m.intermediate)) +
                        2.0 * double(m.vocab) * double(m.hidden);
  const double device_bytes = double(tokens) * ((32.0 * double(m.layers) + 128.0) * width + 64.0 * double(m.vocab)) * 4.0 + 20.0 * params;
  const double host_bytes = double(tokens) * double(m.layers) * double(m.hidden) * 8.0 + 24.0 * params;
  // The model states alone (no token) past the bound: the model is too large at any --seq.
  if (24.0 * params > double(kMaxBytes))
    return Error::bad_input("model", fmt::format("its {:.3g} parameters alone would need on the order of {:.3g} bytes per "
                                                 "rank for weights, gradients and optimizer state, beyond longctx's bound "
                                                 "of {:.3g} at any --seq; use a model with fewer or narrower layers",
                                                 params, 24.0 * params, double(kMaxBytes)));
  if (device_bytes > double(kMaxStepBytes) || host_bytes > double(kMaxBytes)) {
    const bool device = device_bytes > double(kMaxStepBytes);
    return Error::bad_input("--seq", fmt::format("{} tokens per rank of this model would need on the order of {:.3g} {} bytes "
                                                 "per rank, beyond longctx's bound of {:.3g}; shorten --seq or "
                                                 "--micro-batch, or raise --ulysses",
                                                 tokens, device ? device_bytes : host_bytes, device ? "device" : "host",
                                                 double(device ? kMaxStepBytes : kMaxBytes)));
  }
  return validate_stack(m, c, t, p);
}

}  // namespace longctx
