// A limit of the model binds as itself (planner/search/request.cpp, name_model_limits): a
// sliding window shorter than the next length is what stops max-context, not device memory;
// so does max_position_embeddings under --max-positions model. Under extend (the default) an
// answer past it says what those positions need.
#include <string>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "planner/core/model_config.h"
#include "planner/core/plan.h"
#include "planner/search/request.h"
#include "planner/search/stack_answers.h"
#include "tests/test_paths.h"

namespace longctx {
namespace {

TEST(ModelLimit, MistralV01sSlidingWindowBindsAsItselfNotAsDeviceMemory) {
  ClusterRequest r;
  r.model = testing::source_path("tests/data/configs/mistral-7b-v0.1");  // sliding_window 4096
  r.gpus = 8;
  auto a = answer_max_context(r, /*with_ladder=*/true);
  ASSERT_TRUE(a) << a.error().what();
  EXPECT_EQ(a->max_tokens, 4096);
  EXPECT_EQ(a->binding, "the model's sliding window of 4,096 tokens (model.sliding_window)");
  // The rule line's probe met the same window: no Ulysses rule blamed for it.
  EXPECT_EQ(a->rule, "") << a->rule;
  ASSERT_FALSE(a->ladder.empty());
  for (const LadderRung& rung : a->ladder) {
    if (rung.max_tokens == 4096) EXPECT_EQ(rung.binding, a->binding);
  }
}

TEST(ModelLimit, AModelWithoutALimitStillBindsOnMemory) {
  ClusterRequest r;
  r.model = testing::source_path("tests/data/configs/mistral-7b-v0.3");  // sliding_window null
  r.gpus = 8;
  r.techniques = "zero3";
  auto a = answer_max_context(r, /*with_ladder=*/false);
  ASSERT_TRUE(a) << a.error().what();
  EXPECT_EQ(a->binding.find("the model"), std::string::npos) << a->binding;
}

ClusterRequest llama_8b_on_8() {
  ClusterRequest r;
  r.model = "llama-3.1-8b";  // max_position_embeddings 131072
  r.gpus = 8;
  return r;
}

TEST(ModelLimit, MaxPositionEmbeddingsIsReadAndWrittenWithTheModel) {
  const auto m = load_model("llama-3.1-8b");
  ASSERT_TRUE(m) << m.error().what();
  EXPECT_EQ(m->max_positions, 131072);
  EXPECT_EQ(load_model("qwen3-8b")->max_positions, 40960);
  EXPECT_EQ(model_to_json(*m).at("max_position_embeddings"), 131072);
  auto j = model_to_json(*m);
  j.erase("max_position_embeddings");  // a config without it: no limit known
  const auto without = model_from_json(j, "no-limit");
  ASSERT_TRUE(without) << without.error().what();
  EXPECT_EQ(without->max_positions, 0);
  EXPECT_FALSE(past_max_positions(*without, 1LL << 30));
  j["max_position_embeddings"] = 0;
  EXPECT_EQ(model_from_json(j, "zero").error().field, "model.max_position_embeddings");
}

TEST(ModelLimit, UnderMaxPositionsModelTheModelsLimitBindsAsItself) {
  ClusterRequest r = llama_8b_on_8();
  r.max_positions = "model";
  auto a = answer_max_context(r, /*with_ladder=*/false);
  ASSERT_TRUE(a) << a.error().what();
  EXPECT_EQ(a->max_tokens, 131072);
  EXPECT_EQ(a->binding,
            "the model's max_position_embeddings of 131,072 tokens (model.max_position_embeddings, under --max-positions model)");
  EXPECT_EQ(a->positions, "");
  // A length past it is refused naming the field and the fix.
  PlanRequest p{r, "131073", {}, /*no_search=*/true};
  const auto refused = answer_plan(p);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, ErrorKind::BadInput);
  EXPECT_EQ(refused.error().field, "model.max_position_embeddings");
  EXPECT_NE(refused.error().message.find("use --seq 131072 or less, or --max-positions extend"), std::string::npos)
      << refused.error().message;
  p.seq = "128K";
  EXPECT_TRUE(answer_plan(p));
}

// A limit between two lengths the search tries (multiples of its grid, the smallest tile per
// rank) is the answer itself where a plan fits there: a sliding window of 5,000 tokens was
// answered 4,096, a max_position_embeddings of 9,000 answered 8,192, and one of 100 (under
// the shortest length tried) refused, each with plans fitting at the limit.
TEST(ModelLimit, ALimitOffTheSearchsGridIsTheAnswerWhereAPlanFitsThere) {
  struct Case {
    const char* extra;  // the config's keys beside a 1B-sized Llama's
    const char* max_positions;
    std::int64_t limit;
    bool ladder;
  };
  for (const Case& c : {Case{R"("model_type": "mistral", "sliding_window": 5000)", "extend", 5000, true},
                        Case{R"("model_type": "llama", "max_position_embeddings": 9000)", "model", 9000, false},
                        Case{R"("model_type": "llama", "max_position_embeddings": 100)", "model", 100, true}}) {
    ClusterRequest r;
    r.model = "limited";
    r.model_config_json = std::string(R"({"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 4,
      "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, )") + c.extra + "}";
    r.gpus = 8;
    r.max_positions = c.max_positions;
    auto a = answer_max_context(r, c.ladder);
    ASSERT_TRUE(a) << c.extra << ": " << a.error().what();
    EXPECT_EQ(a->max_tokens, c.limit) << c.extra;
    EXPECT_EQ(a->granularity, 1) << c.extra;
    EXPECT_EQ(a->plan.train.seq, c.limit) << c.extra;
    EXPECT_TRUE(a->plan.prediction.feasible) << c.extra;
    EXPECT_NE(a->binding.find("the model's"), std::string::npos) << c.extra << ": " << a->binding;
    if (c.ladder) {
      ASSERT_FALSE(a->ladder.empty());
      EXPECT_EQ(a->ladder.back().max_tokens, c.limit) << c.extra;
    }
    // plan agrees: the limit fits, one token more is the model's to refuse.
    const auto at = answer_plan({r, std::to_string(c.limit), {}, /*no_search=*/false});
    ASSERT_TRUE(at) << at.error().what();
    EXPECT_TRUE(at->recorded.prediction.feasible);
    const auto past = answer_plan({r, std::to_string(c.limit + 1), {}, /*no_search=*/false});
    ASSERT_FALSE(past);
    EXPECT_EQ(past.error().kind, ErrorKind::BadInput);
  }
}

TEST(ModelLimit, UnderExtendAnAnswerPastTheLimitSaysWhatItsPositionsNeed) {
  auto a = answer_max_context(llama_8b_on_8(), /*with_ladder=*/false);
  ASSERT_TRUE(a) << a.error().what();
  ASSERT_GT(a->max_tokens, 131072);
  EXPECT_EQ(a->binding.find("max_position_embeddings"), std::string::npos) << a->binding;
  EXPECT_NE(a->positions.find("run past the model's max_position_embeddings of 131,072: positions past it need RoPE "
                              "scaling set in the model config"),
            std::string::npos)
      << a->positions;
  EXPECT_EQ(max_context_json(*a).at("positions"), a->positions);
  const auto within = answer_plan({llama_8b_on_8(), "128K", {}, /*no_search=*/true});
  ASSERT_TRUE(within) << within.error().what();
  EXPECT_FALSE(plan_answer_json(*within, true).contains("positions"));
  const auto past = answer_plan({llama_8b_on_8(), "256K", {}, /*no_search=*/true});
  ASSERT_TRUE(past) << past.error().what();
  EXPECT_EQ(plan_answer_json(*past, true).at("positions"), max_positions_note(past->recorded.model, 262144));
}

TEST(ModelLimit, TheSettingRoundTripsThroughThePlanFileAndOlderFilesReadAsExtend) {
  ClusterRequest r = llama_8b_on_8();
  r.max_positions = "model";
  const auto a = answer_plan({r, "64K", {}, /*no_search=*/true});
  ASSERT_TRUE(a) << a.error().what();
  const nlohmann::json j = plan_to_json(a->recorded);
  EXPECT_EQ(j.at("train").at("max_positions"), "model");
  const auto back = plan_from_json(j);
  ASSERT_TRUE(back) << back.error().what();
  EXPECT_EQ(back->train.max_positions, MaxPositions::Model);
  nlohmann::json older = j;
  older["train"].erase("max_positions");
  EXPECT_EQ(plan_from_json(older)->train.max_positions, MaxPositions::Extend);
  // The default is not written: plan files read the same as before the setting.
  const auto by_default = answer_plan({llama_8b_on_8(), "64K", {}, /*no_search=*/true});
  EXPECT_FALSE(plan_to_json(by_default->recorded).at("train").contains("max_positions"));
}

}  // namespace
}  // namespace longctx
