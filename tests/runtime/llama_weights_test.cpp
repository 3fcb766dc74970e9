// The runtime's weights follow the parameter table (planner/core/param_layout.h): the
// order, the shapes and the groups the optimizer, the checkpoints and ZeRO see.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "longctx/runtime/llama_weights.h"

namespace longctx::runtime {
namespace {

ModelConfig preset(const std::string& name) {
  auto m = load_model(name);
  EXPECT_TRUE(m.ok()) << name;
  return *m;
}

TEST(LlamaWeights, AllFollowsTheTableGroupByGroup) {
  for (const std::string name : {"tiny-gqa", "tiny-odd"}) {  // untied; tied with q/k norms
    SCOPED_TRACE(name);
    const ModelConfig m = preset(name);
    const auto w = init_weights(m, /*seed=*/3, {});
    std::vector<std::vector<std::int64_t>> want;
    for (std::int64_t l = 0; l < m.layers; ++l)
      for (const auto& p : group_params(ParamGroupKind::Layer, m)) want.push_back(param_shape(p, m));
    for (auto kind : {ParamGroupKind::Embedding, ParamGroupKind::Head})
      for (const auto& p : group_params(kind, m)) want.push_back(param_shape(p, m));
    const auto all = w.all();
    ASSERT_EQ(all.size(), want.size());
    std::int64_t total = 0;
    for (std::size_t i = 0; i < all.size(); ++i) {
      EXPECT_EQ(all[i].sizes().vec(), want[i]) << "parameter " << i;
      total += all[i].numel();
    }
    EXPECT_EQ(total, m.total_params());
  }
}

TEST(LlamaWeights, GroupsHoldTheTablesSizes) {
  const ModelConfig m = preset("tiny-odd");
  auto w = init_weights(m, /*seed=*/3, {});
  for (std::int64_t g = 0; g < m.layers + 2; ++g) {
    std::vector<std::int64_t> sizes;
    for (const torch::Tensor* t : w.group(g)) sizes.push_back(t->numel());
    EXPECT_EQ(sizes, group_param_sizes(group_kind(m, g), m)) << "group " << g;
  }
  EXPECT_TRUE(w.layers[0][ParamRole::QNorm].defined());
  EXPECT_EQ(&w.layers[1][ParamRole::Gate], &w.layers[1].w_gate);
}

TEST(LlamaWeights, TheSeedDrawsTheEmbeddingFirstThenTheLayersInTableOrder) {
  // The draw order is part of what a seed means: checkpoints and measured runs rely on it.
  const ModelConfig m = preset("tiny-gqa");
  const auto w = init_weights(m, /*seed=*/5, {});
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat);
  EXPECT_TRUE(torch::equal(w.embed, at::normal(0.0, 0.02, {m.vocab, m.hidden}, gen, f32)));
  EXPECT_TRUE(torch::equal(w.layers[0].attn_norm, at::normal(1.0, 0.1, {m.hidden}, gen, f32)));
  EXPECT_TRUE(torch::equal(w.layers[0].wq, at::normal(0.0, 0.02, {m.q_dim(), m.hidden}, gen, f32)));
}

TEST(LlamaWeights, CloneHasTheSameValuesInItsOwnStorage) {
  const ModelConfig m = preset("tiny-odd");
  const auto w = init_weights(m, /*seed=*/9, {});
  const auto c = clone_weights(w);
  const auto a = w.all(), b = c.all();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i], b[i])) << i;
    EXPECT_NE(a[i].data_ptr(), b[i].data_ptr()) << i;
    EXPECT_TRUE(b[i].requires_grad()) << i;
  }
  EXPECT_FALSE(c.output.defined());  // tied
}

}  // namespace
}  // namespace longctx::runtime
