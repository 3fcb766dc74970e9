#pragma once
// A GPU kind and the node it sits in: memory sizes and the rates the cost model needs.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/result.h"

namespace longctx {

enum class Backend { Cpu, Cuda };

// Rates measured on a machine by `longctx calibrate` with the runtime's own kernels
// (runtime/calibrate.h says how each is measured). Present: the cost model times each op
// with these at face value instead of datasheet peaks times assumed efficiencies.
// A rate measured at several head dimensions: the flash kernels' throughput depends on it
// far more than on anything else of a model (a head of 12 runs at a fraction of the rate of a
// head of 64).
struct RateByHeadDim {
  std::vector<std::pair<std::int64_t, double>> points;  // (head_dim, rate), head_dim ascending
  // Interpolated linearly in log(head_dim) and log(rate) between the nearest points; the end
  // points' rates beyond them. REQUIRES: points not empty.
  double at(std::int64_t head_dim) const;
};

struct MeasuredRates {
  bool present = false;
  double matmul_fp32_flops = 0, matmul_bf16_flops = 0;  // per second
  RateByHeadDim attention_forward, attention_backward;  // causal flash kernels, flop/s
  double memory_bytes_per_s = 0;      // an elementwise op's reads and writes, into a fresh output
  double op_overhead_s = 0;           // one small op, start to end
  double copy_bytes_per_s = 0;        // host <-> device (the virtual device: host to host)
  double collective_bytes_per_s = 0;  // bytes a rank sends, all-to-all / all-gather / reduce-scatter
  double collective_latency_s = 0;    // one round of a tiny collective
  int ranks = 1;                      // the collectives were measured across this many ranks
  // Rates a preset may lack (written before they were measured): 0 there.
  // The elementwise rate on the host, in place, as an offloaded optimizer's passes run there.
  double host_memory_bytes_per_s = 0;
  // Elements a second through SiLU out of place (an exp and a divide each): what bounds the
  // ops that evaluate exp, sigmoid or log on every element (OpSpec::transcendentals).
  double transcendental_elems_per_s = 0;
  // Bytes a rank sends a second in all-reduces issued back to back, one a gradient tensor, as
  // the step sums its gradients across ranks: beyond each call's collective_latency_s. Small
  // all-reduces queued one after another run far below the rate of one large exchange (Gloo
  // on loopback: 40 KB each, about 1 ms a call back to back, 0.3 ms after a barrier).
  double all_reduce_bytes_per_s = 0;
  // How much longer the slowest of `ranks` ranks takes than their average over the same
  // work, as a fraction of it: the same matmuls on every rank between barriers, max over the
  // ranks / mean - 1, averaged over rounds (calibrate.h). A synchronous exchange ends when the
  // slowest rank reaches it, so a step across ranks waits that much beyond its compute. 0 where
  // not measured: one rank, and presets written before it (or from datasheets).
  double rank_lag = 0;
  // The rate all-reduces are charged at: their own where measured, else the collectives'.
  double all_reduce_rate() const { return all_reduce_bytes_per_s > 0 ? all_reduce_bytes_per_s : collective_bytes_per_s; }

  // The host's elementwise rate; a preset without one takes the device's (on the CPU virtual
  // device the host is the device).
  double host_rate() const { return host_memory_bytes_per_s > 0 ? host_memory_bytes_per_s : memory_bytes_per_s; }
};

// Each scalar rate's key in a preset's "measured" object, with its field; the attention
// rates are objects keyed by head dimension ("attention_forward_flops": {"16": r, ...}).
const std::vector<std::pair<const char*, double MeasuredRates::*>>& measured_rate_fields();
// A figure a preset may leave out (0 when absent): positive when present, and below `below`
// where the figure is a fraction with a sane ceiling (rank_lag) rather than a rate.
struct OptionalMeasuredField {
  const char* key;
  double MeasuredRates::* field;
  double below;       // exclusive upper bound; infinity: none
  const char* limit;  // why the bound, for the refusal's fix ("" without one)
};
const std::vector<OptionalMeasuredField>& optional_measured_rate_fields();

struct Hardware {
  std::string name;
  Backend backend = Backend::Cuda;
  std::int64_t device_memory_bytes = 0;
  std::int64_t host_memory_bytes_per_node = 0;
  std::int64_t gpus_per_node = 8;
  double peak_flops = 0;             // dense bf16 matmul, per device
  double hbm_bytes_per_s = 0;        // device memory bandwidth
  double nvlink_bytes_per_s = 0;     // per device, one direction, inside a node
  double internode_bytes_per_s = 0;  // per device, one direction, between nodes
  double pcie_bytes_per_s = 0;       // host <-> device, per device, one direction
  double host_flops = 0;             // host optimizer step, per node
  // Device memory outside the caching allocator, which nvidia-smi counts and
  // torch.cuda.memory_reserved() does not (device_context_bytes() adds them up):
  std::int64_t context_bytes = 0;         // every process: the CUDA context and the libraries' handles
  std::int64_t nccl_base_bytes = 0;       // a process in a group of 2 or more: NCCL's ring and tree channels
  std::int64_t nccl_bytes_per_peer = 0;   // and per peer it sends to directly (all-to-all, p2p)
  // CPU virtual device: LibTorch intra-op threads of the run. The CPU flash attention kernel
  // allocates its block buffers once per thread, so the prediction depends on it; `longctx
  // run` uses this many unless --threads says otherwise.
  std::int64_t threads = 1;
  // CUDA: the device's streaming multiprocessors (cudaDeviceProp::multiProcessorCount), which
  // size the per-SM partial buffers of kernels such as Liger's RMSNorm backward; 0: unknown.
  std::int64_t multiprocessors = 0;
  // CUDA: cuBLAS's workspace, allocated through the caching allocator once per (handle,
  // stream) and kept (CublasHandlePool.cpp, parseChosenWorkspaceSize); 0: none modelled.
  std::int64_t cublas_workspace_bytes = 0;
  MeasuredRates measured;  // "measured" in the preset: from `longctx calibrate`
};

// What lives on each device outside the caching allocator in a run of `world` ranks,
// `gpus_per_node` to a node: the context, and with 2 ranks or more NCCL's buffers, whose
// direct peers are the other ranks of the node plus one across the network per further node.
std::int64_t device_context_bytes(const Hardware& h, std::int64_t world, std::int64_t gpus_per_node);

// The hardware object `j`, its errors naming each field under `prefix` ("cluster.hardware" in a
// plan file; "" for a hardware file of its own). Refuses keys not in hardware_keys().
Result<Hardware> hardware_from_json(const nlohmann::json& j, const std::string& prefix = "cluster.hardware");
nlohmann::json hardware_to_json(const Hardware& h);
// The keys a hardware object may hold: hardware_to_json's, the optional ones included, and the
// notes a preset file (models/hardware/*.json) carries for readers.
const std::vector<std::string>& hardware_keys();
// A preset by name, or a preset file `longctx calibrate -o` wrote (a name holding a '/' or
// ending in .json); a file's errors name `--gpu FILE` and the key.
Result<Hardware> load_hardware(const std::string& name);
std::vector<std::string> hardware_preset_names();

}  // namespace longctx
