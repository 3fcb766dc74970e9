#pragma once
// Step time from first principles: each op's FLOPs and bytes against the hardware's peak
// rates times an efficiency per op kind, collectives and copies against link bandwidths,
// and explicit overlap rules. Simple and explained rather than fitted (docs/performance.md).
//
// Efficiencies (fraction of the preset's peak an op kind reaches; sources in the doc):
//   matmul 0.70   large bf16 GEMMs in cuBLAS on Hopper
//   attention 0.50  FlashAttention-2/3 forward and backward on Hopper, causal
//   memory-bound ops 0.80 of HBM bandwidth
//   collectives 0.80 of link bandwidth; host<->device copies 0.80 of PCIe
//   10 us per kernel launch or collective round (tiles and head-chunk stages multiply them)
// Roofline per (phase, layer): the larger of FLOP time and memory-traffic time, plus launches.
// Overlap: only an exchange the step does not wait for (OpSpec::comm_async: zero3's layer
// gathers prefetched one layer ahead, checkpoint copies on a CUDA side stream, DeepSpeed's
// side-stream work in the arctic stack) hides behind the compute of its phase and layer; what
// exceeds it is exposed, as is every exchange the runtime waits for (all-reduces,
// reduce-scatters, zero1/2's parameter gathers, Ulysses all-to-alls, gradient copies to the
// host). A ring's hops hide behind their own op's compute (OpSpec::overlapped_comm_bytes).
// The offloaded optimizer step runs on the host after backward and is not hidden.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "planner/core/plan.h"
#include "planner/graph/step_graph.h"

namespace longctx {

struct StepEfficiency {
  double matmul = 0.70;
  double attention = 0.50;
  double memory = 0.80;
  double link = 0.80;
  // Fixed cost of each kernel launch or collective round: what makes more tiles and smaller
  // head chunks slower even at equal FLOPs (CUDA launch latency plus a small NCCL round).
  double launch_s = 10e-6;
};

struct StepTime {
  double total_s = 0;
  double compute_s = 0;          // ops on the device, summed
  double exposed_comm_s = 0;     // collectives and copies not hidden behind compute
  double host_optimizer_s = 0;
  double tokens_per_s = 0;       // global: every data-parallel replica's tokens
  double model_flops = 0;        // per rank, without recompute: what MFU counts
  double mfu = 0;
};

// With the preset's measured rates (Hardware::measured, from `longctx calibrate`) the
// efficiencies are not used: estimate_measured_step_time.
StepTime estimate_step_time(const Plan& plan, const StepGraph& graph, const StepEfficiency& eff = {});

// Each op at the rates its kind reached on the machine: attention forward (recompute too)
// and backward at the flash kernels' measured rates at the model's head dimension, other ops
// at the matmul rate of the plan's dtype, both over the work the kernel does
// (OpSpec::kernel_flops where set); each op bound by the largest of that, its memory traffic
// (its recorded traffic, else the bytes of its inputs and outputs) at the measured
// elementwise bandwidth, and its transcendental evaluations at the measured SiLU rate (when
// the preset has one), plus its launches at the measured cost of a small op. Copies at the measured
// copy rate; collectives at the measured per-rank rate plus a latency per collective issued. Overlap as
// above. REQUIRES: plan.cluster.hardware.measured.present.
StepTime estimate_measured_step_time(const Plan& plan, const StepGraph& graph);

// The step time by phase, under the names the runtime times them (phase_names.h): each
// (phase, layer) segment's compute and exposed exchanges, the host optimizer in
// "optimizer". The values sum to estimate_step_time's total_s.
std::map<std::string, double> phase_step_times(const Plan& plan, const StepGraph& graph, const StepEfficiency& eff = {});

// One op's predicted seconds with measured rates (estimate_measured_step_time): its compute
// on its own roofline plus its launches, and its exchange before any of it hides.
struct OpTime {
  std::string op;           // format(OpSpec::name)
  double compute_s = 0;
  double comm_s = 0;
  std::int64_t launches = 0;
  const char* bound = "";   // "flops", "attention", "memory", "transcendental" or "launches"
};

// Each phase's ops, in schedule order, under the runtime's phase names: the parts
// phase_step_times sums (less overlap), for holding each op to the LibTorch operators the
// runtime times (`run --op-times`). Empty without measured rates, where ops share their
// segment's roofline and have no time of their own. The host optimizer's ops appear with
// its time as compute.
std::map<std::string, std::vector<OpTime>> phase_op_times(const Plan& plan, const StepGraph& graph);

// The collectives each phase issues, under the runtime's phase names: the launches of its
// all-to-alls, all-gathers, reduce-scatters and all-reduces (OpSpec::launches). A ring's
// hops, sent point to point, are not counted, nor the ops that carry them (a ring with head
// chunks: its stages' all-to-alls too). The runtime counts its Communicator's collectives per
// phase (`run --json`, `collectives`); phases without any are absent.
std::map<std::string, std::int64_t> phase_collective_calls(const StepGraph& graph);

}  // namespace longctx
