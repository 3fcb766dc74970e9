// The randomized validation grid: random model shapes x random technique combinations x 1
// to 3 ranks, each planned by the current planner, run for two steps on the CPU virtual
// device, and held within 1% of the prediction on the device peak, the host peak, and every
// phase's device and host peak, on every rank (rank_measure.h); known_gap() would name the
// configurations where they are not, and what they are held to there: today there is none.
//
// The sample: each run draws fresh points, so that runs add up to coverage a single run could
// not afford: kShards tests (they run in parallel), each of LONGCTX_VALIDATION_POINTS points
// (default 5) from a seed of its own drawn from std::random_device and printed.
// LONGCTX_VALIDATION_SEED=S replays seed S (in shard 0 alone; the others skip);
// LONGCTX_VALIDATION_POINT=i runs only point i of the seed's sample.
// The seed and each point's whole configuration are printed: a failure is reproduced with
// the same seed and point, and the plan of a failing point is kept in /tmp for
// `longctx run --plan FILE --allocation-log LOG` (every point's with LONGCTX_VALIDATION_KEEP=1).
// LONGCTX_VALIDATION_QK_NORM_BF16=1 turns
// every point into a bf16 model with q/k norm, its other draws unchanged (the q/k norm's
// buffers are bf16-only and 12% of the points otherwise).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <random>

#include "random_point.h"
#include "rank_measure.h"

namespace longctx::validation {
namespace {

KnownGap known_gap(const Plan&) {
  // None is known today: every configuration the grid draws is held to kBound.
  return {};
}

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

// A seed no run has used before, as far as 64 random bits go.
std::uint64_t fresh_seed() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

// The shards of a run's sample, each a test of its own (ctest runs them side by side).
constexpr int kShards = 4;

// The worst errors of a shard's points: of every figure, and of those held to kBound.
struct Worst {
  double any = 0, held = 0;
  std::string at;
};

// Point `i` of `seed`'s sample run and held to its prediction (failures added to the test).
void hold_point(const Plan& plan, std::uint64_t seed, int i, bool keep_plan, Worst& worst) {
  const std::string config = describe(plan);
  ASSERT_TRUE(validate(plan.model, plan.cluster.shape, plan.train, plan.parallel).ok()) << config;
  const Evaluation e = evaluate(plan);
  const std::string file = fmt::format("/tmp/longctx-validation-{}-{}.plan.json", seed, i);
  ASSERT_TRUE(write_plan_file(plan, file).ok());
  std::vector<RankMeasure> ranks;
  try {
    ranks = plan.cluster.shape.world() == 1 ? run_in_process(plan) : run_ranks(file, plan.cluster.shape.world());
  } catch (const std::exception& ex) {
    ADD_FAILURE() << "point " << i << " did not run: " << ex.what();
    return;
  }
  const KnownGap gap = known_gap(plan);
  const Comparison c = compare(e, ranks, gap);
  std::printf("%-3d %12lld %12lld %+8.3f%%  %-36s %s\n", i, static_cast<long long>(e.sim.peak_device_bytes),
              static_cast<long long>(ranks[0].total.device), 100 * error_of(e.sim.peak_device_bytes, ranks[0].total.device),
              fmt::format("{} {:+.3f}%", c.worst_at, 100 * c.worst).c_str(), config.c_str());
  if (!gap.reason.empty())
    std::printf("    known gap (%s): %s\n",
                !gap.peaks ? "phases printed" : gap.peak_bound > 0 ? "peaks within 10%, phases printed" : "printed",
                gap.reason.c_str());
  std::fflush(stdout);
  if (std::abs(c.worst) > std::abs(worst.any) || worst.at.empty()) worst.any = c.worst, worst.at = fmt::format("point {} {}", i, c.worst_at);
  if (std::abs(c.worst_held) > std::abs(worst.held)) worst.held = c.worst_held;
  if (!c.failures.empty()) {
    std::string all;
    for (const auto& f : c.failures) all += "\n  " + f;
    ADD_FAILURE() << "point " << i << " (" << config << "), outside " << 100 * kBound << "%:" << all
                  << "\n  plan kept: " << file;
  }
  if (c.failures.empty() && !keep_plan) {
    std::remove(file.c_str());
    std::remove((file + ".stderr").c_str());
  }
}

class RandomGrid : public ::testing::TestWithParam<int> {};

TEST_P(RandomGrid, ShapesAndTechniquesArePredictedWithinOnePercent) {
  torch::set_num_threads(1);
  const int shard = GetParam();
  const char* given = std::getenv("LONGCTX_VALIDATION_SEED");
  if (given && *given && shard != 0) GTEST_SKIP() << "LONGCTX_VALIDATION_SEED is replayed in shard 0";
  const std::uint64_t seed = env_or("LONGCTX_VALIDATION_SEED", fresh_seed());
  const int points = static_cast<int>(env_or("LONGCTX_VALIDATION_POINTS", 5));
  const int only = static_cast<int>(env_or("LONGCTX_VALIDATION_POINT", std::uint64_t(-1)));
  const bool qk_norm_bf16 = env_or("LONGCTX_VALIDATION_QK_NORM_BF16", 0) != 0;
  const bool keep_plans = env_or("LONGCTX_VALIDATION_KEEP", 0) != 0;
  std::printf("validation grid, shard %d of %d: seed %llu, %d points, bound %.1f%%\n"
              "  replay: LONGCTX_VALIDATION_SEED=%llu ctest -R 'RandomGrid.*shard_0'\n",
              shard, kShards, static_cast<unsigned long long>(seed), points, 100 * kBound,
              static_cast<unsigned long long>(seed));
  std::printf("%-3s %12s %12s %9s  %-36s %s\n", "#", "predicted", "measured", "error", "worst figure", "configuration");
  Draw draw(seed);
  const auto t0 = std::chrono::steady_clock::now();
  Worst worst;
  for (int i = 0; i < points; ++i) {
    Plan plan = random_plan(draw, i);  // drawn even when skipped: point i is the same either way
    if (qk_norm_bf16) {
      plan.model.qk_norm = true;
      plan.model.model_type = "qwen3";
      plan.train.dtype = plan.train.grad_dtype = DType::BF16;
    }
    if (only < 0 || i == only) hold_point(plan, seed, i, keep_plans, worst);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("worst error %+.3f%% (%s); of the figures held to %.0f%%: %+.3f%%; %.1f s\n", 100 * worst.any,
              worst.at.c_str(), 100 * kBound, 100 * worst.held, seconds);
}

INSTANTIATE_TEST_SUITE_P(ValidationGrid, RandomGrid, ::testing::Range(0, kShards),
                         [](const auto& info) { return fmt::format("shard_{}", info.param); });

// Points a run once drew outside the bound, replayed on every run after their fix, so that
// what a fresh draw found stays found.
TEST(ValidationGrid, PointsOnceDrawnOutsideTheBoundStayWithinIt) {
  torch::set_num_threads(1);
  struct Found {
    std::uint64_t seed;
    int point;
    const char* mechanism;
  };
  const Found found[] = {
      // One checkpointed layer, ZeRO-2 over Ulysses 2, a model small enough that the
      // gradient's reduce-scatter is the peak: the layer's incoming gradient was counted live
      // there (+1.9%), where the runtime drops it when the layer's backward returns.
      {3004918768197124231ULL, 0, "a recomputed layer's output gradient dies before its reduce-scatter"},
  };
  for (const Found& f : found) {
    SCOPED_TRACE(f.mechanism);
    Draw draw(f.seed);
    Plan plan;
    for (int i = 0; i <= f.point; ++i) plan = random_plan(draw, i);
    Worst worst;
    hold_point(plan, f.seed, f.point, false, worst);
  }
}

// A fixed plan of the CPU virtual device with `world` ranks (the rest set by `set`), written
// as `longctx plan` writes it, run as `longctx run` runs it, every rank held to the planner
// within 1% on every phase. The plan file is kept in /tmp (`name`) when it fails.
template <class Set>
void hold_fixed_point(const char* model, std::int64_t world, const std::string& name, Set&& set) {
  Plan plan;
  plan.model = load_model(model).value();
  plan.cluster.shape = {1, world};
  plan.cluster.hardware = load_hardware("cpu").value();
  plan.cluster.device_budget_bytes = 1LL << 30;
  plan.cluster.host_budget_bytes_per_node = 4LL << 30;
  plan.train.dtype = plan.train.grad_dtype = DType::FP32;
  set(plan);
  const std::string config = describe(plan);
  ASSERT_TRUE(validate(plan.model, plan.cluster.shape, plan.train, plan.parallel).ok()) << config;
  const Evaluation e = evaluate(plan);
  const std::string file = fmt::format("/tmp/longctx-validation-{}.plan.json", name);
  ASSERT_TRUE(write_plan_file(plan, file).ok());
  const auto ranks = world == 1 ? run_in_process(plan) : run_ranks(file, world);
  const Comparison c = compare(e, ranks, known_gap(plan));
  std::printf("%12lld %12lld %+8.3f%%  %-36s %s\n", static_cast<long long>(e.sim.peak_device_bytes),
              static_cast<long long>(ranks[0].total.device), 100 * error_of(e.sim.peak_device_bytes, ranks[0].total.device),
              fmt::format("{} {:+.3f}%", c.worst_at, 100 * c.worst).c_str(), config.c_str());
  std::string all;
  for (const auto& f : c.failures) all += "\n  " + f;
  EXPECT_TRUE(c.failures.empty()) << config << ", outside " << 100 * kBound << "%:" << all << "\n  plan kept: " << file;
  if (c.failures.empty()) std::remove(file.c_str());
}

// Fixed points beside the random ones: uneven tiles (3 MLP tiles and 5 loss tiles of 7168
// tokens: 2390 and 1434 rows, the last ones shorter) and a length the Ulysses degree does not
// divide (padded), on tiny-gqa.
TEST(ValidationGrid, UnevenTilesAndPaddedLengthsArePredictedWithinOnePercent) {
  torch::set_num_threads(1);
  struct Point { std::int64_t world, ulysses, seq; };
  for (const Point& pt : {Point{1, 1, 7168}, Point{2, 2, 7167}}) {
    hold_fixed_point("tiny-gqa", pt.world, fmt::format("uneven-{}-{}", pt.world, pt.seq), [&](Plan& plan) {
      plan.train.seq = pt.seq;
      plan.parallel.ulysses = static_cast<int>(pt.ulysses);
      plan.parallel.mlp_tiles = 3;
      plan.parallel.loss_tiles = 5;
    });
  }
}

// Kv heads replicated across the Ulysses ranks (one kv head, two ranks), with two samples:
// each layer's backward peaks at the all-to-all of dq, dk, dv, whose received dk and dv are
// summed straight into the outputs (a drawn point that found the planner counting them twice).
TEST(ValidationGrid, KvHeadsReplicatedAcrossUlyssesRanksArePredictedWithinOnePercent) {
  torch::set_num_threads(1);
  hold_fixed_point("tiny-gqa", 2, "kv-replicated-2-153", [](Plan& plan) {
    ModelConfig& m = plan.model;
    m.name = "kv-replicated";
    m.hidden = 40, m.intermediate = 114, m.layers = 2, m.heads = 2, m.kv_heads = 1, m.head_dim = 24, m.vocab = 414;
    m.tie_embeddings = true;
    plan.train.seq = 153;
    plan.train.micro_batch = 2;
    plan.parallel.ulysses = 2;
    plan.parallel.checkpoint = CheckpointPolicy::full();
    plan.parallel.mlp_tiles = 7;
  });
}

// Ring attention's layouts (`longctx plan --ring R --ulysses U`, `longctx run --nproc`): ring
// 2 and 3 alone, and the hybrid Ulysses 2 x ring 2 on 4 ranks, with and without head chunks
// inside the ring's steps; lengths 2*r*u does not divide (padded), GQA with odd head_dim,
// checkpointing, two samples and bf16; both k/v exchanges (p2p hops, all-gather). A test a
// point, so that ctest runs them side by side.
struct RingPoint {
  const char* model;
  int ring, ulysses;
  std::int64_t seq;
  DType dtype;
  bool checkpoint;
  int head_chunk;
  RingExchange exchange = RingExchange::P2p;
};
void PrintTo(const RingPoint& pt, std::ostream* os) {
  *os << pt.model << " ring " << pt.ring << " ulysses " << pt.ulysses << " seq " << pt.seq;
}

class RingAndHybridLayout : public ::testing::TestWithParam<RingPoint> {};

TEST_P(RingAndHybridLayout, IsPredictedWithinOnePercent) {
  torch::set_num_threads(1);
  const RingPoint& pt = GetParam();
  const std::int64_t world = std::int64_t{pt.ring} * pt.ulysses;
  hold_fixed_point(pt.model, world,
                   fmt::format("ring-{}-{}-{}-{}-{}", pt.ring, pt.ulysses, pt.seq, pt.head_chunk, to_string(pt.exchange)),
                   [&](Plan& plan) {
    plan.train.seq = pt.seq;
    plan.train.micro_batch = 2;
    plan.train.dtype = plan.train.grad_dtype = pt.dtype;
    plan.parallel.ring = pt.ring;
    plan.parallel.ulysses = pt.ulysses;
    plan.parallel.ring_exchange = pt.exchange;
    if (pt.checkpoint) plan.parallel.checkpoint = CheckpointPolicy::full();
    plan.parallel.head_chunk = pt.head_chunk;
  });
}

INSTANTIATE_TEST_SUITE_P(
    ValidationGrid, RingAndHybridLayout,
    ::testing::Values(RingPoint{"tiny-odd", 2, 1, 3001, DType::FP32, false, 0},
                      RingPoint{"tiny-gqa", 3, 1, 2999, DType::BF16, true, 0},
                      RingPoint{"tiny-odd", 2, 2, 3001, DType::FP32, true, 0},
                      RingPoint{"tiny-odd", 2, 2, 2999, DType::BF16, false, 1},
                      RingPoint{"tiny-gqa", 3, 1, 3001, DType::FP32, true, 0, RingExchange::AllGather},
                      RingPoint{"tiny-odd", 2, 2, 2999, DType::BF16, false, 1, RingExchange::AllGather}),
    [](const auto& info) {
      const RingPoint& pt = info.param;
      return fmt::format("{}_ring{}_ulysses{}_{}{}", std::string(pt.model).substr(5), pt.ring, pt.ulysses, pt.seq,
                         pt.exchange == RingExchange::AllGather ? "_allgather" : "");
    });

}  // namespace
}  // namespace longctx::validation
