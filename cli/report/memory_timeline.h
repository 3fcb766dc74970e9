#pragma once
// An evaluated plan's device memory op by op, in the three layers the device binds on:
// allocated (by category), the caching allocator's reserve (reserved - allocated) and the
// context outside the allocator (CUDA context, NCCL buffers; nvidia-smi - reserved). The one
// walk over the step that both pictures draw from (timeline_svg.h, report_html.h).
#include <cstdint>
#include <string>
#include <vector>

#include "planner/search/memory_model.h"

namespace longctx::cli {

struct MemoryTimeline {
  // Per op, in schedule order: allocated while it runs, by category (the simulation's).
  std::vector<CategoryBytes> allocated;
  // Per op: reserved while it runs, never under allocated. On CUDA the caching-allocator
  // replay's (reserved_replay.h) in the step where reserved peaks: the first step, filling the
  // cache from empty, or the second, running on the first one's cache, where that reserves
  // more. On the CPU virtual device, which caches nothing, allocated.
  std::vector<std::int64_t> reserved;
  std::vector<std::int64_t> host_per_node;  // per op
  std::int64_t context = 0;                  // outside the allocator, at every op
  // The first op where the binding figure (reserved + context: nvidia-smi's on CUDA) peaks,
  // and that peak: the plan's prediction.peak_nvidia_smi_bytes.
  int peak_op = -1;
  std::int64_t peak_bytes = 0;

  std::size_t ops() const { return allocated.size(); }
  std::int64_t allocated_total(std::size_t op) const;
  std::int64_t binding(std::size_t op) const { return reserved[op] + context; }
};

// REQUIRES: `e` is what evaluate() returned (its sim covers its graph's ops).
MemoryTimeline memory_timeline(const Evaluation& e);

// A device tensor's life: live at every op from `first` to `last`, holding `bytes` as the
// allocator books them (rounded on CUDA), so that the tensors live at an op and its workspace
// add up to the op's allocated figure.
struct TensorLife {
  int tensor = 0;  // index in the graph
  std::int64_t bytes = 0;
  int first = 0, last = 0;
};

// Every device tensor with bytes, in the graph's order.
std::vector<TensorLife> device_tensor_lives(const Evaluation& e);

// What the device's binding figure is called: "nvidia-smi" on CUDA, "allocated" on the CPU
// virtual device (whose counting allocator reserves nothing beyond what it allocates).
const char* binding_figure_name(const Plan& p);

}  // namespace longctx::cli
