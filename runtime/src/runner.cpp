#include "longctx/runtime/runner.h"

#include <chrono>
#include <cstring>
#include <optional>

#include <c10/core/AllocatorConfig.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "common/atomic_file.h"
#include "common/input_file.h"
#include "planner/core/phase_names.h"
#include "planner/core/units.h"
#include "longctx/runtime/adamw.h"
#include "longctx/runtime/attention.h"
#include "longctx/runtime/communicator.h"
#include "longctx/runtime/llama_step.h"
#include "longctx/runtime/op_timer.h"
#include "longctx/runtime/sharded_params.h"

namespace longctx::runtime {

Result<bool> runnable(const Plan& plan, const RunOptions& o) {
  if (auto v = validate(plan.model, plan.cluster.shape, plan.train, plan.parallel); !v) return v.error();
  int started = 1;
  if (o.comm) {
    started = o.comm->world();
  } else {
    RankEnv env;
    LONGCTX_TRY(env, rank_env_from_environment());
    started = env.world_size;
  }
  const auto world = plan.cluster.shape.world();
  if (world != started)
    return Error::bad_input("cluster", fmt::format("the plan has {} ranks but {} {} started: run it with `longctx run "
                                                   "--nproc {}` (or torchrun --nproc-per-node {}), or plan for {}",
                                                   world, started, started == 1 ? "was" : "were", world, world,
                                                   started == 1 ? "--gpus 1" : fmt::format("{} ranks", started)));
  if (o.device != "cpu" && o.device != "cuda")
    return Error::bad_input("--device", fmt::format("'{}' is unknown; use cpu or cuda", o.device));
  if (o.device == "cuda" && !torch::cuda::is_available())
    return Error::bad_input("--device", "cuda was asked for but no GPU is visible; use --device cpu");
  if (o.device == "cuda" && plan.train.dtype != DType::BF16)
    return Error::bad_input("train.dtype", "the CUDA flash kernels need bf16; plan with --dtype bf16 or run on cpu");
  if (o.device == "cuda" && plan.model.head_dim > kCudaFlashMaxHeadDim)
    return Error::bad_input("model.head_dim", fmt::format("{} is above the {} the CUDA flash kernel supports; run this "
                                                          "model with --device cpu",
                                                          plan.model.head_dim, kCudaFlashMaxHeadDim));
  // Autograd hands each parameter its gradient in the parameter's dtype and the runtime keeps
  // it so (AdamW::step upcasts one parameter's at a time): a plan of fp32 gradient buffers
  // for bf16 parameters predicts memory this runtime never holds.
  if (plan.train.grad_dtype != plan.train.dtype)
    return Error::bad_input("train.grad_dtype",
                            fmt::format("the plan keeps {} gradients of {} parameters, but longctx's runtime keeps "
                                        "autograd's gradients in the parameters' dtype: plan again without --grad-dtype "
                                        "(or with --grad-dtype {})",
                                        to_string(plan.train.grad_dtype), to_string(plan.train.dtype),
                                        to_string(plan.train.dtype)));
  if (o.steps < 1) return Error::bad_input("--steps", "must be at least 1");
  return check_checkpoint_options(o.checkpoint);
}

namespace {

struct Batch {
  torch::Tensor tokens, targets;  // [b, S] int64
};

// Synthetic tokens from (seed, step); or consecutive windows of a uint32 token file. The
// world's batch is dp x micro_batch samples; a rank takes its samples' rows and its
// S/(u*r) columns of them (ulysses.h, sequence_shard).
class BatchSource {
 public:
  BatchSource(const Plan& p, const RunOptions& o, const Communicator& c)
      : b_(p.train.micro_batch * c.dp_size()),
        S_(p.train.seq),
        V_(p.model.vocab),
        seed_(o.seed),
        rows_(p.train.micro_batch),
        first_row_(p.train.micro_batch * c.dp_rank()),
        shard_(sequence_shard(p.train.seq, p.parallel, c.ring_rank(), c.sp_rank())) {}
  // Reads the token file, if any: BadInput naming --data when it is missing, a folder, a
  // FIFO or a device (read_regular_file never blocks on one), too short, or holds an id
  // outside the vocabulary.
  Result<bool> load(const std::string& path) {
    if (path.empty()) return true;
    LONGCTX_TRY(auto bytes, read_regular_file(path, "--data", input_limits::kDataBytes));
    file_.resize(bytes.size() / sizeof(std::uint32_t));
    std::memcpy(file_.data(), bytes.data(), file_.size() * sizeof(std::uint32_t));
    if (auto e = check(path); !e.empty()) return Error::bad_input("--data", e);
    return true;
  }

 private:
  std::string check(const std::string& path) const {
    if (static_cast<std::int64_t>(file_.size()) < b_ * S_ + 1)
      return fmt::format("{} holds {} tokens; a step needs {} (micro_batch x seq + 1)", path, file_.size(), b_ * S_ + 1);
    for (auto id : file_)
      if (static_cast<std::int64_t>(id) >= V_) return fmt::format("{} holds token id {} >= the vocabulary {}", path, id, V_);
    return "";
  }

 public:
  std::int64_t tokens() const { return static_cast<std::int64_t>(file_.size()); }  // 0: synthetic
  // The read position in the file; synthetic tokens have none (they come from the step).
  std::int64_t cursor() const { return cursor_; }
  void restore_cursor(std::int64_t c) { cursor_ = c; }
  Batch next(int step, torch::Device device) {
    torch::Tensor all;
    if (file_.empty()) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(seed_ * 1000003ULL + static_cast<std::uint64_t>(step) + 1);
      all = at::randint(V_, {b_, S_ + 1}, gen, torch::TensorOptions().dtype(torch::kLong));
    } else {
      all = torch::empty({b_, S_ + 1}, torch::kLong);
      auto* a = all.data_ptr<std::int64_t>();
      const auto n = static_cast<std::int64_t>(file_.size());
      for (std::int64_t i = 0; i < b_ * (S_ + 1); ++i) a[i] = file_[static_cast<std::size_t>((cursor_ + i) % n)];
      cursor_ = (cursor_ + b_ * S_) % n;
    }
    auto [tokens, targets] = shard_batch(all.narrow(0, first_row_, rows_), shard_, device);  // padded: ulysses.h
    return {tokens, targets};
  }

 private:
  std::int64_t b_, S_, V_;
  std::uint64_t seed_;
  std::int64_t rows_, first_row_;
  SequenceShard shard_;
  std::vector<std::uint32_t> file_;
  std::int64_t cursor_ = 0;
};

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
                 fmt::format("{} could not be initialized on rank {}: {}", device.str(), rank, e.what())};
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
    return Error{ErrorKind::Internal, dev ? "cluster.device_budget_bytes" : "cluster.host_budget_bytes_per_node",
                 fmt::format("out of memory on the CPU virtual device's {} pool in phase {}: {} requested with {} "
                             "in use, budget {} (the plan predicts a {} peak of {}); raise the budget or plan "
                             "with more memory techniques",
                             dev ? "device" : "host", oom->phase, format_bytes(oom->requested),
                             format_bytes(oom->in_use), format_bytes(oom->budget), dev ? "device" : "host",
                             format_bytes(dev ? plan.prediction.peak_device_bytes : plan.prediction.peak_host_bytes))};
  }
  return Error{ErrorKind::Internal, "", fmt::format("the step failed on rank {} of {}: {}", comm.rank(), comm.world(), e.what())};
}

}  // namespace

Result<RunReport> run_plan(const Plan& plan, const RunOptions& o, const StepCallback& on_step) {
  if (auto r = runnable(plan, o); !r) return r.error();
  std::shared_ptr<Communicator> comm = o.comm;
  RankEnv env;
  LONGCTX_TRY(env, rank_env_from_environment());
  const int local = o.comm ? 0 : env.local_rank;
  LONGCTX_TRY(const torch::Device device,
              rank_device(o.device, local, o.device == "cuda" ? static_cast<int>(c10::cuda::device_count()) : 0));
  const bool cpu = device.is_cpu();
  const bool budget = o.enforce_budget && cpu;
  LONGCTX_TRY(std::shared_ptr<MemoryMeter> meter, start_meter(plan, device, budget, env.rank));
  if (!comm) {
    ProcessGroupOptions po;
    po.backend = o.device == "cuda" ? CommBackend::Nccl : CommBackend::Gloo;
    po.timeout = std::chrono::seconds(o.comm_timeout_s);
    po.device = device;
    LONGCTX_TRY(comm, Communicator::connect(env, plan.parallel.ulysses, plan.parallel.ring, po));
  }
  if (comm->device() != device)
    return Error{ErrorKind::Internal, "comm", fmt::format("the communicator's tensors live on {}, the run's on {}",
                                                          comm->device().str(), device.str())};
  BatchSource data(plan, o, *comm);
  if (auto loaded = data.load(o.data_path); !loaded) return loaded.error();
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
  CheckpointRank place;
  place.rank = comm->rank();
  place.world = comm->world();
  place.count_failures = [c = comm.get()](bool failed) {
    return static_cast<int>(std::lround(c->all_reduce_sum(failed ? 1.0 : 0.0)));
  };
  LONGCTX_TRY(auto checkpoints, TrainingCheckpoints::open(o.checkpoint, plan, o.seed, data.tokens(), o.steps, place));

  meter->set_log(o.allocation_log);
  RunReport report;
  report.device = cpu ? "cpu (virtual device)" : fmt::format("cuda:{}", device.index());
  MeterScope scope(meter);
  try {
    WeightPlacement where;
    where.dtype = plan.train.dtype == DType::BF16 ? torch::kBFloat16 : torch::kFloat;
    where.device = device;
    // Across ranks the shards, not the layers, go to the host pool (ShardedParams).
    const bool sharded = comm->world() > 1 && plan.parallel.sharding != Sharding::None;
    where.layers_in_host_pool = plan.parallel.offload_params && !sharded;
    where.pinned = !cpu;
    LlamaWeights weights = init_weights(plan.model, o.seed, where);
    LlamaStep step(plan.model, plan.parallel, plan.train.seq, weights, device, comm.get());
    std::unique_ptr<ShardedParams> shards;
    if (sharded)
      shards = std::make_unique<ShardedParams>(weights, plan.parallel.sharding, plan.parallel.offload_params, *comm, !cpu);
    // Not offloaded, the optimizer state is on the device with the gradients, also for
    // parameters in the host pool (ZeRO-3 with offloaded parameters).
    AdamW optimizer(shards ? shards->shards() : weights.all(), AdamWOptions{}, plan.parallel.offload_optimizer, !cpu,
                    device);
    // With the optimizer offloaded, each gradient goes into its fp32 host buffer as soon as
    // backward finishes it (the planner's grad.to_host): zero2/zero3's reduced shards,
    // zero1's slice of the all-reduced group, and without shards each group's, all-reduced
    // first across ranks; not all at the step.
    if (plan.parallel.offload_optimizer) {
      if (shards) shards->gradients_to_host(&optimizer);
      step.stream_gradients_to(&optimizer);
    }
    step.use_shards(shards.get());
    const auto params = weights.all();
    // What a checkpoint holds of the parameters: zero3's shards, or the full parameters
    // (zero1/zero2 shards are views of them).
    const auto state = shards && shards->gathers() ? shards->shards() : params;
    report.persistent_device = meter->current(Pool::Device);
    report.persistent_host = meter->current(Pool::Host);
    if (auto r = checkpoints.restore(state, optimizer); !r) return r.error();
    data.restore_cursor(checkpoints.data_cursor());
    report.resumed_after = checkpoints.start_step();
    meter->take_phases();
    meter->take_samples();
    std::optional<OpTimer> op_timer;
    if (o.time_ops) op_timer.emplace();

    for (int i = checkpoints.start_step(); i < o.steps; ++i) {
      meter->reset_peaks();
      meter->set_phase(phase_name(StepPhase::Batch));
      const auto t0 = std::chrono::steady_clock::now();
      StepResult r;
      r.step = i + 1;
      {
        Batch batch = data.next(i, device);
        r.loss = step.forward_backward(std::move(batch.tokens), std::move(batch.targets));
      }
      meter->set_phase(phase_name(StepPhase::Optimizer));
      if (shards) shards->prepare_step();
      if (comm->world() > 1 && !shards && !step.streams_gradients()) sum_gradients(params, *comm);
      optimizer.step();
      if (shards) shards->finish_step();
      if (!cpu) {
        torch::cuda::synchronize();
        std::size_t free = 0, total = 0;
        if (cudaMemGetInfo(&free, &total) == cudaSuccess)
          report.device_in_use_driver = std::max(report.device_in_use_driver, static_cast<std::int64_t>(total - free));
      }
      meter->finish();
      r.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      r.peak_device = meter->peak(Pool::Device);
      r.peak_host = meter->peak(Pool::Host);
      r.peak_device_reserved = meter->peak_device_reserved();
      r.phases = meter->take_phases();
      r.samples = meter->take_samples();
      if (!r.phases.empty() && r.phases.front().name != phase_name(StepPhase::Batch)) r.phases.erase(r.phases.begin());  // the idle gap
      report.peak_device = std::max(report.peak_device, r.peak_device);
      report.peak_host = std::max(report.peak_host, r.peak_host);
      report.peak_device_reserved = std::max(report.peak_device_reserved, r.peak_device_reserved);
      report.steps.push_back(std::move(r));
      if (on_step) on_step(i, report.steps.back());
      if (o.keep_steps > 0 && report.steps.size() > static_cast<std::size_t>(o.keep_steps))
        report.steps.erase(report.steps.begin());  // a long run's memory stays flat
      if (checkpoints.due(i + 1))  // between steps, outside the measured phases
        if (auto c = checkpoints.save(i + 1, data.cursor(), state, optimizer); !c) return c.error();
    }
  } catch (const std::exception& e) {
    return step_failure(plan, *meter, *comm, e);
  }
  return report;
}

}  // namespace longctx::runtime
