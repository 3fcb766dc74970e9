// A limit of the model binds as itself (planner/search/request.cpp, name_model_limits): a
// sliding window shorter than the next length is what stops max-context, not device memory.
#include <string>

#include <gtest/gtest.h>

#include "planner/search/request.h"

namespace longctx {
namespace {

TEST(ModelLimit, MistralV01sSlidingWindowBindsAsItselfNotAsDeviceMemory) {
  ClusterRequest r;
  r.model = std::string(LONGCTX_CONFIGS_DIR) + "/mistral-7b-v0.1";  // sliding_window 4096
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
  r.model = std::string(LONGCTX_CONFIGS_DIR) + "/mistral-7b-v0.3";  // sliding_window null
  r.gpus = 8;
  r.techniques = "zero3";
  auto a = answer_max_context(r, /*with_ladder=*/false);
  ASSERT_TRUE(a) << a.error().what();
  EXPECT_EQ(a->binding.find("the model"), std::string::npos) << a->binding;
}

}  // namespace
}  // namespace longctx
