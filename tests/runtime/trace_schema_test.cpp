// The trace schema round trip: what `run --trace` writes, `compare` reads back unchanged.
#include <gtest/gtest.h>

#include "planner/io/measured_trace.h"
#include "planner/core/phase_names.h"
#include "longctx/runtime/trace.h"

namespace longctx::runtime {
namespace {

TEST(TraceSchema, WhatTheRunWritesCompareReadsBack) {
  RunReport r;
  r.device = "cpu (virtual device)";
  r.peak_device = 9000;
  r.peak_host = 700;
  for (int step = 0; step < 2; ++step) {
    StepResult s;
    PhaseRecord layer{.name = phase_name(StepPhase::ForwardLayer, 0), .start_s = 0.0, .end_s = 0.1};
    layer.peak_device = 4000 + step;
    layer.peak_host = 300;
    PhaseRecord optimizer{.name = phase_name(StepPhase::Optimizer), .start_s = 0.1, .end_s = 0.2};
    optimizer.peak_device = 8000 - step;
    optimizer.peak_host = 600;
    s.phases = {layer, optimizer};
    r.steps.push_back(s);
  }
  auto m = trace_from_json_text(chrome_trace_json(r), "trace");
  ASSERT_TRUE(m.ok()) << m.error().what();
  EXPECT_EQ(m->source, "longctx");
  EXPECT_EQ(m->peak_device_bytes, 9000);
  EXPECT_EQ(m->peak_host_bytes, 700);
  ASSERT_EQ(m->phases.size(), 2u);
  EXPECT_EQ(m->phases.at("forward.layer.0"), 4001);  // the larger of the two steps
  EXPECT_EQ(m->phases.at("optimizer"), 8000);
}

}  // namespace
}  // namespace longctx::runtime
