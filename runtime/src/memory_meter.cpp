#include "longctx/runtime/memory_meter.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/cuda/Resize.h>
#include <ATen/core/Tensor.h>
#include <cuda_runtime_api.h>
#include <c10/core/CPUAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#include <ATen/Context.h>
#include <mutex>
#include <unordered_map>
#include <fmt/format.h>

#include "longctx/runtime/host_heap.h"

namespace longctx::runtime {

// ---- the meter -------------------------------------------------------------------------

MemoryMeter::MemoryMeter(std::int64_t device_budget, std::int64_t host_budget, c10::Device device)
    : device_(device), t0_(std::chrono::steady_clock::now()) {
  budget_[0] = device_budget;
  budget_[1] = host_budget;
  open_.name = phase_;
  if (device_.is_cuda()) {
    // The caching allocator's per-device statistics exist only once CUDA is initialized in
    // the process: resetPeakStats before that throws "Invalid device argument ... did you
    // call init?" (c10/cuda/CUDACachingAllocator.cpp, NativeCachingAllocator's device
    // check). at::Context::lazyInitDevice (ATen/Context.h) runs that initialization once.
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index());
    refresh_cuda_current_locked();
  }
}

double MemoryMeter::now_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

namespace {
constexpr auto kAggregate = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
}  // namespace

void MemoryMeter::refresh_cuda_current_locked() const {
  if (!device_.is_cuda()) return;
  current_[0] = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index()).allocated_bytes[kAggregate].current;
}

void MemoryMeter::read_cuda_locked() {
  if (!device_.is_cuda()) return;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index());
  const auto agg = kAggregate;
  current_[0] = stats.allocated_bytes[agg].current;
  open_.peak_device = std::max(open_.peak_device, stats.allocated_bytes[agg].peak);
  open_.peak_device_reserved = std::max(open_.peak_device_reserved, stats.reserved_bytes[agg].peak);
  peak_[0] = std::max(peak_[0], stats.allocated_bytes[agg].peak);
  peak_reserved_ = std::max(peak_reserved_, stats.reserved_bytes[agg].peak);
  c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index());
}

// ---- the CUDA allocation log --------------------------------------------------------------
//
// The caching allocator calls its trace trackers on every block it hands out and takes back
// once one is attached (c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::
// record_trace: "if (!record_history && trace_trackers_.empty()) return"), under its own
// mutex and with no way to detach one. So one tracker is attached per process and writes
// only while a log is set; it takes cuda_log's own mutex, never the meter's, because the
// meter holds its mutex while it reads the allocator's statistics (lock order: meter, then
// allocator, then cuda_log; the tracker: allocator, then cuda_log).
namespace {
struct CudaLog {
  std::mutex mu;
  std::FILE* file = nullptr;
  std::string phase;
  std::int64_t in_use = 0;    // bytes asked for and not yet freed
  std::int64_t reserved = 0;  // bytes of segments (or pages) the allocator holds
};
CudaLog& cuda_log() {
  static CudaLog log;
  return log;
}
void attach_cuda_log_tracker_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker([](const auto& te) {
      using Action = c10::CachingDeviceAllocator::TraceEntry::Action;
      // ALLOC and FREE_REQUESTED carry the size asked for (DeviceCachingAllocator::malloc's
      // orig_size, free's block->requested_size), unrounded; FREE_COMPLETED is when the block
      // returns to its pool (free_block; later than the request when record_stream deferred
      // it); SEGMENT_* are the driver calls that make up memory_reserved().
      const char* verb = nullptr;
      int sign = 0;
      switch (te.action_) {
        case Action::ALLOC: verb = "device"; sign = '+'; break;
        case Action::FREE_REQUESTED: verb = "device"; sign = '-'; break;
        case Action::FREE_COMPLETED: verb = "returned"; sign = '-'; break;
        case Action::SEGMENT_ALLOC:
        case Action::SEGMENT_MAP: verb = "segment"; sign = '+'; break;
        case Action::SEGMENT_FREE:
        case Action::SEGMENT_UNMAP: verb = "segment"; sign = '-'; break;
        default: return;
      }
      CudaLog& log = cuda_log();
      std::lock_guard lock(log.mu);
      if (!log.file) return;
      const auto bytes = static_cast<std::int64_t>(te.size_);
      std::int64_t* total = nullptr;
      if (te.action_ == Action::ALLOC || te.action_ == Action::FREE_REQUESTED) total = &log.in_use;
      if (te.action_ >= Action::SEGMENT_ALLOC && te.action_ <= Action::SEGMENT_UNMAP) total = &log.reserved;
      if (total) {
        *total += sign == '+' ? bytes : -bytes;
        std::fprintf(log.file, "%s %s %c%lld -> %lld stream %p addr %#zx\n", log.phase.c_str(), verb, sign,
                     (long long)bytes, (long long)*total, te.stream_, te.addr_);
      } else {
        std::fprintf(log.file, "%s %s %c%lld stream %p addr %#zx\n", log.phase.c_str(), verb, sign, (long long)bytes,
                     te.stream_, te.addr_);
      }
    });
  });
}
void set_cuda_log_phase(const std::string& phase) {
  CudaLog& log = cuda_log();
  std::lock_guard lock(log.mu);
  log.phase = phase;
}
}  // namespace

void MemoryMeter::set_log(std::FILE* log) {
  std::lock_guard lock(mu_);
  log_ = log;
  if (!device_.is_cuda()) return;
  refresh_cuda_current_locked();
  attach_cuda_log_tracker_once();
  CudaLog& cuda = cuda_log();
  std::lock_guard log_lock(cuda.mu);
  cuda.file = log;
  cuda.phase = phase_;
  cuda.in_use = current_[0];
  cuda.reserved = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index()).reserved_bytes[kAggregate].current;
}

MemoryMeter::~MemoryMeter() {
  if (!log_ || !device_.is_cuda()) return;
  CudaLog& cuda = cuda_log();
  std::lock_guard lock(cuda.mu);
  if (cuda.file == log_) cuda.file = nullptr;
}

void MemoryMeter::sample_locked() { samples_.push_back({now_s(), current_[0], current_[1]}); }

PhaseRecord MemoryMeter::fresh_phase(const std::string& name, double start_s) const {
  PhaseRecord r;
  r.name = name;
  r.start_s = r.end_s = start_s;
  r.device_at_start = r.peak_device = current_[0];
  r.peak_host = current_[1];
  return r;
}

void MemoryMeter::set_phase(const std::string& name) {
  std::lock_guard lock(mu_);
  read_cuda_locked();
  open_.end_s = now_s();
  phases_.push_back(open_);
  sample_locked();
  phase_ = name;
  if (log_ && device_.is_cuda()) set_cuda_log_phase(phase_);
  open_ = fresh_phase(name, open_.end_s);
}

void MemoryMeter::finish() {
  std::lock_guard lock(mu_);
  read_cuda_locked();
  open_.end_s = now_s();
  phases_.push_back(open_);
  sample_locked();
  phase_ = "idle";
  if (log_ && device_.is_cuda()) set_cuda_log_phase(phase_);
  open_ = fresh_phase(phase_, open_.end_s);
}

void MemoryMeter::on_collective() {
  std::lock_guard lock(mu_);
  ++open_.collectives;
}

void MemoryMeter::on_op(const char* name, double self_s) {
  std::lock_guard lock(mu_);
  OpTally& t = open_.ops[name];
  ++t.calls;
  t.self_s += self_s;
}

void MemoryMeter::on_alloc(Pool pool, std::int64_t bytes) {
  // On CUDA the device pool is the caching allocator's statistics (read_cuda_locked).
  if (pool == Pool::Device && device_.is_cuda()) return;
  std::lock_guard lock(mu_);
  const auto p = static_cast<std::size_t>(pool);
  if (budget_[p] > 0 && current_[p] + bytes > budget_[p]) {
    if (!oom_) oom_ = OutOfMemory{pool, phase_, bytes, current_[p], budget_[p]};
    // LibTorch propagates its own OOM type cleanly through ops and the autograd engine.
    TORCH_CHECK_WITH(OutOfMemoryError, false,
                     fmt::format("{} pool out of memory in phase {}: {} bytes requested, {} in use, budget {}",
                                 pool == Pool::Device ? "device" : "host", phase_, bytes, current_[p], budget_[p]));
  }
  current_[p] += bytes;
  if (log_) std::fprintf(log_, "%s %s +%lld -> %lld\n", phase_.c_str(), p ? "host" : "device", (long long)bytes, (long long)current_[p]);
  peak_[p] = std::max(peak_[p], current_[p]);
  if (pool == Pool::Device)
    open_.peak_device = std::max(open_.peak_device, current_[p]);
  else
    open_.peak_host = std::max(open_.peak_host, current_[p]);
}

void MemoryMeter::on_free(Pool pool, std::int64_t bytes) {
  if (pool == Pool::Device && device_.is_cuda()) return;
  std::lock_guard lock(mu_);
  current_[static_cast<std::size_t>(pool)] -= bytes;
  if (log_)
    std::fprintf(log_, "%s %s -%lld -> %lld\n", phase_.c_str(), pool == Pool::Host ? "host" : "device", (long long)bytes,
                 (long long)current_[static_cast<std::size_t>(pool)]);
}

std::int64_t MemoryMeter::current(Pool pool) const {
  std::lock_guard lock(mu_);
  // On CUDA the device figure is the caching allocator's, read now: nothing else refreshes
  // it between phase boundaries.
  if (pool == Pool::Device) refresh_cuda_current_locked();
  return current_[static_cast<std::size_t>(pool)];
}

std::int64_t MemoryMeter::peak(Pool pool) const {
  std::lock_guard lock(mu_);
  return peak_[static_cast<std::size_t>(pool)];
}

void MemoryMeter::reset_peaks() {
  std::lock_guard lock(mu_);
  read_cuda_locked();
  peak_[0] = current_[0];
  peak_[1] = current_[1];
  peak_reserved_ = 0;
}

std::optional<OutOfMemory> MemoryMeter::oom() const {
  std::lock_guard lock(mu_);
  return oom_;
}

std::vector<PhaseRecord> MemoryMeter::take_phases() {
  std::lock_guard lock(mu_);
  return std::exchange(phases_, {});
}

std::vector<CounterSample> MemoryMeter::take_samples() {
  std::lock_guard lock(mu_);
  return std::exchange(samples_, {});
}

// ---- the counting allocators -----------------------------------------------------------

namespace {

std::mutex g_active_mu;
std::shared_ptr<MemoryMeter> g_active;  // guarded by g_active_mu

std::shared_ptr<MemoryMeter> load_active() {
  std::lock_guard lock(g_active_mu);
  return g_active;
}

// What a counted allocation owes: the wrapped allocation and the meter that counted it.
// Keyed by the data pointer, so the DataPtr's context is its data (LibTorch's raw_allocate,
// which some CPU kernels use for scratch, requires that).
struct Counted {
  c10::DataPtr inner;
  std::int64_t bytes;
  Pool pool;
  std::shared_ptr<MemoryMeter> meter;
};

std::mutex g_counted_mu;
std::unordered_map<void*, Counted>& counted() {
  static auto* m = new std::unordered_map<void*, Counted>();  // never destroyed: frees may come late
  return *m;
}

c10::DeleterFnPtr g_base_raw_deleter = nullptr;  // for allocations made while no meter was active

void delete_counted(void* data) {
  std::optional<Counted> c;
  {
    std::lock_guard lock(g_counted_mu);
    auto it = counted().find(data);
    if (it != counted().end()) {
      c = std::move(it->second);
      counted().erase(it);
    }
  }
  if (!c) {
    if (g_base_raw_deleter) g_base_raw_deleter(data);
    return;
  }
  c->meter->on_free(c->pool, c->bytes);
}  // c->inner frees the memory here

// Wraps another allocator; counts into the active meter's `pool`.
class CountingAllocator final : public c10::Allocator {
 public:
  // The base allocator holds exactly the bytes asked for (none of them rounds).
  CountingAllocator(c10::Allocator* base, Pool pool) : base_(base), pool_(pool) {}

  c10::DataPtr allocate(size_t n) override {
    auto meter = load_active();
    if (!meter || n == 0) return base_->allocate(n);
    // On a CUDA run the CPU allocator's memory is host memory (scratch, gradients of host
    // leaves, host-side optimizer state): it counts in the host pool, the device pool being
    // the caching allocator's statistics.
    const Pool pool = pool_ == Pool::Device && meter->device().is_cuda() ? Pool::Host : pool_;
    const auto bytes = static_cast<std::int64_t>(n);
    meter->on_alloc(pool, bytes);
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    {
      std::lock_guard lock(g_counted_mu);
      counted().emplace(data, Counted{std::move(inner), bytes, pool, std::move(meter)});
    }
    return {data, data, &delete_counted, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &delete_counted; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  c10::Allocator* base_;
  Pool pool_;
};

// Both pools come from the C heap, each freed block kept for its size (host_heap.h).
CountingAllocator& device_allocator() {
  static CountingAllocator a(&host_heap_allocator(), Pool::Device);
  return a;
}

CountingAllocator& host_allocator() {
  static CountingAllocator a(&host_heap_allocator(), Pool::Host);
  return a;
}

// Pinned host memory, exactly as requested. LibTorch's caching host allocator rounds every
// request up to a power of two (ATen/core/CachingHostAllocator.h,
// CachingHostAllocatorImpl::allocate, c10::llvm::PowerOf2Ceil) and keeps freed blocks
// cached: a 4.84 GiB offloaded checkpoint would hold 8 GiB of page-locked memory. Here
// each request is its own cudaHostAlloc and each free its own cudaFreeHost, so the host
// pool's figure is the bytes asked for and page-locked memory ends when the tensor does.
//
// Safety of asynchronous copies: cudaFreeHost synchronizes with the device before it
// returns (the reason caching host allocators exist), so a block is never released under
// an in-flight cudaMemcpyAsync that reads or writes it. The cost is one host wait per free
// of pinned memory (an offloaded checkpoint's host copy, once per layer and step), small
// beside the layer's attention at the lengths where offloading is used (docs/runtime.md).
// LibTorch's non_blocking copy still offers the pointer to the caching host allocator
// (Copy.cu, CachingHostAllocator_recordEvent), which returns false for a pointer it did
// not allocate (CachingHostAllocatorImpl::record_event): nothing is recorded, nothing is
// needed.
class ExactPinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t n) override {
    void* p = nullptr;
    if (n > 0) {
      const cudaError_t err = cudaHostAlloc(&p, n, cudaHostAllocDefault);
      if (err != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky error so later CUDA calls do not report it
        TORCH_CHECK_WITH(OutOfMemoryError, false, "cannot pin ", n, " bytes of host memory: ", cudaGetErrorString(err));
      }
    }
    return {p, p, &release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

 private:
  static void release(void* p) {
    if (p) (void)cudaFreeHost(p);  // a deleter cannot throw; a failed free leaks, it corrupts nothing
  }
};

CountingAllocator& pinned_host_allocator() {
  static ExactPinnedAllocator exact;
  static CountingAllocator a(&exact, Pool::Host);
  return a;
}

}  // namespace

MeterScope::MeterScope(std::shared_ptr<MemoryMeter> meter) {
  static const bool installed = [] {
    // Above the default's priority (0), so every CPU tensor goes through the wrapper.
    g_base_raw_deleter = host_heap_allocator().raw_deleter();
    (void)keep_freed_host_memory();
    c10::SetCPUAllocator(&device_allocator(), /*priority=*/100);
    return true;
  }();
  (void)installed;
  std::lock_guard lock(g_active_mu);
  g_active = std::move(meter);
}

MeterScope::~MeterScope() {
  std::lock_guard lock(g_active_mu);
  g_active.reset();
}

MeterPause::MeterPause() {
  std::lock_guard lock(g_active_mu);
  paused_ = std::exchange(g_active, nullptr);
}

MeterPause::~MeterPause() {
  std::lock_guard lock(g_active_mu);
  g_active = std::move(paused_);
}

MemoryMeter* active_meter() {
  std::lock_guard lock(g_active_mu);
  return g_active.get();
}

at::Tensor host_empty(c10::IntArrayRef sizes, c10::ScalarType dtype, bool pinned) {
  c10::Allocator* a = pinned ? static_cast<c10::Allocator*>(&pinned_host_allocator()) : &host_allocator();
  return at::detail::empty_generic(sizes, a, c10::DispatchKeySet(c10::DispatchKey::CPU), dtype, std::nullopt);
}

void resize_storage(const at::Tensor& t, std::size_t bytes) {
  if (t.is_cuda())
    at::native::resize_bytes_cuda(t.storage().unsafeGetStorageImpl(), bytes);
  else
    at::native::resize_bytes_cpu(t.storage().unsafeGetStorageImpl(), bytes);
}

}  // namespace longctx::runtime
