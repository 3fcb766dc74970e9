// The hand-derived inventory of docs/memory-model.md, written out independently of the step
// builder: for each technique, the bytes each layer keeps from its forward for its backward.
// The simulator's graph must agree exactly.
#include <gtest/gtest.h>

#include <map>

#include "planner/search/memory_model.h"
#include "test_plans.h"

namespace longctx {
namespace {

using testing::cpu_plan;

struct Saved {
  std::int64_t device = 0, host = 0;
};

// Bytes alive across the forward/backward boundary (at the first loss op), by layer, taken
// from the graph: tensors named layer.L.* that are not parameters, grads or optimizer states.
std::map<int, Saved> saved_by_layer(const Plan& p) {
  const Evaluation e = evaluate(p);
  int boundary = -1;
  for (int i = 0; i < static_cast<int>(e.graph.ops().size()); ++i)
    if (e.graph.op(i).phase == Phase::Loss) { boundary = i; break; }
  std::map<int, Saved> out;
  for (const auto& t : e.graph.tensors()) {
    if (t.persistent || t.name.scope < 0) continue;
    if (t.category == Category::Params || t.category == Category::Grads || t.category == Category::Optimizer) continue;
    if (t.producer < boundary && t.last_reader >= boundary) {
      auto& s = out[t.name.scope];
      (t.place == Place::Device ? s.device : s.host) += t.bytes;
    }
  }
  return out;
}

// The inventory, per layer. Shapes (n = b*S/u tokens on a rank, e bytes per element):
//   in [n,h]; attn_norm rstd [n] fp32, out [n,h]
//   qk-norm (Qwen3): q, k before the norm [n,H*d], [n,K*d]; their rstd [n,H], [n,K] fp32
//   attention, unchunked: q [b*S, H/u, d], k and v [b*S, kvr, d] (kvr = K/u, or 1 replicated),
//     out [b*S, H/u, d], lse [b, H/u, S] fp32, and (u > 1) out back on this rank's tokens [n, H*d]
//   attention, chunked (Untied Ulysses): out [n, H*d] and lse [b, H/u, S] fp32 only
//   mid [n,h]; mlp_norm rstd [n] fp32, out [n,h]
//   MLP, untiled: gate, up, act [n, I] each; tiled: nothing
//   full checkpoint: in [n,h] only, on the host when offloaded
std::int64_t inventory(const Plan& p, int layer, bool on_host = false) {
  const auto& m = p.model;
  const auto& par = p.parallel;
  const std::int64_t e = bytes_of(p.train.dtype), u = par.ulysses;
  const std::int64_t n = p.train.micro_batch * p.train.seq / u, S = p.train.micro_batch * p.train.seq;
  const std::int64_t h = m.hidden, I = m.intermediate, H = m.heads, K = m.kv_heads, d = m.head_dim;
  const std::int64_t kvr = K >= u ? K / u : 1;
  if (par.checkpoint.checkpoints_layer(layer)) {
    if (par.offload_checkpoints) return on_host ? n * h * e : 0;
    return on_host ? 0 : n * h * e;
  }
  if (on_host) return 0;
  std::int64_t bytes = n * h * e + n * 4 + n * h * e;  // in, attn_norm rstd and out
  if (par.head_chunk > 0) {
    bytes += n * H * d * e + S * (H / u) * 4;
  } else {
    if (m.qk_norm) bytes += n * H * d * e + n * K * d * e + n * H * 4 + n * K * 4;
    bytes += S * (H / u) * d * e + 2 * S * kvr * d * e;  // q, k, v
    bytes += S * (H / u) * d * e + S * (H / u) * 4;       // out, lse
    if (u > 1) bytes += n * H * d * e;                    // out on this rank's tokens
  }
  bytes += n * h * e + n * 4 + n * h * e;  // mid, mlp_norm rstd and out
  if (par.mlp_tiles == 1) bytes += 3 * n * I * e;
  return bytes;
}

void expect_inventory(const Plan& p, const char* what) {
  const auto saved = saved_by_layer(p);
  for (int l = 0; l < p.model.layers; ++l) {
    const auto it = saved.find(l);
    const Saved s = it == saved.end() ? Saved{} : it->second;
    EXPECT_EQ(s.device, inventory(p, l)) << what << ", layer " << l << " on the device";
    EXPECT_EQ(s.host, inventory(p, l, true)) << what << ", layer " << l << " on the host";
  }
}

TEST(Inventory, PlainLayerKeepsItsWholeSavedSet) {
  for (const char* model : {"tiny-gqa", "tiny-odd"}) expect_inventory(cpu_plan(model, 1, 512), model);
}

TEST(Inventory, UlyssesKeepsTheFullSequenceOfItsHeads) {
  for (int u : {2, 4}) {
    Plan p = cpu_plan("tiny-odd", u, 512);  // 8 q heads, 2 kv heads: u = 4 replicates kv
    p.parallel.ulysses = u;
    expect_inventory(p, u == 2 ? "tiny-odd u=2" : "tiny-odd u=4 (kv replicated)");
  }
  Plan p = cpu_plan("tiny-gqa", 2, 512);
  p.parallel.ulysses = 2;
  expect_inventory(p, "tiny-gqa u=2");
}

TEST(Inventory, UntiedKeepsOnlyOutputAndLse) {
  for (int c : {1, 2}) {
    Plan p = cpu_plan("tiny-odd", 2, 512);
    p.parallel.ulysses = 2;
    p.parallel.head_chunk = c;
    expect_inventory(p, "untied");
  }
}

TEST(Inventory, TiledMlpKeepsNoIntermediate) {
  Plan p = cpu_plan("tiny-gqa", 1, 512);
  p.parallel.mlp_tiles = 4;
  p.parallel.loss_tiles = 4;
  expect_inventory(p, "tiled");
}

TEST(Inventory, CheckpointsKeepOnlyLayerInputs) {
  Plan p = cpu_plan("tiny-odd", 1, 256);
  p.parallel.checkpoint = CheckpointPolicy::full();
  expect_inventory(p, "full");
  p.parallel.offload_checkpoints = true;
  expect_inventory(p, "full, offloaded");
  p.parallel.checkpoint = CheckpointPolicy::every_k(2);
  expect_inventory(p, "every:2, offloaded");
  p.parallel.offload_checkpoints = false;
  expect_inventory(p, "every:2");
}

TEST(Inventory, ModelStatesAreEighteenBytesPerParameterDividedAsShardingSays) {
  // bf16 parameters (2), fp32 master (4), two fp32 moments (8), fp32 gradients (4).
  for (auto sharding : {Sharding::None, Sharding::Zero1, Sharding::Zero2, Sharding::Zero3}) {
    Plan p = cpu_plan("tiny-gqa", 4, 256);
    p.train.dtype = DType::BF16;
    p.parallel.sharding = sharding;
    const Evaluation e = evaluate(p);
    std::int64_t params = 0, optimizer = 0, grads = 0;
    for (const auto& t : e.graph.tensors()) {
      if (t.category == Category::Params && t.persistent) params += t.bytes;
      if (t.category == Category::Optimizer) optimizer += t.bytes;
      // Gradients as kept for the optimizer: the shard after reduce-scatter, or the whole
      // (zero1: the whole, then the shard copied out of it).
      const std::string name = format(t.name);
      if (t.category == Category::Grads && name.find("grad.full") == std::string::npos) grads += t.bytes;
    }
    const auto& m = p.model;
    const std::int64_t N = 4;
    std::int64_t shards = 0;  // per group, rounded up: flat per-layer shards
    for (std::int64_t l = 0; l < m.layers; ++l) shards += (m.params_per_layer() + N - 1) / N;
    shards += (m.embedding_params() + N - 1) / N + (m.hidden + m.output_params() + N - 1) / N;
    const std::int64_t P = m.total_params();
    EXPECT_EQ(params, 2 * (sharding == Sharding::Zero3 ? shards : P)) << to_string(sharding);
    EXPECT_EQ(optimizer, 12 * (sharding == Sharding::None ? P : shards)) << to_string(sharding);
    const bool sharded_grads = sharding == Sharding::Zero2 || sharding == Sharding::Zero3;
    // zero1 all-reduces the whole gradients and then copies the rank's shard out of them.
    const std::int64_t kept = sharded_grads ? shards : sharding == Sharding::Zero1 ? P + shards : P;
    EXPECT_EQ(grads, 4 * kept) << to_string(sharding);
  }
}

}  // namespace
}  // namespace longctx
