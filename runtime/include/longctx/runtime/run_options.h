#pragma once
// How a plan is run: its steps, device, seed and data, what is measured and logged, the ranks
// it joins and its checkpoints (runner.h runs it; runnable.h says whether it can).
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

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
  // `longctx run` without --force: a plan needing more host memory on this machine than it
  // has available (MemAvailable, times LOCAL_WORLD_SIZE ranks) is refused (runnable.h), not
  // left to the kernel's OOM killer part way through the run.
  bool refuse_beyond_host_memory = false;
};

}  // namespace longctx::runtime
