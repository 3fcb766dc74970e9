// The CLI contract (docs/architecture.md) that scripts rely on: JSON keys and exit statuses.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <sys/wait.h>

namespace {

struct Output {
  int status = -1;
  std::string out;
};

Output run(const std::string& args) {
  Output o;
  const std::string cmd = std::string(LONGCTX_CLI) + " " + args + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return o;
  std::array<char, 4096> buf{};
  std::size_t got = 0;
  while ((got = fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), got);
  const int rc = pclose(p);
  o.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return o;
}

TEST(CliContract, PlanJsonHasThePlanKeys) {
  const Output o = run("plan --model tiny-gqa --gpu cpu --gpus 2 --seq 4K --budget 64MiB --json");
  ASSERT_EQ(o.status, 0) << o.out;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["schema"], "longctx.plan/1");
  for (const char* k : {"seq", "micro_batch"}) EXPECT_TRUE(j["train"].contains(k)) << k;
  for (const char* k : {"sharding", "ulysses", "head_chunk", "checkpoint", "offload_checkpoints", "offload_optimizer",
                        "offload_params", "mlp_tiles", "loss_tiles"})
    EXPECT_TRUE(j["parallel"].contains(k)) << k;
  for (const char* k : {"feasible", "peak_device_bytes", "peak_host_bytes", "breakdown", "peak_at", "step_time_s", "tokens_per_s"})
    EXPECT_TRUE(j["prediction"].contains(k)) << k;
  EXPECT_TRUE(j["prediction"]["feasible"].get<bool>());
  std::int64_t sum = 0;
  for (auto& [k, v] : j["prediction"]["breakdown"].items()) sum += v.get<std::int64_t>();
  EXPECT_EQ(sum, j["prediction"]["peak_device_bytes"].get<std::int64_t>()) << "the breakdown adds up to the peak";
}

TEST(CliContract, MaxContextJsonHasTokensPlanAndLadder) {
  const Output o = run("max-context --model tiny-odd --gpu cpu --gpus 2 --budget 16MiB --host-mem 256MiB --json");
  ASSERT_EQ(o.status, 0) << o.out;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_GT(j["max_tokens"].get<std::int64_t>(), 0);
  EXPECT_EQ(j["plan"]["train"]["seq"], j["max_tokens"]);
  ASSERT_TRUE(j["ladder"].is_array());
  ASSERT_FALSE(j["ladder"].empty());
  for (const auto& rung : j["ladder"]) {
    EXPECT_TRUE(rung["techniques"].is_array());
    EXPECT_TRUE(rung["max_tokens"].is_number_integer());
  }
}

TEST(CliContract, PlanFileRoundTripsThroughExplain) {
  const auto path = std::filesystem::temp_directory_path() / ("longctx_contract_" + std::to_string(::getpid()) + ".json");
  const auto svg = path.string() + ".svg";
  const Output o = run("plan --model tiny-gqa --gpu cpu --gpus 1 --seq 2K --budget 64MiB -o " + path.string());
  ASSERT_EQ(o.status, 0) << o.out;
  const Output e = run("explain " + path.string() + " --svg " + svg);
  EXPECT_EQ(e.status, 0) << e.out;
  EXPECT_NE(e.out.find("breakdown at the device peak"), std::string::npos);
  EXPECT_TRUE(std::filesystem::file_size(svg) > 1000);
  std::filesystem::remove(path);
  std::filesystem::remove(svg);
}

TEST(CliContract, ExitStatuses) {
  EXPECT_EQ(run("plan --model no-such-model --seq 1M").status, 2);
  EXPECT_EQ(run("plan --seq 12Q").status, 2);
  EXPECT_EQ(run("plan --model llama-3.1-8b --gpus 1 --seq 1M --budget 1GiB").status, 3);
  EXPECT_EQ(run("plan --model llama-3.1-8b --gpus 8 --seq 1M --ulysses 3").status, 2);
  EXPECT_EQ(run("explain /nonexistent/plan.json").status, 2);
  EXPECT_EQ(run("--no-such-flag").status, 2);
}

}  // namespace
