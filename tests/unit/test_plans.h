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

// The same on GPUs of a hardware preset, at the preset's budgets, in bf16 with fp32 gradients.
inline Plan gpu_plan(const char* model, const char* gpu, std::int64_t gpus, std::int64_t seq) {
  Plan p = cpu_plan(model, gpus, seq);
  p.cluster.hardware = load_hardware(gpu).value();
  p.cluster.device_budget_bytes = p.cluster.hardware.device_memory_bytes;
  p.cluster.host_budget_bytes_per_node = p.cluster.hardware.host_memory_bytes_per_node;
  p.train.dtype = DType::BF16;
  p.train.grad_dtype = DType::FP32;
  return p;
}

}  // namespace longctx::testing
