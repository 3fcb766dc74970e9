// Inputs as a hostile user writes them (docs/robustness.md): plan files nested 100,000 deep,
// misspelt or derived keys edited, files that are not regular files or are huge, gzip files
// that inflate without end; and the outputs that must stay whole: a multi-file export
// replaced all together or not at all, strings escaped in every exported format.
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/atomic_file.h"
#include "common/atomic_folder.h"
#include "common/input_file.h"
#include "common/json_depth.h"
#include "planner/core/hardware.h"
#include "planner/core/plan.h"
#include "planner/footprint/attention.h"
#include "planner/io/plan_text.h"
#include "planner/io/quoted_text.h"
#include "test_plans.h"

namespace {

using namespace longctx;
namespace fs = std::filesystem;

class Inputs : public ::testing::Test {
 protected:
  fs::path dir_;
  void SetUp() override {
    char tmpl[] = "/tmp/longctx_inputs_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }
  std::string read(const std::string& name) const {
    std::stringstream s;
    s << std::ifstream(path(name), std::ios::binary).rdbuf();
    return s.str();
  }
};

// A plan file as `longctx plan -o` writes it (tiny-gqa on the CPU virtual device).
nlohmann::json plan_json() { return plan_to_json(longctx::testing::cpu_plan("tiny-gqa", 1, 2048)); }

// The plan's text with `path` (a key under the top level, or "section.key") holding `value`.
std::string with(const std::string& section, const std::string& key, const std::string& value_text) {
  nlohmann::json j = plan_json();
  (section.empty() ? j : j[section])[key] = nlohmann::json::parse(value_text);
  return j.dump();
}

std::string nested(int depth) { return std::string(std::size_t(depth), '[') + std::string(std::size_t(depth), ']'); }

void expect_refused(const Result<Plan>& r, const std::string& field, const std::string& words) {
  ASSERT_FALSE(r.ok()) << "accepted; expected a refusal of " << field;
  EXPECT_EQ(r.error().kind, ErrorKind::BadInput);
  EXPECT_EQ(r.error().field, field) << r.error().what();
  EXPECT_NE(r.error().message.find(words), std::string::npos) << r.error().what();
}

// 100,000 nested arrays (a 200 KB file) under any section once overflowed the stack.
TEST(PlanReader, DeepNestingIsRefusedNamingTheField) {
  const std::string deep = nested(100000);
  for (const char* section : {"model", "cluster", "parallel", "train"}) {
    std::string text = plan_json().dump();
    const std::string key = fmt::format("\"{}\":{{", section);
    const auto at = text.find(key);
    ASSERT_NE(at, std::string::npos) << section;
    text.insert(at + key.size(), "\"deep\":" + deep + ",");
    expect_refused(plan_from_text(text, "plan.json"), std::string(section) + ".deep", "more than 64 levels deep");
  }
  // The top level and the largest depth accepted.
  expect_refused(plan_from_text(nested(100000), "plan.json"), "plan.json", "more than 64 levels deep");
  EXPECT_TRUE(check_json_depth(nested(64), "x").ok());
  EXPECT_FALSE(check_json_depth(nested(65), "x").ok());
  // Brackets inside strings are text, not nesting.
  EXPECT_TRUE(check_json_depth("{\"a\": \"" + std::string(1000, '[') + "\"}", "x").ok());
}

// nlohmann's parser ends its input at a NUL: a plan file with one after its object (or inside
// a string) was read as though whole.
TEST(PlanReader, ANulByteAnywhereIsRefusedNamingTheFile) {
  const std::string text = plan_json().dump();
  ASSERT_TRUE(plan_from_text(text, "plan.json").ok());
  expect_refused(plan_from_text(text + std::string(1, '\0'), "plan.json"), "plan.json", "NUL byte");
  expect_refused(plan_from_text(text + std::string(1, '\0') + "junk", "plan.json"), "plan.json", "NUL byte");
}

// JSON holds integers of any size; past 64 bits nlohmann reads one as a float, which was
// refused as "must be an integer, found 1.18e+21": it is past the bound.
TEST(PlanReader, AnIntegerPast64BitsIsPastTheBound) {
  std::string text = plan_json().dump();
  const std::string key = "\"seq\":";
  const auto at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  text.replace(at + key.size(), text.find_first_of(",}", at) - at - key.size(), "1180591620717411303424");
  expect_refused(plan_from_text(text, "plan.json"), "train.seq", "above longctx's bound");
}

TEST(PlanReader, UnknownKeysAreRefusedNamingThem) {
  expect_refused(plan_from_text(with("parallel", "rnig", "2"), "p"), "parallel.rnig", "not a key longctx reads");
  expect_refused(plan_from_text(with("train", "micro_bach", "2"), "p"), "train.micro_bach", "check its spelling");
  expect_refused(plan_from_text(with("cluster", "gpu", "1"), "p"), "cluster.gpu", "not a key");
  expect_refused(plan_from_text(with("model", "hiden_size", "64"), "p"), "model.hiden_size", "not a key");
  expect_refused(plan_from_text(with("", "paralel", "{}"), "p"), "paralel", "not a key");
  // The keys a section takes are named, so the fix is in the message.
  const auto r = plan_from_text(with("parallel", "rnig", "2"), "p");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("ring"), std::string::npos) << r.error().what();
  // What longctx writes reads back.
  EXPECT_TRUE(plan_from_text(plan_json().dump(), "p").ok());
}

// A prediction is what plan -o writes or nothing: another value, or a misspelt figure of a
// phase, was read as no prediction, or as a figure left out, without a word.
TEST(PlanReader, APredictionOtherThanPlanWritesItIsRefused) {
  expect_refused(plan_from_text(with("", "prediction", "5"), "p"), "prediction", "must be an object");
  expect_refused(plan_from_text(with("", "prediction", "[1]"), "p"), "prediction", "found a array");
  nlohmann::json j = plan_json();
  j["prediction"]["phases"] = {{{"phase", "forward.embed"}, {"peak_device_bytes", 1}, {"peak_host_bytes", 0}}};
  EXPECT_TRUE(plan_from_text(j.dump(), "p").ok());
  j["prediction"]["phases"][0]["peak_device_reserved_byte"] = 5;
  expect_refused(plan_from_text(j.dump(), "p"), "prediction.phases[0].peak_device_reserved_byte", "check its spelling");
  // Every figure the writer knows is read, and written back as it was read.
  j["prediction"]["phases"][0].erase("peak_device_reserved_byte");
  j["prediction"]["phases"][0]["peak_device_reserved_bytes"] = 7;
  const auto read = plan_from_text(j.dump(), "p");
  ASSERT_TRUE(read.ok()) << read.error().what();
  ASSERT_EQ(read.value().prediction.phases.size(), 1u);
  EXPECT_EQ(read.value().prediction.phases[0].peak_device_reserved_bytes, 7);
  EXPECT_EQ(plan_to_json(read.value())["prediction"]["phases"], j["prediction"]["phases"]);
  j = plan_json();
  j.erase("prediction");
  EXPECT_TRUE(plan_from_text(j.dump(), "p").ok()) << "a plan without a prediction is predicted afresh";
  EXPECT_TRUE(plan_from_text(with("", "prediction", "null"), "p").ok()) << "null: none recorded";
}

TEST(PlanReader, DerivedFieldsMustBeTheDerivedOnes) {
  expect_refused(plan_from_text(with("train", "padding_tokens", "-1"), "p"), "train.padding_tokens", "at least 0");
  expect_refused(plan_from_text(with("train", "padding_tokens", "7"), "p"), "train.padding_tokens", "is not the padding");
  expect_refused(plan_from_text(with("train", "padded_seq", "4096"), "p"), "train.padded_seq", "is not seq");
}

// The plan file is held to validate(), and the refusal names the plan's key, not the flag.
TEST(PlanReader, RulesOfTheCommandLineNameThePlanField) {
  nlohmann::json j = plan_json();
  j["parallel"]["sharding"] = "zero2";  // one GPU: nothing to shard over
  expect_refused(plan_from_text(j.dump(), "p"), "parallel.sharding", "use none");
  // arctic runs on CUDA only: a plan for it on the CPU device is refused as `--stack arctic --gpu cpu` is.
  nlohmann::json a = plan_to_json(longctx::testing::gpu_plan("tiny-gqa", "h100-80gb", 1, 2048));
  a["train"]["stack"] = {{"name", "arctic"}, {"attention", "flash_attention_2"}, {"arctic_model", "liger"}};
  a["cluster"]["hardware"] = plan_json()["cluster"]["hardware"];
  const auto r = plan_from_text(a.dump(), "p");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "cluster.hardware") << r.error().what();
  EXPECT_NE(r.error().message.find("--stack arctic"), std::string::npos) << r.error().what();
}

TEST_F(Inputs, WhatIsNotARegularFileIsRefusedNamingIt) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0644), 0);
  fs::create_directory(path("folder"));
  fs::create_symlink(path("loop-b"), path("loop-a"));
  fs::create_symlink(path("loop-a"), path("loop-b"));
  const std::pair<std::string, std::string> cases[] = {
      {path("fifo"), "is a FIFO"},           {"/dev/zero", "is a character device"},
      {path("folder"), "is a folder"},       {path("loop-a"), "loop of symbolic links"},
      {path("missing"), "No such file"},
  };
  for (const auto& [p, words] : cases) {
    for (const auto& r : {read_regular_file(p, "--plan"), read_text_file(p, "--trace")}) {
      ASSERT_FALSE(r.ok()) << p;
      EXPECT_EQ(r.error().kind, ErrorKind::BadInput);
      EXPECT_NE(r.error().message.find(words), std::string::npos) << r.error().what();
      EXPECT_NE(r.error().message.find(p), std::string::npos) << "names the path: " << r.error().what();
    }
    const auto plan = read_plan_file(p);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.error().field, "--plan");
  }
}

TEST_F(Inputs, FilesPastTheLimitAreRefusedBeforeBeingRead) {
  // A sparse 3 GB file: refused from its size, nothing read.
  const int fd = ::open(path("sparse").c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t(3) << 30), 0);
  ::close(fd);
  const auto r = read_plan_file(path("sparse"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("more than longctx's limit of 64.0 MiB"), std::string::npos) << r.error().what();
  EXPECT_FALSE(read_regular_file(write("small", std::string(100, 'x')), "--x", 99).ok());
  EXPECT_TRUE(read_regular_file(path("small"), "--x", 100).ok());
}

TEST_F(Inputs, GzipIsInflatedOnlyUpToTheLimit) {
  // 64 MiB of zeros gzipped is about 64 KB; inflating it under a 1 MiB limit stops there.
  gzFile g = gzopen(path("bomb.gz").c_str(), "wb9");
  ASSERT_NE(g, nullptr);
  const std::string zeros(1 << 20, '\0');
  for (int i = 0; i < 64; ++i) ASSERT_EQ(gzwrite(g, zeros.data(), unsigned(zeros.size())), int(zeros.size()));
  gzclose(g);
  const auto r = read_text_file(path("bomb.gz"), "--trace", std::uint64_t(1) << 20);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("inflates to more than"), std::string::npos) << r.error().what();
  const auto whole = read_text_file(path("bomb.gz"), "--trace", std::uint64_t(64) << 20);
  ASSERT_TRUE(whole.ok()) << whole.error().what();
  EXPECT_EQ(whole->size(), std::size_t(64) << 20);
}

// A model folder whose config.json is not a regular file says what it is, not "holds no config.json".
TEST_F(Inputs, AConfigJsonThatIsNotAFileIsNamed) {
  fs::create_directory(path("m"));
  ASSERT_EQ(::mkfifo(path("m/config.json").c_str(), 0644), 0);
  const auto r = load_model(path("m"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("is a FIFO"), std::string::npos) << r.error().what();
  fs::create_directory(path("n"));
  fs::create_directory(path("n/config.json"));
  const auto d = load_model(path("n"));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("is a folder"), std::string::npos) << d.error().what();
}

// A hardware file given to --gpu (`longctx calibrate -o` writes them; users edit them) is read
// on its own: its errors name --gpu, the file and the key, not the plan file's
// cluster.hardware it is copied into, and a key longctx does not read (a misspelt
// "context_byte") is refused rather than left at its default.
TEST_F(Inputs, AHardwareFileNamesGpuItsPathAndTheKey) {
  nlohmann::json j = hardware_to_json(load_hardware("h100-80gb").value());
  const auto write = [&](const std::string& name, const nlohmann::json& body) {
    std::ofstream(path(name)) << body.dump();
    return path(name);
  };
  ASSERT_TRUE(load_hardware(write("ok.json", j)).ok()) << "a preset's own keys are read back";

  nlohmann::json misspelt = j;
  misspelt["context_byte"] = 1;
  const auto unknown = load_hardware(write("misspelt.json", misspelt));
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().field, "--gpu " + path("misspelt.json") + ": context_byte");
  EXPECT_NE(unknown.error().message.find("context_bytes"), std::string::npos) << "names the keys it takes";

  nlohmann::json missing = j;
  missing.erase("backend");
  const auto absent = load_hardware(write("missing.json", missing));
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.error().field, "--gpu " + path("missing.json") + ": backend");

  nlohmann::json unnamed = j;  // every answer names the cluster by it
  unnamed["name"] = " ";
  const auto no_name = load_hardware(write("unnamed.json", unnamed));
  ASSERT_FALSE(no_name.ok());
  EXPECT_EQ(no_name.error().field, "--gpu " + path("unnamed.json") + ": name");

  nlohmann::json contextless = j;  // a CUDA device's context binds at the peak: never left at 0
  contextless.erase("context_bytes");
  const auto no_context = load_hardware(write("contextless.json", contextless));
  ASSERT_FALSE(no_context.ok());
  EXPECT_EQ(no_context.error().field, "--gpu " + path("contextless.json") + ": context_bytes");
  // So are the other figures a CUDA device's plan reads (NCCL's buffers, the cuBLAS workspace,
  // the multiprocessors), each named; given as 0 they are read as 0, and written back so, but
  // the multiprocessors: a CUDA device has one at least.
  for (const char* key : {"nccl_base_bytes", "nccl_bytes_per_peer", "multiprocessors", "cublas_workspace_bytes"}) {
    nlohmann::json without = j;
    without.erase(key);
    const auto refused = load_hardware(write("without.json", without));
    ASSERT_FALSE(refused.ok()) << key;
    EXPECT_EQ(refused.error().field, "--gpu " + path("without.json") + ": " + key);
    nlohmann::json zero = j;
    zero[key] = 0;
    const auto read = load_hardware(write("zero.json", zero));
    if (std::string(key) == "multiprocessors") {
      ASSERT_FALSE(read.ok());
      EXPECT_EQ(read.error().field, "--gpu " + path("zero.json") + ": multiprocessors");
      continue;
    }
    ASSERT_TRUE(read.ok()) << key << ": " << read.error().what();
    EXPECT_EQ(hardware_to_json(*read).at(key), 0) << key;
  }

  std::string twice = j.dump();  // a key given twice: one would be kept without a word
  twice.insert(1, "\"context_bytes\": 1, ");
  std::ofstream(path("twice.json")) << twice;
  const auto repeated = load_hardware(path("twice.json"));
  ASSERT_FALSE(repeated.ok());
  EXPECT_NE(repeated.error().message.find("context_bytes is given twice"), std::string::npos) << repeated.error().what();

  std::ofstream(path("broken.json")) << "{\"backend\": ";  // which file is not JSON, by its path
  const auto broken = load_hardware(path("broken.json"));
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.error().field, "--gpu " + path("broken.json"));

  // Inside a plan file the same object keeps the plan's field names.
  const auto in_plan = hardware_from_json(misspelt);
  ASSERT_FALSE(in_plan.ok());
  EXPECT_EQ(in_plan.error().field, "cluster.hardware.context_byte");
}

const std::map<std::string, std::string> kNewSet = {{"a.yaml", "new a\n"}, {"b.json", std::string(8192, 'b')}};

TEST_F(Inputs, AFileSetGoesInWholeIntoANewFolder) {
  const auto w = write_files_atomically(path("out"), "-o", kNewSet);
  ASSERT_TRUE(w.ok()) << w.error().what();
  EXPECT_EQ(w->added, (std::vector<std::string>{"a.yaml", "b.json"}));
  EXPECT_EQ(read("out/a.yaml"), "new a\n");
  EXPECT_EQ(fs::directory_entry(path("out/b.json")).file_size(), 8192u);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir_)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"out"}) << "no staging folder left";
  // The new folder has mkdir's mode under the umask, not the staging folder's 0700: others on
  // the cluster read the configs and run the launch script.
  const mode_t was = ::umask(022);
  const auto shared = write_files_atomically(path("shared"), "-o", kNewSet);
  ::umask(was);
  ASSERT_TRUE(shared.ok()) << shared.error().what();
  EXPECT_EQ(fs::status(path("shared")).permissions(), fs::perms(0755));
}

// Any name the file system takes (up to 255 bytes) can be written: the hidden temporary beside
// it cuts the name short instead of passing the limit ("File name too long" for names of 244
// bytes and more, where ".NAME.tmp-XXXXXX" went past 255).
TEST_F(Inputs, TheLongestFileAndFolderNamesAreWritten) {
  for (const std::size_t length : {std::size_t{200}, std::size_t{244}, std::size_t{255}}) {
    const std::string name(length, 'n');
    const auto file = write_text_atomically(path(name), "-o", "whole\n");
    ASSERT_TRUE(file.ok()) << length << ": " << file.error().what();
    EXPECT_EQ(read(name), "whole\n");
    fs::remove(path(name));
    const auto folder = write_files_atomically(path(name), "-o", kNewSet);
    ASSERT_TRUE(folder.ok()) << length << ": " << folder.error().what();
    EXPECT_EQ(read(name + "/a.yaml"), "new a\n");
    fs::remove_all(path(name));
  }
  EXPECT_TRUE(fs::is_empty(dir_)) << "a temporary was left";
  EXPECT_EQ(hidden_temporary_name(std::string(300, 'x'), ".tmp-XXXXXX").size(), 255u);
  EXPECT_EQ(hidden_temporary_name("plan.json", ".tmp-XXXXXX"), ".plan.json.tmp-XXXXXX");
}

// A write that fails part way (a size limit here, a full disk in use) leaves the old set.
TEST_F(Inputs, AFailedSetWriteLeavesTheOldSetWhole) {
  fs::create_directory(path("out"));
  write("out/a.yaml", "old a\n");
  write("out/b.json", "old b\n");
  write("out/mine.txt", "the user's\n");
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = 4096;  // b.json (8 KiB) fails, a.yaml was already staged
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const auto w = write_files_atomically(path("out"), "-o", kNewSet);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("nothing was written"), std::string::npos) << w.error().what();
  EXPECT_EQ(read("out/a.yaml"), "old a\n");
  EXPECT_EQ(read("out/b.json"), "old b\n");
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(path("out"))) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"a.yaml", "b.json", "mine.txt"})) << "no staging folder left";
  // Without the limit the whole set replaces the old one, and the user's file stays.
  const auto again = write_files_atomically(path("out"), "-o", kNewSet);
  ASSERT_TRUE(again.ok()) << again.error().what();
  EXPECT_EQ(again->replaced, (std::vector<std::string>{"a.yaml", "b.json"}));
  EXPECT_EQ(read("out/a.yaml"), "new a\n");
  EXPECT_EQ(read("out/mine.txt"), "the user's\n");
}

TEST_F(Inputs, ASetIsNotWrittenOverAFolderOrFifoOfItsNames) {
  fs::create_directories(path("out/a.yaml"));
  const auto w = write_files_atomically(path("out"), "-o", kNewSet);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("is a folder"), std::string::npos) << w.error().what();
  EXPECT_FALSE(fs::exists(path("out/b.json")));
  write("file", "x");
  EXPECT_FALSE(write_files_atomically(path("file"), "-o", kNewSet).ok());
}

TEST(QuotedText, NoByteOfANameEndsItsStringOrComment) {
  const std::string name = "x\n seed: 1337\r\n# \"q\" \\ :\t\x01\x7f\xc2\x85\xe2\x80\xa8\xff end";
  const std::string y = yaml_quoted(name);
  EXPECT_EQ(y.find('\n'), std::string::npos);
  EXPECT_EQ(y.find('\r'), std::string::npos);
  EXPECT_EQ(y, "\"x\\n seed: 1337\\r\\n# \\\"q\\\" \\\\ :\\t\\x01\\x7F\\x85\\u2028\xef\xbf\xbd end\"");
  const std::string t = toml_quoted(name);
  EXPECT_EQ(t, "\"x\\n seed: 1337\\r\\n# \\\"q\\\" \\\\ :\\t\\u0001\\u007F\\u0085\xe2\x80\xa8\xef\xbf\xbd end\"");
  EXPECT_EQ(comment_text("a\nb \"c\""), "a\\nb \"c\"");
}

// The CPU kernel's pairs in closed form (a loop over q blocks took minutes at `--seq 1024G`)
// equal the kernel's block loop, written out here, at every length up to 70,000 and beyond.
TEST(SlowPaths, CpuKernelPairsInClosedFormEqualTheBlockLoop) {
  const auto block_loop = [](std::int64_t L) {
    const std::int64_t qs = std::min<std::int64_t>(L >= 768 ? 256 : L >= 192 ? 64 : 32, L);
    const std::int64_t ks = std::min<std::int64_t>(512, L);
    double pairs = 0;
    for (std::int64_t m = 0; m < L; m += qs) {
      const std::int64_t rows = std::min(qs, L - m);
      pairs += double(rows) * double(std::min((m + rows + ks - 1) / ks * ks, L));
    }
    return pairs;
  };
  for (std::int64_t L = 1; L <= 70000; ++L) ASSERT_EQ(footprint::cpu_causal_kernel_pairs(L), block_loop(L)) << L;
  for (std::int64_t L : {std::int64_t(1) << 22, (std::int64_t(1) << 24) + 77}) EXPECT_EQ(footprint::cpu_causal_kernel_pairs(L), block_loop(L)) << L;
  // 2^40 tokens: about 2^79 pairs, the causal half of L^2 plus at most a block's width per row.
  const double L = double(std::int64_t(1) << 40);
  const double big = footprint::cpu_causal_kernel_pairs(std::int64_t(1) << 40);
  EXPECT_GE(big, L * L / 2);
  EXPECT_LE(big, L * L / 2 + 512 * L);
}

}  // namespace
