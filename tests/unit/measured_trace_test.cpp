#include <gtest/gtest.h>

#include "longctx/planner/measured_trace.h"

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

}  // namespace
}  // namespace longctx
