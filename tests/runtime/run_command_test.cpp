// `longctx run`: the CLI contract's JSON keys, the trace, and the exit statuses.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "reference_llama.h"

namespace longctx::runtime {
namespace {

struct Output {
  int status = -1;
  std::string out;
};

Output run_cli(const std::string& args) {
  const std::string cmd = std::string(LONGCTX_BINARY) + " " + args + " 2>/dev/null";
  Output o;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) o.out.append(buf, n);
  const int rc = ::pclose(p);
  o.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return o;
}

class RunCommand : public ::testing::Test {
 protected:
  // Not std::filesystem: libtorch.so exports its own copy of some of it, built for another ABI.
  std::string dir_;
  void SetUp() override {
    char tmpl[] = "/tmp/longctx_run_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string write(const Plan& p, const std::string& name) {
    const auto path = this->path(name);
    EXPECT_TRUE(write_plan_file(p, path).ok());
    return path;
  }
};

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
  const std::string cmd = std::string(LONGCTX_BINARY) + " run --plan " + write(plan, "u2.json") + " 2>&1";
  std::FILE* f = ::popen(cmd.c_str(), "r");
  char buf[1024] = {};
  std::fread(buf, 1, sizeof buf - 1, f);
  EXPECT_EQ(WEXITSTATUS(::pclose(f)), 2);
  EXPECT_NE(std::string(buf).find("cluster"), std::string::npos) << buf;
}

TEST_F(RunCommand, OutOfMemoryOnTheVirtualDeviceExitsOne) {
  const auto plan = write(testing::tiny_plan("tiny-gqa", 64, 1, {}, /*device_budget=*/200 * 1024), "small.json");
  EXPECT_EQ(run_cli("run --plan " + plan).status, 1);
}

}  // namespace
}  // namespace longctx::runtime
