// `longctx run`: the CLI contract's JSON keys, the trace, and the exit statuses.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "cli_fixture.h"
#include "planner/io/measured_trace.h"
#include "reference_llama.h"

namespace longctx::runtime {
namespace {

class RunCommand : public testing::CliTest {
 protected:
  std::vector<std::string> names() const { return testing::all_names(dir_); }
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
  // The predicted peak quoted is this planner's, not a figure the plan file was edited to.
  nlohmann::json edited = nlohmann::json::parse(testing::slurp(plan));
  edited["prediction"]["peak_device_bytes"] = 1;
  std::ofstream(path("edited.json")) << edited.dump();
  const auto stale = run_cli("run --plan " + path("edited.json") + " --threads 1");
  EXPECT_EQ(stale.status, 1) << stale.err;
  EXPECT_NE(stale.err.find("the plan predicts a device peak of"), std::string::npos) << stale.err;
  EXPECT_EQ(stale.err.find("the plan predicts a device peak of 1 B"), std::string::npos) << stale.err;
}

// The trace says which plan it measured, so that compare can refuse it for another.
TEST_F(RunCommand, TheTraceNamesItsPlan) {
  const auto plan = testing::tiny_plan("tiny-gqa", 64, 1, {});
  const auto trace = path("trace.json");
  ASSERT_EQ(run_cli("run --plan " + write(plan, "plan.json") + " --threads 1 --trace " + trace).status, 0);
  const auto t = nlohmann::json::parse(testing::slurp(trace));
  EXPECT_EQ(t["otherData"]["model"], "tiny-gqa");
  EXPECT_EQ(t["otherData"]["plan_fingerprint"], trace_identity(plan).plan_fingerprint);
  // And the cluster it ran on: compare takes the trace for its plan, and refuses it for the
  // same step planned for two ranks (whose fingerprint is this one's).
  EXPECT_EQ(t["otherData"]["cluster"], trace_identity(plan).cluster);
  EXPECT_EQ(run_cli("compare --plan " + path("plan.json") + " --trace " + trace).status, 0);
  Plan two = plan;
  two.cluster.shape.gpus_per_node = 2;
  ASSERT_EQ(trace_identity(two).plan_fingerprint, trace_identity(plan).plan_fingerprint);
  const auto other = run_cli("compare --plan " + write(two, "two.json") + " --trace " + trace);
  EXPECT_EQ(other.status, 2) << other.err;
  EXPECT_NE(other.err.find("another cluster's"), std::string::npos) << other.err;
}

// Numbers out of range say so and say the fix; they are never clamped or wrapped.
TEST_F(RunCommand, NumbersOutOfRangeAreRefusedWithTheFix) {
  const auto plan = write(testing::tiny_plan("tiny-gqa", 64, 1, {}), "plan.json");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--seed -1", "--seed: '-1' is not a seed; give a whole number from 0 to 18446744073709551615"},
      {"--seed 18446744073709551616", "--seed: '18446744073709551616' is not a seed"},
      {"--seed 1e3", "--seed: '1e3' is not a seed"},
      {"--threads -1", "-1 is not a thread count; give 1 to 4096, or 0 for the default"},
      {"--steps 0", "0 is not a step count; run at least 1 step"},
      {"--steps -3", "-3 is not a step count"},
  };
  for (const auto& [flags, message] : cases) {
    const auto o = run_cli("run --plan " + plan + " " + flags);
    EXPECT_EQ(o.status, 2) << flags << "\n" << o.err;
    EXPECT_NE(o.err.find(message), std::string::npos) << flags << "\n" << o.err;
    EXPECT_LT(o.err.size(), 600u) << "a short message, not a range of 300 digits:\n" << o.err;
  }
  const auto o = run_cli("run --plan " + plan + " --threads 1 --seed 18446744073709551615");
  EXPECT_EQ(o.status, 0) << "2^64-1 is a seed\n" << o.err;
}

// A plan that needs more host memory than the machine has free is refused up front (exit
// 3) with both figures, not left to the OOM killer; --force runs anyway.
TEST_F(RunCommand, APlanBeyondTheMachinesMemoryIsRefused) {
  const auto big = write(testing::tiny_plan("llama-3.1-70b", 4096, 1, {}, 1LL << 50, 1LL << 50), "big.json");
  const auto o = run_cli("run --plan " + big + " --threads 1");
  EXPECT_EQ(o.status, 3) << o.err;
  EXPECT_TRUE(std::regex_search(o.err, std::regex("the plan needs [0-9.]+ TiB of host memory on this machine .* and only "
                                                  "[0-9.]+ [KMGT]iB is available \\(MemAvailable\\).*--force")))
      << o.err;
  const auto small = write(testing::tiny_plan("tiny-gqa", 64, 1, {}), "small.json");
  EXPECT_EQ(run_cli("run --plan " + small + " --threads 1 --force").status, 0);
}

// --op-times: every phase of the last step with the LibTorch operators it called, and with
// measured rates each of the planner's ops of that phase beside them, in schedule order.
TEST_F(RunCommand, OpTimesListEachPhasesOperatorsBesideThePlannersOps) {
  Plan plan = testing::tiny_plan("tiny-gqa", 64, 1, {});
  const auto unmeasured = write(plan, "plan.json");
  auto o = run_cli("run --plan " + unmeasured + " --steps 2 --threads 1 --op-times " + path("ops.json"));
  ASSERT_EQ(o.status, 0) << o.err;
  auto j = nlohmann::json::parse(testing::slurp(path("ops.json")));
  EXPECT_EQ(j["step"], 2);
  std::map<std::string, nlohmann::json> phases;
  for (const auto& p : j["phases"]) phases[p["phase"].get<std::string>()] = p;
  ASSERT_TRUE(phases.count("forward.layer.0"));
  const auto& layer = phases["forward.layer.0"];
  bool flash = false;
  std::int64_t calls = 0;
  for (const auto& op : layer["ops"]) {
    flash |= op["op"] == "aten::_scaled_dot_product_flash_attention_for_cpu";
    calls += op["calls"].get<std::int64_t>();
    EXPECT_GE(op["self_s"].get<double>(), 0.0) << op;
  }
  EXPECT_TRUE(flash) << layer["ops"];
  EXPECT_EQ(layer["calls"].get<std::int64_t>(), calls);
  EXPECT_TRUE(layer["predicted_ops"].empty()) << "datasheet rates give ops no time of their own";

  MeasuredRates& m = plan.cluster.hardware.measured;
  m.present = true;
  m.matmul_fp32_flops = m.matmul_bf16_flops = 1e10;
  m.attention_forward.points = m.attention_backward.points = {{8, 1e9}, {64, 1e10}};
  m.memory_bytes_per_s = m.copy_bytes_per_s = m.collective_bytes_per_s = 1e10;
  m.op_overhead_s = m.collective_latency_s = 1e-6;
  const auto measured = write(plan, "measured.json");
  o = run_cli("run --plan " + measured + " --steps 1 --threads 1 --op-times " + path("ops.json"));
  ASSERT_EQ(o.status, 0) << o.err;
  j = nlohmann::json::parse(testing::slurp(path("ops.json")));
  std::vector<std::string> names;
  for (const auto& p : j["phases"])
    if (p["phase"] == "forward.layer.0")
      for (const auto& op : p["predicted_ops"]) names.push_back(op["op"]);
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "layer.0.attn_norm");
  EXPECT_NE(std::find(names.begin(), names.end(), "layer.0.attn.flash"), names.end());
}

// --op-times across ranks: each rank's wait for its exchanges is listed as an operator of the
// phase, one call for each collective the phase issues (the Ulysses layer's three all-to-alls
// for q, k, v and one for its output; the optimizer's gradient all-reduces), so a phase's time
// beyond its operators' shows where a rank waited on the other.
TEST_F(RunCommand, OpTimesCountEachRanksWaitsForItsExchanges) {
  ParallelConfig p;
  p.ulysses = 2;
  Plan plan = testing::tiny_plan("tiny-gqa", 64, 1, p);
  plan.cluster.shape = {1, 2};
  auto o = run_cli("run --plan " + write(plan, "u2.json") + " --nproc 2 --steps 2 --threads 1 --json --op-times " +
                   path("ops.json"));
  ASSERT_EQ(o.status, 0) << o.err;
  const auto run = nlohmann::json::parse(o.out);
  for (const std::string file : {"ops.json", "ops.rank1.json"}) {
    const auto j = nlohmann::json::parse(testing::slurp(path(file)));
    std::map<std::string, std::int64_t> waits;
    for (const auto& phase : j["phases"])
      for (const auto& op : phase["ops"]) {
        const auto name = op["op"].get<std::string>();
        if (name.rfind("c10d::wait(", 0) != 0) continue;
        EXPECT_GE(op["self_s"].get<double>(), 0.0) << op;
        waits[phase["phase"].get<std::string>() + " " + name] += op["calls"].get<std::int64_t>();
      }
    EXPECT_EQ(waits["forward.layer.0 c10d::wait(Ulysses all-to-all)"], 4) << file;
    EXPECT_EQ(waits["backward.layer.1 c10d::wait(Ulysses all-to-all)"], 4) << file;
    // Every collective the runtime counts in the optimizer phase is waited for there.
    std::int64_t optimizer_collectives = -1;
    for (const auto& ph : run["ranks"][0]["measured"]["phases"])
      if (ph["name"] == "optimizer") optimizer_collectives = ph["collectives"].get<std::int64_t>();
    EXPECT_GT(optimizer_collectives, 0);
    EXPECT_EQ(waits["optimizer c10d::wait(gradient all-reduce)"], optimizer_collectives) << file;
  }
}

// --trace and --allocation-log: refused on a device (exit 2), and on a full disk (a
// file-size limit, see training_state_test) an error naming the file, with neither the
// file nor a temporary left.
TEST_F(RunCommand, TraceAndAllocationLogAreWrittenWholeOrNotAtAll) {
  const auto plan = write(testing::tiny_plan("tiny-gqa", 64, 1, {}), "plan.json");
  for (const std::string flag : {"--trace", "--allocation-log", "--op-times"}) {
    auto o = run_cli("run --plan " + plan + " --threads 1 " + flag + " /dev/full");
    EXPECT_EQ(o.status, 2) << flag << "\n" << o.err;
    EXPECT_NE(o.err.find(flag + ": '/dev/full' is a character device"), std::string::npos) << o.err;

    o = run_under("ulimit -f 4", "run --plan " + plan + " --threads 1 --steps 3 " + flag + " " + path("out"));
    EXPECT_EQ(o.status, 1) << flag << "\n" << o.err;
    EXPECT_NE(o.err.find(path("out") + "' failed: File too large"), std::string::npos) << o.err;
    EXPECT_EQ(names(), (std::vector<std::string>{"plan.json", "stderr.txt"})) << flag;

    o = run_cli("run --plan " + plan + " --threads 1 " + flag + " " + path("out"));
    EXPECT_EQ(o.status, 0) << o.err;
    EXPECT_GT(testing::slurp(path("out")).size(), 4096u) << "larger than the limit above";
    ::unlink(path("out").c_str());
  }
}

// An output never names a file the run reads, nor another output, on any rank: a trace over
// the plan it runs, a log over the token file, two outputs on one file, a rank's trace over a
// plan named like it (q.rank1.json), or a stream that cannot hold one file per rank. Refused
// naming the option before any step, every file as it was.
TEST_F(RunCommand, OutputsNeverReplaceAnInputOrEachOther) {
  const std::string plan = write(testing::tiny_plan("tiny-gqa", 64, 1, {}), "plan.json");
  const std::string before = testing::slurp(plan);
  const std::string data = path("tokens.bin");
  std::ofstream(data, std::ios::binary) << std::string(4096, '\0');
  const std::pair<std::string, std::string> one_rank[] = {
      {"--trace " + plan, "--trace"},
      {"--op-times " + plan, "--op-times"},
      {"--data " + data + " --allocation-log " + data, "--allocation-log"},
      {"--trace " + path("same.json") + " --op-times " + path("same.json"), "--op-times"},
      // Standard output is --json's report: a trace there too read as no JSON.
      {"--json --trace /dev/stdout", "--trace"}};
  for (const auto& [flags, field] : one_rank) {
    const auto o = run_cli("run --plan " + plan + " --threads 1 " + flags);
    EXPECT_EQ(o.status, 2) << flags << "\n" << o.err;
    EXPECT_NE(o.err.find("longctx: error: " + field), std::string::npos) << o.err;
    EXPECT_EQ(o.out.find("step 1/"), std::string::npos) << "refused before any step";
  }
  EXPECT_EQ(testing::slurp(plan), before);
  EXPECT_EQ(testing::slurp(data), std::string(4096, '\0'));

  ParallelConfig p;
  p.ulysses = 2;
  auto two = testing::tiny_plan("tiny-gqa", 64, 1, p);
  two.cluster.shape = {1, 2};
  const std::string named_like_a_rank = write(two, "q.rank1.json");
  const std::string two_before = testing::slurp(named_like_a_rank);
  auto o = run_cli("run --plan " + named_like_a_rank + " --nproc 2 --threads 1 --trace " + path("q.json"));
  EXPECT_EQ(o.status, 2) << o.err;
  EXPECT_NE(o.err.find("--trace (rank 1: " + named_like_a_rank + ")"), std::string::npos) << o.err;
  EXPECT_EQ(testing::slurp(named_like_a_rank), two_before);
  o = run_cli("run --plan " + named_like_a_rank + " --nproc 2 --threads 1 --trace /dev/stdout");
  EXPECT_EQ(o.status, 2) << o.err;
  EXPECT_NE(o.err.find("cannot hold one file per rank"), std::string::npos) << o.err;

  // A rank count the plan was not made for: refused once, naming --nproc, before any rank
  // starts (each rank refused it alike and printed it once per rank).
  o = run_cli("run --plan " + plan + " --nproc 2 --threads 1");
  EXPECT_EQ(o.status, 2) << o.err;
  EXPECT_NE(o.err.find("longctx: error: --nproc: 2 ranks for a plan of 1"), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find("rank 0 of 2"), std::string::npos) << "no rank was started: " << o.err;

  // Each rank writes its own allocation log, as it does its trace.
  o = run_cli("run --plan " + named_like_a_rank + " --nproc 2 --threads 1 --allocation-log " + path("a.log"));
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_FALSE(testing::slurp(path("a.log")).empty());
  EXPECT_FALSE(testing::slurp(path("a.rank1.log")).empty());
}

// A GPU preset's plan predicts a CUDA device: on the CPU virtual device it is refused, naming
// --device, not run and reported as the planner's error.
TEST_F(RunCommand, ACudaPlanIsNotRunOnTheCpuDevice) {
  auto plan = testing::tiny_plan("tiny-gqa", 64, 1, {});
  plan.cluster.hardware = load_hardware("h100-80gb").value();
  const auto o = run_cli("run --plan " + write(plan, "h100.json"));
  EXPECT_EQ(o.status, 2) << o.err;
  EXPECT_NE(o.err.find("longctx: error: --device: the plan is for h100-80gb (CUDA)"), std::string::npos) << o.err;
}

// The pid of the child of `parent` whose environment has RANK=<rank>, or -1.
pid_t rank_child(pid_t parent, int rank) {
  DIR* d = ::opendir("/proc");
  if (!d) return -1;
  pid_t found = -1;
  while (const dirent* e = ::readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    const std::string stat = testing::slurp("/proc/" + std::to_string(pid) + "/stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) != 2 || ppid != parent) continue;
    const std::string env = testing::slurp("/proc/" + std::to_string(pid) + "/environ");
    std::istringstream vars(env);
    bool match = false;
    for (std::string v; std::getline(vars, v, '\0');) match |= v == "RANK=" + std::to_string(rank);
    if (match) {
      found = pid;
      break;
    }
  }
  ::closedir(d);
  return found;
}

// A rank stopped mid-run (SIGSTOP) is named as the stalled rank within the stall timeout
// (2 s here), not after the collectives' 60 s, and not the rank that waited for it.
TEST_F(RunCommand, AStalledRankIsNamedWithinTheStallTimeout) {
  ParallelConfig p;
  p.ulysses = 2;
  auto plan = testing::tiny_plan("tiny-gqa", 128, 1, p);
  plan.cluster.shape = {1, 2};
  const std::string file = write(plan, "plan.json");
  const std::string err = path("err.txt");
  const pid_t launcher = testing::spawn_cli({"run", "--plan", file, "--nproc", "2", "--steps", "100000", "--threads", "1"},
                                            "/dev/null", err, {"LONGCTX_STALL_TIMEOUT_S=2"});
  ASSERT_GT(launcher, 0);
  pid_t victim = -1;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while ((victim = rank_child(launcher, 1)) < 0 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GT(victim, 0) << testing::slurp(err);
  std::this_thread::sleep_for(std::chrono::seconds(3));  // into its steps
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  const auto stopped = std::chrono::steady_clock::now();
  int status = 0;
  while (::waitpid(launcher, &status, WNOHANG) != launcher) {
    if (std::chrono::steady_clock::now() - stopped > std::chrono::seconds(50)) {
      ::kill(launcher, SIGKILL);
      ::waitpid(launcher, &status, 0);
      FAIL() << "not detected within 50 s:\n" << testing::slurp(err);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  EXPECT_LT(took, 20.0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  EXPECT_NE(testing::slurp(err).find("rank 1 of 2 stalled"), std::string::npos) << testing::slurp(err);
}

}  // namespace
}  // namespace longctx::runtime
