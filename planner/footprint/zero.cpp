#include "planner/footprint/zero.h"

#include <algorithm>

#include "planner/core/param_layout.h"

namespace longctx::footprint {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

int param_groups(const StepShapes& s) { return static_cast<int>(s.layers) + 2; }
int embed_group(const StepShapes& s) { return static_cast<int>(s.layers); }
int head_group(const StepShapes& s) { return static_cast<int>(s.layers) + 1; }

// ---- The parameter order: the shared table (param_layout.h), read with this step's shapes --
namespace {

std::int64_t dim_of(const StepShapes& s, ParamDim d) {
  switch (d) {
    case ParamDim::None: return 1;
    case ParamDim::Hidden: return s.h;
    case ParamDim::QDim: return s.H * s.d;
    case ParamDim::KvDim: return s.K * s.d;
    case ParamDim::Intermediate: return s.I;
    case ParamDim::HeadDim: return s.d;
    case ParamDim::Vocab: return s.V;
  }
  return 0;
}

bool present(const StepShapes& s, ParamPresence p) {
  return longctx::present(p, {.qk_norm = s.qk_norm, .tied = s.tied, .qkv_bias = s.qkv_bias, .o_bias = s.o_bias,
                              .mlp_bias = s.mlp_bias});
}

}  // namespace

ParamSizes param_sizes(const StepShapes& s, int group) {
  const ParamGroupKind kind = group == embed_group(s)  ? ParamGroupKind::Embedding
                              : group == head_group(s) ? ParamGroupKind::Head
                                                       : ParamGroupKind::Layer;
  ParamSizes v;
  for (const ParamSpec& p : kParamTable)
    if (p.group == kind && present(s, p.presence)) v.push_back(dim_of(s, p.dims[0]) * dim_of(s, p.dims[1]));
  return v;
}

std::int64_t bias_params(const StepShapes& s, std::initializer_list<ParamRole> roles) {
  // Every bias of the table is present only under one of these (Llama's and Qwen's presets
  // have none): the builders ask for every projection of every layer of every graph.
  if (!s.qkv_bias && !s.o_bias && !s.mlp_bias) return 0;
  std::int64_t total = 0;
  for (const ParamSpec& p : kParamTable)
    if (is_bias(p.role) && present(s, p.presence) && std::find(roles.begin(), roles.end(), p.role) != roles.end())
      total += dim_of(s, p.dims[0]);
  return total;
}

std::int64_t sum_of_param_sizes(const StepShapes& s, int group) {
  std::int64_t total = 0;
  for (std::int64_t elems : param_sizes(s, group)) total += elems;
  return total;
}

std::vector<std::array<std::int64_t, 2>> param_dims(const StepShapes& s, int group) {
  const ParamGroupKind kind = group == embed_group(s)  ? ParamGroupKind::Embedding
                              : group == head_group(s) ? ParamGroupKind::Head
                                                       : ParamGroupKind::Layer;
  std::vector<std::array<std::int64_t, 2>> v;
  for (const ParamSpec& p : kParamTable)
    if (p.group == kind && present(s, p.presence)) v.push_back({dim_of(s, p.dims[0]), dim_of(s, p.dims[1])});
  return v;
}

std::int64_t shard_elems(const StepShapes& s, int group) { return ceil_div(group_params(s, group), s.world); }

std::int64_t gathered_params_bytes(const StepShapes& s, int group) { return group_params(s, group) * s.e; }

std::int64_t param_copy_bytes(const StepShapes& s, const ParamSpec& p) {
  return present(s, p.presence) ? dim_of(s, p.dims[0]) * dim_of(s, p.dims[1]) * s.e : 0;
}

// Across ranks the shards are what live on the host: a gather, not a copy per parameter.
bool fetches_param_copies(const StepShapes& s, bool offload_params) { return offload_params && s.world == 1; }

double gather_received_bytes(const StepShapes& s, int group) {
  return double(shard_elems(s, group) * s.e) * double(s.world - 1);
}

std::int64_t grad_shard_bytes(const StepShapes& s, int group) { return shard_elems(s, group) * s.g; }

std::int64_t reduce_scatter_workspace_bytes(const StepShapes& s, int group) {
  return s.world > 1 ? shard_elems(s, group) * (s.world - 1) * s.g : 0;
}

double reduce_scatter_sent_bytes(const StepShapes& s, int group) {
  return double(shard_elems(s, group) * s.g) * double(s.world - 1);
}

double all_reduce_sent_bytes(const StepShapes& s, int group) {
  return 2.0 * double(group_params(s, group) * s.g) * double(s.world - 1) / double(s.world);
}

}  // namespace longctx::footprint
