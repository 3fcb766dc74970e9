#include <gtest/gtest.h>

#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <tuple>

#include "planner/io/comparison.h"
#include "planner/io/measured_trace.h"
#include "test_plans.h"

namespace longctx {
namespace {

TEST(MeasuredTrace, ReadsLongctxPhasesAndPeaks) {
  const std::string text = R"({"traceEvents": [
    {"name": "forward.layer.0", "ph": "X", "ts": 0, "dur": 5, "pid": 1, "tid": 1, "args": {"peak_device_bytes": 700, "peak_host_bytes": 10}},
    {"name": "backward.layer.0", "ph": "X", "ts": 5, "dur": 5, "pid": 1, "tid": 1, "args": {"peak_device_bytes": 900, "peak_host_bytes": 30}},
    {"name": "forward.layer.0", "ph": "X", "ts": 10, "dur": 5, "pid": 1, "tid": 1, "args": {"peak_device_bytes": 800, "peak_host_bytes": 10}},
    {"name": "live bytes", "ph": "C", "ts": 0, "pid": 1, "args": {"device": 5, "host": 1}}]})";
  auto t = trace_from_json_text(text, "t.json");
  ASSERT_TRUE(t.ok()) << t.error().what();
  EXPECT_EQ(t->source, "longctx");
  EXPECT_EQ(t->peak_device_bytes, 900);
  EXPECT_EQ(t->peak_host_bytes, 30);
  EXPECT_EQ(t->phases.at("forward.layer.0"), 800);  // the largest over steps
}

TEST(MeasuredTrace, ReadsPyTorchProfilerMemoryEvents) {
  const std::string text = R"({"traceEvents": [
    {"name": "[memory]", "ph": "i", "args": {"Device Type": 1, "Bytes": 512, "Total Allocated": 512}},
    {"name": "[memory]", "ph": "i", "args": {"Device Type": 1, "Bytes": 1024, "Total Allocated": 1536}},
    {"name": "[memory]", "ph": "i", "args": {"Device Type": 1, "Bytes": -512, "Total Allocated": 1024}},
    {"name": "[memory]", "ph": "i", "args": {"Device Type": 0, "Bytes": 64, "Total Allocated": 64}}]})";
  auto t = trace_from_json_text(text, "p.json");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->source, "pytorch-profiler");
  EXPECT_EQ(t->peak_device_bytes, 1536);
  EXPECT_EQ(t->peak_host_bytes, 64);
}

TEST(MeasuredTrace, RefusesFilesWithoutMemoryEvents) {
  EXPECT_FALSE(trace_from_json_text("{", "x").ok());
  EXPECT_FALSE(trace_from_json_text(R"({"traceEvents": []})", "x").ok());
  EXPECT_FALSE(trace_from_json_text(R"({"other": 1})", "x").ok());
  EXPECT_FALSE(read_trace_file("/nonexistent/trace.json").ok());
}

// A phase event whose device peak is `v` (JSON text), in an otherwise valid trace.
std::string trace_with_peak(const std::string& v) {
  return R"({"traceEvents": [{"name": "forward", "ph": "X", "ts": 0, "dur": 1, "args": {"peak_device_bytes": )" + v +
         R"(, "peak_host_bytes": 0}}]})";
}

TEST(MeasuredTrace, RefusesFiguresThatAreNotByteCounts) {
  for (const std::string v : {"0", "-1", "-5e3", "1e300", "\"900\"", "12.5", "null", "true", "18446744073709551615"}) {
    auto t = trace_from_json_text(trace_with_peak(v), "t.json");
    ASSERT_FALSE(t.ok()) << v << " was accepted";
    EXPECT_EQ(t.error().kind, ErrorKind::BadInput) << v;
    EXPECT_EQ(t.error().field, "t.json") << v;
    if (v != "0") {
      EXPECT_NE(t.error().message.find("not a byte count"), std::string::npos) << t.error().message;
    }
  }
  // A whole number written with an exponent is a byte count.
  auto t = trace_from_json_text(trace_with_peak("1e6"), "t.json");
  ASSERT_TRUE(t.ok()) << t.error().what();
  EXPECT_EQ(t->peak_device_bytes, 1000000);
  // otherData's totals are checked too.
  EXPECT_FALSE(trace_from_json_text(R"({"traceEvents": [{"name": "f", "ph": "X", "args": {"peak_device_bytes": 5}}],
                                        "otherData": {"peak_device_bytes": -7}})",
                                    "t.json")
                   .ok());
  // 2^62 is past the bound, not at it: a peak and a baseline of 2^62 each added to -2^63.
  EXPECT_FALSE(trace_from_json_text(trace_with_peak("4611686018427387904"), "t.json").ok());
  EXPECT_TRUE(trace_from_json_text(trace_with_peak("4611686018427387903"), "t.json").ok());
  // The figures the comparison does not read are counts too: a phase's step and device bytes
  // at its start, the counter tracks, and a profiler event's signed Bytes.
  for (const std::string& bad :
       {std::string(R"({"traceEvents": [{"name": "f", "ph": "X", "args": {"peak_device_bytes": 5, "step": 1.5}}]})"),
        std::string(R"({"traceEvents": [{"name": "f", "ph": "X", "args": {"peak_device_bytes": 5, "device_bytes_at_start": "x"}}]})"),
        std::string(R"({"traceEvents": [{"name": "f", "ph": "X", "args": {"peak_device_bytes": 5}},
                                        {"name": "live bytes", "ph": "C", "args": {"device": -5}}]})"),
        std::string(R"({"traceEvents": [{"name": "[memory]", "ph": "i", "args": {"Total Allocated": 100, "Bytes": "x"}}]})"),
        std::string(R"({"traceEvents": [{"name": "[memory]", "ph": "i", "args": {"Total Allocated": 100, "Bytes": 1.5}}]})"),
        std::string(R"({"traceEvents": [{"name": "[memory]", "ph": "i", "args": {"Total Allocated": 100, "Bytes": 1e300}}]})")}) {
    const auto refused = trace_from_json_text(bad, "t.json");
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.error().message.find("not a byte count"), std::string::npos) << refused.error().message;
  }
  // A free is a negative Bytes.
  EXPECT_TRUE(trace_from_json_text(R"({"traceEvents": [{"name": "[memory]", "ph": "i", "args": {"Total Allocated": 100,
                                       "Bytes": 100}}, {"name": "[memory]", "ph": "i", "args": {"Total Allocated": 0, "Bytes": -100}}]})",
                                   "t.json")
                  .ok());
}

TEST(MeasuredTrace, ATraceOfAnotherPlanIsRefused) {
  const Plan plan = testing::cpu_plan("tiny-gqa", 1, 512);
  Plan other = plan;
  other.train.seq *= 2;
  const auto id = trace_identity(plan);
  EXPECT_EQ(id.model, plan.model.name);
  EXPECT_NE(trace_identity(other).plan_fingerprint, id.plan_fingerprint);

  MeasuredTrace same, another_plan, another_model, unnamed;
  same.identity = id;
  another_plan.identity = trace_identity(other);
  another_model.identity = {"llama-3.1-8b", id.plan_fingerprint};
  EXPECT_TRUE(check_trace_matches(same, plan, "t.json").ok());
  EXPECT_TRUE(check_trace_matches(unnamed, plan, "t.json").ok()) << "a profiler trace names no plan";
  auto r = check_trace_matches(another_plan, plan, "t.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "--trace");
  EXPECT_NE(r.error().message.find("another plan"), std::string::npos) << r.error().message;
  r = check_trace_matches(another_model, plan, "t.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("model llama-3.1-8b"), std::string::npos) << r.error().message;

  // The same plan's step on another cluster (another device's allocator, or more ranks)
  // measured other per-rank figures; a trace from before the cluster was recorded names none.
  // A calibrated preset of the same device (another name, the same bytes) is the same cluster.
  EXPECT_EQ(id.cluster, "1 x 1 cpu");
  Plan calibrated = plan;
  calibrated.cluster.hardware.name = "cpu-calibrated";
  EXPECT_EQ(trace_identity(calibrated).cluster, id.cluster);
  Plan on_a_gpu = plan, wider = plan;
  on_a_gpu.cluster.hardware.backend = Backend::Cuda;
  wider.cluster.shape.gpus_per_node *= 2;
  for (const Plan* elsewhere : {&on_a_gpu, &wider}) {
    MeasuredTrace there;
    there.identity = trace_identity(*elsewhere);
    EXPECT_EQ(there.identity.plan_fingerprint, id.plan_fingerprint);
    r = check_trace_matches(there, plan, "t.json");
    ASSERT_FALSE(r.ok()) << there.identity.cluster;
    EXPECT_NE(r.error().message.find("another cluster's"), std::string::npos) << r.error().message;
  }

  // A profiler's trace names no plan but says which device it measured: another device's
  // profile is another run's.
  const Plan gpu = testing::gpu_plan("tiny-gqa", "h100-80gb", 1, 512);
  MeasuredTrace cpu_profile, cuda_profile;
  cpu_profile.source = cuda_profile.source = "pytorch-profiler";
  cpu_profile.counts_from_profiling_start = true;
  EXPECT_TRUE(check_trace_matches(cpu_profile, plan, "p.json").ok());
  EXPECT_TRUE(check_trace_matches(cuda_profile, gpu, "p.json").ok());
  for (const auto& [trace, of, says] : {std::tuple{&cuda_profile, &plan, "measured a CUDA device"},
                                        std::tuple{&cpu_profile, &gpu, "measured the CPU allocator alone"}}) {
    r = check_trace_matches(*trace, *of, "p.json");
    ASSERT_FALSE(r.ok()) << says;
    EXPECT_EQ(r.error().field, "--trace");
    EXPECT_NE(r.error().message.find(says), std::string::npos) << r.error().message;
  }

  // The identity survives the file.
  const std::string text = R"({"traceEvents": [{"name": "f", "ph": "X", "args": {"peak_device_bytes": 5}}],
                               "otherData": {"model": ")" + id.model + R"(", "plan_fingerprint": ")" + id.plan_fingerprint + R"("}})";
  auto t = trace_from_json_text(text, "t.json");
  ASSERT_TRUE(t.ok()) << t.error().what();
  EXPECT_EQ(t->identity.plan_fingerprint, id.plan_fingerprint);
  EXPECT_EQ(t->identity.model, id.model);
}

// A CPU profile of one training step: forward allocates 100 and 50, backward (inside an
// autograd node) 300 and frees 100, the optimizer (inside its scope) allocates its state of
// 40 and a temporary of 8, and the next forward allocates 10.
std::string cpu_profile(const std::string& other_data = "{}") {
  return R"({"traceEvents": [
    {"name": "[memory]", "ph": "i", "ts": 1, "args": {"Device Type": 0, "Addr": 1, "Bytes": 100, "Total Allocated": 100}},
    {"name": "[memory]", "ph": "i", "ts": 2, "args": {"Device Type": 0, "Addr": 2, "Bytes": 50, "Total Allocated": 150}},
    {"name": "autograd::engine::evaluate_function: MmBackward0", "ph": "X", "ts": 10, "dur": 5, "args": {}},
    {"name": "[memory]", "ph": "i", "ts": 11, "args": {"Device Type": 0, "Addr": 3, "Bytes": 300, "Total Allocated": 450}},
    {"name": "[memory]", "ph": "i", "ts": 16, "args": {"Device Type": 0, "Addr": 1, "Bytes": -100, "Total Allocated": 350}},
    {"name": "Optimizer.step#AdamW.step", "ph": "X", "ts": 20, "dur": 5, "args": {}},
    {"name": "[memory]", "ph": "i", "ts": 21, "args": {"Device Type": 0, "Addr": 4, "Bytes": 40, "Total Allocated": 390}},
    {"name": "[memory]", "ph": "i", "ts": 22, "args": {"Device Type": 0, "Addr": 5, "Bytes": 8, "Total Allocated": 398}},
    {"name": "[memory]", "ph": "i", "ts": 23, "args": {"Device Type": 0, "Addr": 5, "Bytes": -8, "Total Allocated": 390}},
    {"name": "[memory]", "ph": "i", "ts": 30, "args": {"Device Type": 0, "Addr": 6, "Bytes": 10, "Total Allocated": 400}}],
    "otherData": )" + other_data + "}";
}

TEST(MeasuredTrace, AttributesAProfilersMemoryToPhasesFromItsScopes) {
  auto t = trace_from_json_text(cpu_profile(), "p.json");
  ASSERT_TRUE(t.ok()) << t.error().what();
  EXPECT_TRUE(t->counts_from_profiling_start) << "a CPU profile";
  EXPECT_EQ(t->peak_device_bytes, 450);
  // The free at ts 16 follows the backward node: still backward. ts 30 follows the optimizer: forward.
  EXPECT_EQ(t->phases, (std::map<std::string, std::int64_t>{{"forward", 400}, {"backward", 450}, {"optimizer", 398}}));
  EXPECT_EQ(t->optimizer_live_bytes, 40) << "the state, not the freed temporary";

  // `args` is optional in Chrome's format: scopes without one are read alike.
  std::string argless = cpu_profile();
  const std::string empty_args = R"(, "args": {}})";
  for (std::size_t at; (at = argless.find(empty_args)) != std::string::npos;) argless.replace(at, empty_args.size(), "}");
  ASSERT_EQ(argless.find(R"("args": {})"), std::string::npos);
  auto without_args = trace_from_json_text(argless, "p.json");
  ASSERT_TRUE(without_args.ok()) << without_args.error().what();
  EXPECT_EQ(without_args->phases, t->phases);

  // A memory event without its running total is no profiler's: refused, naming what it lacks.
  for (const char* event : {R"({"name": "[memory]", "ph": "i", "ts": 1})",
                            R"({"name": "[memory]", "ph": "i", "ts": 1, "args": {"Device Type": 0, "Bytes": 5}})"}) {
    auto refused = trace_from_json_text(std::string(R"({"traceEvents": [)") + event + "]}", "p.json");
    ASSERT_FALSE(refused.ok()) << event;
    EXPECT_NE(refused.error().message.find("Total Allocated"), std::string::npos) << refused.error().message;
  }

  // Without scopes nothing can be attributed.
  auto bare = trace_from_json_text(R"({"traceEvents": [{"name": "[memory]", "ph": "i", "ts": 1,
      "args": {"Device Type": 0, "Bytes": 5, "Total Allocated": 5}}]})", "p.json");
  ASSERT_TRUE(bare.ok());
  EXPECT_TRUE(bare->phases.empty());
}

TEST(MeasuredTrace, ACpuProfileGetsThePlansStateBeforeProfilingAsItsBaseline) {
  const Plan plan = testing::cpu_plan("tiny-gqa", 1, 512);
  auto t = trace_from_json_text(cpu_profile(), "p.json");
  ASSERT_TRUE(t.ok());
  // The optimizer state the trace saw allocated (40 bytes) is not counted twice.
  auto c = compare_to_trace(plan, *t, "p.json");
  ASSERT_TRUE(c.ok()) << c.error().what();
  std::int64_t params = 0, state = 0;
  for (const auto& x : c->evaluation.graph.tensors())
    if (x.persistent && x.producer < 0 && x.place == Place::Device) {
      if (x.category == Category::Params) params += x.bytes;
      if (x.category == Category::Optimizer) state += x.bytes;
    }
  ASSERT_GT(params, 0);
  ASSERT_GT(state, 40);
  EXPECT_EQ(c->baseline, params + state - 40);
  EXPECT_EQ(c->measured, 450 + c->baseline);
  EXPECT_TRUE(c->phase_note.empty());
  ASSERT_EQ(c->phases.size(), 3u);
  EXPECT_EQ(c->phases[0].phase, "forward");
  EXPECT_EQ(c->phases[1].phase, "backward");
  EXPECT_EQ(c->phases[1].measured, 450 + c->baseline);
  EXPECT_EQ(c->phases[2].phase, "optimizer");
  EXPECT_EQ(c->measured_peak_phase, "backward");

  // A baseline the trace records wins.
  auto recorded = trace_from_json_text(cpu_profile(R"({"baseline_bytes": 1000})"), "p.json");
  ASSERT_TRUE(recorded.ok()) << recorded.error().what();
  c = compare_to_trace(plan, *recorded, "p.json");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->baseline, 1000);
  EXPECT_EQ(c->measured, 1450);
}

TEST(MeasuredTrace, AGzippedTraceReadsAsThePlainOne) {
  const std::string text = cpu_profile();
  const std::string path = ::testing::TempDir() + "/profile.json.gz";
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  gzclose(f);
  auto t = read_trace_file(path);
  ASSERT_TRUE(t.ok()) << t.error().what();
  EXPECT_EQ(t->peak_device_bytes, 450);
  EXPECT_EQ(t->phases.size(), 3u);

  // Cut short: refused naming the file.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  auto cut = read_trace_file(path);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.error().kind, ErrorKind::BadInput);
  EXPECT_NE(cut.error().message.find("damaged or truncated gzip"), std::string::npos) << cut.error().message;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace longctx
