#pragma once
// The memory meter: what a training step holds, per phase, in two pools.
//
//   device: on the CPU virtual device, every allocation LibTorch makes through its CPU
//           allocator (a counting wrapper installed by MeterScope); on CUDA, the caching
//           allocator's allocated and reserved peaks, read at each phase boundary (and its
//           current figure whenever current() is asked).
//   host:   tensors offloaded on purpose (checkpoints, optimizer state, parameters), which
//           the runtime allocates explicitly from host_empty(); on CUDA also every other
//           CPU tensor (the CPU allocator's memory is host memory there: token batches,
//           gradients autograd copies to host-resident leaves).
//
// Bytes are counted as requested (nbytes of the storage), pinned host memory on CUDA too: it
// is allocated exactly as requested, one cudaHostAlloc per tensor (memory_meter.cpp,
// ExactPinnedAllocator), not by LibTorch's caching host allocator, which would round it up
// to a power of two and keep freed blocks.
// A budget per pool turns an allocation past it into an OutOfMemory record naming the
// phase, and a c10::OutOfMemoryError that unwinds the step; the runner turns the record
// into a clean error. Thread-safe: LibTorch may allocate from worker threads.
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <memory>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

namespace at {
class Tensor;
}

namespace longctx::runtime {

enum class Pool { Device, Host };

struct OutOfMemory {
  Pool pool = Pool::Device;
  std::string phase;
  std::int64_t requested = 0;  // bytes of the allocation that did not fit
  std::int64_t in_use = 0;     // bytes live in the pool when it was asked for
  std::int64_t budget = 0;
};

// One LibTorch operator's tally in one phase (op_timer.h).
struct OpTally {
  std::int64_t calls = 0;
  double self_s = 0;  // its time less that of the operators it called
};

// One phase of a step ("forward.layer.3", "loss", "backward.layer.3", "optimizer").
struct PhaseRecord {
  std::string name;
  double start_s = 0, end_s = 0;       // seconds since the meter started
  std::int64_t device_at_start = 0;
  std::int64_t peak_device = 0;        // CPU: counted bytes; CUDA: allocated bytes
  std::int64_t peak_device_reserved = 0;  // CUDA only: the caching allocator's reserved peak
  std::int64_t peak_host = 0;
  // Collectives this rank issued through its Communicator (all-to-all, all-gather,
  // reduce-scatter, all-reduce): what the planner's exchanging ops count as their launches.
  std::int64_t collectives = 0;
  // With an OpTimer alive (op_timer.h): each LibTorch operator's calls and self time in the
  // phase, by name; empty otherwise.
  std::map<std::string, OpTally> ops = {};
};

// A point of the counter tracks of the trace.
struct CounterSample {
  double t_s = 0;
  std::int64_t device = 0;
  std::int64_t host = 0;
};

class MemoryMeter {
 public:
  // budget 0: unlimited. device: where the step runs (CPU counts, CUDA reads statistics).
  MemoryMeter(std::int64_t device_budget, std::int64_t host_budget, c10::Device device);
  ~MemoryMeter();  // stops the CUDA allocation log: its file may close after the meter

  // Closes the current phase and opens `name`. REQUIRES: not inside an allocation.
  void set_phase(const std::string& name);
  void finish();  // closes the current phase

  // Called by the counting allocators. on_alloc throws c10::OutOfMemoryError past a budget
  // and records oom() (the first one wins).
  void on_alloc(Pool pool, std::int64_t bytes);
  void on_free(Pool pool, std::int64_t bytes);
  // Called by the Communicator for each collective it issues: counted in the open phase.
  void on_collective();
  // Called by an OpTimer for each operator that ends: counted in the open phase.
  void on_op(const char* name, double self_s);

  std::int64_t current(Pool pool) const;
  std::int64_t peak(Pool pool) const;  // since construction or reset_peaks()
  std::int64_t peak_device_reserved() const { return peak_reserved_; }
  void reset_peaks();
  std::optional<OutOfMemory> oom() const;
  const std::string& phase() const { return phase_; }
  // Phases and samples since the last take_records(); the runner collects them per step.
  std::vector<PhaseRecord> take_phases();
  std::vector<CounterSample> take_samples();
  double now_s() const;
  c10::Device device() const { return device_; }
  // Writes every counted allocation and release ("phase +bytes -> current") to `log`; for
  // comparing the runtime's allocations with the planner's inventory op by op. On CUDA the
  // lines come from the caching allocator's trace (every block it hands out or takes back,
  // rounded as it rounds them, with the stream asked for), not from the counting allocator.
  void set_log(std::FILE* log);

 private:
  void sample_locked();
  // A phase opening at start_s with the pools as they are now. REQUIRES: mu_ held.
  PhaseRecord fresh_phase(const std::string& name, double start_s) const;
  void read_cuda_locked();
  void refresh_cuda_current_locked() const;  // current_[Device] from the caching allocator

  mutable std::mutex mu_;
  c10::Device device_;
  std::int64_t budget_[2] = {0, 0};
  mutable std::int64_t current_[2] = {0, 0};  // mutable: refreshed from CUDA's statistics
  std::int64_t peak_[2] = {0, 0};
  std::int64_t peak_reserved_ = 0;
  std::string phase_ = "setup";
  PhaseRecord open_;
  std::vector<PhaseRecord> phases_;
  std::vector<CounterSample> samples_;
  std::optional<OutOfMemory> oom_;
  std::chrono::steady_clock::time_point t0_;
  std::FILE* log_ = nullptr;
};

// While alive, `meter` counts the device pool (CPU: every LibTorch CPU allocation) and the
// host pool (host_empty). Installs the counting CPU allocator once per process; without an
// active scope it forwards to LibTorch's default allocator uncounted.
// REQUIRES: one scope at a time; the meter outlives every tensor allocated in the scope
// (the allocator keeps it alive through a shared_ptr).
class MeterScope {
 public:
  explicit MeterScope(std::shared_ptr<MemoryMeter> meter);
  ~MeterScope();
  MeterScope(const MeterScope&) = delete;
  MeterScope& operator=(const MeterScope&) = delete;
};

// While alive, nothing is counted: every allocation goes to LibTorch's default allocator as
// if no scope were active, and no budget applies. For work between steps that the planner's
// step does not contain (writing and reading training-state checkpoints). Tensors counted
// before the pause are still uncounted when they die; tensors made during it never count.
// REQUIRES: inside a MeterScope; no step is running (its worker threads would go uncounted
// too); pauses do not nest.
class MeterPause {
 public:
  MeterPause();
  ~MeterPause();
  MeterPause(const MeterPause&) = delete;
  MeterPause& operator=(const MeterPause&) = delete;

 private:
  std::shared_ptr<MemoryMeter> paused_;
};

// The meter of the active scope, or null.
MemoryMeter* active_meter();

// An empty tensor in the host pool: counted in Pool::Host of the active meter. On CUDA
// devices (pinned=true) the memory is page-locked so copies overlap with compute.
at::Tensor host_empty(c10::IntArrayRef sizes, c10::ScalarType dtype, bool pinned);

// Frees (bytes = 0) or refills a tensor's storage in place, CPU or CUDA: every tensor and
// view sharing the storage sees it, autograd's saved ones included. The pool's count
// follows the allocation.
void resize_storage(const at::Tensor& t, std::size_t bytes);

}  // namespace longctx::runtime
