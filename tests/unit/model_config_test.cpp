#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "longctx/planner/hardware.h"
#include "longctx/planner/model_config.h"

namespace longctx {
namespace {

TEST(ModelConfig, Llama31_8bHasItsPublishedParameterCount) {
  auto m = load_model("llama-3.1-8b");
  ASSERT_TRUE(m.ok()) << m.error().what();
  EXPECT_EQ(m->head_dim, 128);
  EXPECT_EQ(m->kv_heads, 8);
  // 8,030,261,248 parameters (Meta's model card rounds to 8.03B); derived here from shapes:
  // 32 x (4096*4096*2 + 4096*1024*2 + 3*4096*14336 + 2*4096) + 2*128256*4096 + 4096.
  EXPECT_EQ(m->total_params(), 8030261248LL);
}

TEST(ModelConfig, TiedEmbeddingsCountOnce) {
  auto m = load_model("llama-3.2-1b");
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->tie_embeddings);
  EXPECT_EQ(m->output_params(), 0);
  EXPECT_EQ(m->total_params(), 1235814400LL);  // the 1.24B of the model card
}

TEST(ModelConfig, Qwen3HasQkNormAndExplicitHeadDim) {
  auto m = load_model("qwen3-8b");
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->qk_norm);
  EXPECT_EQ(m->head_dim, 128);
  EXPECT_EQ(m->total_params(), 8190735360LL);  // 8.19B, Qwen3-8B's card
}

TEST(ModelConfig, EveryPresetLoads) {
  for (const auto& name : model_preset_names()) {
    auto m = load_model(name);
    EXPECT_TRUE(m.ok()) << name << ": " << (m.ok() ? "" : m.error().what());
  }
  for (const auto& name : hardware_preset_names()) {
    auto h = load_hardware(name);
    EXPECT_TRUE(h.ok()) << name << ": " << (h.ok() ? "" : h.error().what());
  }
  EXPECT_GE(model_preset_names().size(), 8u);
}

TEST(ModelConfig, MissingAndWrongFieldsAreNamed) {
  nlohmann::json j = {{"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2},
                      {"num_attention_heads", 4}, {"vocab_size", 100}};
  EXPECT_TRUE(model_from_json(j, "t").ok());
  auto missing = j;
  missing.erase("vocab_size");
  auto r = model_from_json(missing, "t");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "model.vocab_size");
  auto wrong = j;
  wrong["hidden_size"] = "64";
  r = model_from_json(wrong, "t");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "model.hidden_size");
  auto gqa = j;
  gqa["num_key_value_heads"] = 3;
  r = model_from_json(gqa, "t");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "model.num_key_value_heads");
  auto zero = j;
  zero["num_hidden_layers"] = 0;
  EXPECT_FALSE(model_from_json(zero, "t").ok());
}

TEST(ModelConfig, UnknownPresetListsTheKnownOnes) {
  auto r = load_model("llama-9");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("llama-3.1-8b"), std::string::npos);
}

}  // namespace
}  // namespace longctx
