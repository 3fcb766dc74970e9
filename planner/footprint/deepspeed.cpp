#include "planner/footprint/deepspeed.h"

#include <algorithm>

namespace longctx::footprint::deepspeed {

std::int64_t partition_elems(const StepShapes& s, std::int64_t numel) { return (numel + s.world - 1) / s.world; }

bool persistent_param(std::int64_t numel) { return numel <= kPersistenceThreshold; }

std::int64_t gathered_bytes(const StepShapes& s, std::int64_t numel, bool offload_params) {
  if (s.world == 1) return offload_params ? numel * s.e : 0;
  return partition_elems(s, numel) * s.world * s.e;
}

std::int64_t ipg_bucket_bytes(const StepShapes& s) { return kReduceBucketElems * s.e; }

std::int64_t reduce_flat_bytes(const StepShapes& s, std::int64_t elems) { return elems * s.e; }

std::int64_t partition_grad_workspace(const StepShapes& s, std::int64_t numel, bool offload_optimizer) {
  if (!offload_optimizer) return 0;
  const std::int64_t part = partition_elems(s, numel);
  return part * s.e + std::max(8 * std::min(part, kNormSplitElems), 4 * part);
}

std::int64_t device_step_workspace(const StepShapes& s, std::int64_t partition) { return partition * (s.e + 4); }

}  // namespace longctx::footprint::deepspeed
