#pragma once
// What a backend's allocator does with a request of n bytes.
//
// cpu: the runtime's counting allocator books exactly n.
// cuda: PyTorch's caching allocator rounds every request up to a multiple of 512 bytes
// (minimum 512); that rounded figure is what memory_allocated() reports, so it is what the
// planner predicts as "allocated". Reserved memory adds segment granularity (2 MiB for the
// small pool, 20 MiB or 2 MiB-rounded segments for large requests) and fragmentation,
// which the planner bounds rather than predicts exactly (docs/memory-model.md).
#include <cstdint>

#include "longctx/planner/hardware.h"

namespace longctx {

std::int64_t allocated_bytes(Backend backend, std::int64_t requested);

}  // namespace longctx
