#include "planner/core/hardware.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "planner/core/json_duplicates.h"
#include "planner/core/json_fields.h"
#include "common/input_file.h"
#include "planner/core/limits.h"
#include "planner/core/presets.h"

namespace longctx {
double RateByHeadDim::at(std::int64_t head_dim) const {
  if (head_dim <= points.front().first) return points.front().second;
  if (head_dim >= points.back().first) return points.back().second;
  auto hi = std::lower_bound(points.begin(), points.end(), head_dim, [](const auto& p, std::int64_t d) { return p.first < d; });
  if (hi->first == head_dim) return hi->second;
  auto lo = hi - 1;
  const double f = std::log(double(head_dim) / double(lo->first)) / std::log(double(hi->first) / double(lo->first));
  return std::exp(std::log(lo->second) + f * (std::log(hi->second) - std::log(lo->second)));
}

namespace {

std::vector<std::pair<const char*, RateByHeadDim*>> attention_rate_tables(MeasuredRates& r) {
  return {{"attention_forward_flops", &r.attention_forward}, {"attention_backward_flops", &r.attention_backward}};
}

// Whether a measured rate a second lies within the bounds every rate of a hardware file keeps
// (1e6 to 1e18, hardware_from_json): a rate of 1e-300 makes a step take "nan s".
bool plausible_rate(double per_s) { return per_s >= 1e6 && per_s <= 1e18; }
std::string implausible_rate(double per_s) {
  return fmt::format("{:g} per second is outside longctx's bounds of 1e6 to 1e18, which no machine measures; "
                     "calibrate again",
                     per_s);
}

// {"16": rate, "64": rate, ...}: head dimensions from 1 to 4096, rates within the bounds.
Result<RateByHeadDim> rate_table_from_json(const nlohmann::json& m, const std::string& path, const char* key) {
  const std::string field = path + "." + key;
  if (!m.contains(key) || !m[key].is_object() || m[key].empty())
    return Error::bad_input(field, "must be an object of rates by head dimension; calibrate again");
  RateByHeadDim t;
  for (const auto& [dim, rate] : m[key].items()) {
    char* end = nullptr;
    const long d = std::strtol(dim.c_str(), &end, 10);
    if (dim.empty() || *end != '\0' || d < 1 || d > 4096)
      return Error::bad_input(field, fmt::format("'{}' is not a head dimension (1 to 4096)", dim));
    if (!rate.is_number() || !(rate.get<double>() > 0) || !std::isfinite(rate.get<double>()))
      return Error::bad_input(field + "." + dim, "must be a positive rate; calibrate again");
    if (!plausible_rate(rate.get<double>())) return Error::bad_input(field + "." + dim, implausible_rate(rate.get<double>()));
    t.points.emplace_back(d, rate.get<double>());
  }
  std::sort(t.points.begin(), t.points.end());
  return t;
}

}  // namespace

const std::vector<std::pair<const char*, double MeasuredRates::*>>& measured_rate_fields() {
  static const std::vector<std::pair<const char*, double MeasuredRates::*>> fields = {
      {"matmul_fp32_flops", &MeasuredRates::matmul_fp32_flops},
      {"matmul_bf16_flops", &MeasuredRates::matmul_bf16_flops},
      {"memory_bytes_per_s", &MeasuredRates::memory_bytes_per_s},
      {"op_overhead_s", &MeasuredRates::op_overhead_s},
      {"copy_bytes_per_s", &MeasuredRates::copy_bytes_per_s},
      {"collective_bytes_per_s", &MeasuredRates::collective_bytes_per_s},
      {"collective_latency_s", &MeasuredRates::collective_latency_s}};
  return fields;
}

const std::vector<OptionalMeasuredField>& optional_measured_rate_fields() {
  constexpr double none = std::numeric_limits<double>::infinity();
  static const std::vector<OptionalMeasuredField> fields = {
      {"host_memory_bytes_per_s", &MeasuredRates::host_memory_bytes_per_s, none, ""},
      {"transcendental_elems_per_s", &MeasuredRates::transcendental_elems_per_s, none, ""},
      {"all_reduce_bytes_per_s", &MeasuredRates::all_reduce_bytes_per_s, none, ""},
      // A slowest rank ten times the average's pace is a machine to mend, not a lag to plan for.
      {"rank_lag", &MeasuredRates::rank_lag, 10,
       "the slowest rank's excess over the average, a fraction"}};
  return fields;
}

std::int64_t device_context_bytes(const Hardware& h, std::int64_t world, std::int64_t gpus_per_node) {
  if (world < 2) return h.context_bytes;
  const std::int64_t in_node = std::min(world, gpus_per_node) - 1;
  const std::int64_t across = world > gpus_per_node ? 1 : 0;
  return h.context_bytes + h.nccl_base_bytes + h.nccl_bytes_per_peer * (in_node + across);
}

namespace {

// The preset's "measured" object at `mp`: the rates `longctx calibrate` wrote.
Result<MeasuredRates> measured_rates_from_json(const nlohmann::json& m, const std::string& mp) {
  using namespace json_fields;
  if (!m.is_object()) return Error::bad_input(mp, "is not an object; write it with `longctx calibrate -o FILE`");
  MeasuredRates r;
  r.present = true;
  // The keys calibrate writes (hardware_to_json): a misspelt one ("rank_lagg") would leave its
  // rate unmeasured, silently.
  std::vector<std::string> known = {"ranks"};
  for (const auto& [key, field] : measured_rate_fields()) known.emplace_back(key);
  for (const auto& f : optional_measured_rate_fields()) known.emplace_back(f.key);
  for (const auto& [key, table] : attention_rate_tables(r)) known.emplace_back(key);
  LONGCTX_TRY(auto keys_known, refuse_unknown_keys(m, mp, known, "under " + mp));
  (void)keys_known;
  for (const auto& [key, field] : measured_rate_fields()) {
    LONGCTX_TRY(r.*field, get_number(m, mp, key));
    if (!(r.*field > 0)) return Error::bad_input(mp + "." + key, "must be a positive rate; calibrate again");
    // A cost in seconds (a launch, a collective's latency) of a second or more, or a rate
    // outside the bounds, is no machine's: 1e300 s a launch planned 1e300 s a step.
    const std::string_view name = key;
    const bool seconds = name.ends_with("_s") && !name.ends_with("_per_s");  // op_overhead_s, not memory_bytes_per_s
    if (seconds && !(r.*field < 1))
      return Error::bad_input(mp + "." + key,
                              fmt::format("{:g} s: a second or more, which no machine measures; calibrate again", r.*field));
    if (!seconds && !plausible_rate(r.*field)) return Error::bad_input(mp + "." + key, implausible_rate(r.*field));
  }
  for (const auto& [key, table] : attention_rate_tables(r)) {
    LONGCTX_TRY(*table, rate_table_from_json(m, mp, key));
  }
  for (const auto& f : optional_measured_rate_fields()) {
    if (!m.contains(f.key)) continue;
    LONGCTX_TRY(r.*f.field, get_number(m, mp, f.key));
    if (!(r.*f.field > 0)) return Error::bad_input(mp + "." + f.key, "must be positive; calibrate again");
    if (std::isinf(f.below) && !plausible_rate(r.*f.field))  // a rate a second (rank_lag is a fraction)
      return Error::bad_input(mp + "." + f.key, implausible_rate(r.*f.field));
    if (!(r.*f.field < f.below))
      return Error::bad_input(mp + "." + f.key, fmt::format("must be below {} ({}); calibrate again", f.below, f.limit));
  }
  LONGCTX_TRY(auto ranks, get_int(m, mp, "ranks", 1, limits::kMaxGpus));
  r.ranks = static_cast<int>(ranks);
  return r;
}

}  // namespace

// hardware.h's list, and `longctx calibrate -o`'s note beside it: each probe it took, in
// "measurements" (runtime/src/calibrate.cpp, calibration_json).
const std::vector<std::string>& hardware_keys() {
  static const std::vector<std::string> keys = {
      "description",     "sources",          "context_sources", "name",          "backend",          "device_memory_bytes",
      "host_memory_bytes_per_node", "gpus_per_node", "peak_bf16_flops", "hbm_bytes_per_s",
      "nvlink_bytes_per_s", "internode_bytes_per_s", "pcie_bytes_per_s", "host_flops", "context_bytes",
      "nccl_base_bytes", "nccl_bytes_per_peer", "multiprocessors", "cublas_workspace_bytes", "threads", "measured",
      "measurements"};
  return keys;
}

Result<Hardware> hardware_from_json(const nlohmann::json& j, const std::string& p) {
  using namespace json_fields;
  Hardware h;
  // "cluster.hardware.backend", or "backend" in a file of its own.
  const auto field = [&](const std::string& key) { return p.empty() ? key : p + "." + key; };
  LONGCTX_TRY(auto known, refuse_unknown_keys(j, p, hardware_keys(),
                                              p.empty() ? std::string("in a hardware file") : "under " + p));
  (void)known;
  LONGCTX_TRY(h.name, get_string(j, p, "name"));
  // Every answer names the cluster by it ("8 x h100-80gb"): blank, it read "8 x  (1 node of 8)".
  if (h.name.find_first_not_of(" \t") == std::string::npos)
    return Error::bad_input(field("name"), "is empty; name the device (as the presets do: h100-80gb)");
  LONGCTX_TRY(auto backend, get_string(j, p, "backend"));
  if (backend == "cpu") h.backend = Backend::Cpu;
  else if (backend == "cuda") h.backend = Backend::Cuda;
  else return Error::bad_input(field("backend"), fmt::format("'{}' is unknown; use cpu or cuda", backend));
  LONGCTX_TRY(h.device_memory_bytes, get_int(j, p, "device_memory_bytes", 1, limits::kMaxBytes));
  LONGCTX_TRY(h.host_memory_bytes_per_node, get_int(j, p, "host_memory_bytes_per_node", 1, limits::kMaxBytes));
  LONGCTX_TRY(h.gpus_per_node, get_int(j, p, "gpus_per_node", 1, limits::kMaxGpusPerNode));
  // Every rate within bounds far outside real hardware (1e6 to 1e18 per second): a rate of
  // 1e-300 once made a step take "inf s" and wrote step_time_s: null.
  const auto rate = [&](const char* key) -> Result<double> {
    LONGCTX_TRY(const double v, get_number(j, p, key));
    if (!(v >= 1e6 && v <= 1e18))
      return Error::bad_input(field(key), fmt::format("{:g} per second is outside longctx's bounds of 1e6 to 1e18; "
                                                         "give the device's real figure",
                                                         v));
    return v;
  };
  LONGCTX_TRY(h.peak_flops, rate("peak_bf16_flops"));
  LONGCTX_TRY(h.hbm_bytes_per_s, rate("hbm_bytes_per_s"));
  LONGCTX_TRY(h.nvlink_bytes_per_s, rate("nvlink_bytes_per_s"));
  LONGCTX_TRY(h.internode_bytes_per_s, rate("internode_bytes_per_s"));
  LONGCTX_TRY(h.pcie_bytes_per_s, rate("pcie_bytes_per_s"));
  LONGCTX_TRY(h.host_flops, rate("host_flops"));
  // Every CUDA process holds a context outside the caching allocator, which binds at the peak
  // (nvidia-smi): a file without it would plan as though none were there, as a misspelt key did.
  if (h.backend == Backend::Cuda && !j.contains("context_bytes"))
    return Error::bad_input(field("context_bytes"), "missing; a CUDA device's context outside the caching allocator "
                                                    "(`longctx calibrate` measures it; hardware_to_json writes it)");
  if (j.contains("context_bytes")) {
    LONGCTX_TRY(h.context_bytes, get_int(j, p, "context_bytes", 0, limits::kMaxBytes));
    // What the CUDA context keeps is part of the device's memory: at its size or above, no
    // tensor would ever fit, and every query would answer "no plan fits".
    if (h.context_bytes >= h.device_memory_bytes)
      return Error::bad_input(field("context_bytes"),
                              fmt::format("{} is not below device_memory_bytes ({}); give the context's real size "
                                          "(`longctx calibrate` measures it)",
                                          h.context_bytes, h.device_memory_bytes));
  }
  // The other figures outside the allocator, and what sizes buffers inside it, alike: a CUDA
  // file without one planned as though it were 0 (a misspelt nccl_base_bytes: 256 MiB less on
  // every GPU of a group), so a CUDA file gives each, 0 where it is so.
  if (h.backend == Backend::Cuda)
    for (const auto& [key, what] :
         {std::pair{"nccl_base_bytes", "NCCL's ring and tree channels, held by a process in a group of 2 or more"},
          std::pair{"nccl_bytes_per_peer", "NCCL's buffers per peer a process sends to directly (all-to-all, p2p)"},
          std::pair{"multiprocessors", "the streaming multiprocessors, which size kernels' per-SM partial buffers"},
          std::pair{"cublas_workspace_bytes", "cuBLAS's workspace, allocated through the caching allocator"}})
      if (!j.contains(key))
        return Error::bad_input(field(key), fmt::format("missing; a CUDA device's {} (the presets in models/hardware "
                                                        "give each with its source; 0 where it is so)",
                                                        what));
  if (j.contains("nccl_base_bytes")) {
    LONGCTX_TRY(h.nccl_base_bytes, get_int(j, p, "nccl_base_bytes", 0, limits::kMaxBytes));
  }
  if (j.contains("nccl_bytes_per_peer")) {
    LONGCTX_TRY(h.nccl_bytes_per_peer, get_int(j, p, "nccl_bytes_per_peer", 0, limits::kMaxBytes));
  }
  if (j.contains("multiprocessors")) {
    // A CUDA device has one at least: 0 would size every per-SM partial buffer at nothing.
    LONGCTX_TRY(h.multiprocessors, get_int(j, p, "multiprocessors", h.backend == Backend::Cuda ? 1 : 0, 100000));
  }
  if (j.contains("cublas_workspace_bytes")) {
    LONGCTX_TRY(h.cublas_workspace_bytes, get_int(j, p, "cublas_workspace_bytes", 0, limits::kMaxBytes));
  }
  if (j.contains("threads")) {
    LONGCTX_TRY(h.threads, get_int(j, p, "threads", 1, 4096));
  }
  if (j.contains("measured")) {
    LONGCTX_TRY(h.measured, measured_rates_from_json(j["measured"], field("measured")));
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
  // What hardware_from_json requires of a CUDA device is written for one, 0 or not.
  const bool cuda = h.backend == Backend::Cuda;
  if (cuda || h.nccl_base_bytes > 0) j["nccl_base_bytes"] = h.nccl_base_bytes;
  if (cuda || h.nccl_bytes_per_peer > 0) j["nccl_bytes_per_peer"] = h.nccl_bytes_per_peer;
  if (h.backend == Backend::Cpu) j["threads"] = h.threads;
  if (cuda || h.multiprocessors > 0) j["multiprocessors"] = h.multiprocessors;
  if (cuda || h.cublas_workspace_bytes > 0) j["cublas_workspace_bytes"] = h.cublas_workspace_bytes;
  if (h.measured.present) {
    auto& m = j["measured"];
    for (const auto& [key, field] : measured_rate_fields()) m[key] = h.measured.*field;
    for (const auto& f : optional_measured_rate_fields())
      if (h.measured.*f.field > 0) m[f.key] = h.measured.*f.field;
    auto measured = h.measured;
    for (const auto& [key, table] : attention_rate_tables(measured)) {
      auto& t = m[key] = nlohmann::json::object();
      for (const auto& [d, rate] : table->points) t[std::to_string(d)] = rate;
    }
    m["ranks"] = h.measured.ranks;
  }
  return j;
}

Result<Hardware> load_hardware(const std::string& name) {
  if (name.find('/') != std::string::npos || (name.size() > 5 && name.ends_with(".json"))) {
    LONGCTX_TRY(auto file_text, read_regular_file(name, "--gpu"));
    const std::string what = fmt::format("--gpu {}", name);  // which file is not JSON, or repeats a key
    LONGCTX_TRY(auto fj, json_fields::parse(file_text, what));
    LONGCTX_TRY(auto once, refuse_duplicate_keys(file_text, what));
    (void)once;
    auto read = hardware_from_json(fj, "");
    if (read.ok()) return read;
    Error e = read.error();
    e.field = fmt::format("--gpu {}: {}", name, e.field);
    return e;
  }
  auto text = presets::hardware(name);
  if (!text)
    return Error::bad_input("--gpu", fmt::format("'{}' is not a hardware preset; known: {}", name,
                                                 fmt::join(hardware_preset_names(), ", ")));
  LONGCTX_TRY(auto j, json_fields::parse(std::string(*text), "--gpu"));
  return hardware_from_json(j);
}

std::vector<std::string> hardware_preset_names() { return presets::hardware_names(); }

}  // namespace longctx
