// `longctx run`: the CLI contract's JSON keys, the trace, and the exit statuses.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <regex>

#include "cli_fixture.h"
#include "reference_llama.h"

namespace longctx::runtime {
namespace {

class RunCommand : public testing::CliTest {};

TEST_F(RunCommand, JsonHasTheContractKeysAndTheTraceOpensAsChromeEvents) {
  ParallelConfig p;
  p.checkpoint = CheckpointPolicy::full();
  const auto plan = write(testing::tiny_plan("tiny-gqa", 64, 1, p), "plan.json");
  const auto trace = path("trace.json");
  auto o = run_cli("run --plan " + plan + " --steps 2 --json --threads 1 --trace " + trace);
  ASSERT_EQ(o.status, 0) << o.out;
  auto j = nlohmann::json::parse(o.out);
  ASSERT_EQ(j["steps"].size(), 2u);
  EXPECT_TRUE(j["steps"][0]["loss"].is_number_float());
  EXPECT_TRUE(j["steps"][0]["time_s"].is_number_float());
  EXPECT_GT(j["measured"]["peak_device_bytes"].get<std::int64_t>(), 0);
  EXPECT_TRUE(j["measured"]["peak_host_bytes"].is_number_integer());
  EXPECT_GT(j["predicted"]["peak_device_bytes"].get<std::int64_t>(), 0);

  std::ifstream in(trace);
  auto t = nlohmann::json::parse(in);
  bool counter = false, layer_slice = false;
  for (const auto& e : t["traceEvents"]) {
    counter |= e["ph"] == "C" && e["args"].contains("device") && e["args"].contains("host");
    layer_slice |= e["ph"] == "X" && e["name"] == "backward.layer.1";
  }
  EXPECT_TRUE(counter);
  EXPECT_TRUE(layer_slice);
}

TEST_F(RunCommand, BadInputExitsTwoNamingTheField) {
  const auto bad = path("bad.json");
  std::ofstream(bad) << R"({"schema": "longctx.plan/1"})";
  EXPECT_EQ(run_cli("run --plan " + bad).status, 2);
  ParallelConfig p;
  p.ulysses = 2;
  auto plan = testing::tiny_plan("tiny-gqa", 64, 1, p);
  plan.cluster.shape = {1, 2};
  const auto o = run_cli("run --plan " + write(plan, "u2.json"));
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("cluster"), std::string::npos) << o.err;
}

TEST_F(RunCommand, OutOfMemoryOnTheVirtualDeviceExitsOne) {
  const auto plan = write(testing::tiny_plan("tiny-gqa", 64, 1, {}, /*device_budget=*/200 * 1024), "small.json");
  // The message gives the actual figures (the request, what was in use, the budget) beside
  // the plan's predicted peak.
  const auto o = run_cli("run --plan " + plan + " --threads 1");
  EXPECT_EQ(o.status, 1);
  const std::string size = R"([0-9.]+ (B|KiB|MiB|GiB))";
  EXPECT_TRUE(std::regex_search(o.err, std::regex("error: cluster.device_budget_bytes: out of memory on the CPU virtual "
                                                  "device's device pool in phase [a-z.0-9]+: " + size + " requested with " +
                                                  size + " in use, budget 200.0 KiB \\(the plan predicts a device peak "
                                                  "of " + size + "\\)")))
      << o.err;
}

}  // namespace
}  // namespace longctx::runtime
