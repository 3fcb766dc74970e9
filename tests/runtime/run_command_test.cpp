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

// Across ranks, through the launcher: every rank reports, each rank's trace is written, and
// an optimizer offloaded with zero3 (gradient shards moved to the host as each is reduced)
// trains exactly as the one on the device.
TEST_F(RunCommand, TwoRanksReportAndOffloadingTheOptimizerChangesNoLoss) {
  std::vector<std::vector<double>> losses;
  for (bool offload : {false, true}) {
    ParallelConfig p;
    p.ulysses = 2;
    p.sharding = Sharding::Zero3;
    p.offload_optimizer = offload;
    auto plan = testing::tiny_plan("tiny-odd", 128, 1, p);
    plan.cluster.shape = {1, 2};
    const auto file = write(plan, offload ? "off.json" : "dev.json");
    const auto trace = path(offload ? "off.trace.json" : "dev.trace.json");
    auto o = run_cli("run --plan " + file + " --nproc 2 --steps 3 --json --threads 1 --trace " + trace);
    ASSERT_EQ(o.status, 0) << o.out;
    auto j = nlohmann::json::parse(o.out);
    ASSERT_EQ(j["ranks"].size(), 2u);
    EXPECT_GT(j["predicted"]["peak_device_bytes"].get<std::int64_t>(), 0);
    for (const auto& r : j["ranks"]) EXPECT_GT(r["measured"]["peak_device_bytes"].get<std::int64_t>(), 0);
    EXPECT_TRUE(std::ifstream(trace).good());
    EXPECT_TRUE(std::ifstream(path(offload ? "off.trace.rank1.json" : "dev.trace.rank1.json")).good());
    std::vector<double> l;
    for (const auto& s : j["steps"]) l.push_back(s["loss"].get<double>());
    losses.push_back(l);
  }
  ASSERT_EQ(losses[0].size(), 3u);
  EXPECT_EQ(losses[0], losses[1]);
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
                                                  size + " in use, budget 200.00 KiB \\(the plan predicts a device peak "
                                                  "of " + size + "\\)")))
      << o.err;
}

}  // namespace
}  // namespace longctx::runtime
