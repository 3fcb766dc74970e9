#pragma once
// Whether this runtime can run a plan as asked: every refusal `longctx run` and run_plan make
// before a weight exists, each naming the field and the fix.
#include "common/result.h"
#include "planner/core/plan.h"
#include "longctx/runtime/run_options.h"

namespace longctx::runtime {

// Why this runtime cannot run the plan, naming the field and the fix; ok otherwise. BadInput:
// a stack whose profile says the runtime does not run it, a plan that does not validate, a
// world other than the ranks started, a device it cannot use (or a dtype or head size its
// CUDA kernels do not take), gradients kept in another dtype than the parameters', fewer
// than one step, checkpoint options that do not go together. NoFit: the host memory check
// (RunOptions::refuse_beyond_host_memory). Cheap but for that check (a prediction).
Result<bool> runnable(const Plan& plan, const RunOptions& o);

}  // namespace longctx::runtime
