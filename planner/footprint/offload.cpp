#include "planner/footprint/offload.h"

namespace longctx::footprint {

std::int64_t checkpoint_bytes(const StepShapes& s) { return s.n * s.h * s.e; }  // x [n, h] e

std::int64_t host_grad_bytes(std::int64_t elems) { return elems * 4; }  // grad.host [elems] fp32

bool streamed_group(const StepShapes& s, bool offload_params, int group) { return offload_params && group < s.layers; }

}  // namespace longctx::footprint
