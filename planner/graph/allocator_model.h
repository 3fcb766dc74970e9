#pragma once
// What a backend's allocator does with requests.
//
// cpu: the runtime's counting allocator books exactly n bytes for a request of n.
//
// cuda: PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp: round_size,
// get_pool, get_allocation_size, get_free_block, should_split, alloc_found_block,
// free_block, and the retry chain of DeviceCachingAllocator::malloc), with one stream, no
// garbage_collection_threshold and no power-of-two rounding (the defaults of
// PYTORCH_CUDA_ALLOC_CONF), and max_split_size_mb and expandable_segments as choices.
//  1. Every request is rounded up to a multiple of 512 bytes, at least 512.
//  2. Rounded requests up to 1 MiB come from the small pool, whose segments (cudaMalloc
//     calls) are 2 MiB; larger ones from the large pool, whose segments are 20 MiB for
//     requests under 10 MiB, and the request rounded up to a multiple of 2 MiB otherwise.
//  3. A request takes the smallest free block of its pool that fits it (the lowest address
//     among equals), and reserves a new segment only when none fits.
//  4. The block is split when what remains is at least 512 bytes (small pool) or more than
//     1 MiB (large pool); the remainder becomes a free block of the pool. Otherwise the
//     request gets the whole block, remainder included, and the whole block counts as
//     allocated.
//  5. A freed block merges with the free blocks next to it in its segment and returns to its
//     pool. Segments stay reserved (cached) after their blocks are freed.
//  6. Out of memory: when a new segment would take reserved memory past the capacity
//     (cudaMalloc fails), every cached segment none of whose bytes is in use is released
//     (release_cached_blocks), and the segment is asked for once more. If it still does not
//     fit, the request fails: the model books it anyway and records the failure.
// With max_split_size_mb (rule 9; get_free_block, should_split,
// release_available_cached_blocks):
//  9. A block of max_split_size or more is "oversize": it is never split, a request under
//     max_split_size never takes one, and a larger request takes one only when it is less
//     than 20 MiB too large. Out of memory first releases cached oversize blocks (the
//     smallest one as large as the request, or else the largest ones until as many bytes
//     are free), and only then every wholly free segment (rule 6).
// With expandable_segments:True (the Note on expandable segments in that file;
// find_expandable_block, map_block, unmap_block, try_allocate_expandable_block):
//  7. Each pool is one virtual range, mapped to physical memory in pages of 2 MiB (small
//     pool) or 20 MiB (large pool). Rules 1, 3 and 4 hold for mapped free blocks. When none
//     fits, the lowest unmapped range that, with the mapped free block just before it, is
//     large enough is mapped from its start, the shortfall rounded up to whole pages; the new
//     pages join that free block.
//  8. Out of memory releases every whole page inside a free block (unmapped), then maps
//     once more; reserved memory is the pages mapped.
// memory_allocated() is the sum of the sizes of the blocks in use; memory_reserved() the sum
// of the segments (or pages mapped).
//
// The step simulation predicts allocated bytes on CUDA as each request rounded (rule 1):
// exact when blocks are split or freshly reserved, lower by the unsplit remainder (under
// 1 MiB each) when a large request reuses a free block that is up to 1 MiB too large.
// reserved_replay.h replays a step's requests through this model for the reserved figure.
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "planner/core/hardware.h"
#include "planner/graph/free_blocks.h"

namespace longctx {

// Rule 1 on CUDA; the request itself on the CPU. (Inline, below: every simulation calls it
// for every tensor.)
std::int64_t allocated_bytes(Backend backend, std::int64_t requested);

struct AllocatorSettings {
  bool expandable_segments = false;  // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  // Bytes the allocator may reserve: the device's memory less what lives outside the
  // allocator (CUDA context, NCCL buffers).
  std::int64_t capacity = std::numeric_limits<std::int64_t>::max();
  // PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:N as bytes; the default splits every block.
  std::int64_t max_split_size = std::numeric_limits<std::int64_t>::max();
  bool operator==(const AllocatorSettings&) const = default;
  // Whether every cached block may be split (max_split_size unset): then a block serves a
  // request exactly where it is large enough (CachingAllocatorModel::CacheLook).
  bool splits_every_block() const { return max_split_size == std::numeric_limits<std::int64_t>::max(); }
};

class CachingAllocatorModel {
 public:
  static constexpr std::int64_t kMinBlock = 512;                // rule 1
  static constexpr std::int64_t kSmallSize = 1 << 20;           // largest small request
  static constexpr std::int64_t kSmallSegment = 2 << 20;        // small pool segments and pages
  static constexpr std::int64_t kLargeSegment = 20 << 20;       // for requests under kMinLargeAlloc; large pages
  static constexpr std::int64_t kMinLargeAlloc = 10 << 20;
  static constexpr std::int64_t kRoundLarge = 2 << 20;          // larger segments' rounding

  explicit CachingAllocatorModel(AllocatorSettings settings = {});

  // A request of `bytes` (> 0). Returns the handle free() takes.
  int allocate(std::int64_t bytes);
  // REQUIRES: `handle` came from allocate() and was not freed since.
  void free(int handle);
  // A request returned before this model sees another request or return (an op's workspace,
  // freed once the op ran), where a cached block serves it: taking that block (split or whole)
  // and returning it leaves every block, segment and counter as it was, but the bytes it
  // counts as allocated while it is held. Books those and returns them (> 0); 0 where no cached
  // block serves it, without changing anything (allocate() and free() must then run).
  std::int64_t hold_transient(std::int64_t bytes);
  // REQUIRES: `booked` came from hold_transient(), and nothing was asked of the model since.
  void return_transient(std::int64_t booked) { allocated_ -= booked; }
  // Whether a cached block serves a request of `bytes` (> 0): whether hold_transient() would
  // book it, asked without booking anything.
  bool serves_from_cache(std::int64_t bytes) const;
  // The largest cached block of each pool (0: none). Where max_split_size is unset, a cached
  // block serves a request exactly where its rounded size is at most its pool's largest
  // (fit_of: best fit refuses nothing then), so a look taken before a request tells, later,
  // whether any other size would have been served there (reserved_replay.h, variants_alike).
  struct CacheLook {
    std::int64_t largest_small = 0, largest_large = 0;
    // serves_from_cache() at the look's moment. REQUIRES: the settings split every block.
    bool serves(std::int64_t bytes) const {
      const std::int64_t size = round_size(bytes);
      return size <= (size <= kSmallSize ? largest_small : largest_large);
    }
  };
  CacheLook look() const {
    return {small_free_.size() > 0 ? small_free_.largest().size : 0, large_free_.size() > 0 ? large_free_.largest().size : 0};
  }
  // What torch.cuda.empty_cache() and rule 6 do: releases every cached segment (or, with
  // expandable segments, every whole page) that holds no block in use.
  void release_cached();

  // The bytes it may reserve from now on (other streams' pools hold the rest of the device).
  void set_capacity(std::int64_t capacity) { settings_.capacity = capacity; }

  std::int64_t allocated() const { return allocated_; }
  std::int64_t reserved() const { return reserved_; }
  std::int64_t peak_allocated() const { return peak_allocated_; }
  std::int64_t peak_reserved() const { return peak_reserved_; }
  // Requests that failed even after releasing the cache (rule 6 or 8), booked anyway.
  int failures() const { return failures_; }
  // Size of the block a live handle holds (its rounded request, or more when unsplit).
  std::int64_t block_size(int handle) const;
  int segments() const { return static_cast<int>(segment_sizes_.size()) - released_segments_; }
  int handles() const { return static_cast<int>(live_.size()); }  // handed out so far

  // The state later requests depend on, appended to `out` as numbers: the counters, then every
  // block in address order (address, size, segment, flags, and for a block in use what
  // holder(handle) says of its holder; -1 when free). Two moments whose descriptions are equal
  // answer every later sequence of requests alike, up to who holds which block
  // (reserved_replay.h skips repeated layers with it). The peaks are not part of it.
  template <typename Holder>
  void describe(std::vector<std::int64_t>& out, const Holder& holder) const {
    out.insert(out.end(), {allocated_, reserved_, next_address_, static_cast<std::int64_t>(segment_sizes_.size()),
                           released_segments_, failures_});
    for (int b = first_; b >= 0; b = block(b).next) {
      const Block& k = block(b);
      out.insert(out.end(), {k.address, k.size, k.segment, (k.small ? 1 : 0) | (k.free ? 2 : 0) | (k.mapped ? 4 : 0),
                             k.free ? -1 : holder(k.handle)});
    }
  }
  static constexpr int kCounters = 6, kBlockFields = 5;  // describe()'s layout
  // Calls visit(handle) for every block in use, in address order.
  template <typename Visit>
  void for_each_held(const Visit& visit) const {
    for (int b = first_; b >= 0; b = block(b).next)
      if (!block(b).free) visit(block(b).handle);
  }
  // The largest cached block of the large pool no request holds (0 if none): the largest
  // request the cache can serve without a new segment.
  std::int64_t largest_free_block() const { return large_free_.empty() ? 0 : large_free_.largest().size; }

  static std::int64_t round_size(std::int64_t bytes);
  static std::int64_t segment_size(std::int64_t rounded);

 private:
  // A block of a segment (or of an expandable pool's range), linked to its neighbours in
  // address order: merging needs only them, and segments are laid out one after another.
  struct Block {
    std::int64_t address = 0;
    std::int64_t size = 0;
    int segment = 0;  // expandable: the pool's one segment
    int prev = -1, next = -1;
    int handle = -1;  // the request holding it; -1 when free
    bool small = false;
    bool free = true;
    bool mapped = true;  // expandable segments only: an unmapped range is never a pool's free block
    int whole_at = -1;   // its place in whole_free_ while whole_free_segment() holds, else -1
  };
  FreeBlocks& pool(bool small) { return small ? small_free_ : large_free_; }
  const FreeBlocks& pool(bool small) const { return small ? small_free_ : large_free_; }
  Block& block(int b) { return blocks_[static_cast<std::size_t>(b)]; }
  const Block& block(int b) const { return blocks_[static_cast<std::size_t>(b)]; }

  // A new block linked after `prev` (-1: first of all); returns its index.
  int add_block(const Block& b, int prev);
  void remove_block(int b);
  // Takes the free block `b` for a request of `size` (rules 3-4).
  void take(int b, std::int64_t size, bool small);
  // Rule 3 with rule 9: the free block a request takes (out of its pool), or -1.
  int best_fit(std::int64_t size, bool small);
  // Rule 3 with rule 9 without the taking: where that block lies in its pool's list, if any.
  std::optional<std::size_t> fit_of(std::int64_t size, bool small) const;
  // Rule 4 (with rule 9): whether a request of `size` splits the block it takes, `remaining`
  // bytes past it.
  bool splits(std::int64_t size, std::int64_t remaining, bool small) const;
  // Rule 9's first release: true if it freed a block.
  bool release_oversize(std::int64_t size);
  void release_segment(int b);
  // Rule 2 and 6: a new segment's free block, or -1 when none could be had within capacity.
  int new_segment(std::int64_t size, bool small);
  // Rule 7-8: a free mapped block of at least `size`, or -1.
  int map_expandable(std::int64_t size, bool small);
  // Rule 8 for one free mapped block: its whole pages unmapped.
  void unmap_pages(int b);
  bool grow_reserved(std::int64_t bytes);  // false if over capacity
  void book_failed(std::int64_t bytes);    // a request that failed, reserved anyway
  void insert_free(int b);
  // Merges the free block `b` with its neighbours of the same segment and mapping; returns
  // the merged block.
  int merge(int b);
  bool joins(int b, int other) const;
  // Whether `b` is a free block that is a whole segment (what release_cached releases).
  bool whole_free_segment(int b) const {
    const Block& k = block(b);
    return !settings_.expandable_segments && k.free && k.size == segment_sizes_[static_cast<std::size_t>(k.segment)];
  }

  AllocatorSettings settings_;
  std::vector<Block> blocks_;  // by index; spare_ lists the indices of removed ones
  std::vector<int> spare_;
  int first_ = -1, last_ = -1;  // the lowest and highest addresses
  FreeBlocks small_free_, large_free_;
  std::vector<std::int64_t> segment_sizes_;
  int released_segments_ = 0;
  // The blocks for which whole_free_segment() holds, in no order: what release_cached releases,
  // found without walking every block (a replay past the capacity fails request after request).
  std::vector<int> whole_free_;
  void note_whole_free(int b);
  void note_not_whole_free(int b);
  std::vector<int> live_;  // handle -> block, -1 once freed
  std::int64_t next_address_ = 0;
  int failures_ = 0;
  std::int64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
};

inline std::int64_t CachingAllocatorModel::round_size(std::int64_t bytes) {
  if (bytes < kMinBlock) return kMinBlock;
  return (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
}

inline std::int64_t allocated_bytes(Backend backend, std::int64_t requested) {
  if (backend == Backend::Cpu || requested <= 0) return requested < 0 ? 0 : requested;
  return CachingAllocatorModel::round_size(requested);
}

}  // namespace longctx
