#include "longctx/runtime/host_heap.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <c10/util/Exception.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace longctx::runtime {

namespace {

// LibTorch's CPU alignment (c10/core/alignment.h, gAlignment): vectorized kernels assume it.
constexpr std::size_t kAlignment = 64;

// The block's address as malloc returned it sits in the word just below the aligned data, so
// that data and context are the same pointer (c10::Allocator::raw_allocate requires it) and
// the raw deleter finds what to free from the data pointer alone.
void free_block(void* data) {
  if (!data) return;
  void* raw = nullptr;
  std::memcpy(&raw, static_cast<char*>(data) - sizeof(void*), sizeof(void*));
  std::free(raw);
}

class HostHeapAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t n) override {
    if (n == 0) return {nullptr, nullptr, &free_block, c10::Device(c10::kCPU)};
    // Room for the address word and for aligning past it; the same n always asks malloc for
    // the same size.
    void* raw = std::malloc(n + kAlignment + sizeof(void*));
    TORCH_CHECK_WITH(OutOfMemoryError, raw != nullptr, "cannot allocate ", n, " bytes of host memory");
    const auto first = reinterpret_cast<std::uintptr_t>(raw) + sizeof(void*);
    void* data = reinterpret_cast<void*>((first + kAlignment - 1) / kAlignment * kAlignment);
    std::memcpy(static_cast<char*>(data) - sizeof(void*), &raw, sizeof(void*));
    return {data, data, &free_block, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

}  // namespace

c10::Allocator& host_heap_allocator() {
  static HostHeapAllocator a;
  return a;
}

bool keep_freed_host_memory() {
#if defined(__GLIBC__)
  // glibc malloc/malloc.c: a request at or above mp_.mmap_threshold is mmap'd, and munmap'd when
  // freed (sysmalloc, munmap_chunk); free() raises the threshold to each freed mapped block's
  // size and trims the heap's top above twice it (systrim). Setting both turns that off.
  constexpr int kLargestMmapThreshold = 32 * 1024 * 1024;  // DEFAULT_MMAP_THRESHOLD_MAX
  constexpr int kNeverTrim = 0x7fffffff;
  const bool mmap_set = mallopt(M_MMAP_THRESHOLD, kLargestMmapThreshold) == 1;
  const bool trim_set = mallopt(M_TRIM_THRESHOLD, kNeverTrim) == 1;
  return mmap_set && trim_set;
#else
  return false;
#endif
}

}  // namespace longctx::runtime
