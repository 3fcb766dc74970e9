#pragma once
// Options that `plan` and `max-context` share: the model, the cluster and its budgets.
#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "longctx/planner/plan.h"
#include "longctx/planner/result.h"

namespace longctx::cli {

struct ClusterOptions {
  std::string model = "llama-3.1-8b";
  std::int64_t gpus = 8;
  std::optional<std::int64_t> gpus_per_node;
  std::string gpu = "h100-80gb";
  std::string budget;    // per-GPU device memory budget; default: the preset's memory
  std::string host_mem;  // per node; default: the preset's
  std::string techniques = "all";
  std::string dtype;       // bf16 | fp32; default: bf16 on GPUs, fp32 on the CPU virtual device
  std::string grad_dtype;  // empty: fp32, or on the CPU virtual device the parameters' dtype
  bool json = false;
};

void add_cluster_options(CLI::App& app, ClusterOptions& o);

// Model, hardware and budgets resolved; train and parallel left at defaults.
Result<Plan> resolve_cluster(const ClusterOptions& o);

// Prints an error the way every command does and returns its exit status.
int report(const Error& e);

}  // namespace longctx::cli
