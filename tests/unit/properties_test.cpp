// Properties of the memory model over many random valid configurations. The search prunes
// with some of them (search.h), so they are proofs obligations as much as checks.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "planner/footprint/embedding.h"
#include "planner/footprint/step_shapes.h"
#include "planner/graph/resized_workspaces.h"
#include "planner/graph/simulator.h"
#include "planner/search/memory_model.h"
#include "planner/core/row_chunk.h"
#include "planner/search/search.h"
#include "planner/search/search_order.h"
#include "planner/search/search_space.h"
#include "planner/stacks/profile.h"
#include "test_plans.h"

namespace longctx {
namespace {

struct Case {
  Plan plan;
  std::string text;
};

// A fresh seed from std::random_device, or LONGCTX_PROPERTIES_SEED's, to replay a printed one.
std::uint64_t case_seed() {
  if (const char* given = std::getenv("LONGCTX_PROPERTIES_SEED"); given && *given) return std::strtoull(given, nullptr, 10);
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

// A random valid configuration of a small model on the CPU virtual device.
Case random_case(std::mt19937& rng) {
  auto pick = [&](auto... values) {
    const std::vector<std::common_type_t<decltype(values)...>> v{values...};
    return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)];
  };
  for (;;) {
    const char* model = pick("tiny-gqa", "tiny-odd");
    const std::int64_t gpus = pick(1, 2, 4);
    Plan p = testing::cpu_plan(model, gpus, pick(256, 512, 1024));
    if (pick(0, 1)) p.train.dtype = DType::BF16;
    p.train.micro_batch = pick(1, 2);
    p.parallel.sharding = pick(Sharding::None, Sharding::Zero1, Sharding::Zero2, Sharding::Zero3);
    p.parallel.ulysses = static_cast<int>(pick(1, 2, 4));
    p.parallel.head_chunk = pick(0, 0, 1, 2, 4);
    p.parallel.checkpoint = pick(CheckpointPolicy::none(), CheckpointPolicy::full(), CheckpointPolicy::every_k(2));
    p.parallel.offload_checkpoints = p.parallel.checkpoint.any() && pick(0, 1);
    p.parallel.offload_optimizer = pick(0, 1);
    p.parallel.offload_params = p.parallel.sharding == Sharding::Zero3 && pick(0, 1);
    p.parallel.mlp_tiles = pick(1, 2, 4);
    p.parallel.loss_tiles = pick(1, 2, 4);
    if (!validate(p.model, p.cluster.shape, p.train, p.parallel).ok()) continue;
    const std::string text = plan_to_json(p)["parallel"].dump() + " " + model + " gpus=" + std::to_string(gpus) +
                             " seq=" + std::to_string(p.train.seq) + " " + to_string(p.train.dtype);
    return {p, text};
  }
}

std::int64_t peak(const Plan& p) { return predict(p).peak_device_bytes; }
std::int64_t host(const Plan& p) { return predict(p).peak_host_bytes; }

constexpr int kCases = 300;

TEST(Properties, GraphsAreWellFormed) {
  std::mt19937 rng(1);
  for (int i = 0; i < kCases; ++i) {
    const Case c = random_case(rng);
    const Evaluation e = evaluate(c.plan);
    auto ok = e.graph.check();
    EXPECT_TRUE(ok.ok()) << c.text << ": " << (ok.ok() ? "" : ok.error().what());
  }
}

// Over the tiles the search uses: at least the smallest tile's length, a power of two up to
// min(1024, hidden) tokens. Thinner tiles can raise the peak: a tiled MLP's backward
// allocates its three weight gradients at once, and below that length those outweigh the
// activations tiling saves.
bool tiles_in_domain(const Plan& p) {
  std::int64_t tile = 1;
  while (tile * 2 <= std::min<std::int64_t>(1024, p.model.hidden)) tile *= 2;
  const std::int64_t n = p.train.micro_batch * p.train.seq / p.parallel.ulysses;
  return n / p.parallel.mlp_tiles >= tile && n / p.parallel.loss_tiles >= tile;
}

TEST(Properties, MoreTilesNeverRaiseThePeak) {
  std::mt19937 rng(2);
  int compared = 0;
  for (int i = 0; i < kCases; ++i) {
    Case c = random_case(rng);
    Plan more = c.plan;
    more.parallel.mlp_tiles *= 2;
    if (validate(more.model, more.cluster.shape, more.train, more.parallel).ok() && tiles_in_domain(more)) {
      EXPECT_LE(peak(more), peak(c.plan)) << "mlp tiles x2: " << c.text;
      ++compared;
    }
    more = c.plan;
    more.parallel.loss_tiles *= 2;
    if (validate(more.model, more.cluster.shape, more.train, more.parallel).ok() && tiles_in_domain(more)) {
      EXPECT_LE(peak(more), peak(c.plan)) << "loss tiles x2: " << c.text;
      ++compared;
    }
  }
  EXPECT_GT(compared, kCases / 2);
}

TEST(Properties, ASmallerHeadChunkNeverRaisesThePeak) {
  std::mt19937 rng(3);
  for (int i = 0; i < kCases; ++i) {
    Case c = random_case(rng);
    if (c.plan.parallel.head_chunk < 2) continue;
    Plan smaller = c.plan;
    smaller.parallel.head_chunk /= 2;
    if (validate(smaller.model, smaller.cluster.shape, smaller.train, smaller.parallel).ok())
      EXPECT_LE(peak(smaller), peak(c.plan)) << c.text;
  }
}

// Checkpointing never raises the peak by more than two [n, h] tensors: a recompute holds the
// recomputed output of its layer and the gradient it was handed while that layer's backward
// runs (reentrant checkpointing), so where the peak is set by what else is live there
// (accumulated gradients, a short model) checkpointing can cost those two; it never costs more.
TEST(Properties, CheckpointingRaisesThePeakByAtMostTwoLayerOutputs) {
  std::mt19937 rng(4);
  for (int i = 0; i < kCases; ++i) {
    Case c = random_case(rng);
    Plan none = c.plan, every2 = c.plan, full = c.plan;
    none.parallel.checkpoint = CheckpointPolicy::none();
    none.parallel.offload_checkpoints = false;
    every2.parallel.checkpoint = CheckpointPolicy::every_k(2);
    full.parallel.checkpoint = CheckpointPolicy::full();
    every2.parallel.offload_checkpoints = full.parallel.offload_checkpoints = c.plan.parallel.offload_checkpoints;
    const std::int64_t layer_output = c.plan.train.micro_batch * c.plan.train.seq / c.plan.parallel.ulysses *
                                      c.plan.model.hidden * bytes_of(c.plan.train.dtype);
    EXPECT_LE(peak(full), peak(every2) + 2 * layer_output) << c.text;
    EXPECT_LE(peak(every2), peak(none) + 2 * layer_output) << c.text;
    if (!c.plan.parallel.offload_checkpoints) EXPECT_EQ(host(full), host(none)) << c.text;
  }
  // And in a deep model whose peak is set by activations, it lowers it.
  Plan deep = testing::cpu_plan("tiny-gqa", 1, 4096);
  deep.model.layers = 16;
  Plan ckpt = deep;
  ckpt.parallel.checkpoint = CheckpointPolicy::full();
  EXPECT_LT(peak(ckpt), peak(deep) / 2);
}

// Offloading moves bytes from the device to the host, never loses any: at the end of the
// forward, what the device no longer holds is exactly what the host now holds.
TEST(Properties, OffloadMovesBytesAndLosesNone) {
  std::mt19937 rng(5);
  auto at_forward_end = [](const Plan& p) {
    const Evaluation e = evaluate(p);
    int i = 0;
    while (e.graph.op(i + 1).phase == Phase::Forward) ++i;
    return std::pair{e.sim.per_op[static_cast<std::size_t>(i)].device_after, e.sim.per_op[static_cast<std::size_t>(i)].host_during};
  };
  for (int i = 0; i < kCases / 3; ++i) {
    Case c = random_case(rng);
    if (!c.plan.parallel.checkpoint.any()) continue;
    Plan on = c.plan, off = c.plan;
    on.parallel.offload_checkpoints = true;
    off.parallel.offload_checkpoints = false;
    const auto [dev_on, host_on] = at_forward_end(on);
    const auto [dev_off, host_off] = at_forward_end(off);
    EXPECT_GT(host_on, host_off) << c.text;
    EXPECT_EQ(dev_off - dev_on, host_on - host_off) << c.text;
    EXPECT_LE(peak(on), peak(off)) << c.text;

    on = off = c.plan;
    on.parallel.offload_optimizer = true;
    off.parallel.offload_optimizer = false;
    const auto [d1, h1] = at_forward_end(on);
    const auto [d0, h0] = at_forward_end(off);
    // The offloaded optimizer also keeps an fp32 gradient buffer per state on the host, for
    // the whole step: the host holds what the device no longer does, and those.
    std::int64_t host_grads = 0;
    const Evaluation evaluated = evaluate(on);  // a range-for over a temporary's member would dangle
    for (const auto& t : evaluated.graph.tensors())
      if (t.persistent && t.category == Category::Grads && t.place == Place::Host) host_grads += t.bytes;
    EXPECT_GT(host_grads, 0) << c.text;
    EXPECT_EQ(d0 - d1 + host_grads, h1 - h0) << "optimizer: " << c.text;
  }
}

// A cluster to draw choices on: a tiny model on the CPU virtual device (`gpu` false) or a small
// Llama on an H100, on any stack, 1 to 8 ranks.
Plan drawn_base(std::mt19937_64& rng, bool gpu) {
  auto pick = [&](auto... values) {
    const std::vector<std::common_type_t<decltype(values)...>> v{values...};
    return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)];
  };
  const std::int64_t gpus = pick(1, 2, 4, 8);
  Plan base = gpu ? testing::gpu_plan(pick("llama-3.2-1b", "qwen3-8b"), "h100-80gb", gpus, pick(16384, 65536))
                  : testing::cpu_plan(pick("tiny-gqa", "tiny-odd"), gpus, pick(256, 512, 1024));
  base.train.stack = default_stack(pick(StackKind::Longctx, StackKind::HF, StackKind::Arctic, StackKind::Torchtitan));
  if (!gpu && pick(0, 1)) base.train.dtype = DType::BF16;
  if (base.train.stack.kind == StackKind::Arctic) base.train.grad_dtype = base.train.dtype;
  return base;
}

std::string describe(const Plan& p) {
  return fmt::format("{} b={} {} {} gpus={} seq={} {}", plan_to_json(p)["parallel"].dump(), p.train.micro_batch,
                     to_string(p.train.stack.kind), p.model.name, p.cluster.shape.world(), p.train.seq,
                     to_string(p.train.dtype));
}

// The dominance the plan search judges with (search_detail::holds_no_more): a coarse choice's
// most memory-saving plans, the finest tiles with the smallest head chunk or with none
// (search.cpp, search_fine's first bound), hold no more than those of every sibling it names
// (more samples, a gathered ring, less sharding), on the device or the host. Choices drawn from
// the search's own enumeration on every stack, each with its siblings in those three knobs;
// tiny models on the CPU virtual device and small Llamas on an H100. (Drawn with zero2 against
// zero1 too, it found Qwen3-8B on 4 H100s at 64K tokens without checkpointing 0.9 GB over
// under zero2, which the dominance therefore leaves out.)
TEST(Properties, ASiblingThatHoldsNoMoreNeverHoldsMore) {
  const std::uint64_t seed = case_seed();  // fresh each run: the search judges every query by it
  std::printf("seed %llu (LONGCTX_PROPERTIES_SEED)\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  int compared = 0, samples = 0, exchanges = 0, shardings = 0;
  for (int i = 0; i < 120; ++i) {
    const std::vector<Plan> choices = coarse_choices(drawn_base(rng, i % 2 == 1), all_techniques(), {});
    for (int draw = 0; draw < 2 && !choices.empty(); ++draw) {
      const Plan one = choices[std::uniform_int_distribution<std::size_t>(0, choices.size() - 1)(rng)];
      // (Not where a request fixes the tile counts, which the search then does not judge so:
      // there more samples can lower a CPU step's peak, tiny-gqa's 8-rank ring 1.5% lower at
      // four samples than at two with 2 or 4 tiles fixed.)
      const Knobs fixed;
      // Its siblings, each with the device and host peaks of its two most saving plans.
      struct Sibling {
        Plan plan;
        std::int64_t device[2], host[2];
      };
      std::vector<Sibling> siblings;
      for (const std::int64_t samples : {1, 2, 4})
        for (const RingExchange exchange : {RingExchange::P2p, RingExchange::AllGather})
          for (const Sharding sharding : {Sharding::None, Sharding::Zero1, Sharding::Zero2, Sharding::Zero3}) {
            Plan c = one;
            c.train.micro_batch = samples;
            c.parallel.ring_exchange = exchange;
            c.parallel.sharding = sharding;
            if (!valid(c)) continue;
            const FineOptions o = fine_options(c, all_techniques(), fixed);
            const auto& [chunks, mlps, losses] = o;
            Sibling s{c, {}, {}};
            bool all_valid = true;
            for (int b = 0; b < 2; ++b) {
              const Plan saving = with_fine(c, {b == 0 ? chunks.back() : chunks.front(), mlps.back(), losses.back()});
              all_valid = all_valid && valid(saving);
              if (!all_valid) break;
              const Prediction pr = predict(saving);
              s.device[b] = pr.peak_device_bytes;
              s.host[b] = pr.peak_host_bytes;
            }
            if (all_valid) siblings.push_back(s);
          }
      for (const Sibling& a : siblings)
        for (const Sibling& b : siblings) {
          if (&a == &b || !search_detail::holds_no_more(a.plan, b.plan)) continue;
          const std::string text = describe(a.plan) + " against " + describe(b.plan);
          for (int k = 0; k < 2; ++k) {
            EXPECT_LE(a.device[k], b.device[k]) << text;
            EXPECT_LE(a.host[k], b.host[k]) << text;
          }
          // What the device holds outside the allocator (the CUDA context, NCCL's buffers) too:
          // a fit as allocated counts it.
          EXPECT_LE(plan_context_bytes(a.plan), plan_context_bytes(b.plan)) << text;
          ++compared;
          samples += a.plan.train.micro_batch != b.plan.train.micro_batch;
          exchanges += a.plan.parallel.ring_exchange != b.plan.parallel.ring_exchange;
          shardings += a.plan.parallel.sharding != b.plan.parallel.sharding;
        }
    }
  }
  EXPECT_GE(compared, 200);
  EXPECT_GE(samples, 20);  // each relation compared
  EXPECT_GE(exchanges, 20);
  EXPECT_GE(shardings, 20);
  std::printf("compared %d: samples %d, exchanges %d, shardings %d\n", compared, samples, exchanges, shardings);
}

// A choice drawn as drawn_base's draws: one of the search's own coarse choices there.
Plan drawn_choice(std::mt19937_64& rng) {
  for (;;) {
    const std::vector<Plan> choices =
        coarse_choices(drawn_base(rng, std::uniform_int_distribution<int>(0, 1)(rng) == 1), all_techniques(), {});
    if (!choices.empty()) return choices[std::uniform_int_distribution<std::size_t>(0, choices.size() - 1)(rng)];
  }
}

// Fine knobs for a drawn choice: a head chunk, MLP and loss tile counts among its candidates.
Plan with_drawn_fine(const Plan& choice, std::mt19937_64& rng) {
  const FineOptions o = fine_options(choice, all_techniques(), {});
  const auto& [chunks, mlps, losses] = o;
  auto any = [&](const std::vector<KnobValue>& v) { return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)]; };
  return with_fine(choice, {any(chunks), any(mlps), any(losses)});
}

// This run's drawn plans (with_drawn_fine of drawn_choice, the seed printed), each valid one
// handed to `hold` until `wanted` were or `tries` were drawn, or a check in `hold` failed fatally;
// returns how many were held.
template <class Hold>
int hold_on_drawn_plans(int tries, int wanted, Hold&& hold) {
  const std::uint64_t seed = case_seed();
  std::printf("seed %llu (LONGCTX_PROPERTIES_SEED)\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  int held = 0;
  for (int i = 0; i < tries && held < wanted; ++i) {
    const Plan p = with_drawn_fine(drawn_choice(rng), rng);
    if (!valid(p)) continue;
    hold(p);
    if (::testing::Test::HasFatalFailure()) break;
    ++held;
  }
  return held;
}

// What max-context refutes with before building a layer: the model states alone (a build
// with StepInputs::states_only) are the whole step's first tensors, made before it and never
// freed there, so their standing bytes are held at every op of the whole step.
TEST(Properties, TheModelStatesAreALowerBoundOfEveryOp) {
  int with_states = 0;
  const int held = hold_on_drawn_plans(400, 60, [&](const Plan& p) {
    const StepGraph whole = build_step(step_inputs(p)), states = build_step(step_inputs(p, StepExtent::States));
    const std::string text = describe(p);
    ASSERT_TRUE(states.ops().empty()) << text;
    ASSERT_LE(states.tensors().size(), whole.tensors().size()) << text;
    for (std::size_t t = 0; t < states.tensors().size(); ++t) {
      const TensorSpec &a = states.tensors()[t], &b = whole.tensors()[t];
      EXPECT_TRUE(format(a.name) == format(b.name) && a.bytes == b.bytes && a.place == b.place &&
                  a.persistent == b.persistent && a.category == b.category)
          << text << ": tensor " << t << " " << format(a.name) << " against " << format(b.name);
      if (a.persistent) EXPECT_EQ(b.producer, -1) << text << ": " << format(b.name);
    }
    const StandingBytes floor = standing_bytes(states, p.cluster.hardware.backend);
    const OpTotals t = simulate_totals(whole, p.cluster.hardware.backend);
    for (std::size_t k = 0; k < t.device_during.size(); ++k) {
      ASSERT_LE(floor.device, t.device_during[k]) << text << ": op " << k;
      ASSERT_LE(floor.host, t.host_during[k]) << text << ": op " << k;
    }
    with_states += floor.device > 0 ? 1 : 0;
  });
  EXPECT_GE(held, 50);
  EXPECT_GE(with_states, held / 2);
}

// What max-context judges a choice by where a sibling that offloads more did not fit the
// device (search_detail::device_holds_no_more): the sibling holds no more there at any fine
// knobs, as allocated and outside the allocator. Drawn fresh each run on every stack, each
// choice with every combination of the three offloads.
TEST(Properties, AnOffloadingSiblingNeverHoldsMoreOnTheDevice) {
  const std::uint64_t seed = case_seed();
  std::printf("seed %llu (LONGCTX_PROPERTIES_SEED)\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  int compared = 0;
  int by_offload[3] = {0, 0, 0};  // optimizer, parameters, checkpoints
  for (int i = 0; i < 120; ++i) {
    const Plan one = with_drawn_fine(drawn_choice(rng), rng);
    struct Sibling {
      Plan plan;
      std::int64_t device;
    };
    std::vector<Sibling> siblings;
    for (int set = 0; set < 8; ++set) {
      Plan c = one;
      c.parallel.offload_optimizer = (set & 1) != 0;
      c.parallel.offload_params = (set & 2) != 0;
      c.parallel.offload_checkpoints = (set & 4) != 0;
      if (valid(c)) siblings.push_back({c, predict(c).peak_device_bytes + plan_context_bytes(c)});
    }
    for (const Sibling& a : siblings)
      for (const Sibling& b : siblings) {
        if (&a == &b || !search_detail::device_holds_no_more(a.plan, b.plan)) continue;
        EXPECT_LE(a.device, b.device) << describe(a.plan) << " against " << describe(b.plan);
        ++compared;
        by_offload[0] += a.plan.parallel.offload_optimizer != b.plan.parallel.offload_optimizer;
        by_offload[1] += a.plan.parallel.offload_params != b.plan.parallel.offload_params;
        by_offload[2] += a.plan.parallel.offload_checkpoints != b.plan.parallel.offload_checkpoints;
      }
  }
  // About 250 pairs a run, at the fewest about 80 in 350 runs; each offload about 50 or more.
  EXPECT_GE(compared, 40);
  for (const int n : by_offload) EXPECT_GE(n, 10);  // each offload compared
  std::printf("compared %d: optimizer %d, parameters %d, checkpoints %d\n", compared, by_offload[0], by_offload[1],
              by_offload[2]);
}

// The dominance the max-context search prunes with, at every tile count: sharding the
// optimizer never raises device or host memory. (zero2 against zero1 holds for these tiny
// models, not in general: ASiblingThatHoldsNoMoreNeverHoldsMore's note.)
TEST(Properties, ShardingTheOptimizerNeverRaisesDeviceOrHostMemory) {
  std::mt19937 rng(6);
  for (int i = 0; i < kCases; ++i) {
    Case c = random_case(rng);
    Plan none = c.plan, z1 = c.plan;
    none.parallel.offload_params = z1.parallel.offload_params = false;
    none.parallel.sharding = Sharding::None;
    z1.parallel.sharding = Sharding::Zero1;
    EXPECT_LE(peak(z1), peak(none)) << c.text;
    EXPECT_LE(host(z1), host(none)) << c.text;
  }
}

// What max-context's affine bound rests on: with tiles of a fixed length, every op's live
// bytes are affine in the sequence length once every row chunk of the norms and SwiGLU is
// full (row_chunk.h: at most kRowChunkRows rows, which max-context's sampled lengths reach for
// any model of hidden size 1024 or more). One exception, held to its size: head-chunked
// attention's forward with qk norm is the larger of two moments, q's projection (with the
// norm's constant chunk scratch) and the kernel's (growing a little faster), so its bytes
// bend once where the second overtakes the first, by less than the norm's chunk scratch;
// max_context's confirm() settles such an answer by simulation, upwards too. On CUDA: the
// lengths here (2K tokens and up, doubled until a rank holds a chunk's rows) keep every size
// that grows with the length a multiple of the allocator's 512 bytes. (Not on the CPU
// virtual device, whose flash kernel's block buffers stop growing at 768 tokens; max_context
// settles its configurations by simulation there.)
TEST(Properties, LiveBytesAreAffineInSequenceLength) {
  std::mt19937 rng(7);
  for (int i = 0; i < kCases / 3; ++i) {
    Case c = random_case(rng);
    c.plan.cluster.hardware = load_hardware("h100-80gb").value();
    std::int64_t base = c.plan.train.seq * 8;
    while (base / c.plan.parallel.ulysses < kRowChunkRows) base *= 2;
    auto at = [&](std::int64_t k) {
      Plan p = c.plan;
      p.train.seq = base * k;
      // Tiles of a fixed length: the count grows with the sequence (one tile stays untiled).
      if (p.parallel.mlp_tiles > 1) p.parallel.mlp_tiles *= static_cast<int>(k);
      if (p.parallel.loss_tiles > 1) p.parallel.loss_tiles *= static_cast<int>(k);
      return evaluate(p).sim.per_op;
    };
    const auto a = at(1), b = at(2), d = at(3);
    ASSERT_EQ(a.size(), d.size());
    // The norm's chunk scratch: a chunk of fp32 rows of head_dim, where the untied forward
    // normalizes q and k heads.
    const bool bends = c.plan.model.qk_norm && c.plan.parallel.head_chunk > 0;
    // The CUDA embedding backward's partial segments, tokens / 10 + min(tokens, V) rows: they
    // bend where the tokens pass the vocabulary (and round down by a row at most).
    auto embedding_kernel = [&](std::int64_t k) {
      Plan p = c.plan;
      p.train.seq = base * k;
      const footprint::StepShapes s = footprint::step_shapes(step_inputs(p));
      return footprint::embedding_backward_workspace(s, s.n);
    };
    // Its ids are not a multiple of the allocator's 512-byte blocks: one block of slack.
    const std::int64_t embedding_bend = std::abs(embedding_kernel(3) - 2 * embedding_kernel(2) + embedding_kernel(1)) +
                                        (embedding_kernel(1) > 0 ? 512 : 0);
    const std::int64_t bend = (bends ? kRowChunkRows * c.plan.model.head_dim * 4 : 0) + embedding_bend;
    for (std::size_t j = 0; j < a.size(); ++j) {
      const std::int64_t step1 = b[j].device_during - a[j].device_during, step2 = d[j].device_during - b[j].device_during;
      EXPECT_LE(std::abs(step2 - step1), bend) << c.text << " op " << j << ": " << step1 << " then " << step2;
      EXPECT_EQ(b[j].host_during - a[j].host_during, d[j].host_during - b[j].host_during) << c.text << " op " << j;
    }
  }
}

}  // namespace
}  // namespace longctx

namespace longctx {
namespace {

// Every field of two graphs, tensor by tensor and op by op: the first difference named.
void expect_same_graph(const StepGraph& got, const StepGraph& want, const std::string& what) {
  ASSERT_EQ(got.tensors().size(), want.tensors().size()) << what;
  ASSERT_EQ(got.ops().size(), want.ops().size()) << what;
  for (std::size_t t = 0; t < want.tensors().size(); ++t) {
    const TensorSpec &a = got.tensors()[t], &b = want.tensors()[t];
    ASSERT_TRUE(format(a.name) == format(b.name) && a.bytes == b.bytes && a.category == b.category &&
                a.place == b.place && a.producer == b.producer && a.last_reader == b.last_reader &&
                a.persistent == b.persistent && a.first_step_op == b.first_step_op)
        << what << ": tensor " << t << " " << format(b.name);
  }
  for (std::size_t k = 0; k < want.ops().size(); ++k) {
    const OpSpec &a = got.ops()[k], &b = want.ops()[k];
    const bool same_ids = std::vector<int>(a.inputs.begin(), a.inputs.end()) == std::vector<int>(b.inputs.begin(), b.inputs.end()) &&
                          std::vector<int>(a.outputs.begin(), a.outputs.end()) == std::vector<int>(b.outputs.begin(), b.outputs.end());
    ASSERT_TRUE(format(a.name) == format(b.name) && a.phase == b.phase && a.layer == b.layer && a.kind == b.kind &&
                a.launches == b.launches && same_ids && a.workspace_bytes == b.workspace_bytes &&
                a.workspace_sequence == b.workspace_sequence && a.host_workspace_bytes == b.host_workspace_bytes &&
                a.flops == b.flops && a.kernel_flops == b.kernel_flops && a.memory_bytes == b.memory_bytes &&
                a.transcendentals == b.transcendentals && a.comm == b.comm && a.comm_bytes == b.comm_bytes &&
                a.overlapped_comm_bytes == b.overlapped_comm_bytes && a.comm_group == b.comm_group &&
                a.comm_async == b.comm_async && a.stream == b.stream && a.host_compute == b.host_compute &&
                a.calls_cublas == b.calls_cublas)
        << what << ": op " << k << " " << format(b.name) << " (workspace " << a.workspace_bytes << " against "
        << b.workspace_bytes << ", launches " << a.launches << " against " << b.launches << ")";
  }
}

// What max-context's reserved walk retries coarser MLP tile counts with
// (StackProfile::retile_mlp): the step at the finest count, retiled count by count, coarsest
// last, as the walk retiles one copy, is at every count the graph build_step writes there; a
// count it cannot retile to (an untiled MLP) leaves the graph as it was, as does an untiled step
// asked for a tiled count. Drawn fresh each run on
// every stack that retiles, CPU and H100, at every MLP tile count the search offers.
TEST(Properties, ARetiledStepIsTheStepBuiltAtItsCount) {
  int retiled = 0, refused = 0, members = 0;
  const int held = hold_on_drawn_plans(600, 40, [&](const Plan& p) {
    const auto retile = stack_profile(p.train.stack.kind).retile_mlp;
    if (retile == nullptr) return;
    const std::vector<KnobValue> counts = knob_candidates(KnobId::mlp_tiles, p, all_techniques(), {});
    std::optional<StepGraph> graph, last, finest;  // retiled; built at the count last retiled to; at the finest
    std::optional<Plan> finest_plan;
    for (auto it = counts.rbegin(); it != counts.rend(); ++it) {
      Plan at = p;
      set_knob(at, KnobId::mlp_tiles, *it);
      if (!valid(at)) continue;
      StepGraph built = build_step(step_inputs(at));
      const std::string what = fmt::format("{} at {} MLP tiles", describe(at), *it);
      if (!graph) {
        if (*it > 1) graph.emplace(built), last.emplace(built), finest.emplace(std::move(built)), finest_plan.emplace(at);
        continue;
      }
      if (!retile(*graph, step_inputs(at))) {
        ASSERT_EQ(*it, 1) << what;
        expect_same_graph(*graph, *last, what + ", refused");
        // Nor is the untiled step retiled to the finest count: it has no tiled op to amend.
        StepGraph untiled = built;
        EXPECT_FALSE(retile(untiled, step_inputs(*finest_plan))) << what;
        expect_same_graph(untiled, built, what + ", untiled, refused");
        ++refused;
        continue;
      }
      expect_same_graph(*graph, built, what);
      if (::testing::Test::HasFatalFailure()) return;
      // What the walk reads of it without a walk of its own: its totals, and how it resizes
      // the finest's workspaces.
      const Backend backend = p.cluster.hardware.backend;
      const OpTotals want = simulate_totals(built, backend);
      const OpTotals got = totals_with_workspaces_of(*graph, *finest, simulate_totals(*finest, backend), backend);
      EXPECT_EQ(got.device_during, want.device_during) << what;
      EXPECT_EQ(got.host_during, want.host_during) << what;
      WorkspaceFamily family(*finest);
      const std::optional<int> compared = family.add(built), resized = family.add_resized(*graph);
      ASSERT_EQ(compared.has_value(), resized.has_value()) << what;
      if (compared) {
        const auto a = family.resized(WorkspaceFamily::kBase, *compared), b = family.resized(WorkspaceFamily::kBase, *resized);
        ASSERT_EQ(a.has_value(), b.has_value()) << what;
        if (a) EXPECT_EQ(a->sizes, b->sizes) << what;
        ++members;
      }
      last.emplace(std::move(built));
      ++retiled;
    }
  });
  EXPECT_GE(held, 30);
  EXPECT_GE(retiled, 20);
  EXPECT_GE(refused, 1);
  EXPECT_GE(members, 20);
  std::printf("retiled %d counts (%d family members), refused %d\n", retiled, members, refused);
}

// What the max-context search rejects with: the step built only up to the last layer's
// backward has the same first ops, and none of them holds more than in the whole step.
TEST(Properties, AStepPrefixIsALowerBound) {
  std::mt19937 rng(8);
  for (int i = 0; i < kCases / 3; ++i) {
    const Plan p = random_case(rng).plan;
    StepInputs in{p.model, p.cluster.shape, p.cluster.hardware.backend, p.train, p.parallel};
    in.cpu_threads = p.cluster.hardware.threads;
    const OpTotals whole = simulate_totals(build_step(in), in.backend);
    in.prefix_only = true;
    const OpTotals prefix = simulate_totals(build_step(in), in.backend);
    ASSERT_LT(prefix.device_during.size(), whole.device_during.size());
    for (std::size_t j = 0; j < prefix.device_during.size(); ++j) {
      EXPECT_LE(prefix.device_during[j], whole.device_during[j]) << j;
      EXPECT_LE(prefix.host_during[j], whole.host_during[j]) << j;
    }
  }
}

// The same on every stack, CPU and H100, drawn fresh each run: max-context's first bounds and
// the plan search's loss-tile bisection refute by the prefix on all of them.
TEST(Properties, AStepPrefixIsALowerBoundOnEveryStack) {
  const int held = hold_on_drawn_plans(600, 60, [](const Plan& p) {
    const OpTotals whole = simulate_totals(build_step(step_inputs(p)), p.cluster.hardware.backend);
    const OpTotals prefix = simulate_totals(build_step(step_inputs(p, StepExtent::Prefix)), p.cluster.hardware.backend);
    const std::string text = describe(p);
    ASSERT_LT(prefix.device_during.size(), whole.device_during.size()) << text;
    for (std::size_t j = 0; j < prefix.device_during.size(); ++j) {
      ASSERT_LE(prefix.device_during[j], whole.device_during[j]) << text << ": op " << j;
      ASSERT_LE(prefix.host_during[j], whole.host_during[j]) << text << ": op " << j;
    }
  });
  EXPECT_GE(held, 50);
}

// What the search builds a step with where it refutes by the prefix (step_unless_prefix_over):
// asked at the prefix's end, the graph so far holds no more at any op than the whole step (our
// stack's is the prefix build itself); told to go on, the build is the whole step's. Drawn
// fresh each run on every stack, CPU and H100.
TEST(Properties, ABuildAskedAtItsPrefixIsThePrefixThenTheWholeStep) {
  const int held = hold_on_drawn_plans(600, 60, [](const Plan& p) {
    const Backend backend = p.cluster.hardware.backend;
    const OpTotals whole = simulate_totals(build_step(step_inputs(p)), backend);
    const OpTotals prefix = simulate_totals(build_step(step_inputs(p, StepExtent::Prefix)), backend);
    std::optional<OpTotals> asked;
    const std::function<bool(const StepGraph&)> go_on = [&](const StepGraph& g) {
      asked = simulate_totals(g, backend);
      return false;
    };
    StepInputs in = step_inputs(p);
    in.end_at_prefix = &go_on;
    const StepGraph built = build_step(in);
    const std::string text = describe(p);
    const OpTotals after = simulate_totals(built, backend);
    EXPECT_EQ(after.device_during, whole.device_during) << text;
    EXPECT_EQ(after.host_during, whole.host_during) << text;
    ASSERT_TRUE(asked.has_value()) << text;
    ASSERT_LT(asked->device_during.size(), whole.device_during.size()) << text;
    for (std::size_t j = 0; j < asked->device_during.size(); ++j) {
      ASSERT_LE(asked->device_during[j], whole.device_during[j]) << text << ": op " << j;
      ASSERT_LE(asked->host_during[j], whole.host_during[j]) << text << ": op " << j;
    }
    if (p.train.stack.kind == StackKind::Longctx) {
      EXPECT_EQ(asked->device_during, prefix.device_during) << text;
      EXPECT_EQ(asked->host_during, prefix.host_during) << text;
    }
    // Told to end there, the search reads nothing more of it: step_unless_prefix_over's verdict
    // is the prefix's.
    const StepUnlessPrefixOver r = step_unless_prefix_over(p);
    EXPECT_EQ(r.whole.has_value(), fits_as_allocated(p, *asked)) << text;
  });
  EXPECT_GE(held, 50);
}

// The peaks a prediction reads (simulate without per-op figures: the totals, then the
// categories at the peak op from the tensors live there) are the walk by category's. Drawn
// fresh each run on every stack, CPU and H100.
TEST(Properties, ThePeaksAloneAreThoseOfTheWalkByCategory) {
  const int held = hold_on_drawn_plans(600, 60, [](const Plan& p) {
    const StepGraph g = build_step(step_inputs(p));
    const SimResult walk = simulate(g, p.cluster.hardware.backend, /*per_op=*/true);
    const SimResult peaks = simulate(g, p.cluster.hardware.backend, /*per_op=*/false);
    const std::string text = describe(p);
    ASSERT_EQ(peaks.peak_op, walk.peak_op) << text;
    EXPECT_EQ(peaks.peak_device_bytes, walk.peak_device_bytes) << text;
    EXPECT_EQ(peaks.breakdown, walk.breakdown) << text;
    EXPECT_EQ(peaks.peak_host_op, walk.peak_host_op) << text;
    EXPECT_EQ(peaks.peak_host_bytes_per_rank, walk.peak_host_bytes_per_rank) << text;
  });
  EXPECT_GE(held, 50);
}

// What max-context promises: `plan --seq S` finds a fitting plan for every S up to its
// answer, any S (padded to the layout, tiles uneven), and one granule past it nothing fits.
// Random models, GPU counts, budgets and lengths, on the virtual device (every length
// settled by simulation) and on an H100 (the affine bound). Each run draws fresh cases: 8
// tests that run side by side, case i on the H100 where i % 3 == 2 and with every technique
// (tiles) where i is even, so that every run holds each kind; each case's seed is drawn from
// std::random_device and printed (LONGCTX_PROPERTIES_SEED=S replays it: case_seed).

// A plan of case `i`'s kind: a tiny model on the CPU virtual device under a few MiB, or a
// Llama on an H100 with its whole memory.
Plan max_context_base(int i, std::mt19937_64& rng) {
  auto pick = [&](auto... values) {
    const std::vector<std::common_type_t<decltype(values)...>> v{values...};
    return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)];
  };
  const bool gpu = i % 3 == 2;
  Plan base = testing::cpu_plan(gpu ? pick("llama-3.2-1b", "llama-3.1-8b") : pick("tiny-gqa", "tiny-odd"),
                                pick(1, 2, 3, 4, 6, 8), 0);
  if (gpu) {
    base.cluster.hardware = load_hardware("h100-80gb").value();
    base.cluster.device_budget_bytes = base.cluster.hardware.device_memory_bytes;
    base.cluster.host_budget_bytes_per_node = base.cluster.hardware.host_memory_bytes_per_node;
    base.train.dtype = DType::BF16;
  } else {
    base.cluster.device_budget_bytes = pick(4, 8, 16) << 20;
    base.cluster.host_budget_bytes_per_node = 256LL << 20;
  }
  return base;
}

class MaxContextBounds : public ::testing::TestWithParam<int> {};

TEST_P(MaxContextBounds, EveryShorterLength) {
  const int i = GetParam();
  const bool gpu = i % 3 == 2;
  const std::uint64_t seed = case_seed();
  std::printf("case %d: seed %llu (LONGCTX_PROPERTIES_SEED)\n", i, static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  const Plan base = max_context_base(i, rng);
  // Half without tiles: the answer is then exact to the token.
  const TechniqueSet techniques =
      i % 2 ? *parse_techniques("zero3,ulysses,checkpoint,offload-checkpoints,untied") : all_techniques();
  auto m = max_context(base, techniques, /*with_ladder=*/false);
  if (!m.ok()) {
    // A draw where nothing fits at any length (8B's states on one H100 without their offload):
    // the promise is then that the shortest length finds no plan either.
    ASSERT_EQ(m.error().kind, ErrorKind::NoFit) << base.model.name << ": " << m.error().what();
    Plan shortest = base;
    shortest.train.seq = 1;
    EXPECT_FALSE(best_plan(shortest, techniques).ok()) << base.model.name << ": max-context found nothing, "
                                                       << "yet one token fits: " << m.error().what();
    return;
  }
  const std::string text = fmt::format("{} on {} GPUs, budget {}: max {} granularity {}", base.model.name,
                                       base.cluster.shape.world(), base.cluster.device_budget_bytes, m->max_tokens,
                                       m->granularity);
  std::printf("%s\n", text.c_str());
  std::vector<std::int64_t> lengths = {m->max_tokens, std::uniform_int_distribution<std::int64_t>(1, 4096)(rng)};
  for (int k = 0; k < 3; ++k) lengths.push_back(std::uniform_int_distribution<std::int64_t>(1, m->max_tokens)(rng));
  int checked = 0;
  for (std::int64_t seq : lengths) {
    if (seq > m->max_tokens) continue;
    Plan at = base;
    at.train.seq = seq;
    auto found = best_plan(at, techniques);
    EXPECT_TRUE(found.ok()) << text << "; seq " << seq << ": " << (found.ok() ? "" : found.error().what());
    ++checked;
  }
  EXPECT_GE(checked, 4) << text;  // the answer and the three lengths drawn up to it
  Plan past = base;
  past.train.seq = m->max_tokens + m->granularity;
  auto beyond = best_plan(past, techniques);
  // On CUDA the device binds on the caching allocator's reserved figure, whose
  // fragmentation is not monotone in the length: a longer length may fit where a shorter
  // one does not, so "the next length does not fit" holds only as allocated there.
  if (!gpu) EXPECT_FALSE(beyond.ok()) << text << "; seq " << past.train.seq << " fits";
  EXPECT_TRUE(m->plan.prediction.feasible) << text;
  // Exact to the token without tiles; on CUDA only where the reserved figure fits at the
  // length exact as allocated (fragmentation is not monotone in the length).
  if (i % 2 && !gpu) EXPECT_EQ(m->granularity, 1) << text;
  if (i % 2 && gpu) EXPECT_LE(m->granularity, 2 * min_tile_tokens(base.model) * base.cluster.shape.world()) << text;
}

INSTANTIATE_TEST_SUITE_P(Properties, MaxContextBounds, ::testing::Range(0, 8),
                         [](const auto& info) { return fmt::format("case_{}", info.param); });

}  // namespace
}  // namespace longctx
