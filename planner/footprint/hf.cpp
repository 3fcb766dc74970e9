#include "planner/footprint/hf.h"

#include <algorithm>
#include <vector>

#include "planner/footprint/attention.h"
#include "planner/footprint/zero.h"

namespace longctx::footprint::hf {

// position_ids is cache_position.unsqueeze(0), [1, S]: the tables are one sample's whatever b.
namespace {
std::int64_t tables_workspace(const StepShapes& s, std::int64_t rows) {
  const std::int64_t positions = rows * 4, freqs = rows * (s.d / 2) * 4, table32 = rows * s.d * 4;
  // emb, and one unscaled cos (fp32) or both fp32 tables before the cast (bf16)
  return positions + freqs + table32 + (s.e == 4 ? table32 : 2 * table32);
}
}  // namespace

std::int64_t rope_table_bytes(const StepShapes& s) { return s.S * s.d * s.e; }
std::int64_t rope_tables_workspace(const StepShapes& s) { return tables_workspace(s, s.S); }
std::int64_t rope_table_bytes_per_token(const StepShapes& s) { return s.n * s.d * s.e; }
std::int64_t rope_tables_workspace_per_token(const StepShapes& s) { return tables_workspace(s, s.n); }

std::int64_t norm_square_bytes(std::int64_t rows, std::int64_t width) { return rows * width * 4; }

std::int64_t norm_weight_backward_workspace(const StepShapes& s, std::int64_t rows, std::int64_t width) {
  return rows * width * s.e;
}

std::int64_t norm_scale_backward_workspace(std::int64_t rows, std::int64_t width) { return rows * width * 4; }

std::int64_t norm_rsqrt_backward_workspace(std::int64_t rows) { return 2 * rows * 4; }

std::int64_t norm_pow_backward_workspace(std::int64_t rows, std::int64_t width) { return 3 * rows * width * 4; }

std::int64_t rope_workspace(const StepShapes& s, std::int64_t heads) { return 2 * s.n * heads * s.d * s.e; }

std::int64_t sdpa_backward_workspace(const StepShapes& s) {
  const std::int64_t expanded = !s.cpu && s.H != s.K ? 2 * s.n * s.H * s.d * s.e : 0;
  return flash_backward_scratch(s, s.H) + expanded;
}

std::int64_t eager_scores_bytes(const StepShapes& s) { return s.b * s.H * s.S * s.S * s.e; }
std::int64_t eager_probs_bytes(const StepShapes& s) { return s.b * s.H * s.S * s.S * 4; }
std::int64_t additive_mask_bytes(const StepShapes& s) { return s.b * s.S * s.S * s.e; }
std::int64_t eager_mask_workspace(const StepShapes& s) { return s.S * s.S; }  // the [S, S] bool comparison

std::int64_t boolean_mask_bytes(const StepShapes& s) { return s.b * s.S * s.S; }
std::int64_t boolean_mask_workspace(const StepShapes& s) { return 2 * s.b * s.S * s.S; }

std::int64_t shifted_labels_bytes(const StepShapes& s) { return s.b * (s.S + 1) * 8; }

std::int64_t checkpoint_rng_state_bytes(const StepShapes& s) { return s.cpu ? 5056 : 0; }

std::int64_t adamw_state_bytes(const StepShapes& s, int group, bool fused) {
  const ParamSizes sizes = param_sizes(s, group);
  const bool device_steps = fused || s.cpu;
  return 2 * group_params(s, group) * s.e + (device_steps ? 4 * std::int64_t(sizes.size()) : 0);
}

namespace {

// The parameters in the order model.parameters() yields them, as transformers' modules
// register them: the embedding; per decoder layer its attention (q, k, v, o with their
// biases, then Qwen3's q_norm and k_norm), its MLP (gate, up, down with theirs), then
// input_layernorm and post_attention_layernorm; the final norm and lm_head last.
constexpr ParamRole kRegistrationOrder[] = {
    ParamRole::Embed, ParamRole::Wq, ParamRole::Bq, ParamRole::Wk, ParamRole::Bk, ParamRole::Wv,
    ParamRole::Bv, ParamRole::Wo, ParamRole::Bo, ParamRole::QNorm, ParamRole::KNorm, ParamRole::Gate,
    ParamRole::BGate, ParamRole::Up, ParamRole::BUp, ParamRole::Down, ParamRole::BDown, ParamRole::AttnNorm,
    ParamRole::MlpNorm, ParamRole::FinalNorm, ParamRole::Output};

// A group's parameter sizes in that order (the table's shapes and presence rules).
std::vector<std::int64_t> registration_order(const StepShapes& s, int group) {
  const ParamGroupKind kind = group == embed_group(s)  ? ParamGroupKind::Embedding
                              : group == head_group(s) ? ParamGroupKind::Head
                                                       : ParamGroupKind::Layer;
  std::vector<std::int64_t> v;
  for (const ParamRole role : kRegistrationOrder) {
    const ParamSpec& p = kParamTable[static_cast<std::size_t>(role)];
    if (p.group == kind && param_copy_bytes(s, p) > 0) v.push_back(param_copy_bytes(s, p) / s.e);
  }
  return v;
}

}  // namespace

std::int64_t adamw_single_tensor_workspace(const StepShapes& s, int group) {
  // _single_tensor_adam's `denom` is a loop local: the previous parameter's is still alive
  // while this one's `exp_avg_sq.sqrt()` and its quotient are made. The first parameter of a
  // group follows the last of the group before it (the embedding's comes first of all).
  const std::vector<std::int64_t> sizes = registration_order(s, group);
  std::int64_t prev = 0;
  if (group == 0) prev = s.V * s.h;
  else if (group != embed_group(s)) prev = s.h;  // a norm's weight ends every layer
  std::int64_t peak = 0;
  for (const std::int64_t n : sizes) {
    peak = std::max(peak, prev + 2 * n);
    prev = n;
  }
  return peak * s.e;
}

std::int64_t adamw_foreach_workspace(const StepShapes& s) {
  std::int64_t all = 0;
  for (int g = 0; g < param_groups(s); ++g) all += group_params(s, g);
  return all * s.e;
}

}  // namespace longctx::footprint::hf
