// The reserved replay (reserved_replay.h) over step graphs small enough to work out by hand,
// and its place in every CUDA prediction: reserved never under allocated, nvidia-smi the
// reserved figure plus what lives outside the allocator, and the device binding on it.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "planner/search/memory_model.h"
#include "planner/graph/reserved_replay.h"
#include "planner/search/search.h"
#include "planner/graph/simulator.h"
#include "test_plans.h"

namespace longctx {
namespace {

constexpr std::int64_t MiB = 1024 * 1024;

Plan gpu_plan(std::int64_t gpus, const char* gpu) { return testing::gpu_plan("llama-3.1-8b", gpu, gpus, 64 * 1024); }

// Three ops; a 12 MiB tensor dies before a 14 MiB one is asked for, which does not fit in its
// segment: the cache holds 12 MiB nobody uses at the peak.
//   op0 makes a (12 MiB), read by op1
//   op1 makes b (20 MiB), read by op2
//   op2 makes c (14 MiB), read by op2 itself (a scratch output)
StepGraph fragmenting_step() {
  StepGraph g;
  const int a = g.add_tensor({{Name::kNone, "a"}, 12 * MiB, Category::Activations});
  const int b = g.add_tensor({{Name::kNone, "b"}, 20 * MiB, Category::Activations});
  const int c = g.add_tensor({{Name::kNone, "c"}, 14 * MiB, Category::Activations});
  OpSpec op0{{Name::kNone, "op0"}};
  op0.outputs = {a};
  g.add_op(op0);
  OpSpec op1{{Name::kNone, "op1"}};
  op1.inputs = {a};
  op1.outputs = {b};
  g.add_op(op1);
  OpSpec op2{{Name::kNone, "op2"}};
  op2.inputs = {b, c};
  op2.outputs = {c};
  g.add_op(op2);
  g.finalize();
  return g;
}

TEST(ReservedReplay, CachedSegmentsThatFitNothingAreFragmentation) {
  const StepGraph g = fragmenting_step();
  // Step 1: a takes a 12 MiB segment; b a new 20 MiB one (32); a is freed after op1; c
  // (14 MiB) fits neither free block: a third segment, 46 MiB reserved while 20 + 14 = 34
  // are allocated. Step 2 reuses the three segments (a 12, b 20, c 14): nothing more.
  const ReservedReplay r = replay_reserved(g, {});
  EXPECT_EQ(r.peak_reserved, 46 * MiB);
  EXPECT_EQ(r.allocated_at_peak, 34 * MiB);
  EXPECT_EQ(r.peak_op, 2);
  EXPECT_EQ(r.failed_requests, 0);
  // The simulation's allocated peak is the same 34 MiB: the replay adds only what is cached.
  EXPECT_EQ(simulate(g, Backend::Cuda).peak_device_bytes, 34 * MiB);
}

// What the replay notes op by op (the picture `explain` draws): the segments as each op asks
// for them in the first step, and the cache they leave through the second.
TEST(ReservedReplay, NotesReservedBytesAtEachOp) {
  std::vector<std::tuple<int, int, std::int64_t>> notes;
  const ReservedReplay r = replay_reserved(fragmenting_step(), {}, [&](const ReservedAtOp& at) {
    notes.emplace_back(at.op, at.step, at.reserved);
  });
  const std::vector<std::tuple<int, int, std::int64_t>> expected = {
      {0, 0, 12 * MiB}, {1, 0, 32 * MiB}, {2, 0, 46 * MiB}, {0, 1, 46 * MiB}, {1, 1, 46 * MiB}, {2, 1, 46 * MiB}};
  EXPECT_EQ(notes, expected);
  EXPECT_EQ(r.peak_reserved, 46 * MiB);
}

// Two 30 MiB requests one after the other: on one stream the second reuses the first's freed
// block; on two streams each keeps its own segment, and the device reserves both.
TEST(ReservedReplay, EachStreamKeepsItsOwnPool) {
  auto step = [](int second_stream) {
    StepGraph g;
    const int a = g.add_tensor({{Name::kNone, "a"}, 30 * MiB, Category::Transient});
    const int b = g.add_tensor({{Name::kNone, "b"}, 30 * MiB, Category::Transient});
    OpSpec op0{{Name::kNone, "op0"}};
    op0.outputs = {a};
    g.add_op(op0);
    OpSpec op1{{Name::kNone, "op1"}};
    op1.outputs = {b};
    op1.stream = second_stream;
    g.add_op(op1);
    g.finalize();
    return g;
  };
  const ReservedReplay one = replay_reserved(step(0), {});
  const ReservedReplay two = replay_reserved(step(1), {});
  EXPECT_EQ(one.peak_reserved, 30 * MiB);
  EXPECT_EQ(two.peak_reserved, 60 * MiB);
  EXPECT_EQ(two.allocated_at_peak, 30 * MiB);
}

TEST(ReservedReplay, ACapacityReleasesTheCacheInsteadOfFailing) {
  const StepGraph g = fragmenting_step();
  // 40 MiB: at op2, 32 + 14 > 40; the free 12 MiB segment is released and 20 + 14 fit.
  const ReservedReplay r = replay_reserved(g, {.expandable_segments = false, .capacity = 40 * MiB});
  EXPECT_EQ(r.failed_requests, 0);
  EXPECT_LE(r.peak_reserved, 40 * MiB);
  // 30 MiB: op1 needs 12 + 20 = 32 allocated, so no release can help.
  const ReservedReplay tight = replay_reserved(g, {.expandable_segments = false, .capacity = 30 * MiB});
  EXPECT_GT(tight.failed_requests, 0);
  EXPECT_EQ(tight.first_failed_op, 1);
}

TEST(ReservedReplay, ExpandableSegmentsMapPagesAndKeepThemUntilMemoryRunsShort) {
  const StepGraph g = fragmenting_step();
  // 20 MiB pages. a maps page 1 and leaves [12, 20) free; b (20) extends that free tail by
  // 12 MiB: page 2, b at [12, 32), [32, 40) free. a is freed ([0, 12): b is in use next to
  // it). c (14) fits neither free block (12, 8) and extends [32, 40) by 6 MiB: page 3. 60 MiB
  // mapped while 34 are allocated: without memory pressure nothing is unmapped, so
  // expandable segments can reserve more than segments do (46). Step 2 finds [0, 60) free.
  const ReservedReplay r = replay_reserved(g, {.expandable_segments = true});
  EXPECT_EQ(r.peak_reserved, 60 * MiB);
  EXPECT_EQ(r.allocated_at_peak, 34 * MiB);
  // Under 46 MiB of capacity page 3 does not fit (60 > 46), and no whole page is free to
  // unmap (a's 12 MiB and the 8 MiB tail are parts of pages in use): the request fails,
  // where segments fit in 40 by releasing a's (the previous test).
  const ReservedReplay tight = replay_reserved(g, {.expandable_segments = true, .capacity = 46 * MiB});
  EXPECT_GT(tight.failed_requests, 0);
}

TEST(ReservedReplay, EveryCudaPredictionCarriesReservedAndNvidiaSmiFigures) {
  for (const char* gpu : {"h100-80gb", "a100-80gb"}) {
    for (std::int64_t gpus : {1, 8}) {
      Plan p = gpu_plan(gpus, gpu);
      p.parallel.sharding = Sharding::Zero3;
      p.parallel.ulysses = gpus;
      const Prediction pr = predict(p);
      EXPECT_GE(pr.peak_reserved_bytes, pr.peak_device_bytes) << gpu << " " << gpus;
      EXPECT_EQ(pr.peak_nvidia_smi_bytes - pr.peak_reserved_bytes, plan_context_bytes(p)) << gpu << " " << gpus;
      std::int64_t sum = 0;
      for (const auto& [k, v] : pr.breakdown) sum += v;
      EXPECT_EQ(sum, pr.peak_nvidia_smi_bytes) << "the breakdown adds up to what nvidia-smi shows";
      EXPECT_EQ(pr.feasible, pr.peak_nvidia_smi_bytes <= p.cluster.device_budget_bytes &&
                                 pr.peak_host_bytes <= p.cluster.host_budget_bytes_per_node);
    }
  }
  // More ranks, more NCCL peers: the context grows with the world.
  const Plan one = gpu_plan(1, "h100-80gb"), eight = gpu_plan(8, "h100-80gb");
  EXPECT_LT(plan_context_bytes(one), plan_context_bytes(eight));
}

TEST(ReservedReplay, MaxContextBindsOnWhatNvidiaSmiShows) {
  Plan base = gpu_plan(2, "h100-80gb");
  base.model = load_model("llama-3.2-1b").value();
  base.train.seq = 0;
  const auto r = max_context(base, *parse_techniques("zero3,checkpoint,tiled-loss"), /*with_ladder=*/false);
  ASSERT_TRUE(r.ok()) << r.error().what();
  const Prediction& pr = r->plan.prediction;
  EXPECT_TRUE(pr.feasible);
  EXPECT_LE(pr.peak_nvidia_smi_bytes, base.cluster.device_budget_bytes);
  EXPECT_NE(r->binding.find("nvidia-smi"), std::string::npos) << r->binding;
  // The reserved figure is what is left of the budget once the context is counted: within a
  // few percent of it at the longest length (the length grows until it binds).
  EXPECT_GT(pr.peak_nvidia_smi_bytes, base.cluster.device_budget_bytes * 9 / 10);
}

TEST(ReservedReplay, TheCpuVirtualDeviceReservesWhatItAllocates) {
  const Plan p = testing::cpu_plan("tiny-gqa", 1, 2048);
  const Prediction pr = predict(p);
  EXPECT_EQ(pr.peak_reserved_bytes, pr.peak_device_bytes);
  EXPECT_EQ(pr.peak_nvidia_smi_bytes, pr.peak_device_bytes);
}

}  // namespace
}  // namespace longctx
