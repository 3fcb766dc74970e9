#include "longctx/planner/footprint/zero.h"

namespace longctx::footprint {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

int param_groups(const StepShapes& s) { return static_cast<int>(s.layers) + 2; }
int embed_group(const StepShapes& s) { return static_cast<int>(s.layers); }
int head_group(const StepShapes& s) { return static_cast<int>(s.layers) + 1; }

// ---- THE parameter order (see zero.h) ----------------------------------------------------
ParamSizes param_sizes(const StepShapes& s, int group) {
  const std::int64_t h = s.h, q = s.H * s.d, kv = s.K * s.d;
  ParamSizes v;
  if (group == embed_group(s)) {
    v.push_back(s.V * h);  // embedding
    return v;
  }
  if (group == head_group(s)) {
    v.push_back(h);                      // final norm
    if (!s.tied) v.push_back(s.V * h);  // output projection
    return v;
  }
  for (std::int64_t elems : {h, q * h, kv * h, kv * h, h * q}) v.push_back(elems);  // attn norm, wq, wk, wv, wo
  if (s.qk_norm) {
    v.push_back(s.d);  // q norm
    v.push_back(s.d);  // k norm
  }
  for (std::int64_t elems : {h, s.I * h, s.I * h, h * s.I}) v.push_back(elems);  // mlp norm, gate, up, down
  return v;
}

std::int64_t sum_of_param_sizes(const StepShapes& s, int group) {
  std::int64_t total = 0;
  for (std::int64_t elems : param_sizes(s, group)) total += elems;
  return total;
}

std::int64_t shard_elems(const StepShapes& s, int group) { return ceil_div(group_params(s, group), s.world); }

std::int64_t gathered_params_bytes(const StepShapes& s, int group) { return group_params(s, group) * s.e; }

std::int64_t gather_staging_bytes(const StepShapes& s, int group, bool streamed) {
  // On one rank there is nothing to gather: the copy from the host is the full buffer.
  return streamed && s.world > 1 ? shard_elems(s, group) * s.e : 0;
}

double gather_received_bytes(const StepShapes& s, int group) {
  return double(shard_elems(s, group) * s.e) * double(s.world - 1);
}

std::int64_t grad_shard_bytes(const StepShapes& s, int group) { return shard_elems(s, group) * s.g; }

std::int64_t reduce_scatter_send_bytes(const StepShapes& s, int group) {
  return s.world > 1 ? shard_elems(s, group) * s.world * s.g : 0;
}

double reduce_scatter_sent_bytes(const StepShapes& s, int group) {
  return double(shard_elems(s, group) * s.g) * double(s.world - 1);
}

double all_reduce_sent_bytes(const StepShapes& s, int group) {
  return 2.0 * double(group_params(s, group) * s.g) * double(s.world - 1) / double(s.world);
}

}  // namespace longctx::footprint
