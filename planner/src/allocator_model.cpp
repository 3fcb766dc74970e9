#include "longctx/planner/allocator_model.h"

namespace longctx {
namespace {
constexpr std::int64_t kMinBlock = 512;
constexpr std::int64_t kSmallSize = 1 << 20;       // requests up to 1 MiB use the small pool
constexpr std::int64_t kSmallBuffer = 2 << 20;     // small-pool segments are 2 MiB
constexpr std::int64_t kLargeBuffer = 20 << 20;    // requests under 10 MiB share 20 MiB segments
constexpr std::int64_t kMinLargeAlloc = 10 << 20;
constexpr std::int64_t kRoundLarge = 2 << 20;      // larger segments are rounded to 2 MiB
}  // namespace

std::int64_t allocated_bytes(Backend backend, std::int64_t requested) {
  if (backend == Backend::Cpu || requested <= 0) return requested < 0 ? 0 : requested;
  if (requested < kMinBlock) return kMinBlock;
  return (requested + kMinBlock - 1) / kMinBlock * kMinBlock;
}

std::int64_t segment_bytes(Backend backend, std::int64_t requested) {
  const std::int64_t a = allocated_bytes(backend, requested);
  if (backend == Backend::Cpu) return a;
  if (a <= kSmallSize) return kSmallBuffer;
  if (a < kMinLargeAlloc) return kLargeBuffer;
  return (a + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

}  // namespace longctx
