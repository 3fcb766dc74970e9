// Sizes past longctx::limits are refused as bad input naming the field, before any
// arithmetic on them could overflow (cases the fuzzers in fuzz/ found or guard).
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <nlohmann/json.hpp>

#include "planner/core/limits.h"
#include "planner/search/memory_model.h"
#include "planner/core/plan.h"
#include "planner/io/plan_text.h"
#include "planner/search/search.h"
#include "test_plans.h"

namespace longctx {
namespace {

nlohmann::json llama_config() {
  return {{"model_type", "llama"},         {"hidden_size", 4096},       {"intermediate_size", 14336},
          {"num_hidden_layers", 32},       {"num_attention_heads", 32}, {"num_key_value_heads", 8},
          {"vocab_size", 128256}};
}

TEST(Limits, HugeModelSizesAreRefusedByName) {
  for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"}) {
    auto j = llama_config();
    j[key] = 1000000000000000000LL;
    auto m = model_from_json(j, "huge");
    ASSERT_FALSE(m.ok()) << key;
    EXPECT_EQ(m.error().kind, ErrorKind::BadInput);
    EXPECT_EQ(m.error().field, std::string("model.") + key);
    EXPECT_NE(m.error().message.find("bound"), std::string::npos) << m.error().message;
  }
}

TEST(Limits, IntegersPastInt64AreRefusedNotWrapped) {
  auto j = llama_config();
  j["vocab_size"] = 18446744073709551615ULL;
  auto m = model_from_json(j, "wrapped");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().field, "model.vocab_size");
}

TEST(Limits, NonObjectConfigIsBadInput) {
  auto m = model_from_json(nlohmann::json::array({1, 2}), "array");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().field, "model");
}

TEST(Limits, ValidateRefusesWhatWouldOverflow) {
  Plan p = testing::cpu_plan("tiny-gqa", 2, 4096);
  ASSERT_TRUE(validate(p.model, p.cluster.shape, p.train, p.parallel).ok());

  Plan seq = p;
  seq.train.seq = limits::kMaxSeq * 2;
  EXPECT_EQ(validate(seq.model, seq.cluster.shape, seq.train, seq.parallel).error().field, "--seq");

  Plan batch = p;  // micro_batch x seq would overflow before the bound on seq could help
  batch.train.micro_batch = std::int64_t{1} << 40;
  batch.train.seq = std::int64_t{1} << 30;
  EXPECT_EQ(validate(batch.model, batch.cluster.shape, batch.train, batch.parallel).error().field, "--micro-batch");

  Plan nodes = p;  // nodes x gpus_per_node would overflow
  nodes.cluster.shape = {std::int64_t{1} << 62, 8};
  EXPECT_EQ(validate(nodes.model, nodes.cluster.shape, nodes.train, nodes.parallel).error().field, "--gpus");

  Plan tiles = p;
  tiles.train.seq = std::int64_t{1} << 24;
  tiles.parallel.mlp_tiles = 1 << 23;  // divides the tokens, but 10 x tiles launches overflow int
  EXPECT_EQ(validate(tiles.model, tiles.cluster.shape, tiles.train, tiles.parallel).error().field, "--mlp-tiles");

  Plan wide = p;  // each size within its bound, the step's bytes beyond int64
  wide.model.hidden = limits::kMaxHidden;
  wide.model.intermediate = limits::kMaxIntermediate;
  wide.model.layers = limits::kMaxLayers;
  wide.model.vocab = limits::kMaxVocab;
  wide.train.seq = std::int64_t{1} << 34;
  auto r = validate(wide.model, wide.cluster.shape, wide.train, wide.parallel);
  ASSERT_FALSE(r.ok());
  // Its parameters alone are past the bound: the model is blamed, at any --seq, even 1.
  EXPECT_EQ(r.error().field, "model");
  wide.train.seq = 1;
  r = validate(wide.model, wide.cluster.shape, wide.train, wide.parallel);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "model");
  EXPECT_NE(r.error().message.find("parameters alone"), std::string::npos) << r.error().message;

  Plan tokens = p;  // a model within bounds, tokens past them: --seq is blamed, with the fixes
  tokens.model.hidden = 8192;
  tokens.model.intermediate = 28672;
  tokens.model.layers = 80;
  tokens.train.seq = std::int64_t{1} << 38;
  r = validate(tokens.model, tokens.cluster.shape, tokens.train, tokens.parallel);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "--seq");
  EXPECT_NE(r.error().message.find("--ulysses"), std::string::npos) << r.error().message;
}

// The bound on one rank's tokens is a rule of a layout, not of the request: plan searches a
// length one rank cannot hold where a ring or Ulysses degree it may pick shares it (max-context
// answered 64G tokens on 65,536 GPUs, which plan then refused as bad input, blaming --seq), and
// refuses it only where no layout holds it, or where the knobs given keep the whole on a rank.
TEST(Limits, ALengthOneRankCannotHoldIsSearchedWhereTheSearchMayShareIt) {
  Plan p = testing::cpu_plan("tiny-gqa", 4, std::int64_t{1} << 31);
  p.model.hidden = 8192;
  p.model.intermediate = 28672;
  p.model.layers = 80;
  const auto alone = validate(p.model, p.cluster.shape, p.train, p.parallel);
  ASSERT_FALSE(alone.ok());
  ASSERT_EQ(alone.error().field, "--seq");
  EXPECT_NE(alone.error().message.find("--ring"), std::string::npos) << alone.error().message;
  EXPECT_TRUE(check_fixed_knobs(p, all_techniques(), {}).ok());
  Knobs one_rank;
  one_rank.ring = 1;
  one_rank.ulysses = 1;
  const auto fixed = check_fixed_knobs(p, all_techniques(), one_rank);
  ASSERT_FALSE(fixed.ok());
  EXPECT_EQ(fixed.error().field, "--seq");
  Plan single = p;
  single.cluster.shape = {1, 1};
  const auto lone = check_fixed_knobs(single, all_techniques(), {});
  ASSERT_FALSE(lone.ok());
  EXPECT_EQ(lone.error().field, "--seq");
}

TEST(Limits, ValidateChecksTheModelItself) {
  Plan p = testing::cpu_plan("tiny-gqa", 1, 1024);
  p.model.heads = 0;  // a model built in code, not read from JSON, gets the same rules
  auto r = validate(p.model, p.cluster.shape, p.train, p.parallel);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "model.num_attention_heads");
}

TEST(Limits, RealisticLongContextStaysWithinTheBounds) {
  // Llama 3.1 70B at 16M tokens on one rank: absurd for memory, but the planner must still
  // answer "does not fit" (exit 3), not "bad input".
  Plan p = testing::cpu_plan("llama-3.1-70b", 1, std::int64_t{16} << 20);
  EXPECT_TRUE(validate(p.model, p.cluster.shape, p.train, p.parallel).ok());
  const Prediction pr = predict(p);
  EXPECT_GT(pr.peak_device_bytes, 0);
  EXPECT_FALSE(pr.feasible);
}

TEST(Limits, PlanFilesOfAnotherSchemaOrWithHugeKnobsAreRefused) {
  Plan p = testing::cpu_plan("tiny-gqa", 2, 4096);
  p.prediction = predict(p);
  nlohmann::json j = plan_to_json(p);
  ASSERT_TRUE(plan_from_json(j).ok()) << plan_from_json(j).error().what();

  auto other = j;
  other["schema"] = "longctx.plan/2";
  EXPECT_EQ(plan_from_json(other).error().field, "schema");

  auto ulysses = j;
  ulysses["parallel"]["ulysses"] = 1LL << 40;  // would truncate in the cast to int
  EXPECT_EQ(plan_from_json(ulysses).error().field, "parallel.ulysses");

  auto budget = j;
  budget["cluster"]["device_budget_bytes"] = 1LL << 62;
  EXPECT_EQ(plan_from_json(budget).error().field, "cluster.device_budget_bytes");

  // A figure of the wrong type is refused naming it, not read as 0 or '' (and then held to
  // this planner's as though recorded, or shown as the model "model").
  const std::pair<std::vector<std::string>, nlohmann::json> wrong[] = {
      {{"model", "name"}, nlohmann::json::object()}, {{"model", "name"}, ""}, {{"model", "_name_or_path"}, 3},
      {{"prediction", "binding"}, 5}, {{"prediction", "peak_at"}, 5}, {{"prediction", "step_time_s"}, "x"},
      {{"prediction", "mfu"}, nullptr}, {{"prediction", "breakdown"}, 1}};
  for (const auto& [path, value] : wrong) {
    auto edited = j;
    edited[path[0]][path[1]] = value;
    const auto read = plan_from_json(edited);
    ASSERT_FALSE(read.ok()) << path[1] << " = " << value.dump();
    EXPECT_EQ(read.error().field, path[0] + "." + path[1]);
  }
  auto category = j;
  category["prediction"]["breakdown"]["params"] = "x";
  EXPECT_EQ(plan_from_json(category).error().field, "prediction.breakdown.params");

  // A key given twice in one object (a hand edit) is refused with its place: nlohmann keeps
  // one of the two without a word ("ulysses": 2, "ulysses": 4 exported 4). Objects inside
  // arrays (the phases) are each their own.
  std::string text = j.dump();
  ASSERT_TRUE(plan_from_text(text, "p.json").ok()) << plan_from_text(text, "p.json").error().what();
  const std::string once = "\"ulysses\":1";
  ASSERT_NE(text.find(once), std::string::npos) << text;
  text.replace(text.find(once), once.size(), once + "," + once);
  const auto twice = plan_from_text(text, "p.json");
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.error().field, "p.json");
  EXPECT_NE(twice.error().message.find("parallel.ulysses is given twice"), std::string::npos) << twice.error().message;
}

// Bounds first: a cluster beyond the bound is refused before any search, at once.
TEST(Limits, MaxContextRefusesAHugeClusterBeforeSearching) {
  Plan p = testing::cpu_plan("llama-3.1-8b", 8, 0);
  p.cluster.hardware = load_hardware("h100-80gb").value();
  for (std::int64_t gpus : {limits::kMaxGpus * 2, std::int64_t{1} << 40}) {
    p.cluster.shape = {gpus / 8, 8};
    const auto t0 = std::chrono::steady_clock::now();
    auto r = max_context(p, all_techniques());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().kind, ErrorKind::BadInput);
    EXPECT_EQ(r.error().field, "--gpus");
    EXPECT_LT(s, 1.0);
  }
}

// Budgets up to the bound answer: more memory, at least as long a context; past what a plan
// may hold (limits.h) the answer stops at a length that still validates, not at "nothing".
TEST(Limits, LargeBudgetsAnswer) {
  Plan p = testing::cpu_plan("tiny-gqa", 1, 0);
  p.cluster.hardware = load_hardware("h100-80gb").value();
  p.train.dtype = DType::BF16;
  std::int64_t prev = 0;
  for (std::int64_t budget : {std::int64_t{80} << 30, std::int64_t{1} << 40, std::int64_t{4} << 40, limits::kMaxBytes}) {
    p.cluster.device_budget_bytes = budget;
    p.cluster.host_budget_bytes_per_node = limits::kMaxBytes;
    auto r = max_context(p, all_techniques());
    ASSERT_TRUE(r.ok()) << budget << ": " << r.error().what();
    EXPECT_GE(r->max_tokens, prev) << budget;
    EXPECT_TRUE(r->plan.prediction.feasible);
    prev = r->max_tokens;
  }
}

// predict() takes any budget (plan files and the CLI bound it before): one far below zero on a
// GPU, whose context the allocator's capacity is taken from, does not fit and does not wrap
// (the evaluate fuzzer's reproducer, fuzz/corpus/evaluate/budget-below-int64-context).
TEST(Limits, ABudgetFarBelowZeroDoesNotFit) {
  Plan p = testing::cpu_plan("tiny-gqa", 1, 1024);
  p.cluster.hardware = load_hardware("h100-80gb").value();
  p.cluster.device_budget_bytes = std::numeric_limits<std::int64_t>::min() + 73;
  const Prediction pr = predict(p);
  EXPECT_FALSE(pr.feasible);
  EXPECT_GE(pr.peak_reserved_bytes, pr.peak_device_bytes);
}

}  // namespace
}  // namespace longctx
