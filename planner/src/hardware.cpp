#include "longctx/planner/hardware.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "json_fields.h"
#include "longctx/planner/limits.h"
#include "longctx/planner/presets.h"

namespace longctx {

Result<Hardware> hardware_from_json(const nlohmann::json& j) {
  using namespace json_fields;
  Hardware h;
  const std::string p = "cluster.hardware";
  LONGCTX_TRY(h.name, get_string(j, p, "name"));
  LONGCTX_TRY(auto backend, get_string(j, p, "backend"));
  if (backend == "cpu") h.backend = Backend::Cpu;
  else if (backend == "cuda") h.backend = Backend::Cuda;
  else return Error::bad_input(p + ".backend", fmt::format("'{}' is unknown; use cpu or cuda", backend));
  LONGCTX_TRY(h.device_memory_bytes, get_int(j, p, "device_memory_bytes", 1, limits::kMaxBytes));
  LONGCTX_TRY(h.host_memory_bytes_per_node, get_int(j, p, "host_memory_bytes_per_node", 1, limits::kMaxBytes));
  LONGCTX_TRY(h.gpus_per_node, get_int(j, p, "gpus_per_node", 1, limits::kMaxGpusPerNode));
  LONGCTX_TRY(h.peak_flops, get_number(j, p, "peak_bf16_flops"));
  LONGCTX_TRY(h.hbm_bytes_per_s, get_number(j, p, "hbm_bytes_per_s"));
  LONGCTX_TRY(h.nvlink_bytes_per_s, get_number(j, p, "nvlink_bytes_per_s"));
  LONGCTX_TRY(h.internode_bytes_per_s, get_number(j, p, "internode_bytes_per_s"));
  LONGCTX_TRY(h.pcie_bytes_per_s, get_number(j, p, "pcie_bytes_per_s"));
  LONGCTX_TRY(h.host_flops, get_number(j, p, "host_flops"));
  if (j.contains("context_bytes")) {
    LONGCTX_TRY(h.context_bytes, get_int(j, p, "context_bytes", 0, limits::kMaxBytes));
  }
  if (j.contains("threads")) {
    LONGCTX_TRY(h.threads, get_int(j, p, "threads", 1, 4096));
  }
  return h;
}

nlohmann::json hardware_to_json(const Hardware& h) {
  nlohmann::json j = {{"name", h.name},
          {"backend", h.backend == Backend::Cpu ? "cpu" : "cuda"},
          {"device_memory_bytes", h.device_memory_bytes},
          {"host_memory_bytes_per_node", h.host_memory_bytes_per_node},
          {"gpus_per_node", h.gpus_per_node},
          {"peak_bf16_flops", h.peak_flops},
          {"hbm_bytes_per_s", h.hbm_bytes_per_s},
          {"nvlink_bytes_per_s", h.nvlink_bytes_per_s},
          {"internode_bytes_per_s", h.internode_bytes_per_s},
          {"pcie_bytes_per_s", h.pcie_bytes_per_s},
          {"host_flops", h.host_flops},
          {"context_bytes", h.context_bytes}};
  if (h.backend == Backend::Cpu) j["threads"] = h.threads;
  return j;
}

Result<Hardware> load_hardware(const std::string& name) {
  auto text = presets::hardware(name);
  if (!text)
    return Error::bad_input("--gpu", fmt::format("'{}' is not a hardware preset; known: {}", name,
                                                 fmt::join(hardware_preset_names(), ", ")));
  LONGCTX_TRY(auto j, json_fields::parse(std::string(*text), "--gpu"));
  return hardware_from_json(j);
}

std::vector<std::string> hardware_preset_names() { return presets::hardware_names(); }

}  // namespace longctx
