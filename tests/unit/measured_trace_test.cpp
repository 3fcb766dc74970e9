#include <gtest/gtest.h>

#include "longctx/planner/measured_trace.h"
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

  // The identity survives the file.
  const std::string text = R"({"traceEvents": [{"name": "f", "ph": "X", "args": {"peak_device_bytes": 5}}],
                               "otherData": {"model": ")" + id.model + R"(", "plan_fingerprint": ")" + id.plan_fingerprint + R"("}})";
  auto t = trace_from_json_text(text, "t.json");
  ASSERT_TRUE(t.ok()) << t.error().what();
  EXPECT_EQ(t->identity.plan_fingerprint, id.plan_fingerprint);
  EXPECT_EQ(t->identity.model, id.model);
}

}  // namespace
}  // namespace longctx
