#include "longctx/planner/allocator_model.h"

namespace longctx {
namespace {
constexpr std::int64_t kMinBlock = 512;
}  // namespace

std::int64_t allocated_bytes(Backend backend, std::int64_t requested) {
  if (backend == Backend::Cpu || requested <= 0) return requested < 0 ? 0 : requested;
  if (requested < kMinBlock) return kMinBlock;
  return (requested + kMinBlock - 1) / kMinBlock * kMinBlock;
}

}  // namespace longctx
