// The CLI contract (docs/architecture.md) that scripts rely on: JSON keys and exit statuses.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "common/input_file.h"
#include "common/interrupted_writes.h"
#include "planner/io/measured_trace.h"
#include "planner/core/plan.h"
#include "tests/test_paths.h"

namespace {

using namespace longctx;

struct Output {
  int status = -1;
  std::string out;
};

// Runs a shell command line; its stdout and exit status.
Output capture(const std::string& cmd) {
  Output o;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return o;
  std::array<char, 4096> buf{};
  std::size_t got = 0;
  while ((got = fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), got);
  const int rc = pclose(p);
  o.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return o;
}

Output run(const std::string& args) { return capture(longctx::testing::longctx_cli() + " " + args + " 2>/dev/null"); }

TEST(CliContract, PlanJsonHasThePlanKeys) {
  const Output o = run("plan --model tiny-gqa --gpu cpu --gpus 2 --seq 4K --budget 64MiB --json");
  ASSERT_EQ(o.status, 0) << o.out;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["schema"], "longctx.plan/1");
  for (const char* k : {"seq", "micro_batch"}) EXPECT_TRUE(j["train"].contains(k)) << k;
  for (const char* k : {"sharding", "ulysses", "head_chunk", "checkpoint", "offload_checkpoints", "offload_optimizer",
                        "offload_params", "mlp_tiles", "loss_tiles"})
    EXPECT_TRUE(j["parallel"].contains(k)) << k;
  for (const char* k : {"feasible", "peak_device_bytes", "peak_reserved_bytes", "peak_nvidia_smi_bytes", "peak_host_bytes",
                        "breakdown", "peak_at", "step_time_s", "tokens_per_s"})
    EXPECT_TRUE(j["prediction"].contains(k)) << k;
  EXPECT_TRUE(j["prediction"]["feasible"].get<bool>());
  std::int64_t sum = 0;
  for (auto& [k, v] : j["prediction"]["breakdown"].items()) sum += v.get<std::int64_t>();
  EXPECT_EQ(sum, j["prediction"]["peak_nvidia_smi_bytes"].get<std::int64_t>()) << "the breakdown adds up to what nvidia-smi shows";
  // The CPU virtual device reserves what it allocates and has nothing outside its allocator.
  EXPECT_EQ(j["prediction"]["peak_reserved_bytes"], j["prediction"]["peak_device_bytes"]);
  EXPECT_EQ(j["prediction"]["peak_nvidia_smi_bytes"], j["prediction"]["peak_device_bytes"]);
  // A GPU: allocated <= reserved < nvidia-smi, the context outside the caching allocator.
  const Output g = run("plan --model llama-3.2-1b --gpus 1 --seq 8K --json");
  ASSERT_EQ(g.status, 0) << g.out;
  const auto gp = nlohmann::json::parse(g.out)["prediction"];
  EXPECT_GE(gp["peak_reserved_bytes"].get<std::int64_t>(), gp["peak_device_bytes"].get<std::int64_t>());
  EXPECT_GT(gp["peak_nvidia_smi_bytes"].get<std::int64_t>(), gp["peak_reserved_bytes"].get<std::int64_t>());
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

// What `plan --json` prints, and the plan inside `max-context --json`, saved as files, are plan
// files: every command that takes a plan reads them (the keys written beside the plan included).
TEST(CliContract, JsonOutputsReadBackAsPlanFiles) {
  const auto dir = std::filesystem::temp_directory_path() / ("longctx_contract_json_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string from_plan = (dir / "plan.json").string(), from_max = (dir / "max.json").string();
  const std::string from_past = (dir / "past.json").string();
  ASSERT_EQ(capture(longctx::testing::longctx_cli() + " plan --model tiny-gqa --gpu cpu --gpus 2 --seq 4K --budget 64MiB --json > " +
                    from_plan + " 2>/dev/null").status, 0);
  // Past tiny-gqa's max_position_embeddings (65536): the answer carries "positions" too.
  capture(longctx::testing::longctx_cli() + " plan --model tiny-gqa --gpu cpu --gpus 2 --seq 72K --no-search --json > " + from_past +
          " 2>/dev/null");
  ASSERT_TRUE(nlohmann::json::parse(std::ifstream(from_past)).contains("positions"));
  const Output m = run("max-context --model tiny-odd --gpu cpu --gpus 2 --budget 16MiB --host-mem 256MiB --json");
  ASSERT_EQ(m.status, 0) << m.out;
  std::ofstream(from_max) << nlohmann::json::parse(m.out)["plan"].dump();
  for (const std::string& file : {from_plan, from_max, from_past}) {
    const Output e = capture(longctx::testing::longctx_cli() + " explain " + file + " 2>&1");
    EXPECT_EQ(e.status, 0) << file << ": " << e.out;
    EXPECT_NE(e.out.find("breakdown at the device peak"), std::string::npos) << e.out;
  }
  std::filesystem::remove_all(dir);
}

// run's and calibrate's --nproc is the launcher's own option, parsed before the runtime is
// asked for anything: held to the rule of every whole-number flag, once, in either spelling.
TEST(CliContract, NprocIsParsedAsEveryWholeNumberFlag) {
  const std::pair<const char*, const char*> refused[] = {
      {"--nproc 2 --nproc 1", "given more than once"}, {"--nproc +2", "not a whole number"},
      {"--nproc=0", "not a rank count from 1 to 1024"},  {"--nproc 1025", "not a rank count"},
      {"--nproc", "needs a value"},                    {"--nproc=abc", "not a whole number"}};
  for (const auto& [args, why] : refused)
    for (const char* command : {"run --plan plan.json", "calibrate"}) {
      const Output o = capture(longctx::testing::longctx_cli() + " " + command + " " + args + " 2>&1");
      EXPECT_EQ(o.status, 2) << command << " " << args << ": " << o.out;
      EXPECT_NE(o.out.find("--nproc: "), std::string::npos) << o.out;
      EXPECT_NE(o.out.find(why), std::string::npos) << args << ": " << o.out;
    }
  // Both spellings of a valid count are taken: what fails after them is the missing plan file
  // (or, without a runtime, the build), never --nproc.
  for (const char* args : {"--nproc 2", "--nproc=2"}) {
    const Output o = capture(longctx::testing::longctx_cli() + " run --plan /nonexistent/plan.json " + args + " 2>&1");
    EXPECT_NE(o.status, 0) << args;
    EXPECT_EQ(o.out.find("--nproc"), std::string::npos) << args << ": " << o.out;
  }
}

TEST(CliContract, ExitStatuses) {
  EXPECT_EQ(run("plan --model no-such-model --seq 1M").status, 2);
  EXPECT_EQ(run("plan --seq 12Q").status, 2);
  EXPECT_EQ(run("plan --model llama-3.1-8b --gpus 1 --seq 1M --budget 1GiB").status, 3);
  EXPECT_EQ(run("plan --model llama-3.1-8b --gpus 8 --seq 1M --ulysses 3").status, 2);
  EXPECT_EQ(run("explain /nonexistent/plan.json").status, 2);
  EXPECT_EQ(run("--no-such-flag").status, 2);
  // -o is opened before the search: a path that cannot take the plan file is refused first,
  // not after a search (this one finds no plan, which would exit 3).
  const Output unwritable = run("plan --model llama-3.1-8b --gpus 1 --seq 1M --budget 1GiB -o /nonexistent/plan.json");
  EXPECT_EQ(unwritable.status, 2) << unwritable.out;
  // So does max-context, for one stack's plan file and for --stack all's set of them.
  for (const char* stacks : {"", " --stack all"}) {
    const Output longest =
        run(std::string("max-context --model llama-3.1-8b --gpus 1 --budget 1GiB --no-ladder") + stacks + " -o /nonexistent/x.json");
    EXPECT_EQ(longest.status, 2) << stacks << longest.out;
  }
}

// `sh -c SCRIPT`, where @L@ stands for the longctx binary; stdout and stderr together.
Output run_sh(const std::string& script) {
  std::string cmd = script;
  for (std::size_t at; (at = cmd.find("@L@")) != std::string::npos;) cmd.replace(at, 3, longctx::testing::longctx_cli());
  return capture("sh -c '" + cmd + "' 2>&1");
}

// A fresh folder per test, removed after it.
class Outputs : public ::testing::Test {
 protected:
  std::filesystem::path dir_;
  void SetUp() override {
    char tmpl[] = "/tmp/longctx_outputs_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string plan_file() {
    const std::string p = path("plan.json");
    EXPECT_EQ(run("plan --model tiny-gqa --gpu cpu --gpus 1 --seq 2K --budget 64MiB -o " + p).status, 0);
    return p;
  }
  // What the folder holds (a temporary left behind would show here).
  std::vector<std::string> names() const {
    std::vector<std::string> v;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  }
  // A longctx trace of `plan` with the given device peak (JSON text).
  std::string trace_file(const std::string& plan_path, const std::string& peak, const std::string& name = "trace.json") {
    const auto plan = read_plan_file(plan_path);
    EXPECT_TRUE(plan.ok());
    const auto id = trace_identity(*plan);
    std::ofstream(path(name)) << R"({"traceEvents": [{"name": "forward", "ph": "X", "ts": 0, "dur": 1, "args": )"
                              << R"({"peak_device_bytes": )" << peak << R"(, "peak_host_bytes": 0}}], "otherData": )"
                              << R"({"model": ")" << id.model << R"(", "plan_fingerprint": ")" << id.plan_fingerprint
                              << R"("}})";
    return path(name);
  }
};

bool is_char_device(const char* p) {
  struct stat st{};
  return ::stat(p, &st) == 0 && S_ISCHR(st.st_mode);
}

// Devices and FIFOs are never replaced by a regular file: refused, exit 2, the device
// untouched. (Run as root, the old writer turned /dev/null into a file.)
TEST_F(Outputs, DevicesFoldersAndFifosAreRefusedNotReplaced) {
  const std::string plan = plan_file();
  const std::string trace = trace_file(plan, "1000000");
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0644), 0);
  for (const std::string& target : {std::string("/dev/null"), std::string("/dev/full"), path("fifo"), dir_.string()}) {
    for (const std::string cmd : {"plan --model tiny-gqa --gpu cpu --gpus 1 --seq 2K --budget 64MiB -o " + target,
                                  "explain " + plan + " --svg " + target,
                                  "explain " + plan + " --html " + target,
                                  "compare --plan " + plan + " --trace " + trace + " --svg " + target}) {
      const Output o = run_sh("@L@ " + cmd);
      EXPECT_EQ(o.status, 2) << cmd << "\n" << o.out;
      EXPECT_NE(o.out.find("regular files only"), std::string::npos) << cmd << "\n" << o.out;
      if (cmd.find("--html") != std::string::npos) EXPECT_NE(o.out.find("--html"), std::string::npos) << o.out;
    }
  }
  EXPECT_TRUE(is_char_device("/dev/null"));
  EXPECT_TRUE(is_char_device("/dev/full"));
  EXPECT_EQ(names(), (std::vector<std::string>{"fifo", "plan.json", "trace.json"}));
}

// A symbolic link is followed: the file it names is replaced, the link stays a link.
TEST_F(Outputs, ALinkIsFollowedAndKept) {
  std::ofstream(path("real.json")) << "old";
  ::chmod(path("real.json").c_str(), 0600);
  std::filesystem::create_symlink("real.json", path("link.json"));
  ASSERT_EQ(run("plan --model tiny-gqa --gpu cpu --gpus 1 --seq 2K --budget 64MiB -o " + path("link.json")).status, 0);
  EXPECT_TRUE(std::filesystem::is_symlink(path("link.json")));
  EXPECT_TRUE(read_plan_file(path("real.json")).ok());
  struct stat st{};
  ASSERT_EQ(::stat(path("real.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "the replaced file keeps its mode";
  EXPECT_EQ(names(), (std::vector<std::string>{"link.json", "real.json"}));
}

// /dev/stdout is what the user means literally: written in place, in full.
TEST_F(Outputs, DevStdoutIsWrittenInPlace) {
  const Output o = run_sh("@L@ plan --model tiny-gqa --gpu cpu --gpus 1 --seq 2K --budget 64MiB -o /dev/stdout | cat");
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_NE(o.out.find("\"schema\": \"longctx.plan/1\""), std::string::npos) << o.out;
  // A stream that fails (a full device behind stdout) is an error, not exit 0.
  const Output full = run_sh("@L@ plan --model tiny-gqa --gpu cpu --gpus 1 --seq 2K --budget 64MiB -o /dev/stdout >/dev/full");
  EXPECT_EQ(full.status, 1) << full.out;
  EXPECT_NE(full.out.find("No space left on device"), std::string::npos) << full.out;
}

// An answer that cannot be written to standard output (a full device behind it) is an error
// naming the cause, exit 1: never an abort (fmt's failed write throws), nor exit 0 with the
// answer lost (a buffered stream fails only when flushed).
TEST_F(Outputs, AnAnswerThatCannotBeWrittenToStdoutIsAnError) {
  const std::string plan = plan_file();
  for (const std::string& cmd : std::vector<std::string>{
           "plan --model tiny-gqa --gpu cpu --gpus 1 --seq 2K --budget 64MiB",
           "plan --model tiny-gqa --gpu cpu --gpus 1 --seq 2K --budget 64MiB --json",
           "max-context --model tiny-gqa --gpu cpu --gpus 1 --budget 64MiB --no-ladder --json", "explain " + plan,
           "models"}) {
    const Output o = run_sh("@L@ " + cmd + " >/dev/full");
    EXPECT_EQ(o.status, 1) << cmd << "\n" << o.out;
    EXPECT_NE(o.out.find("writing the answer to standard output failed: No space left on device"), std::string::npos)
        << cmd << "\n" << o.out;
  }
}

// -o naming standard output makes the plan file the one document there, in text and JSON mode
// (the answer beside it made two JSON documents no reader parses); --stack all, which writes a
// plan per stack beside -o, refuses it.
TEST_F(Outputs, APlanFileWrittenToStdoutIsTheOnlyDocumentThere) {
  for (const std::string& cmd : std::vector<std::string>{
           "plan --model tiny-gqa --gpu cpu --gpus 1 --seq 2K --json",
           "plan --model tiny-gqa --gpu cpu --gpus 1 --seq 2K",
           "max-context --model tiny-gqa --gpu cpu --gpus 1 --no-ladder --json",
           "max-context --model tiny-gqa --gpu cpu --gpus 1 --no-ladder"}) {
    const Output o = run_sh("@L@ " + cmd + " -o /dev/stdout 2>/dev/null");
    EXPECT_EQ(o.status, 0) << cmd << "\n" << o.out;
    const auto j = nlohmann::json::parse(o.out, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << cmd << ": not one JSON document\n" << o.out;
    EXPECT_TRUE(j.contains("schema") && j.contains("parallel")) << cmd << "\n" << o.out;
    EXPECT_FALSE(j.contains("search") || j.contains("max_tokens")) << cmd << ": the answer, not the plan file";
  }
  const Output every = run_sh("@L@ max-context --model tiny-gqa --gpu cpu --gpus 1 --stack all -o /dev/fd/1");
  EXPECT_EQ(every.status, 2) << every.out;
  EXPECT_NE(every.out.find("-o: '/dev/fd/1' cannot hold one plan per stack"), std::string::npos) << every.out;
}

// export never writes over the plan it reads: -o naming the plan file, or a folder where the
// plan is saved under one of the set's names, is refused naming -o, exit 2, the plan kept.
TEST_F(Outputs, ExportNeverReplacesItsPlan) {
  ASSERT_EQ(run("plan --model tiny-gqa --gpus 8 --seq 4K -o " + path("plan.json")).status, 0);
  std::filesystem::create_directory(path("set"));
  std::filesystem::copy_file(path("plan.json"), path("set/ds_config.json"));
  const std::pair<std::string, std::string> cases[] = {
      {path("plan.json"), path("plan.json")}, {path("set/ds_config.json"), path("set") + "/"}};
  for (const auto& [input, output] : cases) {
    const Output o = run_sh("@L@ export " + input + " --stack deepspeed -o " + output);
    EXPECT_EQ(o.status, 2) << o.out;
    EXPECT_NE(o.out.find("-o: "), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("names the same file as the plan file"), std::string::npos) << o.out;
    EXPECT_TRUE(read_plan_file(input).ok()) << input;
  }
  EXPECT_EQ(run_sh("@L@ export " + path("plan.json") + " --stack deepspeed -o " + path("other") + "/").status, 0);
}

// A folder holding another export's file that the new set does not write (an earlier hf set's
// ds_config.json beside torchtitan's job file) is refused naming -o and the file, before any
// file of the set is written; the same set exported again replaces its files.
TEST_F(Outputs, ExportRefusesAFolderHoldingAnotherSetsFile) {
  ASSERT_EQ(run("plan --model llama-3.2-1b --gpus 8 --seq 16K --no-search --sharding zero3 --ulysses 4 --budget 1TiB -o " +
                path("ulysses.json")).status,
            0);
  ASSERT_EQ(run("plan --stack torchtitan --model llama-3.1-8b --gpus 8 --seq 8K --no-search --budget 1TiB -o " +
                path("titan.json")).status,
            0);
  const std::string set = path("set") + "/";
  ASSERT_EQ(run_sh("@L@ export " + path("ulysses.json") + " --stack hf -o " + set).status, 0);
  ASSERT_TRUE(std::filesystem::exists(path("set/ds_config.json")));
  const auto before = std::filesystem::last_write_time(path("set/launch.sh"));
  const Output o = run_sh("@L@ export " + path("titan.json") + " --stack torchtitan -o " + set);
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_NE(o.out.find("-o: "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("accelerate_config.yaml, ds_config.json, training_args.json from another export"),
            std::string::npos) << o.out;
  EXPECT_FALSE(std::filesystem::exists(path("set/torchtitan_job.toml")));
  EXPECT_EQ(std::filesystem::last_write_time(path("set/launch.sh")), before);
  EXPECT_EQ(run_sh("@L@ export " + path("ulysses.json") + " --stack hf -o " + set).status, 0);
}

// What max-context --json prints, saved whole and given as a plan, is refused naming where its
// plan is, not as a plan without a schema.
TEST_F(Outputs, AMaxContextAnswerGivenAsAPlanSaysWhereItsPlanIs) {
  ASSERT_EQ(run_sh("@L@ max-context --model tiny-gqa --gpu cpu --gpus 1 --budget 64MiB --no-ladder --json > " +
                   path("answer.json")).status,
            0);
  const Output o = run_sh("@L@ explain " + path("answer.json"));
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_NE(o.out.find("this is max-context --json's answer, whose plan is its \"plan\" object"), std::string::npos)
      << o.out;
}

// A signal that ends the process mid-write (Ctrl-C during `run --trace`, the launcher's
// SIGTERM to its ranks) removes the temporaries then open, and the process still ends by that
// signal; a file already put in place stays.
TEST_F(Outputs, AnInterruptedWriteLeavesNoTemporary) {
  for (const int signal : {SIGINT, SIGTERM}) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      remove_temporaries_when_interrupted();
      auto done = AtomicFile::open(path("done.json"), "-o");
      if (!done || !done->write("{}", 2) || !done->commit()) ::_exit(10);
      auto open = AtomicFile::open(path("trace.json"), "--trace");
      auto log = AtomicFile::open(path("allocations.log"), "--allocation-log");
      if (!open || !log || !open->write("{", 1) || !log->write("x", 1)) ::_exit(11);
      ::raise(signal);
      ::_exit(12);  // not reached: the signal ends the process
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "exit " << WEXITSTATUS(status);
    EXPECT_EQ(WTERMSIG(status), signal);
    EXPECT_EQ(names(), std::vector<std::string>{"done.json"});
    std::filesystem::remove(path("done.json"));
  }
}

// A disk that fills mid-write: a file-size limit (ulimit -f, in 512-byte blocks) makes every write past
// it fail with EFBIG, as a full disk fails with ENOSPC, on any file system and without root.
// The command exits 1 naming the file and the cause, and leaves neither the file nor a
// temporary behind.
TEST_F(Outputs, AWriteThatFailsLeavesNothingBehind) {
  const std::string plan = plan_file();
  const std::string trace = trace_file(plan, "1000000");
  for (const std::string cmd : {"plan --model tiny-gqa --gpu cpu --gpus 1 --seq 2K --budget 64MiB -o " + path("out"),
                                "explain " + plan + " --svg " + path("out"),
                                "explain " + plan + " --html " + path("out"),
                                "compare --plan " + plan + " --trace " + trace + " --svg " + path("out")}) {
    const Output o = run_sh("ulimit -f 1; @L@ " + cmd + " >/dev/null");
    EXPECT_EQ(o.status, 1) << cmd << "\n" << o.out;
    EXPECT_NE(o.out.find(path("out")), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("File too large"), std::string::npos) << o.out;
    EXPECT_EQ(names(), (std::vector<std::string>{"plan.json", "trace.json"})) << cmd;
  }
}

// explain writes its --svg and --html as a set: where the disk fills while one is written
// (a file-size limit between the two files' sizes), neither is left, nor a temporary.
TEST_F(Outputs, ExplainLeavesBothOutputsOrNeither) {
  const std::string plan = plan_file();
  const std::string both = "@L@ explain " + plan + " --svg " + path("t.svg") + " --html " + path("r.html");
  ASSERT_EQ(run_sh(both + " >/dev/null").status, 0);
  const auto svg = std::filesystem::file_size(path("t.svg"));
  const auto html = std::filesystem::file_size(path("r.html"));
  std::filesystem::remove(path("t.svg"));
  std::filesystem::remove(path("r.html"));
  // sh's ulimit -f counts 512-byte blocks (POSIX): the larger file fails, the smaller fits,
  // whichever of the two is written first.
  const auto blocks = std::max(svg, html) / 512;
  ASSERT_LE(std::min(svg, html), blocks * 512) << "the two files must differ by 512 bytes for this test";
  const Output o = run_sh("ulimit -f " + std::to_string(blocks) + "; " + both + " >/dev/null");
  EXPECT_EQ(o.status, 1) << o.out;
  EXPECT_NE(o.out.find("File too large"), std::string::npos) << o.out;
  EXPECT_EQ(names(), (std::vector<std::string>{"plan.json"}));
}

// explain's outputs are all checked before any is written: a bad --html (a folder, a missing
// one) is refused naming --html, exit 2, and leaves no --svg behind; a good one is written
// whole, replacing the file through its temporary.
TEST_F(Outputs, ExplainHtmlIsCheckedFirstAndWrittenWhole) {
  const std::string plan = plan_file();
  for (const std::string& bad : {dir_.string(), path("missing/report.html")}) {
    const Output o = run_sh("@L@ explain " + plan + " --svg " + path("t.svg") + " --html " + bad);
    EXPECT_EQ(o.status, 2) << o.out;
    EXPECT_NE(o.out.find("--html"), std::string::npos) << o.out;
    EXPECT_EQ(names(), (std::vector<std::string>{"plan.json"})) << bad;
  }
  std::ofstream(path("report.html")) << "old";
  const Output o = run_sh("@L@ explain " + plan + " --html " + path("report.html"));
  ASSERT_EQ(o.status, 0) << o.out;
  std::ifstream in(path("report.html"));
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("</html>"), std::string::npos) << "written whole";
  EXPECT_EQ(names(), (std::vector<std::string>{"plan.json", "report.html"}));
}

// max-context -o with --stack all writes every stack's plan file beside -o's as one set: a
// name that cannot be written (here a folder) fails the command before its answer prints and
// leaves every file as it was; a good set replaces them all.
TEST_F(Outputs, MaxContextWritesItsPlanFilesAsOneSet) {
  std::ofstream(path("p.json")) << "old";
  std::ofstream(path("p.hf.json")) << "old hf";
  std::filesystem::create_directory(path("p.torchtitan.json"));
  const std::string cmd = "@L@ max-context --model tiny-gqa --gpus 2 --no-ladder --stack all -o " + path("p.json");
  Output o = run_sh(cmd);
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_NE(o.out.find("p.torchtitan.json"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("tokens"), std::string::npos) << "no answer before the refusal\n" << o.out;
  EXPECT_EQ(names(), (std::vector<std::string>{"p.hf.json", "p.json", "p.torchtitan.json"}));
  std::ifstream old(path("p.json"));
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(old)), std::istreambuf_iterator<char>()), "old");
  std::filesystem::remove(path("p.torchtitan.json"));
  o = run_sh(cmd);
  ASSERT_EQ(o.status, 0) << o.out;
  for (const char* name : {"p.json", "p.hf.json", "p.torchtitan.json"})
    EXPECT_TRUE(read_plan_file(path(name)).ok()) << name;
}

// An output never replaces what the command reads, nor another of its outputs: refused naming
// the output's option, exit 2, every file as it was.
TEST_F(Outputs, AnOutputNeverReplacesAnInputOrAnotherOutput) {
  const std::string plan = plan_file();
  const std::string trace = trace_file(plan, "1000000");
  const auto hardware = nlohmann::json::parse(*read_regular_file(plan, "plan"))["cluster"]["hardware"];
  std::ofstream(path("gpu.json")) << hardware.dump();
  const std::pair<std::string, std::string> cases[] = {
      {"explain " + plan + " --svg " + plan, "--svg: "},
      {"explain " + plan + " --html " + plan, "--html: "},
      {"explain " + plan + " --svg " + path("t.svg") + " --html " + path("t.svg"), "--svg: "},
      {"compare --plan " + plan + " --trace " + trace + " --svg " + trace, "--svg: "},
      {"plan --model tiny-gqa --gpus 1 --seq 2K --gpu " + path("gpu.json") + " -o " + path("gpu.json"), "-o: "}};
  for (const auto& [cmd, field] : cases) {
    const Output o = run_sh("@L@ " + cmd);
    EXPECT_EQ(o.status, 2) << cmd << "\n" << o.out;
    EXPECT_NE(o.out.find(field), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("names the same file as"), std::string::npos) << o.out;
  }
  // Standard output holds --json's document: an SVG there too would leave neither readable.
  const Output both = run_sh("@L@ compare --plan " + plan + " --trace " + trace + " --json --svg /dev/stdout");
  EXPECT_EQ(both.status, 2) << both.out;
  EXPECT_NE(both.out.find("--svg: "), std::string::npos) << both.out;
  EXPECT_EQ(names(), (std::vector<std::string>{"gpu.json", "plan.json", "trace.json"}));
  EXPECT_TRUE(read_plan_file(plan).ok());
  // Without --json the SVG is the one document there: no table after it.
  const Output drawing = run_sh("@L@ compare --plan " + plan + " --trace " + trace + " --svg /dev/stdout 2>/dev/null");
  EXPECT_EQ(drawing.status, 0) << drawing.out;
  EXPECT_EQ(drawing.out.rfind("<svg", 0), 0u) << drawing.out;
  EXPECT_EQ(drawing.out.find("</svg>\n"), drawing.out.size() - 7) << drawing.out;
  // The same name for two streams is no loss: /dev/stdout may take both.
  EXPECT_EQ(run_sh("@L@ explain " + plan + " --svg /dev/stdout --html /dev/stdout >/dev/null").status, 0);
}

// A model given as a folder reads its config.json: -o naming that file is refused as -o naming
// --model's file is, by plan and by max-context (one stack or --stack all), the file intact.
TEST_F(Outputs, AnOutputNeverReplacesTheConfigOfAModelFolder) {
  std::filesystem::create_directory(path("model"));
  std::filesystem::copy_file(longctx::testing::source_path("tests/data/configs/qwen3-8b/config.json"),
                             path("model/config.json"));
  const std::string config = *read_regular_file(path("model/config.json"), "config");
  for (const std::string& cmd :
       {"plan --model " + path("model") + " --gpus 8 --seq 4K -o " + path("model/config.json"),
        "max-context --model " + path("model/") + " --gpus 8 --no-ladder -o " + path("model") + "/./config.json",
        "max-context --model " + path("model") + " --gpus 8 --no-ladder --stack all -o " + path("model/config.json")}) {
    const Output o = run_sh("@L@ " + cmd);
    EXPECT_EQ(o.status, 2) << cmd << "\n" << o.out;
    EXPECT_NE(o.out.find("names the same file as --model's config.json"), std::string::npos) << o.out;
    EXPECT_EQ(*read_regular_file(path("model/config.json"), "config"), config);
  }
}

// export refuses a stack that cannot run the plan's hardware (ArcticTraining on the CPU virtual
// device, as `plan --stack arctic --gpu cpu` does), and says so when the plan does not fit:
// the files written whole, and exit 3 as `plan --no-search` gives for the same plan.
TEST_F(Outputs, ExportSaysWhatTheStackCannotRun) {
  const std::string plan = plan_file();  // the CPU virtual device
  Output o = run_sh("@L@ export " + plan + " --stack arctic -o " + path("arctic.yaml"));
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_NE(o.out.find("--stack arctic runs DeepSpeed and flash attention on CUDA GPUs"), std::string::npos) << o.out;
  EXPECT_EQ(names(), (std::vector<std::string>{"plan.json"}));
  o = run_sh("@L@ plan --model tiny-gqa --gpus 2 --seq 4K --budget 900MiB --no-search -o " + path("over.json"));
  ASSERT_EQ(o.status, 3) << o.out;
  o = run_sh("@L@ export " + path("over.json") + " --stack hf >/dev/null");
  EXPECT_EQ(o.status, 3) << o.out;
  EXPECT_NE(o.out.find("note: the plan does not fit"), std::string::npos) << o.out;
  o = run_sh("@L@ export " + path("over.json") + " --stack hf -o " + path("over") + "/");
  EXPECT_EQ(o.status, 3) << o.out;
  EXPECT_TRUE(std::filesystem::exists(path("over/launch.sh")) && std::filesystem::exists(path("over/training_args.json")));
}

// A hardware file whose CUDA context takes the whole device is bad input, not "no plan fits".
TEST_F(Outputs, AContextAsLargeAsTheDeviceIsRefused) {
  const std::string plan = plan_file();
  auto hardware = nlohmann::json::parse(*read_regular_file(plan, "plan"))["cluster"]["hardware"];
  hardware["context_bytes"] = hardware["device_memory_bytes"];
  std::ofstream(path("gpu.json")) << hardware.dump();
  const Output o = run_sh("@L@ plan --model tiny-gqa --gpus 1 --seq 2K --gpu " + path("gpu.json"));
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_NE(o.out.find("--gpu " + path("gpu.json") + ": context_bytes: "), std::string::npos) << o.out;
}

// Names read from files (a hardware preset's, a plan's model) are printed escaped on their one
// line of a text answer: no ESC reaches the terminal, no newline starts a line of their own.
TEST_F(Outputs, NamesFromFilesAreEscapedInTextAnswers) {
  const std::string plan = plan_file();
  auto j = nlohmann::json::parse(*read_regular_file(plan, "plan"));
  const std::string hostile = "evil\n\x1b[31mred\x07";
  auto hardware = j["cluster"]["hardware"];
  hardware["name"] = "cpu-" + hostile;
  std::ofstream(path("gpu.json")) << hardware.dump();
  j["model"]["name"] = "tiny-" + hostile;
  std::ofstream(path("named.json")) << j.dump();
  for (const std::string& args :
       {"plan --model tiny-gqa --gpus 1 --seq 2K --budget 64MiB --gpu " + path("gpu.json"),
        "max-context --model tiny-gqa --gpus 1 --budget 64MiB --no-ladder --gpu " + path("gpu.json"),
        "explain " + path("named.json")}) {
    const Output o = run(args);
    ASSERT_TRUE(o.status == 0 || o.status == 3) << args << "\n" << o.out;
    EXPECT_EQ(o.out.find('\x1b'), std::string::npos) << args;
    EXPECT_EQ(o.out.find('\x07'), std::string::npos) << args;
    EXPECT_EQ(o.out.find("\n\\x1B[31mred"), std::string::npos) << args;
    EXPECT_NE(o.out.find("evil\\x0A\\x1B[31mred\\x07"), std::string::npos) << args << "\n" << o.out;
  }
}

// --stack all writes its plans as one set of regular files in -o's folder: a link or a stream
// there is refused before the search runs (it was refused after, the search's time lost),
// and nothing is written through the link.
TEST_F(Outputs, EveryStacksSetRefusesALinkBeforeItsSearch) {
  std::filesystem::create_symlink(path("target.json"), path("link.json"));
  for (const std::string& out : {path("link.json"), std::string("/dev/stderr")}) {
    const Output o = run_sh("@L@ max-context --model tiny-gqa --gpu cpu --gpus 1 --budget 64MiB --stack all -o " + out);
    EXPECT_EQ(o.status, 2) << o.out;
    EXPECT_NE(o.out.find("-o: '" + out + "'"), std::string::npos) << o.out;
    EXPECT_EQ(o.out.find("searching"), std::string::npos) << o.out;
  }
  EXPECT_FALSE(std::filesystem::exists(path("target.json")));
  // One stack's plan follows the link.
  EXPECT_EQ(run("max-context --model tiny-gqa --gpu cpu --gpus 1 --budget 64MiB -o " + path("link.json")).status, 0);
  EXPECT_TRUE(std::filesystem::is_regular_file(path("target.json")));
}

// The budget the command line refuses (no more than the CUDA context) is refused from a plan
// file too, naming its key: the rule is validate()'s, which reads both.
TEST_F(Outputs, APlanFilesBudgetUnderTheContextIsRefusedAsOnTheCommandLine) {
  ASSERT_EQ(run("plan --model tiny-gqa --gpus 1 --seq 2K --no-search -o " + path("h100.json")).status, 0);
  auto j = nlohmann::json::parse(*read_regular_file(path("h100.json"), "plan"));
  j["cluster"]["device_budget_bytes"] = 1000;
  std::ofstream(path("small.json")) << j.dump();
  for (const std::string& command : {std::string("explain "), "export --stack hf -o " + path("out") + " "}) {
    const Output o = run_sh("@L@ " + command + path("small.json"));
    EXPECT_EQ(o.status, 2) << command << o.out;
    EXPECT_NE(o.out.find("cluster.device_budget_bytes: 1000 B per GPU is no more than"), std::string::npos) << o.out;
  }
}

// A run's trace names its plan; a longctx trace that names none could be of any plan (a tiny
// model's was held to an 8B plan at +411,779%) and is refused.
TEST_F(Outputs, CompareRefusesALongctxTraceThatNamesNoPlan) {
  const std::string plan = plan_file();
  std::ofstream(path("anonymous.json"))
      << R"({"traceEvents": [{"name": "forward", "ph": "X", "ts": 0, "dur": 1, "args": {"peak_device_bytes": 1000}}]})";
  const Output o = run_sh("@L@ compare --plan " + plan + " --trace " + path("anonymous.json"));
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_NE(o.out.find("names no plan"), std::string::npos) << o.out;
  EXPECT_EQ(run_sh("@L@ compare --plan " + plan + " --trace " + trace_file(plan, "1000") + " >/dev/null").status, 0);
}

// A plan file's ladder, malformed, is refused naming the field (exit 2).
TEST_F(Outputs, ExplainHtmlRefusesAMalformedLadder) {
  const std::string plan = plan_file();
  std::ifstream in(plan);
  auto j = nlohmann::json::parse(in);
  j["ladder"] = nlohmann::json::array({{{"techniques", {"zero3"}}, {"max_tokens", "many"}, {"binding", "host memory"}}});
  std::ofstream(path("ladder.json")) << j.dump();
  const Output o = run_sh("@L@ explain " + path("ladder.json") + " --html " + path("report.html"));
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_NE(o.out.find("ladder[0].max_tokens"), std::string::npos) << o.out;
  EXPECT_EQ(names(), (std::vector<std::string>{"ladder.json", "plan.json"}));
}

TEST_F(Outputs, WriteTextAtomicallyRefusesAFifoWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0644), 0);
  const auto r = write_text_atomically(path("fifo"), "-o", "x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::BadInput);
  EXPECT_NE(r.error().message.find("a FIFO"), std::string::npos) << r.error().message;
  const auto read = read_regular_file(path("fifo"), "--plan");
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.error().message.find("not a regular file"), std::string::npos) << read.error().message;
  // An uncommitted AtomicFile leaves nothing.
  {
    auto f = AtomicFile::open(path("a"), "-o");
    ASSERT_TRUE(f.ok());
    f->write("abc", 3);
  }
  EXPECT_EQ(names(), (std::vector<std::string>{"fifo"}));
}

// compare holds a plan against a trace of that plan only, and against byte counts only.
TEST_F(Outputs, CompareRefusesNonsenseAndTracesOfAnotherPlan) {
  const std::string plan = plan_file();
  ASSERT_EQ(run("plan --model tiny-odd --gpu cpu --gpus 1 --seq 2K --budget 64MiB -o " + path("other.json")).status, 0);
  EXPECT_EQ(run("compare --plan " + plan + " --trace " + trace_file(plan, "1000000")).status, 0);
  for (const std::string peak : {"0", "-4096", "1e300", "\"1000\""}) {
    const Output o = run_sh("@L@ compare --plan " + plan + " --trace " + trace_file(plan, peak));
    EXPECT_EQ(o.status, 2) << peak << "\n" << o.out;
  }
  const Output o = run_sh("@L@ compare --plan " + plan + " --trace " + trace_file(path("other.json"), "1000000", "t2.json"));
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_NE(o.out.find("is a trace of model tiny-odd, the plan is of tiny-gqa"), std::string::npos) << o.out;
}

// A hand-edited cluster.gpus that disagrees with the shape is refused, not run as 1 rank.
TEST_F(Outputs, APlansGpusMustAgreeWithItsShape) {
  const std::string plan = plan_file();
  std::stringstream text;
  text << std::ifstream(plan).rdbuf();
  for (const std::string gpus : {"0", "16"}) {
    auto j = nlohmann::json::parse(text.str());
    j["cluster"]["gpus"] = std::stoi(gpus);
    std::ofstream(path("edited.json")) << j.dump();
    const Output o = run_sh("@L@ explain " + path("edited.json"));
    EXPECT_EQ(o.status, 2) << o.out;
    EXPECT_NE(o.out.find("cluster.gpus"), std::string::npos) << o.out;
  }
}

// Contradictions and empty lists are refused, not resolved silently.
TEST(CliContract, ContradictoryFlagsAndEmptyListsAreRefused) {
  const std::string plan = "@L@ plan --model tiny-gqa --gpu cpu --gpus 1 --seq 2K --budget 64MiB ";
  Output o = run_sh(plan + "--offload-checkpoints --no-offload-checkpoints");
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_NE(o.out.find("--offload-checkpoints: given with --no-offload-checkpoints; pass one of the two"), std::string::npos)
      << o.out;
  // The one rule for every value (cli/common/parse_values.h) refuses a blank or padded value
  // first; a list of empty names is the list's to refuse.
  const std::pair<std::string, std::string> lists[] = {{"\"\"", "--techniques: is empty"},
                                                       {",", "names no technique; write none for no technique"},
                                                       {"zero3,", "'zero3,' ends with a comma"},
                                                       {",zero3", "'' is not a technique"},
                                                       {"\" , \"", "--techniques: ' , ' has spaces around it"}};
  for (const auto& [list, message] : lists) {
    o = run_sh(plan + "--techniques " + list);
    EXPECT_EQ(o.status, 2) << list << "\n" << o.out;
    EXPECT_NE(o.out.find(message), std::string::npos) << o.out;
  }
  EXPECT_EQ(run_sh(plan + "--techniques none").status, 0);
}

TEST(CliContract, ConversionErrorsSayTheFix) {
  const Output o = run_sh("@L@ plan --model tiny-gqa --gpus abc");
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_NE(o.out.find("fix:"), std::string::npos) << o.out;
}

// The parser's own mistakes in longctx's words: a repeated option, arguments the command does
// not take (in the order given), a number past its type's range; exit 2 each.
TEST(CliContract, ParseErrorsNameTheOptionAndTheFix) {
  const std::pair<std::string, std::string> cases[] = {
      {"plan --model tiny-gqa --gpus 2 --gpus 4 --seq 4K", "--gpus: given 2 times; give it once"},
      {"max-context --model tiny-gqa --seq 4K", "error: --seq 4K: this command takes no such arguments"},
      {"plan --model tiny-gqa --seq 4K extra", "error: extra: this command takes no such argument\n"},
      {"explain plan.json --live 2147483648", "--live: '2147483648' is not a whole number in the option's range"},
      {"explain plan.json --live -1", "--live: '-1' is negative; give a whole number in decimal digits"}};
  for (const auto& [cmd, message] : cases) {
    const Output o = run_sh("@L@ " + cmd);
    EXPECT_EQ(o.status, 2) << cmd << "\n" << o.out;
    EXPECT_NE(o.out.find(message), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("\nfix: "), std::string::npos) << o.out;
  }
}

// max-context that finds nothing even at its shortest length says what to change among its
// own options (it has no --seq).
TEST(CliContract, MaxContextNoFitAdvisesItsOwnOptions) {
  // An H100's context is 864.81 MiB: 865 MiB leaves a few hundred KiB for the allocator.
  const Output o = run_sh("@L@ max-context --model tiny-gqa --gpus 1 --budget 865MiB --no-ladder");
  EXPECT_EQ(o.status, 3) << o.out;
  EXPECT_NE(o.out.find("the shortest max-context tries"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("--seq"), std::string::npos) << o.out;
  // A budget the context alone fills is no question of techniques or GPUs: refused as input.
  for (const char* command : {"max-context --no-ladder", "plan --seq 4K"}) {
    const Output under = run_sh(std::string("@L@ ") + command + " --model tiny-gqa --gpus 1 --budget 500MiB");
    EXPECT_EQ(under.status, 2) << under.out;
    EXPECT_NE(under.out.find("--budget: 500.00 MiB per GPU is no more than the 864.81 MiB"), std::string::npos) << under.out;
  }
}

}  // namespace
