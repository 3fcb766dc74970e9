#include "longctx/planner/allocator_model.h"

#include <algorithm>
#include <iterator>

namespace longctx {

std::int64_t allocated_bytes(Backend backend, std::int64_t requested) {
  if (backend == Backend::Cpu || requested <= 0) return requested < 0 ? 0 : requested;
  return CachingAllocatorModel::round_size(requested);
}

std::int64_t CachingAllocatorModel::round_size(std::int64_t bytes) {
  if (bytes < kMinBlock) return kMinBlock;
  return (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
}

std::int64_t CachingAllocatorModel::segment_size(std::int64_t rounded) {
  if (rounded <= kSmallSize) return kSmallSegment;
  if (rounded < kMinLargeAlloc) return kLargeSegment;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

int CachingAllocatorModel::allocate(std::int64_t bytes) {
  const std::int64_t size = round_size(bytes);
  const bool small = size <= kSmallSize;
  FreeSet& free_blocks = pool(small);
  std::int64_t address;
  auto fit = free_blocks.lower_bound({size, 0});
  if (fit != free_blocks.end()) {
    address = fit->second;
    free_blocks.erase(fit);
  } else {
    // A new segment, one free block as large as it.
    const std::int64_t seg = segment_size(size);
    address = next_address_;
    next_address_ += seg;
    blocks_[address] = Block{seg, static_cast<int>(segment_sizes_.size()), small, true};
    segment_sizes_.push_back(seg);
    reserved_ += seg;
    peak_reserved_ = std::max(peak_reserved_, reserved_);
  }
  Block& b = blocks_.at(address);
  const std::int64_t remaining = b.size - size;
  if (small ? remaining >= kMinBlock : remaining > kSmallSize) {
    blocks_[address + size] = Block{remaining, b.segment, small, true};
    free_blocks.insert({remaining, address + size});
    b.size = size;
  }
  b.free = false;
  allocated_ += b.size;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  live_[next_handle_] = address;
  return next_handle_++;
}

void CachingAllocatorModel::free(int handle) {
  auto live = live_.find(handle);
  std::int64_t address = live->second;
  live_.erase(live);
  auto it = blocks_.find(address);
  it->second.free = true;
  allocated_ -= it->second.size;
  const bool small = it->second.small;
  // Merge with the free neighbours of the same segment.
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.free && next->second.segment == it->second.segment) {
    pool(small).erase({next->second.size, next->first});
    it->second.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free && prev->second.segment == it->second.segment) {
      pool(small).erase({prev->second.size, prev->first});
      prev->second.size += it->second.size;
      blocks_.erase(it);
      it = prev;
      address = prev->first;
    }
  }
  pool(small).insert({it->second.size, address});
}

std::int64_t CachingAllocatorModel::block_size(int handle) const { return blocks_.at(live_.at(handle)).size; }

}  // namespace longctx
