// Training-state checkpoints (training_state.h): a run killed after a checkpoint and resumed
// computes the losses of an uninterrupted run, bit for bit; half-written checkpoints are never
// used; a checkpoint of another run is refused; saving and restoring leave the measured
// memory alone.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "cli_fixture.h"
#include "longctx/runtime/adamw.h"
#include "longctx/runtime/runner.h"
#include "longctx/runtime/training_state.h"
#include "reference_llama.h"

namespace longctx::runtime {
namespace {

bool exists(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    ::closedir(d);
  }
  return names;
}

std::size_t entries(const std::string& dir) { return names_in(dir).size(); }

// The steps of dir's complete checkpoints (step-N/ with its manifest), oldest first.
std::vector<int> complete_checkpoints(const std::string& dir) {
  std::vector<int> steps;
  for (const auto& name : names_in(dir))
    if (name.rfind("step-", 0) == 0 && exists(dir + "/" + name + "/manifest.json")) steps.push_back(std::stoi(name.substr(5)));
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<double> losses(const nlohmann::json& j) {
  std::vector<double> v;
  for (const auto& s : j["steps"]) v.push_back(s["loss"].get<double>());
  return v;
}

std::vector<int> step_numbers(const nlohmann::json& j) {
  std::vector<int> v;
  for (const auto& s : j["steps"]) v.push_back(s["step"].get<int>());
  return v;
}

class TrainingState : public testing::CliTest {
 protected:
  nlohmann::json run_json(const std::string& args) {
    auto o = run_cli(args + " --json --threads 1");
    EXPECT_EQ(o.status, 0) << o.err;
    auto j = nlohmann::json::parse(o.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << o.out << o.err;
    return j;
  }

  // Starts `longctx ARGS` as its own process (stdout and stderr to files in the test's folder)
  // and SIGKILLs it as soon as `marker` exists. Returns what it printed.
  std::string run_and_kill_when(const std::vector<std::string>& args, const std::string& marker) {
    const std::string out = path("victim.out"), err = path("victim.err");
    const pid_t pid = testing::spawn_cli(args, out, err);
    EXPECT_GT(pid, 0);
    int status = 0;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (!exists(marker)) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        ADD_FAILURE() << "the run ended (status " << status << ") before " << marker << " appeared:\n" << testing::slurp(err);
        return testing::slurp(out) + testing::slurp(err);
      }
      if (std::chrono::steady_clock::now() > give_up) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    // Had it finished every step before the kill, nothing here would test resuming.
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the run was not killed mid-way (status " << status << "); its steps are too short:\n" << testing::slurp(err);
    return testing::slurp(out) + testing::slurp(err);
  }



  // Little-endian uint32 token ids below the vocabulary; n is not a multiple of a step's
  // tokens, so the cursor wraps at a different place each time round.
  std::string token_file(std::int64_t n, std::int64_t vocab) {
    const auto p = path("tokens.bin");
    std::ofstream out(p, std::ios::binary);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto id = static_cast<std::uint32_t>((i * 7919 + i / 3) % vocab);
      out.write(reinterpret_cast<const char*>(&id), sizeof id);
    }
    return p;
  }
};

struct Variant {
  std::string name;
  ParallelConfig parallel;
  DType dtype = DType::FP32;
  bool data_file = false;
  int ranks = 1;  // > 1: `--nproc`, the launcher is what gets killed
};
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

class KilledAndResumed : public TrainingState, public ::testing::WithParamInterface<Variant> {};

// The issue's test: a run checkpointing every 2 steps is SIGKILLed as soon as its checkpoint
// after step 4 is complete (so mid step 5), and resumed for 2 more steps; its losses must equal
// an uninterrupted run's, bitwise (one intra-op thread makes every step deterministic).
// The killed run is asked for many steps, so it cannot finish before the kill however loaded
// the machine is; --steps only bounds the loop. Should the kill come late, the resumed run
// goes on from the newest checkpoint K the killed run completed, and the comparison covers
// steps 1..K+2.
TEST_P(KilledAndResumed, LossesEqualAnUninterruptedRun) {
  const Variant& v = GetParam();
  auto plan = testing::tiny_plan("tiny-gqa", 512, 2, v.parallel);
  plan.train.dtype = plan.train.grad_dtype = v.dtype;
  plan.cluster.shape = {1, v.ranks};
  const std::string common = "run --plan " + write(plan, "plan.json") +
                             (v.ranks > 1 ? " --nproc " + std::to_string(v.ranks) : "") +
                             (v.data_file ? " --data " + token_file(3 * 2 * 512 + 101, plan.model.vocab) : "");
  const auto ck = path("ck");

  std::vector<std::string> args;
  // Ranks' stdout reaches the launcher only when they end: with several, progress goes to
  // stderr (--json), which they share with it.
  std::istringstream words(common + " --steps 1000 --threads 1 --checkpoint-dir " + ck + " --checkpoint-every 2" +
                           (v.ranks > 1 ? " --json" : ""));
  for (std::string w; words >> w;) args.push_back(w);
  const std::string progress = run_and_kill_when(args, ck + "/step-4/manifest.json");
  const auto saved = complete_checkpoints(ck);
  ASSERT_FALSE(saved.empty());
  const int k = saved.back();
  EXPECT_GE(k, 4);
  const int total = k + 2;

  const auto whole = run_json(common + " --steps " + std::to_string(total));
  ASSERT_EQ(losses(whole).size(), static_cast<std::size_t>(total));
  // The killed run's steps, as far as its progress lines (4 decimals) show them.
  const std::regex step_line(R"(step (\d+)/1000  loss ([0-9.]+))");
  int seen = 0;
  for (auto it = std::sregex_iterator(progress.begin(), progress.end(), step_line); it != std::sregex_iterator(); ++it) {
    const int step = std::stoi((*it)[1]);
    if (step > total) continue;
    ++seen;
    char expected[32];
    std::snprintf(expected, sizeof expected, "%.4f", losses(whole)[static_cast<std::size_t>(step - 1)]);
    EXPECT_EQ((*it)[2].str(), expected) << "step " << step;
  }
  EXPECT_GE(seen, k) << progress;

  const auto resumed = run_json(common + " --steps " + std::to_string(total) + " --checkpoint-dir " + ck +
                                " --checkpoint-every 2 --resume");
  EXPECT_EQ(resumed["resumed_after_step"], k);
  EXPECT_EQ(step_numbers(resumed), (std::vector<int>{k + 1, k + 2}));
  ASSERT_EQ(losses(resumed).size(), 2u);
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(losses(resumed)[static_cast<std::size_t>(i)], losses(whole)[static_cast<std::size_t>(k + i)])
        << "step " << k + 1 + i << " differs after resuming";
  // It went on checkpointing; --keep's default leaves the newest two, and any folder the kill
  // cut short is gone.
  EXPECT_EQ(complete_checkpoints(ck), (std::vector<int>{k, k + 2}));
  EXPECT_EQ(entries(ck), 2u);
}

ParallelConfig offload_everything() {
  ParallelConfig p;
  p.sharding = Sharding::Zero3;
  p.offload_params = true;
  p.offload_optimizer = true;
  p.checkpoint = CheckpointPolicy::full();
  return p;
}

INSTANTIATE_TEST_SUITE_P(
    Variants, KilledAndResumed,
    ::testing::Values(
        // Adam moments in the host pool.
        Variant{"OffloadedOptimizer", [] { ParallelConfig p; p.offload_optimizer = true; return p; }()},
        // The data cursor: a token file that wraps within the run.
        Variant{"TokenFile", {}, DType::FP32, /*data_file=*/true},
        // bf16 parameters in the host pool, with fp32 masters and moments there too.
        Variant{"Bf16OffloadedParamsAndMasters", offload_everything(), DType::BF16},
        // Two ranks: each saves its zero3 shards and optimizer shard; Ulysses splits the tokens.
        Variant{"TwoRanksZero3Ulysses2", [] {
                  ParallelConfig p;
                  p.sharding = Sharding::Zero3;
                  p.ulysses = 2;
                  p.head_chunk = 1;
                  return p;
                }(), DType::FP32, false, 2}),
    [](const auto& info) { return info.param.name; });

// The small plan of the tests below: steps of a few tens of milliseconds.
Plan small_plan(ParallelConfig p = {}) {
  p.offload_optimizer = true;
  return testing::tiny_plan("tiny-gqa", 128, 2, p);
}

TEST_F(TrainingState, ResumeIgnoresAndDeletesHalfWrittenCheckpoints) {
  const auto plan = write(small_plan(), "plan.json");
  const auto ck = path("ck");
  const auto whole = run_json("run --plan " + plan + " --steps 6");
  run_json("run --plan " + plan + " --steps 4 --checkpoint-dir " + ck + " --checkpoint-every 2");
  ASSERT_TRUE(exists(ck + "/step-4/manifest.json"));

  // What a run killed while saving leaves: a step folder with a truncated rank file and a
  // manifest still under its temporary name; and a folder with only a temporary file.
  ASSERT_EQ(::mkdir((ck + "/step-6").c_str(), 0755), 0);
  const std::string rank_file = testing::slurp(ck + "/step-4/rank-0-of-1.pt");
  std::ofstream(ck + "/step-6/rank-0-of-1.pt", std::ios::binary) << rank_file.substr(0, rank_file.size() / 2);
  std::ofstream(ck + "/step-6/manifest.json.tmp") << testing::slurp(ck + "/step-4/manifest.json");
  ASSERT_EQ(::mkdir((ck + "/step-8").c_str(), 0755), 0);
  std::ofstream(ck + "/step-8/rank-0-of-1.pt.tmp") << "half";

  const auto resumed = run_json("run --plan " + plan + " --steps 6 --checkpoint-dir " + ck + " --checkpoint-every 2 --resume");
  EXPECT_EQ(resumed["resumed_after_step"], 4);
  ASSERT_EQ(losses(resumed).size(), 2u);
  EXPECT_EQ(losses(resumed)[0], losses(whole)[4]);
  EXPECT_EQ(losses(resumed)[1], losses(whole)[5]);
  EXPECT_FALSE(exists(ck + "/step-8"));
  EXPECT_FALSE(exists(ck + "/step-6/manifest.json.tmp"));
  // step-6 is now the resumed run's own, whole checkpoint.
  const auto m = nlohmann::json::parse(testing::slurp(ck + "/step-6/manifest.json"));
  EXPECT_EQ(m["step"], 6);
  EXPECT_EQ(m["ranks"][0]["bytes"].get<std::size_t>(), testing::slurp(ck + "/step-6/rank-0-of-1.pt").size());
  EXPECT_EQ(m["format"], kTrainingStateFormat);
}

TEST_F(TrainingState, AFolderWithoutItsManifestIsNotACheckpoint) {
  const auto plan = write(small_plan(), "plan.json");
  const auto ck = path("ck");
  const auto whole = run_json("run --plan " + plan + " --steps 4");
  run_json("run --plan " + plan + " --steps 4 --checkpoint-dir " + ck + " --checkpoint-every 2");
  ASSERT_EQ(::unlink((ck + "/step-4/manifest.json").c_str()), 0);  // its rank file is whole

  const auto resumed = run_json("run --plan " + plan + " --steps 4 --checkpoint-dir " + ck + " --resume");
  EXPECT_EQ(resumed["resumed_after_step"], 2);
  EXPECT_EQ(step_numbers(resumed), (std::vector<int>{3, 4}));
  EXPECT_EQ(losses(resumed), (std::vector<double>{losses(whole)[2], losses(whole)[3]}));

  // With no checkpoint at all, --resume starts from scratch.
  const auto fresh = run_json("run --plan " + plan + " --steps 2 --checkpoint-dir " + path("empty") + " --resume");
  EXPECT_EQ(fresh["resumed_after_step"], 0);
  EXPECT_EQ(losses(fresh), (std::vector<double>{losses(whole)[0], losses(whole)[1]}));
}

TEST_F(TrainingState, ACheckpointOfAnotherRunIsRefused) {
  const auto plan = write(small_plan(), "plan.json");
  const auto ck = path("ck");
  run_json("run --plan " + plan + " --steps 2 --checkpoint-dir " + ck + " --checkpoint-every 2");
  const std::string resume = " --steps 4 --checkpoint-dir " + ck + " --resume --threads 1";

  ParallelConfig other;
  other.checkpoint = CheckpointPolicy::full();
  auto o = run_cli("run --plan " + write(small_plan(other), "other.json") + resume);
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--plan: the plan's parallel section differs"), std::string::npos) << o.err;

  o = run_cli("run --plan " + plan + resume + " --seed 7");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--seed: the checkpoint in " + ck + " was saved by a run with seed 0; pass --seed 0"),
            std::string::npos)
      << o.err;

  o = run_cli("run --plan " + plan + resume + " --data " + token_file(1000, 256));
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--data:"), std::string::npos) << o.err;

  o = run_cli("run --plan " + plan + " --steps 2 --checkpoint-dir " + ck + " --resume");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--steps: 2 steps are already done"), std::string::npos) << o.err;

  o = run_cli("run --plan " + plan + " --steps 2 --checkpoint-dir " + ck + " --checkpoint-every 1");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--checkpoint-dir: " + ck + " already holds checkpoints"), std::string::npos) << o.err;

  // Rank shards only fit the world size that wrote them.
  auto m = nlohmann::json::parse(testing::slurp(ck + "/step-2/manifest.json"));
  m["world_size"] = 2;
  std::ofstream(ck + "/step-2/manifest.json") << m.dump();
  o = run_cli("run --plan " + plan + resume);
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--nproc: the checkpoint after step 2"), std::string::npos) << o.err;
  EXPECT_TRUE(exists(ck + "/step-2/rank-0-of-1.pt"));  // refused, not deleted
}

TEST_F(TrainingState, BadCheckpointOptionsExitTwoNamingTheFlag) {
  const auto plan = write(small_plan(), "plan.json");
  std::ofstream(path("file")) << "not a folder";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--resume", "--resume: needs --checkpoint-dir"},
      {"--checkpoint-every 2", "--checkpoint-every: needs --checkpoint-dir"},
      {"--checkpoint-dir " + path("ck") + " --checkpoint-every 0", "--checkpoint-every: 0 is not a step count"},
      {"--checkpoint-dir " + path("ck") + " --checkpoint-every 1 --keep 0", "--keep: 0 keeps no checkpoint"},
      {"--checkpoint-dir " + path("ck"), "--checkpoint-dir: given without --checkpoint-every"},
      {"--keep 3", "--keep: counts the checkpoints"},
      {"--checkpoint-dir " + path("ck") + " --resume --keep 3", "--keep: counts the checkpoints"},
      {"--checkpoint-dir " + path("file") + "/ck --checkpoint-every 1", "--checkpoint-dir: cannot write into"},
  };
  for (const auto& [flags, message] : cases) {
    const auto o = run_cli("run --plan " + plan + " --steps 2 " + flags);
    EXPECT_EQ(o.status, 2) << flags;
    EXPECT_NE(o.err.find(message), std::string::npos) << flags << "\n" << o.err;
  }
}

// In process: the virtual device's budgets set to the peaks a run without checkpoints
// measures; saving every step and resuming must neither trip them nor change a peak. At
// seq 16 the step's peak is little more than parameters and gradients, below the whole copy
// of the state that loading the archive makes.
TEST_F(TrainingState, SavingAndRestoringLeaveTheMeasuredPeaksAlone) {
  ParallelConfig p;
  p.offload_optimizer = true;
  auto plan = testing::tiny_plan("tiny-gqa", 16, 1, p);
  RunOptions o;
  o.steps = 1;
  ASSERT_TRUE(run_plan(plan, o).ok());  // a process's first step allocates a little less than later ones
  o.steps = 3;
  auto plain = run_plan(plan, o);
  ASSERT_TRUE(plain.ok()) << plain.error().what();
  ASSERT_GT(plain->peak_host, 0);
  plan.cluster.device_budget_bytes = plain->peak_device;
  plan.cluster.host_budget_bytes_per_node = plain->peak_host;

  o.checkpoint.dir = path("ck");
  o.checkpoint.every = 1;
  o.steps = 2;
  auto saving = run_plan(plan, o);
  ASSERT_TRUE(saving.ok()) << saving.error().what();
  o.steps = 3;
  o.checkpoint.resume = true;
  auto resumed = run_plan(plan, o);
  ASSERT_TRUE(resumed.ok()) << resumed.error().what();
  ASSERT_EQ(resumed->steps.size(), 1u);
  EXPECT_EQ(resumed->steps[0].step, 3);
  EXPECT_EQ(resumed->steps[0].loss, plain->steps[2].loss);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(saving->steps[i].peak_device, plain->steps[i].peak_device) << i;
    EXPECT_EQ(saving->steps[i].peak_host, plain->steps[i].peak_host) << i;
  }
  EXPECT_EQ(resumed->steps[0].peak_host, plain->steps[2].peak_host);
  EXPECT_EQ(resumed->persistent_device, plain->persistent_device);
  EXPECT_EQ(resumed->persistent_host, plain->persistent_host);
}

// In process: restore() copies into the tensors the run placed (host pool here), so their
// storage and the pools' counts are unchanged, and every value, fp32 masters included, is
// the saved one.
TEST_F(TrainingState, RestoreCopiesIntoThePlacedTensors) {
  auto plan = testing::tiny_plan("tiny-gqa", 64, 1, offload_everything());
  plan.train.dtype = plan.train.grad_dtype = DType::BF16;
  auto meter = std::make_shared<MemoryMeter>(0, 0, torch::kCPU);
  MeterScope scope(meter);
  WeightPlacement where;
  where.dtype = torch::kBFloat16;
  where.layers_in_host_pool = true;
  LlamaWeights weights = init_weights(plan.model, 3, where);
  AdamW optimizer(weights.all(), AdamWOptions{}, /*offload=*/true, /*pinned=*/false);
  for (const auto& p : weights.all()) p.mutable_grad() = torch::randn(p.sizes()).to(p.scalar_type());
  optimizer.step();

  std::vector<torch::Tensor> state;  // every tensor a checkpoint holds
  for (const auto& p : weights.all()) state.push_back(p.detach());
  for (const auto& s : optimizer.state())
    for (const auto& t : {s.master, s.exp_avg, s.exp_avg_sq})
      if (t.defined()) state.push_back(t);
  ASSERT_GT(state.size(), 2 * weights.all().size());  // masters are there

  CheckpointOptions c;
  c.dir = path("ck");
  c.every = 1;
  auto peak_device = meter->peak(Pool::Device), peak_host = meter->peak(Pool::Host);
  {  // the saver holds the folder's lock until it goes
    auto saver = TrainingCheckpoints::open(c, plan, 3, 0, 10);
    ASSERT_TRUE(saver.ok()) << saver.error().what();
    ASSERT_TRUE(saver->save(1, 0, weights.all(), optimizer).ok());
  }
  EXPECT_EQ(meter->peak(Pool::Device), peak_device);
  EXPECT_EQ(meter->peak(Pool::Host), peak_host);

  std::vector<torch::Tensor> saved;
  std::vector<const void*> where_before;
  for (const auto& t : state) saved.push_back(t.clone()), where_before.push_back(t.data_ptr());
  const auto device = meter->current(Pool::Device), host = meter->current(Pool::Host);
  {
    torch::NoGradGuard no_grad;
    for (const auto& t : state) t.fill_(7);
  }
  optimizer.set_steps(99);

  c.resume = true;
  auto loader = TrainingCheckpoints::open(c, plan, 3, 0, 10);
  ASSERT_TRUE(loader.ok()) << loader.error().what();
  EXPECT_EQ(loader->start_step(), 1);
  peak_device = meter->peak(Pool::Device), peak_host = meter->peak(Pool::Host);
  auto r = loader->restore(weights.all(), optimizer);
  ASSERT_TRUE(r.ok()) << r.error().what();
  EXPECT_EQ(optimizer.steps(), 1);
  EXPECT_EQ(meter->current(Pool::Device), device);
  EXPECT_EQ(meter->current(Pool::Host), host);
  EXPECT_EQ(meter->peak(Pool::Device), peak_device);
  EXPECT_EQ(meter->peak(Pool::Host), peak_host);
  for (std::size_t i = 0; i < state.size(); ++i) {
    EXPECT_EQ(state[i].data_ptr(), where_before[i]) << i;
    EXPECT_TRUE(torch::equal(state[i], saved[i])) << i;
  }
}

// A flipped byte in a rank file's tensor data, or a same-sized rank file of another step,
// loads without complaint from LibTorch; the CRC-32 in the manifest refuses both, naming
// the file, and the checkpoint is left for the user to delete.
TEST_F(TrainingState, ADamagedOrForeignRankFileIsRefusedNamingIt) {
  const auto plan = write(small_plan(), "plan.json");
  const auto ck = path("ck");
  run_json("run --plan " + plan + " --steps 4 --checkpoint-dir " + ck + " --checkpoint-every 2");
  const std::string newest = ck + "/step-4/rank-0-of-1.pt";
  const std::string original = testing::slurp(newest);
  const std::string older = testing::slurp(ck + "/step-2/rank-0-of-1.pt");
  const std::string resume = "run --plan " + plan + " --steps 6 --threads 1 --checkpoint-dir " + ck + " --resume";

  std::string flipped = original;
  flipped[flipped.size() / 2] ^= 0x01;  // inside the tensor data
  std::ofstream(newest, std::ios::binary) << flipped;
  auto o = run_cli(resume);
  EXPECT_EQ(o.status, 2) << o.err;
  EXPECT_NE(o.err.find(newest + ": its CRC-32 is"), std::string::npos) << o.err;

  std::ofstream(newest, std::ios::binary) << older;  // another step's file, the same size here
  o = run_cli(resume);
  EXPECT_EQ(o.status, 2) << o.err;
  EXPECT_NE(o.err.find(newest), std::string::npos) << o.err;
  EXPECT_TRUE(exists(newest)) << "refused, not deleted";

  std::ofstream(newest, std::ios::binary) << original;
  o = run_cli(resume);
  EXPECT_EQ(o.status, 0) << o.err;
}

// Every field is range-checked: a cursor of -1, 1.5, 10^12 or -100000 once trained on
// other data (or indexed out of range).
TEST_F(TrainingState, EveryManifestFieldIsRangeChecked) {
  const auto plan = write(small_plan(), "plan.json");
  const auto ck = path("ck");
  const auto tokens = token_file(5000, 256);
  run_json("run --plan " + plan + " --steps 2 --data " + tokens + " --checkpoint-dir " + ck + " --checkpoint-every 2");
  const std::string manifest = ck + "/step-2/manifest.json";
  const auto original = nlohmann::json::parse(testing::slurp(manifest));
  const std::vector<std::pair<std::string, nlohmann::json>> edits = {
      {"/data/cursor", -1},          {"/data/cursor", 1.5},     {"/data/cursor", 1e12},
      {"/data/cursor", -100000},     {"/data/cursor", 5000},    {"/data/cursor", "12"},
      {"/step", 2.5},                {"/step", -2},             {"/world_size", 0},
      {"/seed", -1},                 {"/ranks/0/bytes", 0},     {"/ranks/0/crc32", -1},
      {"/ranks/0/crc32", 1LL << 33}, {"/ranks/0/file", "rank-1-of-1.pt"}, {"/ranks", nlohmann::json::array()},
  };
  for (const auto& [field, value] : edits) {
    auto m = original;
    m[nlohmann::json::json_pointer(field)] = value;
    std::ofstream(manifest) << m.dump(2);
    const auto o = run_cli("run --plan " + plan + " --steps 4 --threads 1 --data " + tokens + " --checkpoint-dir " + ck +
                           " --resume");
    EXPECT_EQ(o.status, 2) << field << " = " << value.dump() << "\n" << o.err;
    EXPECT_NE(o.err.find(manifest), std::string::npos) << field << "\n" << o.err;
    std::string dotted = field.substr(1);
    std::replace(dotted.begin(), dotted.end(), '/', '.');
    EXPECT_NE(o.err.find(dotted), std::string::npos) << field << "\n" << o.err;
  }
  std::ofstream(manifest) << original.dump(2);
  EXPECT_EQ(run_cli("run --plan " + plan + " --steps 4 --threads 1 --data " + tokens + " --checkpoint-dir " + ck +
                    " --resume")
                .status,
            0);
}

// A manifest that is a folder once ended in std::__ios_failure (SIGABRT); a FIFO hung.
TEST_F(TrainingState, AManifestThatIsNotARegularFileIsRefused) {
  const auto plan = write(small_plan(), "plan.json");
  const auto ck = path("ck");
  run_json("run --plan " + plan + " --steps 2 --checkpoint-dir " + ck + " --checkpoint-every 2");
  const std::string manifest = ck + "/step-2/manifest.json";
  for (const bool fifo : {false, true}) {
    ::unlink(manifest.c_str());
    ::rmdir(manifest.c_str());
    ASSERT_EQ(fifo ? ::mkfifo(manifest.c_str(), 0644) : ::mkdir(manifest.c_str(), 0755), 0);
    const auto o = run_cli("run --plan " + plan + " --steps 4 --threads 1 --checkpoint-dir " + ck + " --resume");
    EXPECT_EQ(o.status, 2) << o.err;
    EXPECT_NE(o.err.find(manifest + " is damaged"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find(fifo ? "a FIFO" : "a folder"), std::string::npos) << o.err;
  }
}

// One run per folder: a second is refused naming the first's pid and host; a lock left by
// a run that died (its flock gone with it) is taken over with a line saying so.
TEST_F(TrainingState, ASecondRunOnTheFolderIsRefusedNamingTheOwner) {
  const auto plan = write(small_plan(), "plan.json");
  const auto ck = path("ck");
  ASSERT_EQ(::mkdir(ck.c_str(), 0755), 0);
  const std::string lock = ck + "/.lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const std::string owner = "pid 4242\nhost elsewhere\n";
  ASSERT_EQ(::write(fd, owner.data(), owner.size()), static_cast<ssize_t>(owner.size()));
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);  // what a run on another terminal holds

  const std::string args = "run --plan " + plan + " --steps 2 --threads 1 --checkpoint-dir " + ck + " --checkpoint-every 1";
  auto o = run_cli(args);
  EXPECT_EQ(o.status, 2) << o.err;
  EXPECT_NE(o.err.find("--checkpoint-dir: " + ck + " is in use by another run (pid 4242 on host elsewhere"),
            std::string::npos)
      << o.err;
  EXPECT_TRUE(complete_checkpoints(ck).empty());

  ::close(fd);  // the owner died: its lock file stays, its flock is gone
  o = run_cli(args);
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.err.find("stale lock of pid 4242 on host elsewhere"), std::string::npos) << o.err;
  EXPECT_EQ(complete_checkpoints(ck), (std::vector<int>{1, 2}));
  EXPECT_EQ(testing::slurp(lock), "") << "released when the run ended";
}

// A disk that fills during a save: a file-size limit (ulimit -f, KiB) makes the rank file's
// writes fail with EFBIG, as a full disk fails them with ENOSPC. LibTorch's archive writer
// once threw from its destructor here (SIGABRT, "unexpected pos") and left its temporary.
// Now: exit 1 naming the file and the cause, no temporary, no step folder; on --resume the
// checkpoint resumed from stays whole.
TEST_F(TrainingState, AFullDiskFailsTheSaveCleanly) {
  const auto plan = write(small_plan(), "plan.json");
  const auto ck = path("ck");
  run_json("run --plan " + plan + " --steps 2 --checkpoint-dir " + ck + " --checkpoint-every 2");
  const auto saved = testing::all_names(ck + "/step-2");
  for (const bool resume : {false, true}) {
    const std::string dir = resume ? ck : path("fresh");
    const auto o = run_under("ulimit -f 64", "run --plan " + plan + " --steps 4 --threads 1 --checkpoint-every 1 "
                                             "--checkpoint-dir " + dir + (resume ? " --resume" : ""));
    EXPECT_EQ(o.status, 1) << o.err;
    EXPECT_NE(o.err.find("rank-0-of-1.pt' failed: File too large"), std::string::npos) << o.err;
    EXPECT_EQ(testing::all_names(dir), resume ? (std::vector<std::string>{".lock", "step-2"}) : std::vector<std::string>{".lock"})
        << o.err;
  }
  EXPECT_EQ(testing::all_names(ck + "/step-2"), saved);
  EXPECT_EQ(run_cli("run --plan " + plan + " --steps 3 --threads 1 --checkpoint-dir " + ck + " --resume").status, 0);
}

// The same with two ranks: every rank learns that a rank file could not be written, so the
// step folder goes too and no rank waits for another.
TEST_F(TrainingState, AFullDiskFailsAMultiRankSaveCleanly) {
  auto two_ranks = small_plan();
  two_ranks.cluster.shape = {1, 2};
  const auto plan = write(two_ranks, "plan.json");
  const std::string dir = path("ranks");
  const auto o = run_under("ulimit -f 64", "run --plan " + plan + " --nproc 2 --steps 3 --threads 1 --checkpoint-every 1 "
                                           "--checkpoint-dir " + dir);
  EXPECT_EQ(o.status, 1) << o.err;
  EXPECT_NE(o.err.find("failed: File too large"), std::string::npos) << o.err;
  EXPECT_EQ(testing::all_names(dir), std::vector<std::string>{".lock"}) << o.err;
}

// --data names a FIFO: refused at once (exit 2), not waited on for a writer.
TEST_F(TrainingState, ADataFifoIsRefusedNotWaitedOn) {
  const auto plan = write(small_plan(), "plan.json");
  const std::string fifo = path("tokens.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto o = run_cli("run --plan " + plan + " --steps 1 --threads 1 --data " + fifo);
  EXPECT_EQ(o.status, 2) << o.err;
  EXPECT_NE(o.err.find("--data: '" + fifo + "' is a FIFO, not a regular file"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace longctx::runtime
