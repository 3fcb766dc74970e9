#pragma once
// Which LibTorch operators a step calls, how often, and how long each takes, per phase: the
// evidence for the cost model's per-op prices (cost_model.h), which the step's total time
// alone cannot separate (an attention kernel slower than its probe, or the small ops
// around it costing more than their bytes).
//
// While an OpTimer is alive, every operator LibTorch dispatches on the thread that made it
// (autograd's CPU backward runs there too) is timed through LibTorch's RecordFunction
// observers and counted in the active meter's open phase (MemoryMeter::on_op) under its
// name: calls, and self time (its time less that of the operators it called, so a
// composite such as aten::linear is not counted twice). Autograd's backward nodes
// ("MulBackward0", ...) are scopes of their own; their self time is the engine's work
// between the operators they call. The communicator's waits for its exchanges are scopes too
// ("c10d::wait(Ulysses all-to-all)", communicator.cpp): the time a rank spends in the
// exchange and waiting for the slowest of its peers, which no operator shows.
//
// The observers cost about a microsecond an operator, so a timed step is slower than an
// untimed one by that much per call: use it to see where time goes, not to time the step.
// On CUDA the times are of the host's launches, not of the kernels.
// REQUIRES: one OpTimer at a time; made and destroyed on the thread that runs the step.
#include <cstdint>

namespace longctx::runtime {

class OpTimer {
 public:
  OpTimer();
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  std::uint64_t handle_ = 0;
};

}  // namespace longctx::runtime
