// The plan file as a contract: explain and compare say where the prediction a plan file
// records differs from this planner's, and say nothing when they agree.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "planner/core/plan.h"
#include "planner/io/measured_trace.h"
#include "planner/io/trace_schema.h"
#include "tests/test_paths.h"

namespace {

struct Output {
  std::string out, err;
};

Output run(const std::string& args) {
  const std::string err_path = std::filesystem::temp_directory_path() / ("longctx_drift_err_" + std::to_string(::getpid()));
  const std::string cmd = longctx::testing::longctx_cli() + " " + args + " 2>" + err_path;
  Output o;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  std::size_t got = 0;
  while (p && (got = fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), got);
  if (p) pclose(p);
  std::ifstream e(err_path);
  o.err.assign(std::istreambuf_iterator<char>(e), {});
  std::filesystem::remove(err_path);
  return o;
}

TEST(PlanDrift, ExplainAndCompareReportAnEditedPredictionAndAreSilentOtherwise) {
  const auto dir = std::filesystem::temp_directory_path() / ("longctx_drift_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string plan = (dir / "plan.json").string(), trace = (dir / "trace.json").string();
  run("plan --model tiny-gqa --gpu cpu --gpus 1 --seq 2K --budget 64MiB -o " + plan);
  nlohmann::json j = nlohmann::json::parse(std::ifstream(plan));
  ASSERT_FALSE(j["prediction"]["phases"].empty()) << "the plan file records the peaks per phase";

  // A trace of one phase, written with the schema's keys.
  namespace k = longctx::trace_schema;
  const std::string phase = j["prediction"]["phases"][0]["phase"];
  const auto id = longctx::trace_identity(*longctx::read_plan_file(plan));  // a run's trace names its plan
  nlohmann::json tr = {{k::kEvents, {{{k::kName, phase}, {k::kType, k::kComplete}, {k::kArgs, {{k::kPeakDevice, 1000}}}}}},
                       {k::kOtherData, {{"model", id.model}, {"plan_fingerprint", id.plan_fingerprint}}}};
  std::ofstream(trace) << tr.dump();

  EXPECT_EQ(run("explain " + plan).err.find("the plan says"), std::string::npos) << "identical: silent";
  const auto same = nlohmann::json::parse(run("compare --json --plan " + plan + " --trace " + trace).out);
  EXPECT_TRUE(same["prediction_drift"].empty());

  const std::int64_t recorded = j["prediction"]["phases"][0]["peak_device_bytes"];
  j["prediction"]["phases"][0]["peak_device_bytes"] = recorded + 4096;
  std::ofstream(plan) << j.dump();
  const Output e = run("explain " + plan);
  EXPECT_NE(e.err.find(phase + " peak_device_bytes: the plan says"), std::string::npos) << e.err;
  const auto c = nlohmann::json::parse(run("compare --json --plan " + plan + " --trace " + trace).out);
  ASSERT_EQ(c["prediction_drift"].size(), 1u) << c["prediction_drift"].dump();
  EXPECT_EQ(c["prediction_drift"][0]["plan_says"], recorded + 4096);
  EXPECT_EQ(c["prediction_drift"][0]["planner_says"], recorded);

  // Every figure the file records is held, not only the peaks: the one that binds on CUDA
  // (nvidia-smi), what binds, the time and the verdict (a budget edited under the peak).
  j["prediction"]["phases"][0]["peak_device_bytes"] = recorded;
  const std::int64_t smi = j["prediction"]["peak_nvidia_smi_bytes"];
  j["prediction"]["peak_nvidia_smi_bytes"] = smi + 1;
  j["prediction"]["binding"] = "host memory";
  j["prediction"]["mfu"] = 0.5;
  j["prediction"]["breakdown"]["activations"] = 1;
  j["cluster"]["device_budget_bytes"] = 1024;
  std::ofstream(plan) << j.dump();
  const Output all = run("explain " + plan);
  for (const char* what : {"feasible: the plan says fits, this planner says does not fit", "peak_nvidia_smi_bytes: the plan says",
                           "binding: the plan says 'host memory'", "mfu: the plan says 0.5,", "breakdown.activations: the plan says"})
    EXPECT_NE(all.err.find(what), std::string::npos) << what << "\n" << all.err;

  // What a plan file says is shown on one line, nothing in it driving the terminal: a recorded
  // name with a newline, a bell and an escape sequence comes out escaped.
  j["prediction"]["peak_at"] = "op\nnote: a line of its own\x07";
  j["prediction"]["binding"] = "B\x1b[31mRED";
  std::ofstream(plan) << j.dump();
  const Output edited = run("explain " + plan);
  EXPECT_NE(edited.err.find("peak_at: the plan says 'op\\x0Anote: a line of its own\\x07'"), std::string::npos) << edited.err;
  EXPECT_NE(edited.err.find("binding: the plan says 'B\\x1B[31mRED'"), std::string::npos) << edited.err;
  EXPECT_EQ(edited.err.find('\x1b'), std::string::npos) << edited.err;
  EXPECT_EQ(edited.err.find('\x07'), std::string::npos) << edited.err;
  EXPECT_EQ(edited.err.find("\nnote: a line of its own"), std::string::npos) << edited.err;
  std::filesystem::remove_all(dir);
}

// A plan file from before the reserved figure, the breakdown, the time or the phases were
// recorded holds the verdict and the peaks alone: it agrees with this planner on those, and the
// figures it never held are not read as its 0 or ''. Edit one it holds and that one is named.
TEST(PlanDrift, AnOlderFileIsHeldToTheFiguresItRecords) {
  const auto dir = std::filesystem::temp_directory_path() / ("longctx_drift_old_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string plan = (dir / "plan.json").string();
  run("plan --model tiny-gqa --gpu cpu --gpus 1 --seq 2K --budget 64MiB -o " + plan);
  nlohmann::json j = nlohmann::json::parse(std::ifstream(plan));
  nlohmann::json& pr = j["prediction"];
  pr = {{"feasible", pr["feasible"]}, {"peak_device_bytes", pr["peak_device_bytes"]}, {"peak_host_bytes", pr["peak_host_bytes"]}};
  std::ofstream(plan) << j.dump();
  const Output silent = run("explain " + plan);
  EXPECT_EQ(silent.err.find("the plan says"), std::string::npos) << silent.err;
  pr["peak_host_bytes"] = pr["peak_host_bytes"].get<std::int64_t>() + 1;
  std::ofstream(plan) << j.dump();
  const Output named = run("explain " + plan);
  EXPECT_NE(named.err.find("peak_host_bytes: the plan says"), std::string::npos) << named.err;
  EXPECT_EQ(named.err.find("peak_reserved_bytes"), std::string::npos) << named.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
