// The parameter table against ModelConfig's counts, for every preset in models/.
#include <gtest/gtest.h>

#include <numeric>

#include "planner/core/param_layout.h"

namespace longctx {
namespace {

std::int64_t sum(const std::vector<std::int64_t>& v) { return std::accumulate(v.begin(), v.end(), std::int64_t{0}); }

TEST(ParamLayout, GroupSizesSumToModelConfigsCountsForEveryPreset) {
  const auto names = model_preset_names();
  ASSERT_FALSE(names.empty());
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    auto m = load_model(name);
    ASSERT_TRUE(m.ok()) << m.error().what();
    EXPECT_EQ(sum(group_param_sizes(ParamGroupKind::Layer, *m)), m->params_per_layer());
    EXPECT_EQ(sum(group_param_sizes(ParamGroupKind::Embedding, *m)), m->embedding_params());
    // The head is the final norm ([h]) and the output projection unless tied.
    EXPECT_EQ(sum(group_param_sizes(ParamGroupKind::Head, *m)), m->hidden + m->output_params());
    EXPECT_EQ(m->layers * m->params_per_layer() + sum(group_param_sizes(ParamGroupKind::Embedding, *m)) +
                  sum(group_param_sizes(ParamGroupKind::Head, *m)),
              m->total_params());
  }
}

TEST(ParamLayout, LayerOrderAndNamesFollowHuggingFace) {
  auto m = load_model("qwen3-8b");
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(m->qk_norm);
  const auto layer = group_params(ParamGroupKind::Layer, *m);
  std::vector<std::string> names;
  for (const auto& p : layer) names.push_back(param_hf_name(p, 3));
  const std::vector<std::string> want = {
      "model.layers.3.input_layernorm.weight",          "model.layers.3.self_attn.q_proj.weight",
      "model.layers.3.self_attn.k_proj.weight",         "model.layers.3.self_attn.v_proj.weight",
      "model.layers.3.self_attn.o_proj.weight",         "model.layers.3.self_attn.q_norm.weight",
      "model.layers.3.self_attn.k_norm.weight",         "model.layers.3.post_attention_layernorm.weight",
      "model.layers.3.mlp.gate_proj.weight",            "model.layers.3.mlp.up_proj.weight",
      "model.layers.3.mlp.down_proj.weight"};
  EXPECT_EQ(names, want);
  // Shapes as PyTorch's nn.Linear stores them: [out, in].
  EXPECT_EQ(param_shape(layer[1], *m), (std::vector<std::int64_t>{m->q_dim(), m->hidden}));
  EXPECT_EQ(param_shape(layer[4], *m), (std::vector<std::int64_t>{m->hidden, m->q_dim()}));
  EXPECT_EQ(param_shape(layer[5], *m), (std::vector<std::int64_t>{m->head_dim}));
  EXPECT_EQ(param_shape(layer[10], *m), (std::vector<std::int64_t>{m->hidden, m->intermediate}));
}

TEST(ParamLayout, QkNormAndUntiedOutputAreConditional) {
  auto llama = load_model("llama-3.2-1b");  // tied embeddings, no q/k norms
  ASSERT_TRUE(llama.ok());
  EXPECT_EQ(group_params(ParamGroupKind::Layer, *llama).size(), 9u);
  const auto head = group_params(ParamGroupKind::Head, *llama);
  ASSERT_EQ(head.size(), 1u);
  EXPECT_EQ(param_hf_name(head[0]), "model.norm.weight");
  auto untied = load_model("llama-3.1-8b");
  ASSERT_TRUE(untied.ok());
  const auto head8 = group_params(ParamGroupKind::Head, *untied);
  ASSERT_EQ(head8.size(), 2u);
  EXPECT_EQ(head8[1].role, ParamRole::Output);
  EXPECT_EQ(group_kind(*untied, untied->layers - 1), ParamGroupKind::Layer);
  EXPECT_EQ(group_kind(*untied, untied->layers), ParamGroupKind::Embedding);
  EXPECT_EQ(group_kind(*untied, untied->layers + 1), ParamGroupKind::Head);
}

}  // namespace
}  // namespace longctx
