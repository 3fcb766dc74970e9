#pragma once
// The order of a Llama-family model's parameters: one table, read by the planner (the
// parameter groups' sizes) and by the runtime (weights, ZeRO's flat groups, the optimizer's
// and a checkpoint's parameter lists), so the two cannot disagree on it.
//
// Parameters come in groups, in this order: one group per layer (layer 0 first), then the
// embedding, then the head (final norm and, unless tied to the embedding, the output
// projection). Within a group they follow the table's order.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "planner/core/model_config.h"

namespace longctx {

enum class ParamGroupKind { Layer, Embedding, Head };

// Every parameter a model may have, one value per table row.
enum class ParamRole {
  AttnNorm, Wq, Bq, Wk, Bk, Wv, Bv, Wo, Bo, QNorm, KNorm, MlpNorm, Gate, BGate, Up, BUp, Down, BDown,
  Embed, FinalNorm, Output
};

// A dimension of a parameter's shape, as a function of ModelConfig; None ends a 1-D shape.
enum class ParamDim { None, Hidden, QDim, KvDim, Intermediate, HeadDim, Vocab };

// Which models have the parameter.
// QkvBias, OBias, MlpBias: ModelConfig's qkv_bias, o_bias, mlp_bias.
enum class ParamPresence { Always, QkNorm, Untied, QkvBias, OBias, MlpBias };

struct ParamSpec {
  ParamRole role;
  ParamGroupKind group;
  // The planner's name of a device copy of the parameter alone ("layer.3.params.wq"): a
  // streamed layer's parameters come to the device one copy each (footprint/zero.h).
  const char* copy_name;
  std::string_view hf_name;  // Hugging Face's name; "{}" stands for the layer's index
  std::array<ParamDim, 2> dims;
  ParamPresence presence = ParamPresence::Always;
};

// THE table: a layer's parameters in order, then the embedding, then the head's.
inline constexpr std::array<ParamSpec, 21> kParamTable = {{
    {ParamRole::AttnNorm, ParamGroupKind::Layer, "params.attn_norm", "model.layers.{}.input_layernorm.weight", {ParamDim::Hidden}},
    {ParamRole::Wq, ParamGroupKind::Layer, "params.wq", "model.layers.{}.self_attn.q_proj.weight", {ParamDim::QDim, ParamDim::Hidden}},
    {ParamRole::Bq, ParamGroupKind::Layer, "params.bq", "model.layers.{}.self_attn.q_proj.bias", {ParamDim::QDim}, ParamPresence::QkvBias},
    {ParamRole::Wk, ParamGroupKind::Layer, "params.wk", "model.layers.{}.self_attn.k_proj.weight", {ParamDim::KvDim, ParamDim::Hidden}},
    {ParamRole::Bk, ParamGroupKind::Layer, "params.bk", "model.layers.{}.self_attn.k_proj.bias", {ParamDim::KvDim}, ParamPresence::QkvBias},
    {ParamRole::Wv, ParamGroupKind::Layer, "params.wv", "model.layers.{}.self_attn.v_proj.weight", {ParamDim::KvDim, ParamDim::Hidden}},
    {ParamRole::Bv, ParamGroupKind::Layer, "params.bv", "model.layers.{}.self_attn.v_proj.bias", {ParamDim::KvDim}, ParamPresence::QkvBias},
    {ParamRole::Wo, ParamGroupKind::Layer, "params.wo", "model.layers.{}.self_attn.o_proj.weight", {ParamDim::Hidden, ParamDim::QDim}},
    {ParamRole::Bo, ParamGroupKind::Layer, "params.bo", "model.layers.{}.self_attn.o_proj.bias", {ParamDim::Hidden}, ParamPresence::OBias},
    {ParamRole::QNorm, ParamGroupKind::Layer, "params.q_norm", "model.layers.{}.self_attn.q_norm.weight", {ParamDim::HeadDim},
     ParamPresence::QkNorm},
    {ParamRole::KNorm, ParamGroupKind::Layer, "params.k_norm", "model.layers.{}.self_attn.k_norm.weight", {ParamDim::HeadDim},
     ParamPresence::QkNorm},
    {ParamRole::MlpNorm, ParamGroupKind::Layer, "params.mlp_norm", "model.layers.{}.post_attention_layernorm.weight", {ParamDim::Hidden}},
    {ParamRole::Gate, ParamGroupKind::Layer, "params.w_gate", "model.layers.{}.mlp.gate_proj.weight",
     {ParamDim::Intermediate, ParamDim::Hidden}},
    {ParamRole::BGate, ParamGroupKind::Layer, "params.b_gate", "model.layers.{}.mlp.gate_proj.bias", {ParamDim::Intermediate},
     ParamPresence::MlpBias},
    {ParamRole::Up, ParamGroupKind::Layer, "params.w_up", "model.layers.{}.mlp.up_proj.weight", {ParamDim::Intermediate, ParamDim::Hidden}},
    {ParamRole::BUp, ParamGroupKind::Layer, "params.b_up", "model.layers.{}.mlp.up_proj.bias", {ParamDim::Intermediate}, ParamPresence::MlpBias},
    {ParamRole::Down, ParamGroupKind::Layer, "params.w_down", "model.layers.{}.mlp.down_proj.weight",
     {ParamDim::Hidden, ParamDim::Intermediate}},
    {ParamRole::BDown, ParamGroupKind::Layer, "params.b_down", "model.layers.{}.mlp.down_proj.bias", {ParamDim::Hidden}, ParamPresence::MlpBias},
    {ParamRole::Embed, ParamGroupKind::Embedding, "params.embed", "model.embed_tokens.weight", {ParamDim::Vocab, ParamDim::Hidden}},
    {ParamRole::FinalNorm, ParamGroupKind::Head, "params.final_norm", "model.norm.weight", {ParamDim::Hidden}},
    {ParamRole::Output, ParamGroupKind::Head, "params.output", "lm_head.weight", {ParamDim::Vocab, ParamDim::Hidden},
     ParamPresence::Untied},
}};

// Row i of the table is the role whose value is i: a role indexes the table and anything
// kept per row.
constexpr bool rows_follow_roles() {
  for (std::size_t i = 0; i < kParamTable.size(); ++i)
    if (static_cast<std::size_t>(kParamTable[i].role) != i) return false;
  return true;
}
static_assert(rows_follow_roles(), "kParamTable's rows are in ParamRole's order");

// Whether the parameter is a projection's bias (drawn near 0, where a norm's 1-D weight is
// drawn near 1).
constexpr bool is_bias(ParamRole r) {
  return r == ParamRole::Bq || r == ParamRole::Bk || r == ParamRole::Bv || r == ParamRole::Bo || r == ParamRole::BGate ||
         r == ParamRole::BUp || r == ParamRole::BDown;
}

// Whether the presence rule holds for a model with these features; has_param and the
// planner's footprint (which sees a model through StepShapes) both decide by it.
struct ParamFeatures {
  bool qk_norm = false, tied = false, qkv_bias = false, o_bias = false, mlp_bias = false;
};
ParamFeatures param_features(const ModelConfig& m);
bool present(ParamPresence p, const ParamFeatures& f);

// Whether model m has the parameter.
bool has_param(const ParamSpec& p, const ModelConfig& m);
// Its shape under m: [rows, cols] for a matrix, [n] for a norm's weight.
std::vector<std::int64_t> param_shape(const ParamSpec& p, const ModelConfig& m);
std::int64_t param_numel(const ParamSpec& p, const ModelConfig& m);
// Its Hugging Face name; `layer` fills a layer parameter's index (ignored by the others).
std::string param_hf_name(const ParamSpec& p, std::int64_t layer = 0);

// The parameters m has in a group of this kind, in the table's order.
std::vector<ParamSpec> group_params(ParamGroupKind group, const ModelConfig& m);
// Their element counts, in the same order (what a group's flat ZeRO vector is made of).
std::vector<std::int64_t> group_param_sizes(ParamGroupKind group, const ModelConfig& m);

// The group kind of group index g of m: layers 0..L-1, then the embedding (L), the head (L+1).
ParamGroupKind group_kind(const ModelConfig& m, std::int64_t g);

}  // namespace longctx
