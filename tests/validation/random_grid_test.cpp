// The randomized validation grid: random model shapes x random technique combinations x 1
// to 3 ranks, each planned by the current planner, run for two steps on the CPU virtual
// device, and held within 1% of the prediction on the device peak, the host peak, and every
// phase's device and host peak, on every rank; known_gap() names the configurations where
// they are not yet, and what they are held to there.
//
// The seed: LONGCTX_VALIDATION_SEED if set, else the UTC date as YYYYMMDD, so each day
// samples shapes no one has checked before. LONGCTX_VALIDATION_POINTS changes how many
// points (default 40); LONGCTX_VALIDATION_POINT=i runs only point i of the seed's sample.
// The seed and each point's whole configuration are printed: a failure is reproduced with
// the same seed and point, and the plan of a failing point is kept in /tmp for
// `longctx run --plan FILE --allocation-log LOG`. LONGCTX_VALIDATION_QK_NORM_BF16=1 turns
// every point into a bf16 model with q/k norm, its other draws unchanged (the q/k norm's
// buffers are bf16-only and 12% of the points otherwise).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include "longctx/planner/memory_model.h"
#include "longctx/planner/phase_peaks.h"
#include "longctx/runtime/runner.h"
#include "random_point.h"

#ifndef LONGCTX_BINARY
#error "LONGCTX_BINARY: the longctx CLI, which launches ranks (tests/CMakeLists.txt)"
#endif

namespace longctx::validation {
namespace {

constexpr double kBound = 0.01;
// Where the runtime and the planner are known to differ by more than kBound, and why
// (docs/validation.md, "The validation label"). There the phases are only printed and the
// peaks held to `peak_bound` (0: only printed), so that drift elsewhere still fails.
struct KnownGap {
  std::string reason;       // empty: every figure is held to kBound
  bool peaks = false;       // the peaks differ too
  double peak_bound = 0.10;
};
KnownGap known_gap(const Plan& p) {
  const bool across_ranks = p.cluster.shape.world() > 1;
  // The peak bounds are the largest differences seen over seeds 1 to 11 and 20261124-26,
  // rounded up (docs/validation.md lists them): a gap that grows past them fails.
  if (across_ranks && p.parallel.sharding == Sharding::Zero3)
    return {"zero3 across ranks: the embedding's gathered parameters and gradient in backward.embed, and the layers' "
            "gathers",
            true, 0.15};
  if (across_ranks && p.parallel.sharding == Sharding::Zero2)
    return {"zero2 across ranks: activation gradients the planner holds through a reduce-scatter that is the peak",
            true, 0.05};
  if (p.parallel.offload_params)
    return {"parameter offload on one rank: the copies of a streamed layer in backward", true, 0.15};
  // With the optimizer offloaded, zero1 takes its slice of each group in backward instead.
  if (across_ranks && p.parallel.sharding == Sharding::Zero1 && !p.parallel.offload_optimizer)
    return {"zero1's optimizer phase: the all-reduced gradients and the shard's copy (the peak where that phase tops "
            "the step)",
            true, 0.10};
  return {};
}

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

std::uint64_t todays_seed() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  return static_cast<std::uint64_t>((utc.tm_year + 1900) * 10000 + (utc.tm_mon + 1) * 100 + utc.tm_mday);
}

// What one rank measured: the peaks of the whole run and each phase of its last step.
struct Peaks {
  std::int64_t device = 0, host = 0;
};
struct RankMeasure {
  Peaks total;
  std::map<std::string, Peaks> phases;
};

std::vector<RankMeasure> run_in_process(const Plan& plan) {
  runtime::RunOptions o;
  o.steps = 2;
  o.threads = 1;
  auto r = runtime::run_plan(plan, o);
  if (!r) throw std::runtime_error(r.error().what());
  RankMeasure m{{r->peak_device, r->peak_host}, {}};
  for (const auto& ph : r->steps.back().phases) m.phases[ph.name] = {ph.peak_device, ph.peak_host};
  return {m};
}

// Several ranks: `longctx run --nproc N`, one process per rank (the meter counts a process).
std::vector<RankMeasure> run_ranks(const std::string& plan_file, std::int64_t world) {
  const std::string cmd = fmt::format("{} run --plan {} --nproc {} --steps 2 --threads 1 --json 2>{}.stderr",
                                      LONGCTX_BINARY, plan_file, world, plan_file);
  std::string out;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = ::pclose(p);
  if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0)
    throw std::runtime_error(fmt::format("`{}` failed ({}); see {}.stderr", cmd, rc, plan_file));
  const auto j = nlohmann::json::parse(out);
  std::vector<RankMeasure> ranks;
  for (const auto& r : j.at("ranks")) {
    const auto& m = r.at("measured");
    RankMeasure rm{{m.at("peak_device_bytes").get<std::int64_t>(), m.at("peak_host_bytes").get<std::int64_t>()}, {}};
    for (const auto& ph : m.at("phases"))
      rm.phases[ph.at("name").get<std::string>()] = {ph.at("peak_device_bytes").get<std::int64_t>(),
                                                     ph.at("peak_host_bytes").get<std::int64_t>()};
    ranks.push_back(std::move(rm));
  }
  return ranks;
}

// (predicted - measured) / measured: negative where the planner under-predicts.
double error_of(std::int64_t predicted, std::int64_t measured) {
  if (measured == 0) return predicted == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return double(predicted - measured) / double(measured);
}

// The comparisons of one point: every figure of every rank, the worst kept for the table.
struct Comparison {
  std::vector<std::string> failures;
  double worst = 0, worst_held = 0;  // worst_held: over the figures held to kBound
  std::string worst_at;
  // gap: why the figure is not held to kBound (empty: it is); `bound` what it is held to then
  // (0: only printed).
  void hold(const std::string& what, std::int64_t predicted, std::int64_t measured, const std::string& gap = "",
            double bound = kBound) {
    const double e = error_of(predicted, measured);
    if (std::abs(e) > std::abs(worst) || worst_at.empty()) worst = e, worst_at = what;
    if (gap.empty() && std::abs(e) > std::abs(worst_held)) worst_held = e;
    if (bound > 0 && !(std::abs(e) <= bound))
      failures.push_back(fmt::format("{}: predicted {} measured {} ({:+.3f}%, bound {:.0f}%{})", what, predicted, measured,
                                     100 * e, 100 * bound, gap.empty() ? "" : "; known gap: " + gap));
  }
};

Comparison compare(const Evaluation& e, const std::vector<RankMeasure>& ranks, const KnownGap& gap) {
  Comparison c;
  const auto phases = phase_peaks(e);
  const std::string peaks_gap = gap.peaks ? gap.reason : "", phases_gap = gap.reason;
  const double peak_bound = gap.peaks ? gap.peak_bound : kBound, phase_bound = gap.reason.empty() ? kBound : 0;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const auto& m = ranks[r];
    const std::string rank = ranks.size() > 1 ? fmt::format("rank {} ", r) : "";
    c.hold(rank + "device peak", e.sim.peak_device_bytes, m.total.device, peaks_gap, peak_bound);
    c.hold(rank + "host peak", e.sim.peak_host_bytes_per_rank, m.total.host, peaks_gap, peak_bound);
    for (const auto& [name, predicted] : phases) {
      const auto it = m.phases.find(name);
      if (it == m.phases.end()) {
        c.failures.push_back(fmt::format("{}{}: predicted, never measured", rank, name));
        continue;
      }
      c.hold(rank + name + " device", predicted.device_bytes, it->second.device, phases_gap, phase_bound);
      c.hold(rank + name + " host", predicted.host_bytes, it->second.host, phases_gap, phase_bound);
    }
  }
  return c;
}

TEST(ValidationGrid, RandomShapesAndTechniquesArePredictedWithinOnePercent) {
  torch::set_num_threads(1);
  const std::uint64_t seed = env_or("LONGCTX_VALIDATION_SEED", todays_seed());
  const int points = static_cast<int>(env_or("LONGCTX_VALIDATION_POINTS", 40));
  const int only = static_cast<int>(env_or("LONGCTX_VALIDATION_POINT", std::uint64_t(-1)));
  const bool qk_norm_bf16 = env_or("LONGCTX_VALIDATION_QK_NORM_BF16", 0) != 0;
  std::printf("validation grid: seed %llu (LONGCTX_VALIDATION_SEED), %d points, bound %.1f%%\n",
              static_cast<unsigned long long>(seed), points, 100 * kBound);
  std::printf("%-3s %12s %12s %9s  %-36s %s\n", "#", "predicted", "measured", "error", "worst figure", "configuration");
  Draw draw(seed);
  const auto t0 = std::chrono::steady_clock::now();
  double worst = 0, worst_held = 0;
  std::string worst_at;
  for (int i = 0; i < points; ++i) {
    Plan plan = random_plan(draw, i);  // drawn even when skipped: point i is the same either way
    if (qk_norm_bf16) {
      plan.model.qk_norm = true;
      plan.model.model_type = "qwen3";
      plan.train.dtype = plan.train.grad_dtype = DType::BF16;
    }
    if (only >= 0 && i != only) continue;
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
      continue;
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
    if (std::abs(c.worst) > std::abs(worst) || worst_at.empty()) worst = c.worst, worst_at = fmt::format("point {} {}", i, c.worst_at);
    if (std::abs(c.worst_held) > std::abs(worst_held)) worst_held = c.worst_held;
    if (!c.failures.empty()) {
      std::string all;
      for (const auto& f : c.failures) all += "\n  " + f;
      ADD_FAILURE() << "point " << i << " (" << config << "), outside " << 100 * kBound << "%:" << all
                    << "\n  plan kept: " << file;
    }
    if (c.failures.empty()) {
      std::remove(file.c_str());
      std::remove((file + ".stderr").c_str());
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("worst error %+.3f%% (%s); of the figures held to %.0f%%: %+.3f%%; %.1f s\n", 100 * worst,
              worst_at.c_str(), 100 * kBound, 100 * worst_held, seconds);
}

// Fixed points beside the random ones: uneven tiles (3 MLP tiles and 5 loss tiles of 7168
// tokens: 2390 and 1434 rows, the last ones shorter) and a length the Ulysses degree does not
// divide (padded), on tiny-gqa as `longctx plan` writes it and `longctx run` runs it.
TEST(ValidationGrid, UnevenTilesAndPaddedLengthsArePredictedWithinOnePercent) {
  torch::set_num_threads(1);
  struct Point { std::int64_t world, ulysses, seq; };
  for (const Point& pt : {Point{1, 1, 7168}, Point{2, 2, 7167}}) {
    Plan plan;
    plan.model = load_model("tiny-gqa").value();
    plan.cluster.shape = {1, pt.world};
    plan.cluster.hardware = load_hardware("cpu").value();
    plan.cluster.device_budget_bytes = 1LL << 30;
    plan.cluster.host_budget_bytes_per_node = 4LL << 30;
    plan.train.seq = pt.seq;
    plan.train.dtype = plan.train.grad_dtype = DType::FP32;
    plan.parallel.ulysses = static_cast<int>(pt.ulysses);
    plan.parallel.mlp_tiles = 3;
    plan.parallel.loss_tiles = 5;
    const std::string config = describe(plan);
    ASSERT_TRUE(validate(plan.model, plan.cluster.shape, plan.train, plan.parallel).ok()) << config;
    const Evaluation e = evaluate(plan);
    const std::string file = fmt::format("/tmp/longctx-validation-uneven-{}-{}.plan.json", pt.world, pt.seq);
    ASSERT_TRUE(write_plan_file(plan, file).ok());
    const auto ranks = pt.world == 1 ? run_in_process(plan) : run_ranks(file, pt.world);
    const Comparison c = compare(e, ranks, known_gap(plan));
    std::printf("%12lld %12lld %+8.3f%%  %-36s %s\n", static_cast<long long>(e.sim.peak_device_bytes),
                static_cast<long long>(ranks[0].total.device), 100 * error_of(e.sim.peak_device_bytes, ranks[0].total.device),
                fmt::format("{} {:+.3f}%", c.worst_at, 100 * c.worst).c_str(), config.c_str());
    std::string all;
    for (const auto& f : c.failures) all += "\n  " + f;
    EXPECT_TRUE(c.failures.empty()) << config << ", outside " << 100 * kBound << "%:" << all << "\n  plan kept: " << file;
    if (c.failures.empty()) std::remove(file.c_str());
  }
}

}  // namespace
}  // namespace longctx::validation
