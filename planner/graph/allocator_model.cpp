#include "planner/graph/allocator_model.h"

#include <algorithm>
#include <iterator>

namespace longctx {
namespace {

// An expandable pool's virtual range: more than any device holds. The small pool's starts at
// 0, the large pool's right after it.
constexpr std::int64_t kVirtualRange = std::int64_t{1} << 56;

std::int64_t round_up(std::int64_t n, std::int64_t m) { return (n + m - 1) / m * m; }

}  // namespace

std::int64_t allocated_bytes(Backend backend, std::int64_t requested) {
  if (backend == Backend::Cpu || requested <= 0) return requested < 0 ? 0 : requested;
  return CachingAllocatorModel::round_size(requested);
}

std::int64_t CachingAllocatorModel::round_size(std::int64_t bytes) {
  if (bytes < kMinBlock) return kMinBlock;
  return round_up(bytes, kMinBlock);
}

std::int64_t CachingAllocatorModel::segment_size(std::int64_t rounded) {
  if (rounded <= kSmallSize) return kSmallSegment;
  if (rounded < kMinLargeAlloc) return kLargeSegment;
  return round_up(rounded, kRoundLarge);
}

CachingAllocatorModel::CachingAllocatorModel(AllocatorSettings settings) : settings_(settings) {
  if (!settings_.expandable_segments) return;
  // Rule 7: one unmapped range per pool, segment 0 small and segment 1 large.
  for (bool small : {true, false}) {
    blocks_[small ? 0 : kVirtualRange] = Block{kVirtualRange, small ? 0 : 1, small, true, false};
    segment_sizes_.push_back(kVirtualRange);
  }
  next_address_ = 2 * kVirtualRange;
}

bool CachingAllocatorModel::grow_reserved(std::int64_t bytes) {
  if (bytes > settings_.capacity - reserved_) return false;
  reserved_ += bytes;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  return true;
}

void CachingAllocatorModel::book_failed(std::int64_t bytes) {
  ++failures_;
  reserved_ += bytes;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
}

void CachingAllocatorModel::insert_free(std::int64_t address) {
  const Block& b = blocks_.at(address);
  if (b.mapped) pool(b.small).insert({b.size, address});
}

std::int64_t CachingAllocatorModel::merge(std::int64_t address) {
  auto it = blocks_.find(address);
  auto joins = [&](const Block& other) {
    return other.free && other.segment == it->second.segment && other.mapped == it->second.mapped;
  };
  auto next = std::next(it);
  if (next != blocks_.end() && joins(next->second)) {
    pool(next->second.small).erase({next->second.size, next->first});
    it->second.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (joins(prev->second)) {
      pool(prev->second.small).erase({prev->second.size, prev->first});
      prev->second.size += it->second.size;
      blocks_.erase(it);
      return prev->first;
    }
  }
  return address;
}

std::int64_t CachingAllocatorModel::best_fit(std::int64_t size, bool small) {
  FreeSet& free_blocks = pool(small);
  auto fit = free_blocks.lower_bound({size, 0});
  if (fit == free_blocks.end()) return -1;
  const std::int64_t max_split = settings_.max_split_size;
  if (size < max_split && fit->first >= max_split) return -1;
  if (size >= max_split && fit->first >= size + kLargeSegment) return -1;
  const std::int64_t address = fit->second;
  free_blocks.erase(fit);
  return address;
}

void CachingAllocatorModel::release_segment(std::int64_t address) {
  const Block& b = blocks_.at(address);
  pool(b.small).erase({b.size, address});
  reserved_ -= b.size;
  ++released_segments_;
  blocks_.erase(address);
}

bool CachingAllocatorModel::release_oversize(std::int64_t size) {
  const std::int64_t max_split = settings_.max_split_size;
  if (max_split == std::numeric_limits<std::int64_t>::max()) return false;
  FreeSet& large = pool(false);  // oversize blocks are large, and never split: whole segments
  const std::int64_t key = std::max(size, max_split);
  if (auto it = large.lower_bound({key, 0}); it != large.end()) {
    release_segment(it->second);
    return true;
  }
  std::int64_t released = 0;
  while (released < key && !large.empty()) {
    auto largest = std::prev(large.end());
    if (largest->first < max_split) break;
    released += largest->first;
    release_segment(largest->second);
  }
  return released > 0;
}

std::int64_t CachingAllocatorModel::new_segment(std::int64_t size, bool small) {
  const std::int64_t seg = segment_size(size);
  if (!grow_reserved(seg) && !(release_oversize(size) && grow_reserved(seg))) {
    release_cached();
    if (!grow_reserved(seg)) book_failed(seg);
  }
  const std::int64_t address = next_address_;
  next_address_ += seg;
  blocks_[address] = Block{seg, static_cast<int>(segment_sizes_.size()), small, true, true};
  segment_sizes_.push_back(seg);
  return address;
}

std::int64_t CachingAllocatorModel::map_expandable(std::int64_t size, bool small) {
  const std::int64_t base = small ? 0 : kVirtualRange, page = small ? kSmallSegment : kLargeSegment;
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (auto it = blocks_.lower_bound(base); it != blocks_.end() && it->first < base + kVirtualRange; ++it) {
      if (it->second.mapped) continue;  // unmapped ranges are always free
      std::int64_t before = 0;          // the mapped free block just before the range
      if (it != blocks_.begin()) {
        const Block& prev = std::prev(it)->second;
        if (prev.free && prev.mapped && prev.segment == it->second.segment) before = prev.size;
      }
      if (before + it->second.size < size) continue;
      const std::int64_t bytes = std::min(round_up(size - before, page), it->second.size);
      if (!grow_reserved(bytes)) {
        if (attempt == 0) break;  // release, then look again
        book_failed(bytes);
      }
      const std::int64_t address = it->first;
      const Block range = it->second;
      if (bytes < range.size) blocks_[address + bytes] = Block{range.size - bytes, range.segment, small, true, false};
      blocks_[address] = Block{bytes, range.segment, small, true, true};
      const std::int64_t joined = merge(address);
      pool(small).erase({blocks_.at(joined).size, joined});
      return joined;
    }
    release_cached();
  }
  return -1;  // unreachable: the last range of a pool is as large as the pool's virtual range
}

void CachingAllocatorModel::release_cached() {
  if (!settings_.expandable_segments) {
    for (auto it = blocks_.begin(); it != blocks_.end();) {
      const Block& b = it->second;
      const std::int64_t address = it->first;
      ++it;
      if (b.free && b.size == segment_sizes_[static_cast<std::size_t>(b.segment)]) release_segment(address);
    }
    return;
  }
  // Rule 8: the whole pages inside each mapped free block are unmapped.
  std::vector<std::int64_t> free_mapped;
  for (const auto& [address, b] : blocks_)
    if (b.free && b.mapped) free_mapped.push_back(address);
  for (std::int64_t address : free_mapped) {
    const Block b = blocks_.at(address);
    const std::int64_t base = b.small ? 0 : kVirtualRange, page = b.small ? kSmallSegment : kLargeSegment;
    const std::int64_t lo = base + round_up(address - base, page);
    const std::int64_t hi = base + (address + b.size - base) / page * page;
    if (hi <= lo) continue;
    pool(b.small).erase({b.size, address});
    blocks_.erase(address);
    if (lo > address) {
      blocks_[address] = Block{lo - address, b.segment, b.small, true, true};
      insert_free(address);
    }
    if (address + b.size > hi) {
      blocks_[hi] = Block{address + b.size - hi, b.segment, b.small, true, true};
      insert_free(hi);
    }
    blocks_[lo] = Block{hi - lo, b.segment, b.small, true, false};
    merge(lo);
    reserved_ -= hi - lo;
  }
}

std::int64_t CachingAllocatorModel::take(std::int64_t address, std::int64_t size, bool small) {
  Block& b = blocks_.at(address);
  const std::int64_t remaining = b.size - size;
  if (small ? remaining >= kMinBlock : size < settings_.max_split_size && remaining > kSmallSize) {
    blocks_[address + size] = Block{remaining, b.segment, small, true, true};
    pool(small).insert({remaining, address + size});
    b.size = size;
  }
  b.free = false;
  allocated_ += b.size;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  return address;
}

int CachingAllocatorModel::allocate(std::int64_t bytes) {
  const std::int64_t size = round_size(bytes);
  const bool small = size <= kSmallSize;
  std::int64_t address = best_fit(size, small);
  if (address < 0)
    address = settings_.expandable_segments ? map_expandable(size, small) : new_segment(size, small);
  live_[next_handle_] = take(address, size, small);
  return next_handle_++;
}

void CachingAllocatorModel::free(int handle) {
  auto live = live_.find(handle);
  const std::int64_t address = live->second;
  live_.erase(live);
  Block& b = blocks_.at(address);
  b.free = true;
  allocated_ -= b.size;
  insert_free(merge(address));
}

std::int64_t CachingAllocatorModel::block_size(int handle) const { return blocks_.at(live_.at(handle)).size; }

}  // namespace longctx
