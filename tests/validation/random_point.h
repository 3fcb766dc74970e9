#pragma once
// A random point of the validation grid: a small Llama-shaped model of random shape and a
// random combination of the planner's techniques on 1 to 3 ranks of the CPU virtual device,
// drawn from a seeded generator so that a seed names the same points on every machine.
//
// The shapes are far from the committed grid's (models/tiny-*.json) on purpose: head_dim
// differs from hidden / heads, sizes are not powers of two, the vocabulary is odd-sized, and
// the sequence takes each of the CPU flash kernel's block sizes.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "planner/core/hardware.h"
#include "planner/core/knobs.h"
#include "planner/core/plan.h"

namespace longctx::validation {

// A std::mt19937_64 with the few draws the grid needs. Uniform integers are drawn by
// modulo, not std::uniform_int_distribution, whose algorithm differs between standard
// libraries: the same seed must name the same points everywhere.
class Draw {
 public:
  explicit Draw(std::uint64_t seed) : g_(seed) {}
  std::int64_t in(std::int64_t lo, std::int64_t hi) {  // [lo, hi]
    return lo + static_cast<std::int64_t>(g_() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  bool chance(int percent) { return in(1, 100) <= percent; }
  template <class T>
  T pick(const std::vector<T>& v) { return v[static_cast<std::size_t>(in(0, static_cast<std::int64_t>(v.size()) - 1))]; }

 private:
  std::mt19937_64 g_;
};

inline std::vector<std::int64_t> divisors_in(std::int64_t n, const std::vector<std::int64_t>& candidates) {
  std::vector<std::int64_t> out;
  for (auto c : candidates)
    if (c <= n && n % c == 0) out.push_back(c);
  return out;
}

inline ModelConfig random_model(Draw& r, int index) {
  ModelConfig m;
  m.name = fmt::format("random-{}", index);
  m.heads = r.pick<std::int64_t>({2, 3, 4, 6, 8});
  m.kv_heads = r.pick(divisors_in(m.heads, {1, 2, 3, 4, 6, 8}));
  m.hidden = 4 * r.in(6, 24);  // 24 .. 96
  do m.head_dim = 2 * r.in(3, 12);  // 6 .. 24, never hidden / heads
  while (m.head_dim * m.heads == m.hidden);
  m.intermediate = r.in(m.hidden, 3 * m.hidden);
  m.vocab = r.in(97, 420);
  m.layers = r.in(1, 3);
  m.tie_embeddings = r.chance(40);
  m.qk_norm = r.chance(40);
  m.model_type = m.qk_norm ? "qwen3" : "llama";
  // Biases as Llama's attention_bias (q, k, v, o) and mlp_bias (gate, up, down) set them.
  m.qkv_bias = m.o_bias = r.chance(30);
  m.mlp_bias = !m.qk_norm && r.chance(30);
  m.rms_norm_eps = 1e-6;
  m.rope_theta = 10000.0;
  return m;
}

// A value of knob `k` for `plan`, whose rows above k are already drawn: the row's own
// candidates (knobs.h), so the grid draws every knob the table has, with the table's
// requirements; beyond them the ranges the search does not try but a user may give: uneven
// tile counts and every:K for any K. A row away from its plain value 40% of the time,
// except the Ulysses degree and the sharding, drawn uniformly among their values.
inline KnobValue random_knob(Draw& r, const Plan& plan, const Knob& k) {
  const std::vector<KnobValue> values = knob_candidates(k.id, plan, all_techniques(), {});
  std::vector<KnobValue> beyond;
  for (KnobValue v : values)
    if (v != k.plain) beyond.push_back(v);
  switch (k.rule.candidates) {
    case Candidates::Ulysses: return r.pick(values);
    case Candidates::Ring: return r.chance(50) ? r.pick(values) : k.plain;
    case Candidates::Tiles: {
      const std::int64_t n = tokens_per_rank(plan.train, plan.parallel);
      return r.chance(40) && n >= 2 ? r.in(2, std::min<std::int64_t>(16, n)) : k.plain;  // any count: uneven tiles
    }
    case Candidates::HeadChunk:
    case Candidates::Listed: break;
  }
  if (k.id == KnobId::sharding) {
    // One rank runs unsharded or zero3 (its parameter offload); several ranks any stage.
    const KnobValue v = r.pick(values);
    const bool one_rank_stage = plan.cluster.shape.world() == 1 && v != 0 && v != static_cast<KnobValue>(Sharding::Zero3);
    return one_rank_stage ? (r.chance(67) ? 0 : static_cast<KnobValue>(Sharding::Zero3)) : v;
  }
  // Head-chunked attention does not take q/k/v biases (validate refuses the pair).
  if (k.id == KnobId::head_chunk && plan.model.qkv_bias) return k.plain;
  if (beyond.empty() || !r.chance(40)) return k.plain;
  const KnobValue v = r.pick(beyond);
  // every:K: any K up to the layers (the table lists every:2); one layer has only full
  // (validate refuses a K past the layers).
  if (k.id == KnobId::checkpoint && v > 1) return plan.model.layers >= 2 ? r.in(2, plan.model.layers) : 1;
  return v;
}

// Every parallel knob of the table, in its order (each sees the rows above it drawn).
inline ParallelConfig random_techniques(Draw& r, Plan plan) {
  for (const Knob& k : knob_table())
    if (std::string(k.section) == "parallel") set_knob(plan, k.id, random_knob(r, plan, k));
  return plan.parallel;
}

// One point: a plan for `world` ranks of the CPU virtual device, one node.
inline Plan random_plan(Draw& r, int index) {
  Plan plan;
  plan.model = random_model(r, index);
  const std::int64_t world = r.pick<std::int64_t>({1, 1, 1, 2, 2, 3});
  plan.cluster.shape = {1, world};
  plan.cluster.hardware = load_hardware("cpu").value();
  plan.cluster.device_budget_bytes = 1LL << 30;
  plan.cluster.host_budget_bytes_per_node = 4LL << 30;
  // 96 .. 480 tokens, any count: odd ones are padded to the Ulysses degree
  // (parallel_config.h, padded_seq); below 192, 192 .. 767 and their block sizes of the CPU
  // flash kernel.
  plan.train.seq = r.in(96, 480);
  plan.train.micro_batch = r.chance(25) ? 2 : 1;
  plan.train.dtype = r.chance(30) ? DType::BF16 : DType::FP32;
  plan.train.grad_dtype = plan.train.dtype;  // the CPU virtual device's gradients: the parameters' dtype
  plan.parallel = random_techniques(r, plan);
  return plan;
}

// Everything that names the point, on one line.
inline std::string describe(const Plan& p) {
  const auto& m = p.model;
  const auto& q = p.parallel;
  const std::int64_t world = p.cluster.shape.world();
  std::string s = fmt::format("h={} I={} L={} H={} K={} d={} V={}{}{} | world={} u={} r={} dp={} seq={} b={} {} | ckpt={}", m.hidden,
                              m.intermediate, m.layers, m.heads, m.kv_heads, m.head_dim, m.vocab,
                              m.tie_embeddings ? " tied" : "",
                              std::string(m.qk_norm ? " qk-norm" : "") + (m.qkv_bias ? " attn-bias" : "") + (m.mlp_bias ? " mlp-bias" : ""), world, q.ulysses,
                              q.ring, world / sequence_ranks(q), p.train.seq, p.train.micro_batch, to_string(p.train.dtype),
                              to_string(q.checkpoint));
  if (q.ring_exchange != RingExchange::P2p) s += " ring-" + to_string(q.ring_exchange);
  if (q.offload_checkpoints) s += " offload-ckpt";
  if (const auto pad = padding_tokens(p.train.seq, q); pad > 0) s += fmt::format(" (padded +{})", pad);
  if (q.mlp_tiles > 1) s += fmt::format(" mlp-tiles={}", q.mlp_tiles);
  if (q.loss_tiles > 1) s += fmt::format(" loss-tiles={}", q.loss_tiles);
  if (q.head_chunk > 0) s += fmt::format(" head-chunk={}", q.head_chunk);
  if (q.offload_optimizer) s += " offload-optim";
  if (q.sharding != Sharding::None) s += " " + to_string(q.sharding);
  if (q.offload_params) s += " offload-params";
  return s;
}

}  // namespace longctx::validation
