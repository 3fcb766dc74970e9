#include "longctx/runtime/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <cuda_runtime_api.h>
#include <torch/torch.h>

#include "exception_text.h"
#include "planner/footprint/attention.h"
#include "planner/footprint/step_shapes.h"
#include "longctx/runtime/attention.h"
#include "longctx/runtime/llama_weights.h"
#include "longctx/runtime/memory_meter.h"

namespace longctx::runtime {
namespace {

using Clock = std::chrono::steady_clock;

void synchronize(const torch::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
}

// Bytes of a sweep that evicts what the last call left in the caches private to a core (on
// CUDA: the device's L2): twice the largest of them. The step's ops find their inputs and
// output buffers out of those caches (between two uses of a tensor the step moves more than
// they hold), where a call repeated on the same tensors would find them in place: measured on
// the CPU virtual device, matmuls and elementwise ops at tiny-gqa's shapes run 15-35% slower
// cold than repeated, attention alike either way. As triton.testing.do_bench clears the L2
// before each timed call (python/triton/testing.py, do_bench).
std::int64_t private_cache_bytes(const torch::Device& d) {
  std::int64_t bytes = 0;
  if (d.is_cuda()) {
    int l2 = 0;
    if (cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, d.index()) == cudaSuccess) bytes = l2;
  } else {
    for (const int level : {_SC_LEVEL1_DCACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) bytes = std::max<std::int64_t>(bytes, ::sysconf(level));
  }
  constexpr std::int64_t kFallback = 4 << 20;  // where the system does not say
  return 2 * (bytes > 0 ? bytes : kFallback);
}

// Writes over a buffer larger than the private caches before each timed call.
class CacheSweep {
 public:
  explicit CacheSweep(const torch::Device& d)
      : buffer_(torch::zeros({private_cache_bytes(d) / 4}, torch::TensorOptions().dtype(torch::kFloat).device(d))) {}
  void operator()() { buffer_.add_(1.0f); }

 private:
  torch::Tensor buffer_;
};

// The median seconds of one call of f, each call after `sweep` (untimed; none: null): one warm-up call,
// then calls until `budget_s` has passed and at least 3 ran.
template <class F>
double median_seconds(F&& f, const torch::Device& d, double budget_s, CacheSweep* sweep) {
  f();
  synchronize(d);
  std::vector<double> times;
  const auto start = Clock::now();
  while (times.size() < 3 || (std::chrono::duration<double>(Clock::now() - start).count() < budget_s && times.size() < 10000)) {
    if (sweep) {
      (*sweep)();
      synchronize(d);
    }
    const auto t0 = Clock::now();
    f();
    synchronize(d);
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

// The same for a collective: a fixed number of rounds on every rank, after a barrier.
template <class F>
double median_collective_seconds(F&& f, Communicator& comm, int rounds) {
  comm.barrier();
  f();
  std::vector<double> times;
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = Clock::now();
    f();
    synchronize(comm.device());
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

// The head dimensions attention is timed at: powers of two from 8 to 128 and the model's own.
std::vector<std::int64_t> attention_head_dims(std::int64_t model_head_dim) {
  std::vector<std::int64_t> dims = {8, 16, 32, 64, 128};
  if (std::find(dims.begin(), dims.end(), model_head_dim) == dims.end()) dims.push_back(model_head_dim);
  std::sort(dims.begin(), dims.end());
  return dims;
}

struct Probes {
  const CalibrateOptions& o;
  Communicator& comm;
  torch::Device device;
  CacheSweep sweep;
  std::vector<ProbeResult> out;

  std::vector<std::pair<std::int64_t, std::pair<double, double>>> attention_points;  // head_dim -> (forward, backward)
  void record_attention(std::int64_t d, double fwd, double bwd, std::string how) {
    attention_points.push_back({d, {fwd, bwd}});
    record(fmt::format("attention_forward_flops.{}", d), fwd, "flop/s", how);
    record(fmt::format("attention_backward_flops.{}", d), bwd, "flop/s", how);
  }
  void record(std::string key, double value, std::string unit, std::string how) {
    if (o.progress && comm.rank() == 0) std::fprintf(o.progress, "calibrate: %-26s %12.4g %s\n", key.c_str(), value, unit.c_str());
    out.push_back({std::move(key), value, std::move(unit), std::move(how)});
  }
  torch::TensorOptions opts(torch::ScalarType t) const { return torch::TensorOptions().dtype(t).device(device); }

  double matmul(torch::ScalarType type) {
    const auto& m = o.model;
    const auto n = o.seq, h = m.hidden, I = m.intermediate;
    auto x = torch::randn({n, h}, opts(type)), up = torch::randn({I, h}, opts(type)), down = torch::randn({h, I}, opts(type));
    torch::Tensor y;
    const double s = median_seconds([&] { y = torch::linear(torch::linear(x, up), down); }, device, o.seconds_per_probe, &sweep);
    return 2 * footprint::matmul_flops(n, h, I) / s;
  }

  // The model's query and kv heads at head dimension d.
  std::pair<double, double> attention_rates(std::int64_t d) {
    const auto& m = o.model;
    const auto type = device.is_cuda() ? torch::kBFloat16 : torch::kFloat;
    auto q = torch::randn({1, o.seq, m.heads, d}, opts(type)).requires_grad_();
    auto k = torch::randn({1, o.seq, m.kv_heads, d}, opts(type)).requires_grad_();
    auto v = torch::randn({1, o.seq, m.kv_heads, d}, opts(type)).requires_grad_();
    footprint::StepShapes s;
    s.b = 1, s.S = o.seq, s.d = d;
    s.cpu = !device.is_cuda();
    // The kernel's own work, whole blocks across the diagonal included: the rate is then the
    // kernel's at any length (footprint::attention_kernel_flops).
    const double flops = footprint::attention_kernel_flops(s, m.heads);
    torch::Tensor out;
    const double fwd = median_seconds([&] { out = attention(q, k, v); }, device, o.seconds_per_probe, &sweep);
    auto dout = torch::randn_like(out);
    const double both = median_seconds(
        [&] {
          auto y = attention(q, k, v);
          auto g = torch::autograd::grad({y}, {q, k, v}, {dout});
        },
        device, o.seconds_per_probe, &sweep);
    return {flops / fwd, 2.5 * flops / std::max(both - fwd, 1e-9)};
  }

  // Over [n, I] fp32 on `where`, the bytes moved a second counting two reads and a write:
  // in place, a += b (the optimizer's passes over its states); else c = a * b into a fresh
  // output (a step's elementwise ops under autograd, whose output buffer the write must
  // first bring into the cache).
  double elementwise_bandwidth(const torch::Device& where, bool in_place) {
    const auto n = o.seq, I = o.model.intermediate;
    const auto fp32 = torch::TensorOptions().dtype(torch::kFloat).device(where);
    auto a = torch::randn({n, I}, fp32), b = torch::randn({n, I}, fp32);
    torch::Tensor c;
    CacheSweep host_sweep(torch::kCPU);
    CacheSweep& before = where == device ? sweep : host_sweep;
    const double s = in_place ? median_seconds([&] { a.add_(b); }, where, o.seconds_per_probe, &before)
                              : median_seconds([&] { c = a * b; }, where, o.seconds_per_probe, &before);
    return 3.0 * double(n * I) * 4 / s;
  }

  // SiLU into a fresh output, as the step's SwiGLU runs it: an exp and a divide an element,
  // which on a CPU take longer than the element's bytes do.
  double transcendental_rate() {
    const auto n = o.seq, I = o.model.intermediate;
    auto a = torch::randn({n, I}, opts(torch::kFloat));
    torch::Tensor y;
    const double s = median_seconds([&] { y = torch::silu(a); }, device, o.seconds_per_probe, &sweep);
    return double(n * I) / s;
  }

  // A step's ops run under autograd: one small op's cost is a forward that records a node
  // and a backward that runs it, half of the pair each (the planner counts the two as two ops).
  double op_overhead() {
    auto a = torch::ones({8}, opts(torch::kFloat)).requires_grad_(), b = torch::ones({8}, opts(torch::kFloat));
    // Not after a sweep: a step's small ops run back to back, each finding the last one's
    // code and bookkeeping in the caches.
    return median_seconds([&] { (a * b).backward(b); }, device, o.seconds_per_probe, nullptr) / 2;
  }

  double copy_rate() {
    const auto bytes = o.seq * o.model.hidden * 4;
    auto host = torch::randn({o.seq, o.model.hidden}, torch::TensorOptions().dtype(torch::kFloat).pinned_memory(device.is_cuda()));
    auto dev = torch::empty({o.seq, o.model.hidden}, opts(torch::kFloat));
    const double s = median_seconds([&] { dev.copy_(host, /*non_blocking=*/false); }, device, o.seconds_per_probe, &sweep);
    return double(bytes) / s;
  }

  // Bytes a rank sends per second, as the planner counts them for each collective.
  std::pair<double, double> collective_rates(int rounds) {
    const std::int64_t w = comm.world();
    const std::int64_t elems = (o.seq * o.model.hidden + w - 1) / w * w;
    const double bytes = double(elems) * 4;
    auto full = torch::randn({elems}, opts(torch::kFloat));
    auto shard = torch::randn({elems / w}, opts(torch::kFloat));
    auto send = torch::randn({w, elems / w}, opts(torch::kFloat));
    const double sent = bytes * double(w - 1) / double(w);
    const double a2a = median_collective_seconds([&] { auto r = comm.all_to_all(send); }, comm, rounds);
    const double ag = median_collective_seconds([&] { comm.all_gather(full, shard); }, comm, rounds);
    const double rs = median_collective_seconds(
        [&] {
          auto f = full.clone();
          comm.reduce_scatter_sum(shard, f);
        },
        comm, rounds);
    auto one = torch::ones({1}, opts(torch::kFloat));
    const double latency = median_collective_seconds([&] { comm.all_reduce_sum(one); }, comm, rounds);
    if (o.progress && comm.rank() == 0)
      std::fprintf(o.progress, "calibrate: all-to-all %.3g s, all-gather %.3g s, reduce-scatter %.3g s for %.3g bytes sent\n",
                   a2a, ag, rs, sent);
    return {(sent / a2a + sent / ag + sent / rs) / 3, latency};
  }

  // How much later the slowest rank finishes the same work than the average rank does, as a
  // fraction of the work (MeasuredRates::rank_lag): every rank runs the MLP's up projection
  // at the step's shape, repeated to about kLagIntervalS (the span of a layer's compute between
  // two of its exchanges), between barriers; each round's times are summed across the ranks
  // into one vector, and max / mean - 1 averaged over `rounds`. Ranks that share cores,
  // caches or memory bandwidth (with each other or other tenants) run the same work at
  // different speeds from moment to moment, and a synchronous exchange ends with the slowest.
  double rank_lag(int rounds) {
    constexpr double kLagIntervalS = 0.01;
    const auto& m = o.model;
    auto x = torch::randn({o.seq, m.hidden}, opts(torch::kFloat)), up = torch::randn({m.intermediate, m.hidden}, opts(torch::kFloat));
    torch::Tensor y;
    auto work = [&] { y = torch::linear(x, up); };
    work();
    synchronize(device);
    auto t0 = Clock::now();
    work();
    synchronize(device);
    const double once = std::max(std::chrono::duration<double>(Clock::now() - t0).count(), 1e-7);
    // Every rank must run the same repetitions: the mean of each rank's count, rounded up.
    const double mine = std::clamp(std::ceil(kLagIntervalS / once), 1.0, 10000.0);
    const int reps = static_cast<int>(std::ceil(comm.all_reduce_sum(mine) / double(comm.world())));
    auto times = torch::zeros({comm.world()}, opts(torch::kDouble));
    double lag = 0;
    for (int r = 0; r < rounds; ++r) {
      comm.barrier();
      t0 = Clock::now();
      for (int i = 0; i < reps; ++i) work();
      synchronize(device);
      const double took = std::chrono::duration<double>(Clock::now() - t0).count();
      times.zero_();
      times[comm.rank()].fill_(took);
      comm.all_reduce_sum(times);
      const auto all = times.cpu();
      lag += all.max().item<double>() / all.mean().item<double>() - 1;
    }
    return lag / rounds;
  }

  // The step's gradient all-reduces (runner.cpp, sum_gradients): one per parameter tensor of
  // the model, back to back; bytes a rank sends a second beyond `latency` a call, as the
  // planner counts them (footprint::all_reduce_sent_bytes). 0 where the calls take no longer
  // than their latency: the bytes then cost nothing measurable beyond it.
  double all_reduce_rate(int rounds, double latency) {
    WeightPlacement where;
    where.device = device;
    std::vector<torch::Tensor> grads;
    double sent = 0;
    const double w = double(comm.world());
    for (const auto& p : init_weights(o.model, 0, where).all()) {
      grads.push_back(torch::randn_like(p));
      sent += 2.0 * double(p.numel() * 4) * (w - 1) / w;
    }
    const double round_s = median_collective_seconds(
        [&] {
          for (auto& g : grads) comm.all_reduce_sum(g);
        },
        comm, rounds);
    const double beyond_latency = round_s - double(grads.size()) * latency;
    if (o.progress && comm.rank() == 0)
      std::fprintf(o.progress, "calibrate: %zu gradient all-reduces back to back %.3g s for %.3g bytes sent\n", grads.size(),
                   round_s, sent);
    return beyond_latency > 0 ? sent / beyond_latency : 0;
  }
};

}  // namespace

Result<Calibration> calibrate(const CalibrateOptions& o, Communicator& comm) {
  if (o.seq < 16) return Error::bad_input("--seq", fmt::format("{} tokens is too few to time; use at least 16", o.seq));
  if (o.threads > 0) torch::set_num_threads(o.threads);
  // On the CPU virtual device the probes allocate as a step does (host_heap.h, through the
  // counting allocator of an unlimited meter): LibTorch's default allocator would page-fault
  // fresh outputs in that no step pays for.
  std::optional<MeterScope> heap;
  if (!comm.device().is_cuda()) heap.emplace(std::make_shared<MemoryMeter>(0, 0, comm.device()));
  Probes p{o, comm, comm.device(), CacheSweep(comm.device()), {}, {}};
  const auto& m = o.model;
  const std::string at = fmt::format("{} at {} tokens", m.name, o.seq);
  try {
    p.record("matmul_fp32_flops", p.matmul(torch::kFloat), "flop/s",
             fmt::format("x [{}, {}] fp32 through the MLP's up [{}, {}] and down weights ({}), median call", o.seq, m.hidden,
                         m.intermediate, m.hidden, at));
    p.record("matmul_bf16_flops", p.matmul(torch::kBFloat16), "flop/s", fmt::format("the same in bf16 ({})", at));
    for (const std::int64_t d : attention_head_dims(m.head_dim)) {
      const auto [fwd, bwd] = p.attention_rates(d);
      p.record_attention(d, fwd, bwd,
                         fmt::format("runtime attention(), causal, {} q / {} kv heads of {} at {} tokens; the kernel's "
                                     "flops (footprint::attention_kernel_flops); backward: forward + backward minus forward, 2.5 x the flops",
                                     m.heads, m.kv_heads, d, o.seq));
    }
    p.record("memory_bytes_per_s", p.elementwise_bandwidth(p.device, /*in_place=*/false), "byte/s",
             fmt::format("c = a * b over [{}, {}] fp32 into a fresh output: two reads and a write", o.seq, m.intermediate));
    p.record("host_memory_bytes_per_s", p.elementwise_bandwidth(torch::kCPU, /*in_place=*/true), "byte/s",
             fmt::format("a += b over [{}, {}] fp32 in host memory, in place, {} threads: the optimizer's passes", o.seq,
                         m.intermediate, torch::get_num_threads()));
    p.record("transcendental_elems_per_s", p.transcendental_rate(), "element/s",
             fmt::format("silu(a) out of place over [{}, {}] fp32, elements a second", o.seq, m.intermediate));
    const double overhead = p.op_overhead();
    p.record("op_overhead_s", overhead, "s", "a * b over 8 elements under autograd, forward and backward, halved");
    const double copy = p.copy_rate();
    p.record("copy_bytes_per_s", copy, "byte/s",
             p.device.is_cuda() ? "pinned host [n, h] fp32 into the device" : "host [n, h] fp32 into another host buffer");
    if (comm.world() > 1) {
      const auto [rate, latency] = p.collective_rates(10);
      p.record("collective_bytes_per_s", rate, "byte/s",
               fmt::format("mean of all-to-all, all-gather and reduce-scatter of [{}, {}] fp32 across {} ranks, bytes a "
                           "rank sends",
                           o.seq, m.hidden, comm.world()));
      p.record("collective_latency_s", latency, "s", fmt::format("all-reduce of one element across {} ranks", comm.world()));
      if (const double lag = p.rank_lag(20); lag > 0)
        p.record("rank_lag", lag, "fraction",
                 fmt::format("the slowest of {} ranks' time over the average's, less 1: x [{}, {}] fp32 through the "
                             "MLP's up weights, repeated to about 10 ms on every rank between barriers, mean of 20 rounds",
                             comm.world(), o.seq, m.hidden));
      if (const double all_reduce = p.all_reduce_rate(10, latency); all_reduce > 0)
        p.record("all_reduce_bytes_per_s", all_reduce, "byte/s",
                 fmt::format("all-reduce of each of {}'s parameter tensors back to back across {} ranks, as the step "
                             "sums its gradients: bytes a rank sends beyond the latency of each call",
                             m.name, comm.world()));
    } else {
      p.record("collective_bytes_per_s", copy, "byte/s", "one rank: no collective to time; the copy rate");
      p.record("collective_latency_s", overhead, "s", "one rank: the small-op overhead");
    }
  } catch (const CommError& e) {
    return Error{ErrorKind::Internal, "calibrate", e.what()};
  } catch (const c10::Error& e) {
    return Error{ErrorKind::Internal, "calibrate", fmt::format("a probe failed: {}", exception_text(e))};
  }

  Calibration c;
  c.hardware = o.base;
  c.hardware.name = o.name.empty() ? o.base.name + "-calibrated" : o.name;
  if (c.hardware.backend == Backend::Cpu) c.hardware.threads = std::max(1, o.threads);
  auto& r = c.hardware.measured;
  r.present = true;
  r.ranks = comm.world();
  for (const auto& probe : p.out) {
    if (!(probe.value > 0) || !std::isfinite(probe.value))
      return Error{ErrorKind::Internal, "calibrate", fmt::format("{} came out as {}", probe.key, probe.value)};
    for (const auto& [key, field] : measured_rate_fields())
      if (probe.key == key) r.*field = probe.value;
    for (const auto& f : optional_measured_rate_fields())
      if (probe.key == f.key) r.*f.field = probe.value;
  }
  for (const auto& [d, rates] : p.attention_points) {
    r.attention_forward.points.emplace_back(d, rates.first);
    r.attention_backward.points.emplace_back(d, rates.second);
  }
  c.probes = std::move(p.out);
  return c;
}

nlohmann::json calibration_json(const Calibration& c) {
  nlohmann::json j = hardware_to_json(c.hardware);
  j["description"] = fmt::format("{}, with rates measured on this machine by `longctx calibrate`", c.hardware.name);
  j["sources"] = "measured: each rate in `measurements`, with how it was taken; memory sizes and links from the base preset";
  j["measurements"] = nlohmann::json::array();
  for (const auto& p : c.probes) j["measurements"].push_back({{"key", p.key}, {"value", p.value}, {"unit", p.unit}, {"how", p.how}});
  return j;
}

}  // namespace longctx::runtime
