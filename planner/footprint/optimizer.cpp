#include "planner/footprint/optimizer.h"

#include <algorithm>

#include "planner/footprint/zero.h"

namespace longctx::footprint {

std::int64_t per_param_peak(const StepShapes& s, int group, std::int64_t temp_bytes_per_elem,
                            std::int64_t freed_bytes_per_elem) {
  std::int64_t done = 0, peak = 0;
  for (std::int64_t elems : param_sizes(s, group)) {
    peak = std::max(peak, elems * temp_bytes_per_elem - done);
    done += elems * freed_bytes_per_elem;
  }
  return peak;
}

std::int64_t adamw_device_workspace(const StepShapes& s, int group, std::int64_t elems, bool whole) {
  const std::int64_t temps = s.g == 4 ? 1 : 2;  // denom, and g_fp32 unless gradients are fp32
  return whole ? per_param_peak(s, group, 4 * temps, s.g) : elems * 4 * temps;
}

std::int64_t adamw_host_workspace(const StepShapes& s, int group, std::int64_t elems, bool whole) {
  const std::int64_t temps = s.master ? 1 : 2;  // denom, and host_p for fp32 parameters
  // The fp32 gradients are the optimizer's persistent host buffers: none is released.
  return whole ? per_param_peak(s, group, 4 * temps, 0) : elems * 4 * temps;
}

double adamw_memory_bytes(const StepShapes& s, std::int64_t elems) { return double(elems) * (s.master ? 16 : 12) * 2; }

double runtime_adamw_memory_bytes(const StepShapes& s, std::int64_t elems, bool on_host) {
  const double passes = 12 + 8 + 12 + 8 + 8 + 8 + 8 + 16;
  const double upcast_and_copy_back = s.master && !on_host ? 6 + 6 : 0;
  return double(elems) * (passes + upcast_and_copy_back);
}

}  // namespace longctx::footprint
