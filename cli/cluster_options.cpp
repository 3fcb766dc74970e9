#include "cluster_options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "longctx/planner/knobs.h"
#include "longctx/planner/limits.h"
#include "longctx/planner/units.h"

namespace longctx::cli {

void add_cluster_options(CLI::App& app, ClusterOptions& o) {
  app.add_option("--model", o.model, "Preset name (see `longctx models`) or path of a Hugging Face config.json")
      ->capture_default_str();
  app.add_option("--gpus", o.gpus, "Total GPUs (ranks)")->capture_default_str();
  app.add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node (default: the preset's, at most --gpus)");
  app.add_option("--gpu", o.gpu, "Hardware preset: h100-80gb, h200-141gb, a100-80gb, or cpu (the runtime's virtual device)")
      ->capture_default_str();
  app.add_option("--budget", o.budget, "Device memory budget per GPU, e.g. 80GiB (default: the preset's memory)");
  app.add_option("--host-mem", o.host_mem, "Host memory per node, e.g. 2TiB (default: the preset's)");
  app.add_option("--techniques", o.techniques,
                 fmt::format("Comma list the search may use: {}; 'all' (default) or 'none'",
                             fmt::join(technique_names(all_techniques()), ",")))
      ->capture_default_str();
  app.add_option("--dtype", o.dtype, "Parameters and activations: bf16 or fp32 (default: bf16 on GPUs, fp32 on --gpu cpu)");
  app.add_option("--grad-dtype", o.grad_dtype,
                 "Gradients: fp32 or bf16 (default: fp32 on GPUs; on --gpu cpu the --dtype, as the runtime's autograd "
                 "keeps them)");
  app.add_flag("--json", o.json, "Print JSON for scripts instead of tables");
}

Result<Plan> resolve_cluster(const ClusterOptions& o) {
  Plan p;
  LONGCTX_TRY(p.model, load_model(o.model));
  LONGCTX_TRY(p.cluster.hardware, load_hardware(o.gpu));
  // Bounds first (limits.h): the searches loop over divisors of the GPUs and build graphs
  // whose sizes follow them, so an unbounded count would run long before being refused.
  if (o.gpus < 1) return Error::bad_input("--gpus", fmt::format("{} is not a GPU count; give 1 or more", o.gpus));
  if (o.gpus > limits::kMaxGpus)
    return Error::bad_input("--gpus", fmt::format("{} is above longctx's bound of {} GPUs", o.gpus, limits::kMaxGpus));
  const std::int64_t per_node = o.gpus_per_node.value_or(std::min(o.gpus, p.cluster.hardware.gpus_per_node));
  if (per_node < 1) return Error::bad_input("--gpus-per-node", "must be at least 1");
  if (per_node > limits::kMaxGpusPerNode)
    return Error::bad_input("--gpus-per-node",
                            fmt::format("{} is above longctx's bound of {} GPUs per node", per_node, limits::kMaxGpusPerNode));
  if (o.gpus % per_node != 0)
    return Error::bad_input("--gpus", fmt::format("{} GPUs do not fill whole nodes of {}; give a multiple, or set --gpus-per-node", o.gpus, per_node));
  p.cluster.shape = {o.gpus / per_node, per_node};
  p.cluster.device_budget_bytes = p.cluster.hardware.device_memory_bytes;
  if (!o.budget.empty()) {
    LONGCTX_TRY(p.cluster.device_budget_bytes, parse_bytes(o.budget, "--budget"));
  }
  p.cluster.host_budget_bytes_per_node = p.cluster.hardware.host_memory_bytes_per_node;
  if (!o.host_mem.empty()) {
    LONGCTX_TRY(p.cluster.host_budget_bytes_per_node, parse_bytes(o.host_mem, "--host-mem"));
  }
  // Larger budgets would let the max-context bounds pass int64 (limits.h).
  if (p.cluster.device_budget_bytes > limits::kMaxBytes)
    return Error::bad_input("--budget", fmt::format("{} is above longctx's bound of 4PiB per GPU", o.budget));
  if (p.cluster.host_budget_bytes_per_node > limits::kMaxBytes)
    return Error::bad_input("--host-mem", fmt::format("{} is above longctx's bound of 4PiB per node", o.host_mem));
  if (p.cluster.hardware.backend == Backend::Cpu) p.train.dtype = DType::FP32;
  if (!o.dtype.empty()) {
    LONGCTX_TRY(p.train.dtype, parse_dtype(o.dtype, "--dtype"));
  }
  if (!o.grad_dtype.empty()) {
    LONGCTX_TRY(p.train.grad_dtype, parse_dtype(o.grad_dtype, "--grad-dtype"));
  } else {
    p.train.grad_dtype = p.cluster.hardware.backend == Backend::Cpu ? p.train.dtype : DType::FP32;
  }
  return p;
}

int report(const Error& e) {
  fmt::print(stderr, "longctx: error: {}\n", e.what());
  return exit_status(e.kind);
}

}  // namespace longctx::cli
