#include "planner/core/param_layout.h"

#include <fmt/format.h>

namespace longctx {

namespace {
std::int64_t dim_size(ParamDim d, const ModelConfig& m) {
  switch (d) {
    case ParamDim::None: return 1;
    case ParamDim::Hidden: return m.hidden;
    case ParamDim::QDim: return m.q_dim();
    case ParamDim::KvDim: return m.kv_dim();
    case ParamDim::Intermediate: return m.intermediate;
    case ParamDim::HeadDim: return m.head_dim;
    case ParamDim::Vocab: return m.vocab;
  }
  return 0;
}
}  // namespace

ParamFeatures param_features(const ModelConfig& m) {
  return {.qk_norm = m.qk_norm, .tied = m.tie_embeddings, .qkv_bias = m.qkv_bias, .o_bias = m.o_bias, .mlp_bias = m.mlp_bias};
}

bool present(ParamPresence p, const ParamFeatures& f) {
  switch (p) {
    case ParamPresence::Always: return true;
    case ParamPresence::QkNorm: return f.qk_norm;
    case ParamPresence::Untied: return !f.tied;
    case ParamPresence::QkvBias: return f.qkv_bias;
    case ParamPresence::OBias: return f.o_bias;
    case ParamPresence::MlpBias: return f.mlp_bias;
  }
  return false;
}

bool has_param(const ParamSpec& p, const ModelConfig& m) { return present(p.presence, param_features(m)); }

std::vector<std::int64_t> param_shape(const ParamSpec& p, const ModelConfig& m) {
  std::vector<std::int64_t> shape;
  for (ParamDim d : p.dims)
    if (d != ParamDim::None) shape.push_back(dim_size(d, m));
  return shape;
}

std::int64_t param_numel(const ParamSpec& p, const ModelConfig& m) {
  std::int64_t n = 1;
  for (std::int64_t s : param_shape(p, m)) n *= s;
  return n;
}

std::string param_hf_name(const ParamSpec& p, std::int64_t layer) {
  if (p.group != ParamGroupKind::Layer) return std::string(p.hf_name);
  return fmt::format(fmt::runtime(p.hf_name), layer);
}

std::vector<ParamSpec> group_params(ParamGroupKind group, const ModelConfig& m) {
  std::vector<ParamSpec> v;
  for (const ParamSpec& p : kParamTable)
    if (p.group == group && has_param(p, m)) v.push_back(p);
  return v;
}

std::vector<std::int64_t> group_param_sizes(ParamGroupKind group, const ModelConfig& m) {
  std::vector<std::int64_t> v;
  for (const ParamSpec& p : group_params(group, m)) v.push_back(param_numel(p, m));
  return v;
}

ParamGroupKind group_kind(const ModelConfig& m, std::int64_t g) {
  if (g < m.layers) return ParamGroupKind::Layer;
  return g == m.layers ? ParamGroupKind::Embedding : ParamGroupKind::Head;
}

}  // namespace longctx
