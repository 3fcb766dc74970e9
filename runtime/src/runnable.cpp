// Every refusal of a plan before it runs: what its stack, world, device and dtypes ask of this
// runtime, and whether its host memory fits the machine.
#include "longctx/runtime/runnable.h"

#include <cstdio>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/atomic_file.h"
#include "common/input_file.h"
#include "planner/core/units.h"
#include "planner/stacks/profile.h"
#include "longctx/runtime/attention.h"
#include "longctx/runtime/communicator.h"
#include "longctx/runtime/prediction.h"
#include "longctx/runtime/process_group.h"

namespace longctx::runtime {

namespace {

// Only the stacks whose profile says so are this runtime's to execute.
Result<bool> runs_stack(const Plan& p) {
  if (stack_profile(p.train.stack.kind).runtime_runs_it) return true;
  return Error::bad_input("train.stack", fmt::format("the plan predicts the {} stack, which longctx's runtime does not "
                                                     "execute; train it with that stack (longctx export) and hold the "
                                                     "run to the plan with longctx compare, or re-plan with --stack {}",
                                                     to_string(p.train.stack.kind), stack_profiles().front()->name));
}

// The plan's world against the ranks started (the communicator's, or torchrun's environment).
Result<bool> world_matches(const Plan& plan, const RunOptions& o) {
  int started = 1;
  if (o.comm) {
    started = o.comm->world();
  } else {
    RankEnv env;
    LONGCTX_TRY(env, rank_env_from_environment());
    started = env.world_size;
  }
  const auto world = plan.cluster.shape.world();
  if (world == started) return true;
  return Error::bad_input("cluster", fmt::format("the plan has {} rank(s) but {} {} started: run it with `longctx run "
                                                 "--nproc {}` (or torchrun --nproc-per-node {}), or plan for {}",
                                                 world, started, started == 1 ? "was" : "were", world, world,
                                                 started == 1 ? "--gpus 1" : fmt::format("{} ranks", started)));
}

// The device asked for, and what its kernels take of the plan.
Result<bool> device_takes(const Plan& plan, const RunOptions& o) {
  if (o.device != "cpu" && o.device != "cuda")
    return Error::bad_input("--device", fmt::format("'{}' is unknown; use cpu or cuda", o.device));
  // A GPU preset's plan predicts what a CUDA device holds (the caching allocator, cuBLAS's
  // workspace, the flash kernels' buffers): on the CPU virtual device it ran, and its report
  // read -95% on the embedding, which looked like the planner's error.
  if (o.device == "cpu" && plan.cluster.hardware.backend == Backend::Cuda)
    return Error::bad_input("--device", fmt::format("the plan is for {} (CUDA) and --device is cpu; run it with "
                                                    "--device cuda on that GPU, or plan for the CPU virtual device "
                                                    "(--gpu cpu) to run it here",
                                                    plan.cluster.hardware.name));
  if (o.device == "cpu") return true;
  if (!torch::cuda::is_available())
    return Error::bad_input("--device", "cuda was asked for but no GPU is visible; use --device cpu");
  if (plan.train.dtype != DType::BF16)
    return Error::bad_input("train.dtype", "the CUDA flash kernels need bf16; plan with --dtype bf16 or run on cpu");
  if (plan.model.head_dim > kCudaFlashMaxHeadDim)
    return Error::bad_input("model.head_dim", fmt::format("{} is above the {} the CUDA flash kernel supports; run this "
                                                          "model with --device cpu",
                                                          plan.model.head_dim, kCudaFlashMaxHeadDim));
  return true;
}

// Autograd hands each parameter its gradient in the parameter's dtype and the runtime keeps
// it so (AdamW::step upcasts one parameter's at a time): a plan of fp32 gradient buffers
// for bf16 parameters predicts memory this runtime never holds.
Result<bool> keeps_autograds_gradients(const Plan& plan) {
  if (plan.train.grad_dtype == plan.train.dtype) return true;
  return Error::bad_input("train.grad_dtype",
                          fmt::format("the plan keeps {} gradients of {} parameters, but longctx's runtime keeps "
                                      "autograd's gradients in the parameters' dtype: plan again without --grad-dtype "
                                      "(or with --grad-dtype {})",
                                      to_string(plan.train.grad_dtype), to_string(plan.train.dtype),
                                      to_string(plan.train.dtype)));
}

// MemAvailable from /proc/meminfo, in bytes: what the kernel can give without swapping.
std::optional<std::int64_t> available_memory() {
  auto text = read_regular_file("/proc/meminfo", "/proc/meminfo");
  if (!text) return std::nullopt;
  const auto at = text->find("MemAvailable:");
  if (at == std::string::npos) return std::nullopt;
  long long kib = 0;
  if (std::sscanf(text->c_str() + at, "MemAvailable: %lld kB", &kib) != 1) return std::nullopt;
  return static_cast<std::int64_t>(kib) * 1024;
}

// The host memory the ranks on this machine will use (the plan's host figure; on the CPU
// virtual device its device memory is host memory too) against what the machine has free:
// NoFit when it does not fit.
Result<bool> fits_host_memory(const Plan& plan, const RunOptions& o) {
  const auto available = available_memory();
  if (!available) return true;
  const PredictedStep predicted = predict_step(plan);
  std::int64_t local_ranks = 1;
  if (const char* n = std::getenv("LOCAL_WORLD_SIZE"); n && std::atoll(n) > 0) local_ranks = std::atoll(n);
  const std::int64_t per_rank =
      predicted.totals.peak_host_bytes + (o.device == "cpu" ? predicted.totals.peak_device_bytes : 0);
  const std::int64_t needed = per_rank * local_ranks;
  if (needed <= *available) return true;
  return Error{ErrorKind::NoFit, "--plan",
               fmt::format("the plan needs {} of host memory on this machine ({} rank{} x {}{}), and only {} is available "
                           "(MemAvailable); plan for a smaller --host-mem or budget, free memory, or pass --force to "
                           "run anyway",
                           format_bytes(needed), local_ranks, local_ranks == 1 ? "" : "s", format_bytes(per_rank),
                           o.device == "cpu" ? ", the CPU virtual device's memory included" : "",
                           format_bytes(*available))};
}

}  // namespace

Result<bool> runnable(const Plan& plan, const RunOptions& o) {
  if (auto r = runs_stack(plan); !r) return r;
  if (auto v = validate(plan.model, plan.cluster.shape, plan.train, plan.parallel); !v) return v.error();
  if (auto r = world_matches(plan, o); !r) return r;
  if (auto r = device_takes(plan, o); !r) return r;
  if (auto r = keeps_autograds_gradients(plan); !r) return r;
  if (o.steps < 1) return Error::bad_input("--steps", "must be at least 1");
  if (auto r = check_checkpoint_options(o.checkpoint); !r) return r;
  if (o.refuse_beyond_host_memory) return fits_host_memory(plan, o);
  return true;
}

}  // namespace longctx::runtime
