#pragma once
// Plans for planner tests: small models on the CPU virtual device (exact byte counts).
#include "planner/core/plan.h"

namespace longctx::testing {

inline Plan cpu_plan(const char* model, std::int64_t gpus, std::int64_t seq) {
  Plan p;
  p.model = load_model(model).value();
  p.cluster.hardware = load_hardware("cpu").value();
  p.cluster.shape = {1, gpus};
  p.cluster.device_budget_bytes = 1LL << 40;
  p.cluster.host_budget_bytes_per_node = 1LL << 42;
  p.train.seq = seq;
  p.train.dtype = DType::FP32;
  return p;
}

}  // namespace longctx::testing
