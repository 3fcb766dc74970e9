#pragma once
// Runs a plan: builds the model it names, runs training steps with its techniques, and
// measures device and host memory per phase. The one entry point of `longctx run`.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "planner/core/plan.h"
#include "common/result.h"
#include "longctx/runtime/memory_meter.h"
#include "longctx/runtime/run_options.h"
#include "longctx/runtime/runnable.h"

namespace longctx::runtime {

struct StepResult {
  int step = 0;  // 1-based, counted over the whole run (a resumed run's first is the checkpoint's + 1)
  double loss = 0;
  double time_s = 0;
  std::int64_t peak_device = 0;
  std::int64_t peak_host = 0;
  std::int64_t peak_device_reserved = 0;  // CUDA only
  std::vector<PhaseRecord> phases;
  std::vector<CounterSample> samples;
};

struct RunReport {
  std::vector<StepResult> steps;
  std::int64_t peak_device = 0;  // over all steps, including the persistent state
  std::int64_t peak_host = 0;
  std::int64_t peak_device_reserved = 0;
  // CUDA only: the device's memory in use as its driver reports it (cudaMemGetInfo's total
  // less free), read at each step's end, when the caching allocator still holds its reserved
  // peak: what nvidia-smi shows for the process, its CUDA context included (and any other
  // process's on the same GPU).
  std::int64_t device_in_use_driver = 0;
  std::int64_t persistent_device = 0;  // after setup: weights and optimizer state
  std::int64_t persistent_host = 0;
  std::string device;                  // "cpu (virtual device)" or the GPU's name
  int resumed_after = 0;               // the checkpoint's step a resumed run went on from; 0 otherwise
};

// Called after each step, for progress.
using StepCallback = std::function<void(int step, const StepResult&)>;

// Errors: BadInput for plans it cannot run; Internal for out of memory on the virtual
// device (the message names the phase, the request, what was in use and the budget) and
// for anything LibTorch throws.
Result<RunReport> run_plan(const Plan& plan, const RunOptions& o, const StepCallback& on_step = {});


}  // namespace longctx::runtime
