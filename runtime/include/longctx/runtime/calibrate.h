#pragma once
// `longctx calibrate`: measures the machine it runs on with the runtime's own kernels, at the
// shapes a step of a given model uses, and returns a hardware preset whose "measured" rates
// the cost model then uses at face value (cost_model.h, estimate_measured_step_time).
//
// Each probe runs its op once to warm up, then again until it has run for the probe's time
// budget (at least 3 times), and takes the median time of one call; collectives run a fixed
// number of rounds on every rank (a time budget would let ranks disagree on the count). On
// CUDA every call is followed by a device synchronize. What each figure is and how it was
// taken is written beside it in the preset's "measurements".
//
// The probes run their ops as a step runs them, not as a loop over one op would:
// - Before each timed call (untimed) a buffer twice the size of the core's private caches
//   (CUDA: the device's L2) is written over, so the call finds its inputs and its output
//   buffer out of them, as a step's ops do (between two uses of a tensor a step moves more
//   than those caches hold). The small-op overhead is the exception: a step's small ops run
//   back to back.
// - On the CPU virtual device the probes allocate from the step's heap (host_heap.h, through
//   the counting allocator), which keeps freed blocks; LibTorch's default allocator would
//   page-fault fresh outputs in, which no step pays.
//
//   matmul_{fp32,bf16}_flops    x [n,h] by the MLP's up and down weights ([I,h], [h,I]):
//                               2 n h I flops each (footprint::matmul_flops)
//   attention_forward_flops     runtime attention() over the model's heads at S tokens,
//                               causal, in the kernel's own work
//                               (footprint::attention_kernel_flops); at head dimensions 8, 16,
//                               32, 64, 128 and the model's own
//   attention_backward_flops    its backward: 2.5 x the forward's flops, as the planner counts
//   memory_bytes_per_s          c = a * b over [n, I] fp32 into a fresh output, as a step's
//                               elementwise ops under autograd: 3 n I x 4 bytes a call
//   host_memory_bytes_per_s     a += b over [n, I] fp32 in host memory, in place, as the
//                               optimizer's passes (CPU: the same memory, in place)
//   transcendental_elems_per_s  silu(a) over [n, I] fp32 into a fresh output: elements a call
//   op_overhead_s               a * b over 8 elements under autograd, forward and backward,
//                               halved: the cost of one small op of a step
//   copy_bytes_per_s            a pinned host buffer into the device (CPU: host to host), n h
//                               x 4 bytes
//   collective_bytes_per_s      the mean rate of all-to-all, all-gather and reduce-scatter of
//                               an [n, h] fp32 buffer, in the bytes a rank sends as the
//                               planner counts them; one rank: the copy rate
//   collective_latency_s        an all-reduce of one element; one rank: op_overhead_s
//   all_reduce_bytes_per_s      an all-reduce of each of the model's parameter tensors, back
//                               to back as the step sums its gradients: the bytes a rank
//                               sends (2 (w-1)/w of each tensor's) over the time beyond one
//                               collective_latency_s a call; absent on one rank, or where
//                               the calls took no longer than their latency
//   rank_lag                    x [n,h] by the MLP's up weights, repeated to about 10 ms on
//                               every rank between barriers: the slowest rank's time over the
//                               mean, less 1, averaged over 20 rounds (a fraction); absent on
//                               one rank
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/core/hardware.h"
#include "planner/core/model_config.h"
#include "common/result.h"
#include "longctx/runtime/communicator.h"

namespace longctx::runtime {

struct CalibrateOptions {
  Hardware base;                     // the preset the measured one starts from (memory sizes, links)
  std::string name;                  // the new preset's name; empty: base.name + "-calibrated"
  ModelConfig model;                 // whose shapes the probes use
  std::int64_t seq = 4096;           // tokens of one sample (S; the probes' n is S)
  int threads = 1;                   // LibTorch intra-op threads, as `run --threads`
  double seconds_per_probe = 0.5;
  std::FILE* progress = nullptr;     // a line per probe; nullptr: quiet
};

struct ProbeResult {
  std::string key;     // the MeasuredRates field
  double value = 0;
  std::string unit, how;
};

struct Calibration {
  Hardware hardware;   // base with `measured` filled
  std::vector<ProbeResult> probes;
};

// REQUIRES: every rank of comm calls it with the same options; on the CPU virtual device no
// MeterScope is alive (the probes open their own). Errors (a shape the device cannot hold, a
// failed collective) as values.
Result<Calibration> calibrate(const CalibrateOptions& o, Communicator& comm);

// The preset file: hardware_to_json plus "measurements" (each probe with how it was taken)
// and "sources" saying where the figures come from.
nlohmann::json calibration_json(const Calibration& c);

}  // namespace longctx::runtime
