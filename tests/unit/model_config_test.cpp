#include <cmath>
#include <fstream>
#include <numbers>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/input_file.h"
#include "planner/core/hardware.h"
#include "planner/core/model_config.h"
#include "planner/core/param_layout.h"
#include "tests/test_paths.h"
#include "test_plans.h"

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

// ---- published config.json files (tests/data/configs/<model>/config.json) ------------------

std::string config_dir(const std::string& model) { return testing::source_path("tests/data/configs/" + model); }

nlohmann::json config_json(const std::string& model) {
  std::ifstream in(config_dir(model) + "/config.json");
  return nlohmann::json::parse(in);
}

// The refusal's field, or "" when the config was read.
std::string refused_field(const nlohmann::json& j) {
  auto m = model_from_json(j, "t");
  return m.ok() ? "" : m.error().field;
}

TEST(PublishedConfigs, Llama31TransformersFourAndFiveLayoutsReadTheSame) {
  auto v4 = load_model(config_dir("llama-3.1-8b"));
  auto v5 = load_model(config_dir("llama-3.1-8b-transformers5") + "/");  // a directory, trailing slash
  ASSERT_TRUE(v4.ok()) << v4.error().what();
  ASSERT_TRUE(v5.ok()) << v5.error().what();
  EXPECT_EQ(v5->name, "llama-3.1-8b-transformers5");
  for (const ModelConfig* m : {&*v4, &*v5}) {
    EXPECT_EQ(m->rope_theta, 500000.0);  // transformers 5 keeps it under rope_parameters
    EXPECT_EQ(m->rope_scaling.type, "llama3");
    EXPECT_EQ(m->rope_scaling.factor, 8.0);
    EXPECT_EQ(m->rope_scaling.low_freq_factor, 1.0);
    EXPECT_EQ(m->rope_scaling.high_freq_factor, 4.0);
    EXPECT_EQ(m->rope_scaling.original_max_positions, 8192);
    EXPECT_EQ(m->weights_dtype, "bfloat16");  // torch_dtype (4), dtype (5)
    EXPECT_FALSE(m->qkv_bias || m->o_bias || m->mlp_bias);
    EXPECT_EQ(m->total_params(), 8030261248LL);
  }
  EXPECT_EQ(rope_inverse_frequencies(*v4), rope_inverse_frequencies(*v5));
  // The preset is the same model.
  auto preset = load_model("llama-3.1-8b");
  ASSERT_TRUE(preset.ok());
  EXPECT_EQ(preset->rope_scaling, v4->rope_scaling);
}

TEST(PublishedConfigs, Qwen25HasQkvBiasesAndNoOutputOrMlpBias) {
  auto m = load_model(config_dir("qwen2.5-7b"));
  ASSERT_TRUE(m.ok()) << m.error().what();
  EXPECT_EQ(m->model_type, "qwen2");
  EXPECT_TRUE(m->qkv_bias);
  EXPECT_FALSE(m->o_bias);
  EXPECT_FALSE(m->mlp_bias);
  EXPECT_EQ(m->sliding_window, 0);  // sliding_window 131072 with use_sliding_window false
  EXPECT_EQ(m->rope_theta, 1e6);
  // Qwen2.5-7B's 7.62B: 28 x (weights + 3584 + 2 x 512 q/k/v bias elements + norms) + embeddings.
  EXPECT_EQ(m->total_params(), 7615616512LL);
  std::vector<std::string> names;
  for (const ParamSpec& p : group_params(ParamGroupKind::Layer, *m)) names.push_back(param_hf_name(p, 3));
  EXPECT_NE(std::find(names.begin(), names.end(), "model.layers.3.self_attn.k_proj.bias"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "model.layers.3.self_attn.o_proj.bias"), names.end());
}

TEST(PublishedConfigs, Qwen3NullsAreAbsent) {
  auto m = load_model(config_dir("qwen3-8b"));
  ASSERT_TRUE(m.ok()) << m.error().what();
  EXPECT_TRUE(m->qk_norm);
  EXPECT_EQ(m->rope_scaling.type, "default");
  EXPECT_EQ(m->sliding_window, 0);
  EXPECT_FALSE(m->qkv_bias);
  EXPECT_EQ(m->total_params(), 8190735360LL);
}

TEST(PublishedConfigs, MistralWindowIsInEffectOnlyBelowTheSequence) {
  auto v01 = load_model(config_dir("mistral-7b-v0.1"));
  ASSERT_TRUE(v01.ok()) << v01.error().what();
  EXPECT_EQ(v01->sliding_window, 4096);
  EXPECT_EQ(v01->total_params(), 7241732096LL);  // Mistral-7B's 7.24B
  EXPECT_TRUE(check_model_for_seq(*v01, 4096).ok());
  EXPECT_NE(describe_model(*v01, 4096).find("sliding_window 4096 >= seq 4096: not in effect"), std::string::npos);
  auto r = check_model_for_seq(*v01, 8192);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "model.sliding_window");
  EXPECT_EQ(r.error().kind, ErrorKind::BadInput);
  auto v03 = load_model(config_dir("mistral-7b-v0.3"));
  ASSERT_TRUE(v03.ok()) << v03.error().what();
  EXPECT_EQ(v03->sliding_window, 0);  // "sliding_window": null
  EXPECT_TRUE(check_model_for_seq(*v03, 1 << 20).ok());
  EXPECT_EQ(v03->vocab, 32768);
}

// A key a config.json leaves out takes its family's default, as transformers 4.57's config
// classes give it (configuration_<family>.py), not another family's: num_key_value_heads
// Mistral's 8, Qwen's 32, Llama's num_attention_heads; head_dim Qwen3's 128; sliding_window
// 4096 where the family slides. A null takes the derived value, or no window.
TEST(PublishedConfigs, AKeyLeftOutTakesItsFamilysDefault) {
  auto without = [](const char* dir, std::initializer_list<const char*> keys) {
    nlohmann::json j = config_json(dir);
    for (const char* k : keys) j.erase(k);
    return j;
  };
  auto mistral = model_from_json(without("mistral-7b-v0.1", {"num_key_value_heads", "sliding_window"}), "m");
  ASSERT_TRUE(mistral.ok()) << mistral.error().what();
  EXPECT_EQ(mistral->kv_heads, 8);
  EXPECT_EQ(mistral->sliding_window, 4096);
  EXPECT_EQ(mistral->head_dim, 128);  // 4096 / 32: Mistral derives it
  nlohmann::json unwindowed = without("mistral-7b-v0.1", {});
  unwindowed["sliding_window"] = nullptr;
  EXPECT_EQ(model_from_json(unwindowed, "m")->sliding_window, 0);
  auto llama = model_from_json(without("llama-3.1-8b", {"num_key_value_heads", "head_dim"}), "l");
  ASSERT_TRUE(llama.ok()) << llama.error().what();
  EXPECT_EQ(llama->kv_heads, llama->heads);
  EXPECT_EQ(llama->head_dim, 128);
  // Qwen3-32B's 64 heads and 8 kv heads: left out, 32 kv heads (not 64, nor 8).
  nlohmann::json qwen3 = nlohmann::json::parse(*read_regular_file(testing::source_path("models/qwen3-32b.json"), "preset"));
  for (const char* k : {"num_key_value_heads", "head_dim", "sliding_window"}) qwen3.erase(k);
  qwen3["use_sliding_window"] = true;
  qwen3["max_window_layers"] = 0;
  auto q = model_from_json(qwen3, "q");
  ASSERT_TRUE(q.ok()) << q.error().what();
  EXPECT_EQ(q->heads, 64);
  EXPECT_EQ(q->kv_heads, 32);
  EXPECT_EQ(q->head_dim, 128);  // not 5120 / 64 = 80
  EXPECT_EQ(q->sliding_window, 4096);
  // A null head_dim: Qwen's attention takes the None and fails; refused naming it.
  qwen3["head_dim"] = nullptr;
  EXPECT_EQ(refused_field(qwen3), "model.head_dim");
  // Qwen2.5-7B's 28 heads under Qwen2's default of 32 kv heads: refused naming the key and
  // saying it was left out, as transformers cannot build it either.
  auto qwen2 = model_from_json(without("qwen2.5-7b", {"num_key_value_heads"}), "q2");
  ASSERT_FALSE(qwen2.ok());
  EXPECT_EQ(qwen2.error().field, "model.num_key_value_heads");
  EXPECT_NE(qwen2.error().message.find("left out, and qwen2's default"), std::string::npos) << qwen2.error().message;
}

// A Mistral without a window: its config.json says null (left out, Mistral slides), while a plan
// file leaves the key out as plan files always did, meaning none, so the model section and the
// fingerprints made from it (traces, training checkpoints) are those of files written before.
TEST(PublishedConfigs, AMistralWithoutAWindowIsNullInItsConfigAndAbsentFromItsPlanFile) {
  Plan p = testing::gpu_plan("mistral-7b", "h100-80gb", 8, 65536);
  ASSERT_EQ(p.model.sliding_window, 0);
  const nlohmann::json config = model_to_json(p.model);
  EXPECT_TRUE(config.contains("sliding_window") && config["sliding_window"].is_null());
  EXPECT_EQ(model_from_json(config, "m")->sliding_window, 0);
  const nlohmann::json j = plan_to_json(p);
  EXPECT_FALSE(j["model"].contains("sliding_window"));
  auto back = plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().what();
  EXPECT_EQ(back->model.sliding_window, 0);
  EXPECT_EQ(plan_to_json(*back)["model"], j["model"]);
}

TEST(PublishedConfigs, MixturesOfExpertsAreRefusedByTheirExpertField) {
  EXPECT_EQ(refused_field(config_json("qwen3-30b-a3b")), "model.num_experts");
  EXPECT_EQ(refused_field(config_json("mixtral-8x7b")), "model.num_local_experts");
  auto deepseek = config_json("qwen3-8b");
  deepseek["n_routed_experts"] = 64;
  EXPECT_EQ(refused_field(deepseek), "model.n_routed_experts");
  deepseek["n_routed_experts"] = nullptr;  // null: no experts
  EXPECT_EQ(refused_field(deepseek), "");
}

TEST(PublishedConfigs, FieldsThatChangeTheModelAreReadOrRefusedByName) {
  const auto llama = config_json("llama-3.1-8b");
  auto with = [&](const char* key, nlohmann::json v) {
    auto j = llama;
    j[key] = std::move(v);
    return refused_field(j);
  };
  EXPECT_EQ(with("hidden_act", "gelu"), "model.hidden_act");
  EXPECT_EQ(with("hidden_act", "swish"), "");  // SiLU under another name
  EXPECT_EQ(with("hidden_act", nullptr), "model.hidden_act");  // transformers builds no activation from None
  EXPECT_EQ(with("use_cache", "no"), "model.use_cache");
  for (const auto& [value, cache] : {std::pair{nlohmann::json(false), false}, {nlohmann::json(nullptr), false},
                                     {nlohmann::json(true), true}}) {
    auto j = llama;
    j["use_cache"] = value;
    const auto m = model_from_json(j, "t");
    ASSERT_TRUE(m.ok()) << m.error().what();
    EXPECT_EQ(m->use_cache, cache) << value;
    // A run setting, kept in a plan as train.stack.use_cache: not in the model's own section.
    EXPECT_FALSE(model_to_json(*m).contains("use_cache"));
  }
  auto without = llama;
  without.erase("hidden_act");
  EXPECT_EQ(refused_field(without), "");  // left out: the family's silu
  EXPECT_EQ(with("model_type", 7), "model.model_type");
  EXPECT_EQ(with("model_type", "gemma2"), "model.model_type");
  EXPECT_EQ(with("torch_dtype", "float8_e4m3fn"), "model.torch_dtype");
  EXPECT_EQ(with("torch_dtype", "float16"), "");
  EXPECT_EQ(with("dtype", "float32"), "model.dtype");  // disagrees with torch_dtype bfloat16
  EXPECT_EQ(with("quantization_config", {{"quant_method", "fp8"}}), "model.quantization_config");
  EXPECT_EQ(with("attention_dropout", 0.1), "model.attention_dropout");
  EXPECT_EQ(with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}), "model.rope_scaling.rope_type");
  EXPECT_EQ(with("rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}), "model.rope_scaling.type");
  EXPECT_EQ(with("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}), "model.rope_scaling.low_freq_factor");
  EXPECT_EQ(with("rope_parameters", {{"rope_theta", 10000.0}}), "model.rope_parameters.rope_theta");  // != 500000
  EXPECT_EQ(with("attention_bias", "yes"), "model.attention_bias");
  auto qwen2 = config_json("qwen2.5-7b");
  qwen2["mlp_bias"] = true;  // transformers' Qwen2MLP has none
  EXPECT_EQ(refused_field(qwen2), "model.mlp_bias");
  // Which layers slide, as transformers 4.57's Qwen2Config and Qwen3Config say: under
  // use_sliding_window, those from max_window_layers (default 28) on, or the sliding_attention
  // entries of layer_types; without it none (their config sets sliding_window to None).
  const auto window_of = [](nlohmann::json j) {
    auto m = model_from_json(j, "t");
    EXPECT_TRUE(m.ok()) << m.error().what();
    return m.ok() ? m->sliding_window : -1;
  };
  qwen2 = config_json("qwen2.5-7b");  // 28 layers
  qwen2["use_sliding_window"] = true;
  EXPECT_EQ(window_of(qwen2), 0) << "layers from the 28th slide: none of 28";
  qwen2["max_window_layers"] = 20;
  EXPECT_EQ(window_of(qwen2), 131072);
  qwen2.erase("max_window_layers");
  qwen2["layer_types"] = std::vector<std::string>(28, "full_attention");
  EXPECT_EQ(window_of(qwen2), 0);
  qwen2["layer_types"][27] = "sliding_attention";
  EXPECT_EQ(window_of(qwen2), 131072);
  qwen2["use_sliding_window"] = false;
  EXPECT_EQ(window_of(qwen2), 0) << "sliding entries without use_sliding_window slide nothing";
  auto qwen3 = config_json("qwen3-8b");  // 36 layers, max_window_layers 36: none slides
  qwen3["use_sliding_window"] = true;
  qwen3["sliding_window"] = 4096;
  EXPECT_EQ(window_of(qwen3), 0);
  qwen3.erase("max_window_layers");  // the default, 28: the last 8 slide
  qwen3["sliding_window"] = 4096;
  EXPECT_EQ(window_of(qwen3), 4096);
  // A plan file keeps it: written as sliding from the first layer, read back the same.
  qwen2 = config_json("qwen2.5-7b");
  qwen2["use_sliding_window"] = true;
  qwen2["max_window_layers"] = 20;
  const ModelConfig windowed = model_from_json(qwen2, "t").value();
  EXPECT_EQ(model_from_json(model_to_json(windowed), "t").value().sliding_window, 131072);
  auto mistral = config_json("mistral-7b-v0.1");
  mistral["attention_bias"] = true;
  EXPECT_EQ(refused_field(mistral), "model.attention_bias");
}

TEST(PublishedConfigs, BiasesAndScalingSurviveAPlanFile) {
  for (const char* dir : {"llama-3.1-8b", "qwen2.5-7b", "mistral-7b-v0.1", "mistral-7b-v0.3", "qwen3-8b"}) {
    auto m = load_model(config_dir(dir));
    ASSERT_TRUE(m.ok()) << dir;
    auto back = model_from_json(model_to_json(*m), m->name);
    ASSERT_TRUE(back.ok()) << dir << ": " << back.error().what();
    EXPECT_EQ(model_to_json(*back), model_to_json(*m)) << dir;
    EXPECT_EQ(back->qkv_bias, m->qkv_bias);
    EXPECT_EQ(back->sliding_window, m->sliding_window);
    EXPECT_EQ(back->rope_scaling, m->rope_scaling);
  }
}

TEST(PublishedConfigs, LlamaBiasesAddTheirElements) {
  auto j = config_json("llama-3.1-8b");
  auto plain = model_from_json(j, "t").value();
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  auto biased = model_from_json(j, "t").value();
  // q, k, v, o biases: 4096 + 1024 + 1024 + 4096; gate, up, down: 14336 x 2 + 4096.
  EXPECT_EQ(biased.params_per_layer() - plain.params_per_layer(), 4096 + 1024 + 1024 + 4096 + 2 * 14336 + 4096);
}

// The llama3 rule of transformers' _compute_llama3_parameters, checked at its three bands
// for Llama 3.1 (theta 500000, d 128, factor 8, original 8192, low 1, high 4).
TEST(RopeFrequencies, Llama3ScalesLongWavelengthsAndSmoothsTheBand) {
  auto m = load_model(config_dir("llama-3.1-8b")).value();
  const auto scaled = rope_inverse_frequencies(m);
  m.rope_scaling = RopeScaling{};
  const auto plain = rope_inverse_frequencies(m);
  ASSERT_EQ(scaled.size(), 64u);
  int kept = 0, divided = 0, smoothed = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    EXPECT_DOUBLE_EQ(plain[i], std::pow(500000.0, -2.0 * double(i) / 128.0));
    const double wavelen = 2 * std::numbers::pi / plain[i];
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(scaled[i], plain[i]);
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 8);
      ++divided;
    } else {
      const double smooth = (8192.0 / wavelen - 1) / 3;
      EXPECT_DOUBLE_EQ(scaled[i], (1 - smooth) * plain[i] / 8 + smooth * plain[i]);
      EXPECT_LT(scaled[i], plain[i]);
      EXPECT_GT(scaled[i], plain[i] / 8);
      ++smoothed;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
}

TEST(ModelConfig, ADirectoryWithoutConfigIsNamed) {
  auto r = load_model(testing::source_path("tests/data/configs"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "--model");
  EXPECT_NE(r.error().message.find("holds no config.json"), std::string::npos);
}

}  // namespace
}  // namespace longctx
