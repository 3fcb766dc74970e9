// run_plan: the check (runnable.h), the rank joined, then the steps run and measured.
#include "longctx/runtime/runner.h"

#include <chrono>
#include <optional>

#include <c10/core/AllocatorConfig.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "planner/core/phase_names.h"
#include "planner/core/units.h"
#include "longctx/runtime/adamw.h"
#include "longctx/runtime/communicator.h"
#include "longctx/runtime/llama_step.h"
#include "longctx/runtime/op_timer.h"
#include "longctx/runtime/prediction.h"
#include "longctx/runtime/sharded_params.h"
#include "batch_source.h"
#include "exception_text.h"

namespace longctx::runtime {

namespace {

// The rank's device made current and the meter started on it.
Result<std::shared_ptr<MemoryMeter>> start_meter(const Plan& plan, torch::Device device, bool budget, int rank) {
  try {
    // The rank's GPU is the current one before anything touches CUDA: streams from
    // getStreamFromPool(), events, torch::cuda::synchronize() and NCCL's communicators take
    // the current device, and a rank left on GPU 0 would open a context there too.
    if (device.is_cuda()) {
      c10::cuda::set_device(device.index());
      // The caching allocator runs as the plan's reserved figure was predicted: its segments
      // expandable or not as the plan says, every other setting at its default
      // (AcceleratorAllocatorConfig::parseArgs resets max_split_size, rounding and garbage
      // collection), whatever PYTORCH_CUDA_ALLOC_CONF says. Set before the first segment.
      c10::CachingAllocator::setAllocatorSettings(plan.cluster.expandable_segments ? "expandable_segments:True"
                                                                                   : "expandable_segments:False");
    }
    // On CUDA the meter initializes CUDA in the process (it reads the caching allocator).
    return std::make_shared<MemoryMeter>(budget ? plan.cluster.device_budget_bytes : 0,
                                         budget ? plan.cluster.host_budget_bytes_per_node : 0, device);
  } catch (const std::exception& e) {
    return Error{ErrorKind::Internal, "--device",
                 fmt::format("{} could not be initialized on rank {}: {}", device.str(), rank, exception_text(e))};
  }
}

// Data and sequence parallel without ZeRO: every rank's gradient is its tokens' share of the
// batch mean; their sum, in place, is the batch's gradient.
void sum_gradients(const std::vector<torch::Tensor>& params, Communicator& comm) {
  for (const auto& p : params)
    if (p.grad().defined()) {
      torch::Tensor g = p.grad();
      comm.all_reduce_sum(g);
    }
}

// What a step that threw becomes: the virtual device's out-of-memory with its figures beside
// the plan's, or the failure named with the rank.
Error step_failure(const Plan& plan, const MemoryMeter& meter, const Communicator& comm, const std::exception& e) {
  if (auto oom = meter.oom()) {
    const bool dev = oom->pool == Pool::Device;
    // This planner's figure, as the run's report shows it: a plan file's own may be stale or
    // edited (86.72 MiB quoted where this planner says 2.71 GiB).
    const Prediction now = predict_step(plan).totals;
    return Error{ErrorKind::Internal, dev ? "cluster.device_budget_bytes" : "cluster.host_budget_bytes_per_node",
                 fmt::format("out of memory on the CPU virtual device's {} pool in phase {}: {} requested with {} "
                             "in use, budget {} (the plan predicts a {} peak of {}); raise the budget or plan "
                             "with more memory techniques",
                             dev ? "device" : "host", oom->phase, format_bytes(oom->requested),
                             format_bytes(oom->in_use), format_bytes(oom->budget), dev ? "device" : "host",
                             format_bytes(dev ? now.peak_device_bytes : now.peak_host_bytes))};
  }
  return Error{ErrorKind::Internal, "", fmt::format("the step failed on rank {} of {}: {}", comm.rank(), comm.world(), exception_text(e))};
}

// The rank joined: its device current, its meter started on it, and its communicator.
struct RankSetup {
  torch::Device device = torch::kCPU;
  std::shared_ptr<MemoryMeter> meter;
  std::shared_ptr<Communicator> comm;
};

Result<RankSetup> join_rank(const Plan& plan, const RunOptions& o) {
  RankSetup rank;
  rank.comm = o.comm;
  RankEnv env;
  LONGCTX_TRY(env, rank_env_from_environment());
  const int local = o.comm ? 0 : env.local_rank;
  LONGCTX_TRY(rank.device,
              rank_device(o.device, local, o.device == "cuda" ? static_cast<int>(c10::cuda::device_count()) : 0));
  const bool budget = o.enforce_budget && rank.device.is_cpu();
  LONGCTX_TRY(rank.meter, start_meter(plan, rank.device, budget, env.rank));
  if (!rank.comm) {
    ProcessGroupOptions po;
    po.backend = o.device == "cuda" ? CommBackend::Nccl : CommBackend::Gloo;
    po.timeout = std::chrono::seconds(o.comm_timeout_s);
    po.device = rank.device;
    LONGCTX_TRY(rank.comm, Communicator::connect(env, plan.parallel.ulysses, plan.parallel.ring, po));
  }
  if (rank.comm->device() != rank.device)
    return Error{ErrorKind::Internal, "comm", fmt::format("the communicator's tensors live on {}, the run's on {}",
                                                          rank.comm->device().str(), rank.device.str())};
  return rank;
}

// LibTorch's threads and kernels as the plan's prediction counts them.
void configure_libtorch(const Plan& plan, const RunOptions& o, torch::Device device) {
  // The plan's thread count on the virtual device: the prediction counts the flash kernel's
  // per-thread buffers.
  const int threads = o.threads > 0 ? o.threads
                      : o.device == "cpu" && plan.cluster.hardware.backend == Backend::Cpu
                          ? static_cast<int>(plan.cluster.hardware.threads)
                          : 0;
  if (threads > 0) torch::set_num_threads(threads);
  // The virtual device's bf16 matmuls without oneDNN: its GEMMs allocate scratch that
  // depends on the CPU's instruction set (tens to hundreds of KiB, several % of a small
  // step), which no plan can predict; LibTorch's own kernels allocate only their outputs.
  if (device.is_cpu()) at::globalContext().setUserEnabledMkldnn(false);
}

// The rank's place among the checkpoint's writers; a failure anywhere fails every rank's save.
CheckpointRank checkpoint_rank(Communicator& comm) {
  CheckpointRank place;
  place.rank = comm.rank();
  place.world = comm.world();
  place.count_failures = [c = &comm](bool failed) {
    return static_cast<int>(std::lround(c->all_reduce_sum(failed ? 1.0 : 0.0)));
  };
  return place;
}

// Across ranks the shards, not the layers, go to the host pool (ShardedParams).
bool sharded_across_ranks(const Plan& plan, const Communicator& comm) {
  return comm.world() > 1 && plan.parallel.sharding != Sharding::None;
}

WeightPlacement weight_placement(const Plan& plan, torch::Device device, bool sharded) {
  WeightPlacement where;
  where.dtype = plan.train.dtype == DType::BF16 ? torch::kBFloat16 : torch::kFloat;
  where.device = device;
  where.layers_in_host_pool = plan.parallel.offload_params && !sharded;
  where.pinned = !device.is_cpu();
  return where;
}

// The model on the rank: its weights, the step over them, their shards across ranks and the
// optimizer, allocated in that order under the meter. Built in place (the step holds the
// weights by reference).
struct RankModel {
  RankModel(const Plan& plan, const RunOptions& o, torch::Device device, Communicator& comm)
      : weights(init_weights(plan.model, o.seed, weight_placement(plan, device, sharded_across_ranks(plan, comm)))),
        step(plan.model, plan.parallel, plan.train.seq, weights, device, &comm),
        shards(sharded_across_ranks(plan, comm) ? std::make_unique<ShardedParams>(weights, plan.parallel.sharding,
                                                                                   plan.parallel.offload_params, comm,
                                                                                   !device.is_cpu())
                                                : nullptr),
        // Not offloaded, the optimizer state is on the device with the gradients, also for
        // parameters in the host pool (ZeRO-3 with offloaded parameters).
        optimizer(shards ? shards->shards() : weights.all(), AdamWOptions{}, plan.parallel.offload_optimizer,
                  !device.is_cpu(), device) {
    // With the optimizer offloaded, each gradient goes into its fp32 host buffer as soon as
    // backward finishes it (the planner's grad.to_host): zero2/zero3's reduced shards,
    // zero1's slice of the all-reduced group, and without shards each group's, all-reduced
    // first across ranks; not all at the step.
    if (plan.parallel.offload_optimizer) {
      if (shards) shards->gradients_to_host(&optimizer);
      step.stream_gradients_to(&optimizer);
    }
    step.use_shards(shards.get());
    params = weights.all();
    // What a checkpoint holds of the parameters: zero3's shards, or the full parameters
    // (zero1/zero2 shards are views of them).
    state = shards && shards->gathers() ? shards->shards() : params;
  }
  RankModel(const RankModel&) = delete;
  RankModel& operator=(const RankModel&) = delete;

  LlamaWeights weights;
  LlamaStep step;
  std::unique_ptr<ShardedParams> shards;
  AdamW optimizer;
  std::vector<torch::Tensor> params;  // every parameter, full
  std::vector<torch::Tensor> state;   // what a checkpoint saves of them
};

// Step i (0-based) on the rank: the batch, forward and backward, the optimizer; measured.
// On CUDA, the driver's figure of the device in use is kept in `report`.
StepResult train_step(int i, RankModel& model, BatchSource& data, const RankSetup& rank, RunReport& report) {
  MemoryMeter& meter = *rank.meter;
  meter.reset_peaks();
  meter.set_phase(phase_name(StepPhase::Batch));
  const auto t0 = std::chrono::steady_clock::now();
  StepResult r;
  r.step = i + 1;
  {
    Batch batch = data.next(i, rank.device);
    r.loss = model.step.forward_backward(std::move(batch.tokens), std::move(batch.targets));
  }
  meter.set_phase(phase_name(StepPhase::Optimizer));
  if (model.shards) model.shards->prepare_step();
  if (rank.comm->world() > 1 && !model.shards && !model.step.streams_gradients()) sum_gradients(model.params, *rank.comm);
  model.optimizer.step();
  if (model.shards) model.shards->finish_step();
  if (!rank.device.is_cpu()) {
    torch::cuda::synchronize();
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess)
      report.device_in_use_driver = std::max(report.device_in_use_driver, static_cast<std::int64_t>(total - free));
  }
  meter.finish();
  r.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.peak_device = meter.peak(Pool::Device);
  r.peak_host = meter.peak(Pool::Host);
  r.peak_device_reserved = meter.peak_device_reserved();
  r.phases = meter.take_phases();
  r.samples = meter.take_samples();
  if (!r.phases.empty() && r.phases.front().name != phase_name(StepPhase::Batch)) r.phases.erase(r.phases.begin());  // the idle gap
  return r;
}

// The step's peaks into the run's, the step kept (the newest o.keep_steps) and reported.
void record_step(RunReport& report, StepResult r, const RunOptions& o, const StepCallback& on_step, int i) {
  report.peak_device = std::max(report.peak_device, r.peak_device);
  report.peak_host = std::max(report.peak_host, r.peak_host);
  report.peak_device_reserved = std::max(report.peak_device_reserved, r.peak_device_reserved);
  report.steps.push_back(std::move(r));
  if (on_step) on_step(i, report.steps.back());
  if (o.keep_steps > 0 && report.steps.size() > static_cast<std::size_t>(o.keep_steps))
    report.steps.erase(report.steps.begin());  // a long run's memory stays flat
}

// The model built on the joined rank, restored from its checkpoint if any, and trained for
// the steps left, each measured and saved when due.
Result<RunReport> execute(const Plan& plan, const RunOptions& o, const RankSetup& rank, BatchSource& data,
                          TrainingCheckpoints& checkpoints, const StepCallback& on_step) {
  MemoryMeter& meter = *rank.meter;
  meter.set_log(o.allocation_log);
  RunReport report;
  report.device = rank.device.is_cpu() ? "cpu (virtual device)" : fmt::format("cuda:{}", rank.device.index());
  MeterScope scope(rank.meter);
  try {
    RankModel model(plan, o, rank.device, *rank.comm);
    report.persistent_device = meter.current(Pool::Device);
    report.persistent_host = meter.current(Pool::Host);
    if (auto r = checkpoints.restore(model.state, model.optimizer); !r) return r.error();
    data.restore_cursor(checkpoints.data_cursor());
    report.resumed_after = checkpoints.start_step();
    meter.take_phases();
    meter.take_samples();
    std::optional<OpTimer> op_timer;
    if (o.time_ops) op_timer.emplace();
    for (int i = checkpoints.start_step(); i < o.steps; ++i) {
      record_step(report, train_step(i, model, data, rank, report), o, on_step, i);
      if (checkpoints.due(i + 1))  // between steps, outside the measured phases
        if (auto c = checkpoints.save(i + 1, data.cursor(), model.state, model.optimizer); !c) return c.error();
    }
  } catch (const std::exception& e) {
    return step_failure(plan, meter, *rank.comm, e);
  }
  return report;
}

}  // namespace

Result<RunReport> run_plan(const Plan& plan, const RunOptions& o, const StepCallback& on_step) {
  if (auto r = runnable(plan, o); !r) return r.error();
  LONGCTX_TRY(const RankSetup rank, join_rank(plan, o));
  BatchSource data(plan, o, *rank.comm);
  if (auto loaded = data.load(o.data_path); !loaded) return loaded.error();
  configure_libtorch(plan, o, rank.device);
  LONGCTX_TRY(auto checkpoints, TrainingCheckpoints::open(o.checkpoint, plan, o.seed, data.tokens(), o.steps,
                                                          checkpoint_rank(*rank.comm)));
  return execute(plan, o, rank, data, checkpoints, on_step);
}

}  // namespace longctx::runtime
