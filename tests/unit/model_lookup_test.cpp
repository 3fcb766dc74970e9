// What --model names (planner/core/model_lookup.cpp): presets in any case and by their Hub id,
// and Hub ids from a local Hugging Face cache laid out as huggingface_hub lays it out (built
// here in a temporary folder), never the network.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include "planner/core/hub_cache.h"
#include "planner/core/model_config.h"
#include "planner/core/presets.h"

namespace longctx {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTinyConfig = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 160,
  "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256})";

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A Hub cache in a fresh temporary folder, named by HF_HUB_CACHE for the test's length; the
// other variables a cache can come from unset, so only this one is seen.
class HubCache : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("longctx_hub_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "hub");
    for (const char* v : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME"}) {
      if (const char* was = std::getenv(v)) saved_.emplace_back(v, was);
      ::unsetenv(v);
    }
    ::setenv("HF_HUB_CACHE", (root_ / "hub").c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("HF_HUB_CACHE");
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
    fs::remove_all(root_);
  }
  // models--ORG--NAME/refs/main naming `rev`, and snapshots/<rev>/config.json.
  void download(const std::string& org, const std::string& name, const std::string& rev, const std::string& config) {
    const fs::path repo = root_ / "hub" / ("models--" + org + "--" + name);
    write(repo / "refs" / "main", rev);
    write(repo / "snapshots" / rev / "config.json", config);
  }
  fs::path root_;
  std::vector<std::pair<std::string, std::string>> saved_;
};

TEST_F(HubCache, AHubIdResolvesToTheSnapshotRefsMainNames) {
  download("acme", "Tiny-Llama", "0123abcd", kTinyConfig);
  // An older snapshot beside it is not the one main points at.
  write(root_ / "hub" / "models--acme--Tiny-Llama" / "snapshots" / "ffff0000" / "config.json",
        std::string(kTinyConfig).replace(std::string(kTinyConfig).find("\"num_hidden_layers\": 3"), 22,
                                         "\"num_hidden_layers\": 9"));
  auto m = load_model("acme/Tiny-Llama");
  ASSERT_TRUE(m) << m.error().what();
  EXPECT_EQ(m->layers, 3);
  EXPECT_EQ(m->name, "acme/Tiny-Llama");
  EXPECT_EQ(m->source, "acme/Tiny-Llama");  // what a stack loads: the id, as given
  // The plan file carries the source, and reads it back.
  auto back = model_from_json(model_to_json(*m), m->name);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->source, "acme/Tiny-Llama");
}

TEST_F(HubCache, HfHomeHubIsLookedInWhenHfHubCacheIsUnset) {
  download("acme", "tiny", "rev1", kTinyConfig);
  ::unsetenv("HF_HUB_CACHE");
  ::setenv("HF_HOME", root_.c_str(), 1);
  auto m = load_model("acme/tiny");
  ::unsetenv("HF_HOME");
  ASSERT_TRUE(m) << m.error().what();
  EXPECT_EQ(m->layers, 3);
}

TEST_F(HubCache, AnAbsentIdIsBadInputNamingWhereItLooked) {
  download("acme", "other", "rev1", kTinyConfig);
  auto m = load_model("acme/missing");
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().field, "--model");
  EXPECT_NE(m.error().message.find((root_ / "hub" / "models--acme--missing").string()), std::string::npos)
      << m.error().message;
  EXPECT_NE(m.error().message.find("never downloads"), std::string::npos);
}

TEST_F(HubCache, ARefWithoutItsSnapshotIsNotFound) {
  write(root_ / "hub" / "models--acme--half" / "refs" / "main", "abc");
  auto m = load_model("acme/half");
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().field, "--model");
}

// refs/main is read as every input file is: a FIFO put there is refused, never waited on
// (the lookup hung), and a device is never read (a link to /dev/zero grew without end).
TEST_F(HubCache, ARefThatIsNoRegularFileIsBadInputNotAWait) {
  const fs::path fifo_repo = root_ / "hub" / "models--acme--fifo";
  fs::create_directories(fifo_repo / "refs");
  ASSERT_EQ(::mkfifo((fifo_repo / "refs" / "main").c_str(), 0600), 0);
  const fs::path device_repo = root_ / "hub" / "models--acme--zero";
  fs::create_directories(device_repo / "refs");
  fs::create_symlink("/dev/zero", device_repo / "refs" / "main");
  for (const char* id : {"acme/fifo", "acme/zero"}) {
    auto m = load_model(id);
    ASSERT_FALSE(m) << id;
    EXPECT_EQ(m.error().kind, ErrorKind::BadInput) << id;
    EXPECT_EQ(m.error().field, "--model") << id;
    EXPECT_NE(m.error().message.find("refs/main"), std::string::npos) << m.error().message;
  }
}

TEST_F(HubCache, APresetsHubIdAnswersFromThePresetWhenTheCacheLacksIt) {
  auto m = load_model("meta-llama/Llama-3.1-8B");
  ASSERT_TRUE(m) << m.error().what();
  EXPECT_EQ(m->name, "llama-3.1-8b");
  EXPECT_EQ(m->source, "meta-llama/Llama-3.1-8B");
  // The cache's own config is read when it has one.
  download("meta-llama", "Llama-3.1-8B", "r", kTinyConfig);
  auto cached = load_model("meta-llama/Llama-3.1-8B");
  ASSERT_TRUE(cached);
  EXPECT_EQ(cached->layers, 3);
}

TEST(ModelLookup, PresetNamesAreCaseInsensitive) {
  for (const char* name : {"Llama-3.1-8B", "LLAMA-3.1-8B", "llama-3.1-8b"}) {
    auto m = load_model(name);
    ASSERT_TRUE(m) << name << ": " << m.error().what();
    EXPECT_EQ(m->name, "llama-3.1-8b");
    EXPECT_EQ(m->layers, 32);
  }
}

TEST_F(HubCache, EveryFullSizePresetCarriesItsHubIdAsAnAlias) {
  for (const std::string& name : presets::model_names()) {
    if (name.rfind("tiny-", 0) == 0) continue;  // test shapes, on no Hub
    auto m = load_model(name);
    ASSERT_TRUE(m) << name;
    ASSERT_TRUE(looks_like_hub_id(m->source)) << name << " has no Hub id (\"_name_or_path\" in models/" << name << ".json)";
    auto by_id = load_model(m->source);
    ASSERT_TRUE(by_id) << m->source;
    EXPECT_EQ(by_id->name, name);
  }
}

TEST(ModelLookup, HubIdShape) {
  EXPECT_TRUE(looks_like_hub_id("meta-llama/Llama-3.1-8B"));
  EXPECT_TRUE(looks_like_hub_id("Qwen/Qwen2.5-7B"));
  EXPECT_FALSE(looks_like_hub_id("llama-3.1-8b"));
  EXPECT_FALSE(looks_like_hub_id("a/b/c"));
  EXPECT_FALSE(looks_like_hub_id("../x"));
  EXPECT_FALSE(looks_like_hub_id("/abs"));
}

TEST(ModelLookup, AnUnknownWordNamesTheForms) {
  auto m = load_model("no-such-model");
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().field, "--model");
  EXPECT_NE(m.error().message.find("Hub id"), std::string::npos);
}

}  // namespace
}  // namespace longctx
