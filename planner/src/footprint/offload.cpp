#include "longctx/planner/footprint/offload.h"

namespace longctx::footprint {

std::int64_t checkpoint_bytes(const StepShapes& s) { return s.n * s.h * s.e; }  // x [n, h] e

std::int64_t host_grad_bytes(const StepShapes& s, std::int64_t device_bytes) { return device_bytes / s.g * 4; }

bool streamed_group(const StepShapes& s, bool offload_params, int group) { return offload_params && group < s.layers; }

}  // namespace longctx::footprint
