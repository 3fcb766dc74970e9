#include "longctx/runtime/runner.h"

#include <chrono>
#include <fstream>

#include <c10/cuda/CUDAFunctions.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "longctx/runtime/adamw.h"
#include "longctx/runtime/llama_step.h"

namespace longctx::runtime {

Result<bool> runnable(const Plan& plan, const RunOptions& o) {
  if (auto v = validate(plan.model, plan.cluster.shape, plan.train, plan.parallel); !v) return v.error();
  if (plan.cluster.shape.world() != 1)
    return Error::bad_input("cluster", fmt::format("the plan has {} ranks; this runtime runs one rank for now: plan for "
                                                   "1 node x 1 GPU (--gpus 1)",
                                                   plan.cluster.shape.world()));
  if (plan.parallel.ulysses != 1)
    return Error::bad_input("parallel.ulysses", "Ulysses needs several ranks; set it to 1 for a one-rank run");
  if (plan.parallel.sharding == Sharding::Zero1 || plan.parallel.sharding == Sharding::Zero2)
    return Error::bad_input("parallel.sharding",
                            fmt::format("{} shards over several ranks; use none (or zero3 with offload_params) for a "
                                        "one-rank run",
                                        to_string(plan.parallel.sharding)));
  if (o.device != "cpu" && o.device != "cuda")
    return Error::bad_input("--device", fmt::format("'{}' is unknown; use cpu or cuda", o.device));
  if (o.device == "cuda" && !torch::cuda::is_available())
    return Error::bad_input("--device", "cuda was asked for but no GPU is visible; use --device cpu");
  if (o.device == "cuda" && plan.train.dtype != DType::BF16)
    return Error::bad_input("train.dtype", "the CUDA flash kernels need bf16; plan with --dtype bf16 or run on cpu");
  if (o.steps < 1) return Error::bad_input("--steps", "must be at least 1");
  return true;
}

namespace {

struct Batch {
  torch::Tensor tokens, targets;  // [b, S] int64
};

// Synthetic tokens from (seed, step); or consecutive windows of a uint32 token file.
class BatchSource {
 public:
  BatchSource(const Plan& p, const RunOptions& o) : b_(p.train.micro_batch), S_(p.train.seq), V_(p.model.vocab), seed_(o.seed) {
    if (!o.data_path.empty()) {
      std::ifstream in(o.data_path, std::ios::binary);
      std::uint32_t v;
      while (in.read(reinterpret_cast<char*>(&v), sizeof v)) file_.push_back(v);
    }
  }
  std::string check(const std::string& path) const {
    if (path.empty()) return "";
    if (static_cast<std::int64_t>(file_.size()) < b_ * S_ + 1)
      return fmt::format("{} holds {} tokens; a step needs {} (micro_batch x seq + 1)", path, file_.size(), b_ * S_ + 1);
    for (auto id : file_)
      if (static_cast<std::int64_t>(id) >= V_) return fmt::format("{} holds token id {} >= the vocabulary {}", path, id, V_);
    return "";
  }
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
    // Tokens and targets in buffers of their own, [b, S] each, as the planner has them (a
    // view into `all` would keep both alive as long as either).
    auto part = [&](std::int64_t from) {
      return torch::empty({b_, S_}, all.options().device(device)).copy_(all.narrow(1, from, S_));
    };
    return {part(0), part(1)};
  }

 private:
  std::int64_t b_, S_, V_;
  std::uint64_t seed_;
  std::vector<std::uint32_t> file_;
  std::int64_t cursor_ = 0;
};

std::string bytes_text(std::int64_t b) {
  if (b >= (1LL << 30)) return fmt::format("{:.2f} GiB", double(b) / double(1LL << 30));
  if (b >= (1LL << 20)) return fmt::format("{:.2f} MiB", double(b) / double(1LL << 20));
  if (b >= (1LL << 10)) return fmt::format("{:.1f} KiB", double(b) / double(1LL << 10));
  return fmt::format("{} B", b);
}

}  // namespace

Result<RunReport> run_plan(const Plan& plan, const RunOptions& o, const StepCallback& on_step) {
  if (auto r = runnable(plan, o); !r) return r.error();
  const torch::Device device = o.device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  BatchSource data(plan, o);
  if (auto e = data.check(o.data_path); !e.empty()) return Error::bad_input("--data", e);
  // The plan's thread count on the virtual device: the prediction counts the flash kernel's
  // per-thread buffers.
  const int threads = o.threads > 0 ? o.threads
                      : o.device == "cpu" && plan.cluster.hardware.backend == Backend::Cpu
                          ? static_cast<int>(plan.cluster.hardware.threads)
                          : 0;
  if (threads > 0) torch::set_num_threads(threads);

  const bool cpu = device.is_cpu();
  const bool budget = o.enforce_budget && cpu;
  auto meter = std::make_shared<MemoryMeter>(budget ? plan.cluster.device_budget_bytes : 0,
                                             budget ? plan.cluster.host_budget_bytes_per_node : 0, device);
  meter->set_log(o.allocation_log);
  RunReport report;
  report.device = cpu ? "cpu (virtual device)" : fmt::format("cuda:{}", device.index());
  MeterScope scope(meter);
  try {
    WeightPlacement where;
    where.dtype = plan.train.dtype == DType::BF16 ? torch::kBFloat16 : torch::kFloat;
    where.device = device;
    where.layers_in_host_pool = plan.parallel.offload_params;
    where.pinned = !cpu;
    LlamaWeights weights = init_weights(plan.model, o.seed, where);
    AdamW optimizer(weights.all(), AdamWOptions{}, plan.parallel.offload_optimizer, !cpu);
    LlamaStep step(plan.model, plan.parallel, plan.train.seq, weights, device);
    report.persistent_device = meter->current(Pool::Device);
    report.persistent_host = meter->current(Pool::Host);
    meter->take_phases();
    meter->take_samples();

    for (int i = 0; i < o.steps; ++i) {
      meter->reset_peaks();
      meter->set_phase("batch");
      const auto t0 = std::chrono::steady_clock::now();
      StepResult r;
      {
        Batch batch = data.next(i, device);
        r.loss = step.forward_backward(std::move(batch.tokens), std::move(batch.targets));
      }
      meter->set_phase("optimizer");
      optimizer.step();
      if (!cpu) torch::cuda::synchronize();
      meter->finish();
      r.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      r.peak_device = meter->peak(Pool::Device);
      r.peak_host = meter->peak(Pool::Host);
      r.peak_device_reserved = meter->peak_device_reserved();
      r.phases = meter->take_phases();
      r.samples = meter->take_samples();
      if (!r.phases.empty() && r.phases.front().name != "batch") r.phases.erase(r.phases.begin());  // the idle gap
      report.peak_device = std::max(report.peak_device, r.peak_device);
      report.peak_host = std::max(report.peak_host, r.peak_host);
      report.peak_device_reserved = std::max(report.peak_device_reserved, r.peak_device_reserved);
      report.steps.push_back(std::move(r));
      if (on_step) on_step(i, report.steps.back());
    }
  } catch (const std::exception& e) {
    if (auto oom = meter->oom()) {
      const bool dev = oom->pool == Pool::Device;
      return Error{ErrorKind::Internal, dev ? "cluster.device_budget_bytes" : "cluster.host_budget_bytes_per_node",
                   fmt::format("out of memory on the CPU virtual device's {} pool in phase {}: {} requested with {} "
                               "in use, budget {} (the plan predicts a {} peak of {}); raise the budget or plan "
                               "with more memory techniques",
                               dev ? "device" : "host", oom->phase, bytes_text(oom->requested),
                               bytes_text(oom->in_use), bytes_text(oom->budget), dev ? "device" : "host",
                               bytes_text(dev ? plan.prediction.peak_device_bytes : plan.prediction.peak_host_bytes))};
    }
    return Error{ErrorKind::Internal, "", fmt::format("the step failed: {}", e.what())};
  }
  return report;
}

}  // namespace longctx::runtime
