// `longctx calibrate` measures this machine and writes a preset `--gpu FILE` plans with. The
// figures themselves depend on the machine and its load: what is held is that every rate is
// measured (positive, finite, with how it was taken), that the preset plans, and that the
// plan's step time comes from the measured model (the datasheet preset answers otherwise).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <cmath>

#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "planner/core/hardware.h"

namespace longctx::runtime {
namespace {

class Calibrate : public testing::CliTest {};

TEST_F(Calibrate, WritesAPresetThatPlans) {
  const std::string preset = path("cpu-measured.json");
  auto o = run_cli("calibrate --seq 256 --seconds 0.02 --name here -o " + preset);
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.err.find("calibrate: matmul_fp32_flops"), std::string::npos) << "progress, a line a probe: " << o.err;
  const auto j = nlohmann::json::parse(testing::slurp(preset));
  EXPECT_EQ(j["name"], "here");
  ASSERT_TRUE(j.contains("measured"));
  for (const auto& [key, field] : measured_rate_fields()) {
    ASSERT_TRUE(j["measured"].contains(key)) << key;
    const double v = j["measured"][key];
    EXPECT_TRUE(v > 0 && std::isfinite(v)) << key << " = " << v;
  }
  for (const char* table : {"attention_forward_flops", "attention_backward_flops"}) {
    ASSERT_TRUE(j["measured"][table].is_object()) << table;
    EXPECT_TRUE(j["measured"][table].contains("16")) << "tiny-gqa's own head dimension: " << j["measured"][table].dump();
    EXPECT_EQ(j["measured"][table].size(), 5u) << "8, 16, 32, 64, 128";
  }
  // The scalar rates, the optional ones (the host's elementwise rate, SiLU's), and forward and
  // backward at five head dims.
  // The gradients' all-reduces have no peer on one rank: absent, all-reduces then take the
  // collective rate; nor is there a slower rank to wait for.
  for (const auto& [key, field, below, limit] : optional_measured_rate_fields()) {
    if (std::string(key) == "all_reduce_bytes_per_s" || std::string(key) == "rank_lag") {
      EXPECT_FALSE(j["measured"].contains(key)) << "one rank has no peer: " << key;
      continue;
    }
    EXPECT_GT(j["measured"][key].get<double>(), 0) << key;
  }
  EXPECT_EQ(j["measurements"].size(), measured_rate_fields().size() + optional_measured_rate_fields().size() - 2 + 2 * 5);
  // The step's elementwise ops write fresh outputs; the optimizer's passes write in place.
  std::map<std::string, std::string> how;
  for (const auto& m : j["measurements"]) how[m["key"]] = m["how"];
  EXPECT_NE(how["memory_bytes_per_s"].find("into a fresh output"), std::string::npos) << how["memory_bytes_per_s"];
  EXPECT_NE(how["host_memory_bytes_per_s"].find("in place"), std::string::npos) << how["host_memory_bytes_per_s"];
  for (const auto& m : j["measurements"]) EXPECT_FALSE(m["how"].get<std::string>().empty()) << m.dump();

  auto measured = run_cli("plan --model tiny-gqa --gpus 1 --seq 1024 --no-search --json --gpu " + preset);
  ASSERT_EQ(measured.status, 0) << measured.err;
  auto datasheet = run_cli("plan --model tiny-gqa --gpus 1 --seq 1024 --no-search --json --gpu cpu");
  ASSERT_EQ(datasheet.status, 0) << datasheet.err;
  const auto pm = nlohmann::json::parse(measured.out), pd = nlohmann::json::parse(datasheet.out);
  EXPECT_NE(pm["prediction"]["step_time_s"], pd["prediction"]["step_time_s"]);
  EXPECT_EQ(pm["prediction"]["peak_device_bytes"], pd["prediction"]["peak_device_bytes"]) << "memory is the base's";
  EXPECT_EQ(pm["cluster"]["hardware"]["measured"], j["measured"]) << "the plan file carries the rates it used";
}

TEST_F(Calibrate, MeasuresCollectivesAcrossRanks) {
  const std::string preset = path("two.json");
  auto o = run_cli("calibrate --nproc 2 --seq 256 --seconds 0.02 -o " + preset);
  ASSERT_EQ(o.status, 0) << o.err;
  const auto j = nlohmann::json::parse(testing::slurp(preset));
  EXPECT_EQ(j["measured"]["ranks"], 2);
  bool timed = false;
  for (const auto& m : j["measurements"])
    if (m["key"] == "collective_bytes_per_s") timed = m["how"].get<std::string>().find("across 2 ranks") != std::string::npos;
  EXPECT_TRUE(timed) << j["measurements"].dump();
  // The gradients' all-reduces, where they took longer than their latency (at 256 tokens of
  // tiny-gqa the tensors are small enough that they may not).
  if (j["measured"].contains("all_reduce_bytes_per_s")) EXPECT_GT(j["measured"]["all_reduce_bytes_per_s"].get<double>(), 0);
  EXPECT_NE(o.err.find("gradient all-reduces back to back"), std::string::npos) << o.err;
  // The slowest rank's lag over the same work: never behind the average, and recorded.
  ASSERT_TRUE(j["measured"].contains("rank_lag")) << j["measured"].dump();
  const double lag = j["measured"]["rank_lag"];
  EXPECT_TRUE(lag > 0 && lag < 10) << lag;
}

TEST_F(Calibrate, BadInputExitsTwoNamingTheField) {
  for (const auto& [args, field] : {std::pair{"calibrate --gpu h100-80gb", "--device"},
                                    std::pair{"calibrate --gpu cpu --device cuda", "--gpu"},
                                    std::pair{"calibrate --seq 4", "--seq"},
                                    std::pair{"calibrate --model nonesuch", "--model"}}) {
    auto o = run_cli(args);
    EXPECT_EQ(o.status, 2) << args << ": " << o.err;
    EXPECT_NE(o.err.find(field), std::string::npos) << args << ": " << o.err;
  }
  auto o = run_cli("plan --model tiny-gqa --gpus 1 --seq 1024 --gpu " + path("missing.json"));
  EXPECT_EQ(o.status, 2) << o.err;
  EXPECT_NE(o.err.find("--gpu"), std::string::npos) << o.err;
  // Nor may -o replace the preset it starts from, before any probe runs.
  const std::string base = path("base.json");
  std::ofstream(base) << hardware_to_json(load_hardware("cpu").value()).dump();
  const std::string before = testing::slurp(base);
  o = run_cli("calibrate --device cpu --gpu " + base + " -o " + base);
  EXPECT_EQ(o.status, 2) << o.err;
  EXPECT_NE(o.err.find("longctx: error: -o"), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find("calibrate: "), std::string::npos) << "refused before measuring: " << o.err;
  EXPECT_EQ(testing::slurp(base), before);
}

}  // namespace
}  // namespace longctx::runtime
