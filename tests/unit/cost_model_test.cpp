// The cost model with measured rates (`longctx calibrate`): each op at the rate its kind
// reached, so changing one measured rate moves exactly the ops of that kind; and a preset
// carrying measured rates survives its JSON.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "planner/graph/cost_model.h"
#include "planner/search/memory_model.h"
#include "test_plans.h"

namespace longctx {
namespace {

MeasuredRates rates() {
  MeasuredRates m;
  m.present = true;
  m.matmul_fp32_flops = 1e10, m.matmul_bf16_flops = 2e10;
  m.attention_forward.points = {{8, 1e9}, {16, 5e9}, {64, 2e10}};
  m.attention_backward.points = {{8, 1e9}, {16, 4e9}, {64, 2e10}};
  m.memory_bytes_per_s = 1e10, m.op_overhead_s = 1e-6, m.copy_bytes_per_s = 5e9;
  m.collective_bytes_per_s = 1e9, m.collective_latency_s = 1e-4;
  return m;
}

StepTime time_of(Plan p) {
  const Evaluation e = evaluate(p);
  return estimate_step_time(p, e.graph);
}

TEST(MeasuredCostModel, EachRateMovesOnlyItsOps) {
  Plan p = testing::cpu_plan("tiny-gqa", 1, 2048);
  p.cluster.hardware.measured = rates();
  const StepTime base = time_of(p);
  ASSERT_GT(base.total_s, 0);

  // Attention's rates: halving both makes the step slower by exactly the attention time.
  Plan slow_attention = p;
  for (auto* t : {&slow_attention.cluster.hardware.measured.attention_forward,
                  &slow_attention.cluster.hardware.measured.attention_backward})
    for (auto& point : t->points) point.second /= 2;
  const Evaluation e = evaluate(p);
  double attention_s = 0;
  for (const auto& op : e.graph.ops())
    if (op.kind == OpKind::Attention)
      attention_s += op.kernel_flops / (op.phase == Phase::Backward && !op.name.recompute ? 4e9 : 5e9);  // head_dim 16
  ASSERT_GT(attention_s, 0);
  // On the CPU the kernel's whole blocks are what takes time (footprint::attention_kernel_flops).
  for (const auto& op : e.graph.ops())
    if (op.kind == OpKind::Attention) EXPECT_GT(op.kernel_flops, op.flops) << format(op.name);
  // An attention op is flop-bound at these rates, so its time doubles.
  EXPECT_NEAR(time_of(slow_attention).total_s - base.total_s, attention_s, 1e-9 * base.total_s + 1e-12);

  // The bf16 matmul rate does not touch an fp32 plan.
  Plan bf16_rate = p;
  bf16_rate.cluster.hardware.measured.matmul_bf16_flops *= 10;
  EXPECT_DOUBLE_EQ(time_of(bf16_rate).total_s, base.total_s);

  // Every op pays the overhead once a launch.
  Plan overhead = p;
  overhead.cluster.hardware.measured.op_overhead_s += 1e-3;
  double launches = 0;
  for (const auto& op : e.graph.ops()) launches += op.launches;
  EXPECT_NEAR(time_of(overhead).total_s - base.total_s, launches * 1e-3, 1e-9 * launches);
}

// An offloaded optimizer runs on the host: its time follows the host's measured rate (and
// nothing else does), over the eight passes of the runtime's AdamW.
TEST(MeasuredCostModel, TranscendentalsBindAtTheMeasuredRateAndOnlyWhereEvaluated) {
  Plan p = testing::cpu_plan("tiny-gqa", 1, 2048);
  p.cluster.hardware.measured = rates();
  const Evaluation e = evaluate(p);
  const std::int64_t n = 2048, I = p.model.intermediate, V = p.model.vocab;
  double evaluations = 0;
  for (const auto& op : e.graph.ops()) {
    evaluations += op.transcendentals;
    // SwiGLU: one SiLU an element forward, silu, sigmoid and silu backward; the log-softmax one
    // exp an element each way (runtime/src/mlp.cpp, runtime/src/loss.cpp).
    const std::string name = format(op.name);
    if (name.ends_with("mlp.swiglu")) EXPECT_EQ(op.transcendentals, double(n * I)) << name;
    if (name.ends_with("mlp.swiglu.bwd")) EXPECT_EQ(op.transcendentals, 3.0 * double(n * I)) << name;
    if (name.starts_with("loss.log_softmax")) EXPECT_EQ(op.transcendentals, double(n * V)) << name;
    if (op.kind == OpKind::Attention || name.ends_with("residual")) EXPECT_EQ(op.transcendentals, 0) << name;
  }
  ASSERT_GT(evaluations, 0);
  // Absent from the preset: nothing changes. Slow enough to bind every op that has them: the
  // step grows by their evaluations' time less the time those ops took before, which is at
  // most what the rate adds.
  const double base = time_of(p).total_s;
  Plan slow = p;
  slow.cluster.hardware.measured.transcendental_elems_per_s = 1e3;
  const double added = time_of(slow).total_s - base;
  EXPECT_GT(added, 0.99 * evaluations / 1e3 - base);
  EXPECT_LE(added, evaluations / 1e3 * (1 + 1e-12));
}

// The runtime waits for every collective it issues except zero3's prefetched layer gathers:
// those exchanges add their whole time to the step, and each collective call pays the
// measured latency once (one all-reduce per parameter tensor, runtime/src/runner.cpp,
// sum_gradients).
TEST(MeasuredCostModel, ExchangesTheRankWaitsForAreExposedAndEachCallPaysTheLatency) {
  for (const Sharding sharding : {Sharding::None, Sharding::Zero2, Sharding::Zero3}) {
    Plan p = testing::cpu_plan("tiny-gqa", 2, 2048);
    p.parallel.sharding = sharding;
    p.cluster.hardware.measured = rates();
    p.cluster.hardware.measured.ranks = 2;
    const Evaluation e = evaluate(p);
    double waited_s = 0;
    int calls = 0, prefetched = 0, all_reduces = 0;
    for (const auto& op : e.graph.ops()) {
      if (op.comm == CommKind::None) continue;
      calls += op.launches;
      if (op.comm_async) {
        ++prefetched;
        EXPECT_EQ(op.comm, CommKind::AllGather) << format(op.name);
        EXPECT_NE(op.layer, op.name.scope) << format(op.name) << ": prefetched among its own layer's ops";
      } else {
        waited_s += op.comm_bytes / p.cluster.hardware.measured.collective_bytes_per_s;
      }
      if (op.comm == CommKind::AllReduce) all_reduces += op.launches;
    }
    ASSERT_GT(waited_s, 0);
    // tiny-gqa: two layers of nine tensors (two norms, four attention and three MLP
    // projections), the embedding, the final norm and the output projection; and the loss.
    EXPECT_EQ(all_reduces, (sharding == Sharding::None ? 2 * 9 + 3 : 0) + 1);
    // zero3 prefetches the second layer in forward and the first in backward.
    EXPECT_EQ(prefetched, sharding == Sharding::Zero3 ? 2 : 0);
    const double base = time_of(p).total_s;
    Plan slow = p;
    slow.cluster.hardware.measured.collective_bytes_per_s /= 2;
    if (sharding != Sharding::Zero3)
      EXPECT_NEAR(time_of(slow).total_s - base, waited_s, 1e-9 * base);
    else  // the prefetched gathers still hide behind their layers at half the rate
      EXPECT_NEAR(time_of(slow).total_s - base, waited_s, 0.01 * waited_s);
    Plan latency = p;
    latency.cluster.hardware.measured.collective_latency_s += 1e-3;
    if (sharding != Sharding::Zero3) EXPECT_NEAR(time_of(latency).total_s - base, calls * 1e-3, 1e-9 * calls);

    // With the gradients' all-reduces measured (all_reduce_bytes_per_s), every all-reduce
    // moves its bytes at that rate and nothing else does.
    double all_reduce_bytes = 0;
    for (const auto& op : e.graph.ops())
      if (op.comm == CommKind::AllReduce) all_reduce_bytes += op.comm_bytes;
    Plan measured = p;
    measured.cluster.hardware.measured.all_reduce_bytes_per_s = 1e8;
    const double expected = all_reduce_bytes / 1e8 - all_reduce_bytes / p.cluster.hardware.measured.collective_bytes_per_s;
    EXPECT_NEAR(time_of(measured).total_s - base, expected, 1e-9 * base) << to_string(sharding);
  }
}

// rank_lag: where the ranks meet at exchanges they wait for, each segment's compute is
// followed by the wait for the slowest rank, that fraction of it, counted as exposed exchange
// time; one rank, or a preset that did not measure it, waits for no one.
TEST(MeasuredCostModel, RanksWaitForTheSlowestAtEachSynchronousExchange) {
  for (const std::int64_t ranks : {1, 2}) {
    Plan p = testing::cpu_plan("tiny-gqa", ranks, 2048);
    p.parallel.ulysses = static_cast<int>(ranks);
    p.cluster.hardware.measured = rates();
    p.cluster.hardware.measured.ranks = static_cast<int>(ranks);
    const StepTime base = time_of(p);
    Plan lagged = p;
    lagged.cluster.hardware.measured.rank_lag = 0.1;
    const StepTime t = time_of(lagged);
    EXPECT_EQ(t.compute_s, base.compute_s) << "the ops' own work is unchanged";
    const double wait = ranks > 1 ? 0.1 * base.compute_s : 0.0;
    EXPECT_NEAR(t.exposed_comm_s - base.exposed_comm_s, wait, 1e-9 * base.total_s) << ranks << " ranks";
    EXPECT_NEAR(t.total_s - base.total_s, wait, 1e-9 * base.total_s) << ranks << " ranks";
    // The phases carry the waits they end in: still summing to the step.
    double sum = 0;
    for (const auto& [name, seconds] : phase_step_times(lagged, evaluate(lagged).graph)) sum += seconds;
    EXPECT_NEAR(sum, t.total_s, 1e-9 * t.total_s);
  }
}

TEST(MeasuredCostModel, PhaseTimesAddUpToTheStepUnderTheRuntimesPhaseNames) {
  for (const bool measured : {true, false}) {
    for (Plan p : {testing::cpu_plan("tiny-gqa", 1, 2048), testing::cpu_plan("tiny-odd", 2, 1536)}) {
      if (measured) p.cluster.hardware.measured = rates();
      p.parallel.offload_optimizer = true;
      const Evaluation e = evaluate(p);
      const auto phases = phase_step_times(p, e.graph);
      double sum = 0;
      for (const auto& [name, seconds] : phases) {
        EXPECT_GE(seconds, 0) << name;
        sum += seconds;
      }
      EXPECT_NEAR(sum, estimate_step_time(p, e.graph).total_s, 1e-9 * sum);
      // The same names `run` measures: a layer's forward and backward, the loss, the optimizer.
      for (const char* name : {"forward.embed", "forward.layer.0", "loss", "backward.loss", "backward.layer.0",
                               "backward.embed", "optimizer"})
        EXPECT_TRUE(phases.count(name)) << name;
      EXPECT_EQ(phases.count("forward.layer." + std::to_string(p.model.layers)), 0u);
      EXPECT_GT(phases.at("optimizer"), 0);  // the host optimizer's update is in it
    }
  }
}

TEST(MeasuredCostModel, AnOffloadedOptimizerIsTimedAtTheHostsRate) {
  Plan p = testing::cpu_plan("tiny-gqa", 1, 2048);
  p.parallel.offload_optimizer = true;
  p.cluster.hardware.measured = rates();
  p.cluster.hardware.measured.host_memory_bytes_per_s = 1e9;
  const StepTime base = time_of(p);
  Plan faster = p;
  faster.cluster.hardware.measured.host_memory_bytes_per_s = 2e9;
  const StepTime fast = time_of(faster);
  EXPECT_EQ(fast.compute_s, base.compute_s);
  EXPECT_GT(base.host_optimizer_s, 0);
  const double params = double(p.model.total_params());
  // Half the time of the passes (80 bytes an element at 1 GB/s), the launches' overhead unchanged.
  EXPECT_NEAR(base.host_optimizer_s - fast.host_optimizer_s, params * 80 / 2e9, params * 80 / 2e9 * 1e-6);
}

TEST(MeasuredCostModel, AttentionRatesInterpolateInLogHeadDim) {
  const MeasuredRates m = rates();
  EXPECT_DOUBLE_EQ(m.attention_forward.at(16), 5e9);
  EXPECT_DOUBLE_EQ(m.attention_forward.at(4), 1e9) << "below the table: its first rate";
  EXPECT_DOUBLE_EQ(m.attention_forward.at(256), 2e10) << "above: its last";
  EXPECT_NEAR(m.attention_forward.at(32), std::sqrt(5e9 * 2e10), 1) << "halfway in log d: the geometric mean";
}

TEST(MeasuredCostModel, WithoutMeasuredRatesTheDatasheetModelAnswers) {
  Plan p = testing::cpu_plan("tiny-gqa", 1, 2048);
  const StepTime datasheet = time_of(p);
  p.cluster.hardware.measured = rates();
  EXPECT_NE(time_of(p).total_s, datasheet.total_s);
}

TEST(MeasuredCostModel, APresetWithMeasuredRatesSurvivesItsJson) {
  Hardware h = load_hardware("cpu").value();
  h.measured = rates();
  h.measured.ranks = 2;
  const auto j = hardware_to_json(h);
  auto back = hardware_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().what();
  EXPECT_TRUE(back->measured.present);
  for (const auto& [key, field] : measured_rate_fields()) EXPECT_EQ(back->measured.*field, h.measured.*field) << key;
  EXPECT_EQ(back->measured.attention_forward.points, h.measured.attention_forward.points);
  EXPECT_EQ(back->measured.attention_backward.points, h.measured.attention_backward.points);
  EXPECT_EQ(back->measured.ranks, 2);
  EXPECT_EQ(back->measured.host_rate(), h.measured.memory_bytes_per_s)
      << "a preset without the host's rate takes the device's (the CPU virtual device's host)";
  EXPECT_EQ(back->measured.transcendental_elems_per_s, 0) << "absent: not used";
  for (const auto& [key, field, below, limit] : optional_measured_rate_fields()) {
    auto with = j;
    const double value = std::string(key) == "rank_lag" ? 0.07 : 7e9;  // a fraction, not a rate
    with["measured"][key] = value;
    EXPECT_EQ(hardware_from_json(with)->measured.*field, value) << key;
    EXPECT_EQ(hardware_to_json(*hardware_from_json(with))["measured"][key], value) << key;
    with["measured"][key] = -1;
    ASSERT_FALSE(hardware_from_json(with).ok()) << key;
    EXPECT_NE(hardware_from_json(with).error().field.find(key), std::string::npos) << key;
  }

  // A figure at its ceiling is refused, naming the field (a slowest rank ten times the
  // average's pace: rank_lag's); one just under it is taken.
  int bounded = 0;
  for (const auto& [key, field, below, limit] : optional_measured_rate_fields()) {
    if (!std::isfinite(below)) continue;
    ++bounded;
    auto at = j;
    at["measured"][key] = below;
    ASSERT_FALSE(hardware_from_json(at).ok()) << key;
    EXPECT_EQ(hardware_from_json(at).error().field, std::string("cluster.hardware.measured.") + key);
    EXPECT_NE(hardware_from_json(at).error().what().find(limit), std::string::npos) << key;
    at["measured"][key] = below * 0.99;
    EXPECT_TRUE(hardware_from_json(at).ok()) << key;
  }
  EXPECT_EQ(bounded, 1) << "rank_lag has its ceiling";

  // A rate that is not positive is refused naming it.
  auto bad = j;
  bad["measured"]["op_overhead_s"] = 0;
  auto r = hardware_from_json(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "cluster.hardware.measured.op_overhead_s");
  // Nor one no machine measures: a launch of a second or more (1e300 s planned a step of
  // 1e300 s), a rate past 1e18 a second.
  for (const auto& [key, value] : {std::pair{"op_overhead_s", 1e300}, std::pair{"collective_latency_s", 1.0},
                                   std::pair{"memory_bytes_per_s", 1e19}}) {
    auto absurd = j;
    absurd["measured"][key] = value;
    r = hardware_from_json(absurd);
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_EQ(r.error().field, std::string("cluster.hardware.measured.") + key);
    EXPECT_NE(r.error().message.find("no machine measures"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(std::string(key).ends_with("per_s") ? "per second" : " s: "), std::string::npos)
        << r.error().message;
  }
  // Nor a rate under 1e6 a second, the bound every rate of a hardware file keeps (1e-300 made a
  // step take "nan s" and wrote step_time_s: null), in the rates, the optional rates and the
  // attention tables alike.
  for (const auto& [key, value] : {std::pair{"matmul_fp32_flops", 1e-300}, std::pair{"copy_bytes_per_s", 5e5},
                                   std::pair{"transcendental_elems_per_s", 1e-300}, std::pair{"all_reduce_bytes_per_s", 1e19}}) {
    auto slow = j;
    slow["measured"][key] = value;
    r = hardware_from_json(slow);
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_EQ(r.error().field, std::string("cluster.hardware.measured.") + key);
    EXPECT_NE(r.error().message.find("outside longctx's bounds of 1e6 to 1e18"), std::string::npos) << r.error().message;
  }
  auto slow_attention = j;
  slow_attention["measured"]["attention_forward_flops"]["16"] = 1e-300;
  r = hardware_from_json(slow_attention);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "cluster.hardware.measured.attention_forward_flops.16");
  // A key calibrate never writes (a misspelt rank_lag) is refused, naming it.
  auto misspelt = j;
  misspelt["measured"]["rank_lagg"] = 0.1;
  r = hardware_from_json(misspelt);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "cluster.hardware.measured.rank_lagg");
}

}  // namespace
}  // namespace longctx
