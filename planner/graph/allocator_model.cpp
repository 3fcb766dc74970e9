#include "planner/graph/allocator_model.h"

#include <algorithm>

namespace longctx {
namespace {

// An expandable pool's virtual range: more than any device holds. The small pool's starts at
// 0, the large pool's right after it.
constexpr std::int64_t kVirtualRange = std::int64_t{1} << 56;

std::int64_t round_up(std::int64_t n, std::int64_t m) { return (n + m - 1) / m * m; }

}  // namespace

std::int64_t CachingAllocatorModel::segment_size(std::int64_t rounded) {
  if (rounded <= kSmallSize) return kSmallSegment;
  if (rounded < kMinLargeAlloc) return kLargeSegment;
  return round_up(rounded, kRoundLarge);
}

CachingAllocatorModel::CachingAllocatorModel(AllocatorSettings settings) : settings_(settings) {
  if (!settings_.expandable_segments) return;
  // Rule 7: one unmapped range per pool, segment 0 small and segment 1 large.
  for (bool small : {true, false}) {
    add_block(Block{small ? 0 : kVirtualRange, kVirtualRange, small ? 0 : 1, -1, -1, -1, small, true, false}, last_);
    segment_sizes_.push_back(kVirtualRange);
  }
  next_address_ = 2 * kVirtualRange;
}

int CachingAllocatorModel::add_block(const Block& b, int prev) {
  int index = static_cast<int>(blocks_.size());
  if (spare_.empty()) {
    blocks_.push_back(b);
  } else {
    index = spare_.back();
    spare_.pop_back();
    block(index) = b;
  }
  Block& k = block(index);
  k.prev = prev;
  k.next = prev >= 0 ? block(prev).next : first_;
  if (k.next >= 0) block(k.next).prev = index;
  else last_ = index;
  if (prev >= 0) block(prev).next = index;
  else first_ = index;
  return index;
}

void CachingAllocatorModel::remove_block(int b) {
  const Block& k = block(b);
  if (k.prev >= 0) block(k.prev).next = k.next;
  else first_ = k.next;
  if (k.next >= 0) block(k.next).prev = k.prev;
  else last_ = k.prev;
  spare_.push_back(b);
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

void CachingAllocatorModel::insert_free(int b) {
  const Block& k = block(b);
  if (k.mapped) pool(k.small).insert({k.size, k.address, b});
}

bool CachingAllocatorModel::joins(int b, int other) const {
  if (other < 0) return false;
  const Block &k = block(b), &o = block(other);
  return o.free && o.segment == k.segment && o.mapped == k.mapped;
}

int CachingAllocatorModel::merge(int b) {
  if (const int next = block(b).next; joins(b, next)) {
    pool(block(next).small).erase(block(next).size, block(next).address);
    block(b).size += block(next).size;
    remove_block(next);
  }
  if (const int prev = block(b).prev; joins(b, prev)) {
    pool(block(prev).small).erase(block(prev).size, block(prev).address);
    block(prev).size += block(b).size;
    remove_block(b);
    return prev;
  }
  return b;
}

std::optional<std::size_t> CachingAllocatorModel::fit_of(std::int64_t size, bool small) const {
  const FreeBlocks& free_blocks = pool(small);
  const std::size_t fit = free_blocks.lower_bound(size);
  if (fit == free_blocks.size()) return std::nullopt;
  const std::int64_t max_split = settings_.max_split_size, found = free_blocks.at(fit).size;
  if (size < max_split && found >= max_split) return std::nullopt;
  if (size >= max_split && found >= size + kLargeSegment) return std::nullopt;
  return fit;
}

bool CachingAllocatorModel::splits(std::int64_t size, std::int64_t remaining, bool small) const {
  return small ? remaining >= kMinBlock : size < settings_.max_split_size && remaining > kSmallSize;
}

int CachingAllocatorModel::best_fit(std::int64_t size, bool small) {
  const std::optional<std::size_t> fit = fit_of(size, small);
  if (!fit) return -1;
  FreeBlocks& free_blocks = pool(small);
  const int b = free_blocks.at(*fit).block;
  free_blocks.erase_at(*fit);
  return b;
}

std::int64_t CachingAllocatorModel::hold_transient(std::int64_t bytes) {
  // best_fit() and take() without their changes (fit_of, splits): the block found, and what
  // the request holds of it.
  const std::int64_t size = round_size(bytes);
  const bool small = size <= kSmallSize;
  const std::optional<std::size_t> fit = fit_of(size, small);
  if (!fit) return 0;
  const std::int64_t found = pool(small).at(*fit).size;
  const std::int64_t held = splits(size, found - size, small) ? size : found;
  allocated_ += held;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  return held;
}

bool CachingAllocatorModel::serves_from_cache(std::int64_t bytes) const {
  const std::int64_t size = round_size(bytes);
  return fit_of(size, size <= kSmallSize).has_value();
}

void CachingAllocatorModel::note_whole_free(int b) {
  block(b).whole_at = static_cast<int>(whole_free_.size());
  whole_free_.push_back(b);
}

void CachingAllocatorModel::note_not_whole_free(int b) {
  const int at = block(b).whole_at;
  if (at < 0) return;
  const int moved = whole_free_.back();
  whole_free_[static_cast<std::size_t>(at)] = moved;
  block(moved).whole_at = at;
  whole_free_.pop_back();
  block(b).whole_at = -1;
}

void CachingAllocatorModel::release_segment(int b) {
  note_not_whole_free(b);
  const Block& k = block(b);
  pool(k.small).erase(k.size, k.address);
  reserved_ -= k.size;
  ++released_segments_;
  remove_block(b);
}

bool CachingAllocatorModel::release_oversize(std::int64_t size) {
  const std::int64_t max_split = settings_.max_split_size;
  if (max_split == std::numeric_limits<std::int64_t>::max()) return false;
  FreeBlocks& large = pool(false);  // oversize blocks are large, and never split: whole segments
  const std::int64_t key = std::max(size, max_split);
  if (const std::size_t it = large.lower_bound(key); it != large.size()) {
    release_segment(large.at(it).block);
    return true;
  }
  std::int64_t released = 0;
  while (released < key && !large.empty()) {
    if (large.largest().size < max_split) break;
    released += large.largest().size;
    release_segment(large.largest().block);
  }
  return released > 0;
}

int CachingAllocatorModel::new_segment(std::int64_t size, bool small) {
  const std::int64_t seg = segment_size(size);
  if (!grow_reserved(seg) && !(release_oversize(size) && grow_reserved(seg))) {
    release_cached();
    if (!grow_reserved(seg)) book_failed(seg);
  }
  // Past every block there is: the last in address order.
  const int b = add_block(Block{next_address_, seg, static_cast<int>(segment_sizes_.size()), -1, -1, -1, small, true, true},
                          last_);
  next_address_ += seg;
  segment_sizes_.push_back(seg);
  if (whole_free_segment(b)) note_whole_free(b);
  return b;
}

int CachingAllocatorModel::map_expandable(std::int64_t size, bool small) {
  const std::int64_t base = small ? 0 : kVirtualRange, page = small ? kSmallSegment : kLargeSegment;
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (int b = first_; b >= 0 && block(b).address < base + kVirtualRange; b = block(b).next) {
      const Block& range = block(b);
      if (range.address < base || range.mapped) continue;  // unmapped ranges are always free
      std::int64_t before = 0;                              // the mapped free block just before the range
      if (range.prev >= 0) {
        const Block& prev = block(range.prev);
        if (prev.free && prev.mapped && prev.segment == range.segment) before = prev.size;
      }
      if (before + range.size < size) continue;
      const std::int64_t bytes = std::min(round_up(size - before, page), range.size);
      if (!grow_reserved(bytes)) {
        if (attempt == 0) break;  // release, then look again
        book_failed(bytes);
      }
      if (bytes < range.size)
        add_block(Block{range.address + bytes, range.size - bytes, range.segment, -1, -1, -1, small, true, false}, b);
      block(b).size = bytes;
      block(b).mapped = true;
      const int joined = merge(b);
      pool(small).erase(block(joined).size, block(joined).address);
      return joined;
    }
    release_cached();
  }
  return -1;  // unreachable: the last range of a pool is as large as the pool's virtual range
}

void CachingAllocatorModel::unmap_pages(int b) {
  const Block k = block(b);
  const std::int64_t base = k.small ? 0 : kVirtualRange, page = k.small ? kSmallSegment : kLargeSegment;
  const std::int64_t lo = base + round_up(k.address - base, page);
  const std::int64_t hi = base + (k.address + k.size - base) / page * page;
  if (hi <= lo) return;
  pool(k.small).erase(k.size, k.address);
  // The block becomes up to three: mapped free pages before lo, the unmapped pages, mapped
  // free bytes from hi.
  int unmapped = b;
  if (lo > k.address) {
    block(b).size = lo - k.address;
    insert_free(b);
    unmapped = add_block(Block{lo, hi - lo, k.segment, -1, -1, -1, k.small, true, false}, b);
  } else {
    block(b).size = hi - lo;
    block(b).mapped = false;
  }
  if (k.address + k.size > hi)
    insert_free(add_block(Block{hi, k.address + k.size - hi, k.segment, -1, -1, -1, k.small, true, true}, unmapped));
  merge(unmapped);
  reserved_ -= hi - lo;
}

void CachingAllocatorModel::release_cached() {
  if (!settings_.expandable_segments) {
    // In address order, as the allocator walks its blocks (which blocks' slots are reused
    // next follows it).
    std::vector<int> whole = whole_free_;
    std::sort(whole.begin(), whole.end(), [&](int a, int b) { return block(a).address < block(b).address; });
    for (const int b : whole) release_segment(b);
    return;
  }
  // Rule 8: the whole pages inside each mapped free block are unmapped.
  std::vector<int> free_mapped;
  for (int b = first_; b >= 0; b = block(b).next)
    if (block(b).free && block(b).mapped) free_mapped.push_back(b);
  for (const int b : free_mapped) unmap_pages(b);
}

void CachingAllocatorModel::take(int b, std::int64_t size, bool small) {
  note_not_whole_free(b);
  const std::int64_t remaining = block(b).size - size;
  if (splits(size, remaining, small)) {
    const Block& k = block(b);
    const int rest = add_block(Block{k.address + size, remaining, k.segment, -1, -1, -1, small, true, true}, b);
    pool(small).insert({remaining, block(rest).address, rest});
    block(b).size = size;
  }
  Block& k = block(b);
  k.free = false;
  k.handle = static_cast<int>(live_.size());
  allocated_ += k.size;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
}

int CachingAllocatorModel::allocate(std::int64_t bytes) {
  const std::int64_t size = round_size(bytes);
  const bool small = size <= kSmallSize;
  int b = best_fit(size, small);
  if (b < 0) b = settings_.expandable_segments ? map_expandable(size, small) : new_segment(size, small);
  take(b, size, small);
  live_.push_back(b);
  return static_cast<int>(live_.size()) - 1;
}

void CachingAllocatorModel::free(int handle) {
  const int b = live_[static_cast<std::size_t>(handle)];
  live_[static_cast<std::size_t>(handle)] = -1;
  Block& k = block(b);
  k.free = true;
  k.handle = -1;
  allocated_ -= k.size;
  const int merged = merge(b);
  if (whole_free_segment(merged)) note_whole_free(merged);
  insert_free(merged);
}

std::int64_t CachingAllocatorModel::block_size(int handle) const {
  return block(live_.at(static_cast<std::size_t>(handle))).size;
}

}  // namespace longctx
