#pragma once
// The PyTorch profiler's memory events (torch.profiler.profile(profile_memory=True)
// .export_chrome_trace) attributed to the phases of a training step from the trace's own
// structure: an allocation inside an `Optimizer.*` scope (the record_function every
// torch.optim optimizer opens: torch/optim/optimizer.py, Optimizer.profile_hook_step) is the
// optimizer's; inside an `autograd::engine::evaluate_function: ...` scope (the autograd
// engine's per-node scope: torch/csrc/autograd/engine.cpp, evaluate_function) it is
// backward's; outside both it belongs to the phase before it, except that what follows the
// optimizer starts the next step's forward.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace longctx::profiler {

inline constexpr const char* kForward = "forward";
inline constexpr const char* kBackward = "backward";
inline constexpr const char* kOptimizer = "optimizer";

struct MemoryEvent {
  double ts = 0;               // microseconds
  std::int64_t bytes = 0;      // > 0 an allocation, < 0 a free
  std::int64_t total = 0;      // the allocator's total after it
  std::string addr;            // pairs a free with its allocation
};

struct Scope {
  double begin = 0, end = 0;   // microseconds
  bool optimizer = false;      // else a backward node
};

// A scope of `name`, or false when the name is neither kind.
bool scope_kind(const std::string& name, bool& optimizer);

struct Attribution {
  std::map<std::string, std::int64_t> phase_peaks;  // kForward/kBackward/kOptimizer -> peak total; empty: no scopes
  // Allocated inside optimizer scopes and not freed by the trace's end: the optimizer's
  // state when the profile saw it created (a first step), about 0 after a warm-up step.
  std::int64_t optimizer_live_bytes = 0;
};

// REQUIRES: events of one device. Sorts both vectors.
Attribution attribute(std::vector<MemoryEvent>& events, std::vector<Scope>& scopes);

}  // namespace longctx::profiler
