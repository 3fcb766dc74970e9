#include "planner/footprint/fsdp2.h"

#include <algorithm>

#include "planner/footprint/zero.h"

namespace longctx::footprint::fsdp2 {
namespace {

// A parameter's rows rounded up to a multiple of the ranks, as FSDP2 pads dim 0
// (_fsdp_common.py, _get_dim0_padded_size).
std::int64_t padded_rows(const StepShapes& s, std::int64_t rows) { return (rows + s.world - 1) / s.world * s.world; }

}  // namespace

std::int64_t padded_shard_elems(const StepShapes& s, int group) {
  std::int64_t elems = 0;
  for (const auto& [rows, cols] : param_dims(s, group)) elems += padded_rows(s, rows) / s.world * cols;
  return elems;
}

std::int64_t shard_bytes(const StepShapes& s, int group) { return padded_shard_elems(s, group) * 4; }

std::int64_t all_gather_output_bytes(const StepShapes& s, int group) { return s.world * padded_shard_elems(s, group) * s.e; }

std::int64_t all_gather_workspace(const StepShapes& s, int group) {
  return s.e == 4 ? 0 : padded_shard_elems(s, group) * s.e;
}

std::int64_t unsharded_bytes(const StepShapes& s, int group) { return s.world * padded_shard_elems(s, group) * s.e; }

std::int64_t reduce_scatter_input_bytes(const StepShapes& s, int group, std::int64_t reduce_e) {
  return s.world * padded_shard_elems(s, group) * reduce_e;
}

std::int64_t reduce_copy_in_padding_bytes(const StepShapes& s, int group, std::int64_t grad_e) {
  std::int64_t elems = 0;
  for (const auto& [rows, cols] : param_dims(s, group))
    if (rows % s.world != 0) elems += padded_rows(s, rows) * cols;
  return elems * grad_e;
}

std::int64_t reduce_copy_in_cast_bytes(const StepShapes& s, int group, std::int64_t grad_e, std::int64_t reduce_e) {
  if (grad_e == reduce_e) return 0;
  std::int64_t largest = 0;
  for (const auto& [rows, cols] : param_dims(s, group)) largest = std::max(largest, padded_rows(s, rows) * cols);
  return largest * grad_e;
}

std::int64_t reduce_scatter_output_bytes(const StepShapes& s, int group, std::int64_t reduce_e) {
  return padded_shard_elems(s, group) * reduce_e;
}

std::int64_t grad_shard_bytes(const StepShapes& s, int group) { return padded_shard_elems(s, group) * 4; }

std::int64_t adamw_state_bytes(const StepShapes& s, int group) {
  return 2 * shard_bytes(s, group) + 4 * static_cast<std::int64_t>(param_dims(s, group).size());
}

}  // namespace longctx::footprint::fsdp2
