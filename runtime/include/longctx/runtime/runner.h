#pragma once
// Runs a plan: builds the model it names, runs training steps with its techniques, and
// measures device and host memory per phase. The one entry point of `longctx run`.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <memory>

#include "planner/core/plan.h"
#include "common/result.h"
#include "longctx/runtime/memory_meter.h"
#include "longctx/runtime/training_state.h"

namespace longctx::runtime {

class Communicator;

struct RunOptions {
  int steps = 1;                  // of the whole run: a resumed run does the steps after its checkpoint
  std::string device = "cpu";     // "cpu" (the virtual device) or "cuda"
  std::uint64_t seed = 0;         // weights and synthetic tokens
  std::string data_path;          // optional: a file of little-endian uint32 token ids
  bool enforce_budget = true;     // CPU: refuse allocations past the plan's budgets
  int threads = 0;                // LibTorch intra-op threads; 0 keeps its default
  std::FILE* allocation_log = nullptr;  // every counted allocation, for debugging the inventory
  bool time_ops = false;          // each phase's LibTorch operators timed (op_timer.h, PhaseRecord::ops)
  // The ranks of a distributed run; nullptr: joined from the torchrun environment (RANK,
  // WORLD_SIZE, ...), one rank when it is unset.
  std::shared_ptr<Communicator> comm;
  int comm_timeout_s = 60;  // a collective waiting longer fails: a dead rank is reported, not waited on
  CheckpointOptions checkpoint;   // training-state checkpoints: save every N steps, resume
  // How many of the newest steps RunReport::steps keeps (each holds its phases and samples,
  // kilobytes); 0: every step, so a long run's memory grows with its length.
  int keep_steps = 0;
};

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

// Why this runtime cannot run the plan (its world differs from the ranks started, or a
// technique it does not run), naming the field and the fix; ok otherwise.
Result<bool> runnable(const Plan& plan, const RunOptions& o);

// Called after each step, for progress.
using StepCallback = std::function<void(int step, const StepResult&)>;

// Errors: BadInput for plans it cannot run; Internal for out of memory on the virtual
// device (the message names the phase, the request, what was in use and the budget) and
// for anything LibTorch throws.
Result<RunReport> run_plan(const Plan& plan, const RunOptions& o, const StepCallback& on_step = {});


}  // namespace longctx::runtime
