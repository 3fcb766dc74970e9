#pragma once
// A GPU kind and the node it sits in: memory sizes and the rates the cost model needs.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "longctx/planner/result.h"

namespace longctx {

enum class Backend { Cpu, Cuda };

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
  std::int64_t context_bytes = 0;    // device memory outside the allocator: CUDA context, NCCL, handles
  // CPU virtual device: LibTorch intra-op threads of the run. The CPU flash attention kernel
  // allocates its block buffers once per thread, so the prediction depends on it; `longctx
  // run` uses this many unless --threads says otherwise.
  std::int64_t threads = 1;
};

Result<Hardware> hardware_from_json(const nlohmann::json& j);
nlohmann::json hardware_to_json(const Hardware& h);
Result<Hardware> load_hardware(const std::string& name);
std::vector<std::string> hardware_preset_names();

}  // namespace longctx
