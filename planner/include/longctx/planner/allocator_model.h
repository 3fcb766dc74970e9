#pragma once
// What a backend's allocator does with requests.
//
// cpu: the runtime's counting allocator books exactly n bytes for a request of n.
//
// cuda: PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp), with its default
// settings: one stream, no max_split_size, no expandable segments, no power-of-two rounding.
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
//     pool. Segments are never given back (no empty_cache, and cudaMalloc never fails).
// memory_allocated() is the sum of the sizes of the blocks in use; memory_reserved() the sum
// of the segments.
//
// The step simulation predicts allocated bytes on CUDA as each request rounded (rule 1):
// exact when blocks are split or freshly reserved, lower by the unsplit remainder (under
// 1 MiB each) when a large request reuses a free block that is up to 1 MiB too large.
// CachingAllocatorModel replays rules 1-5 over a sequence of requests; it is not part of the
// step simulation.
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "longctx/planner/hardware.h"

namespace longctx {

// Rule 1 on CUDA; the request itself on the CPU.
std::int64_t allocated_bytes(Backend backend, std::int64_t requested);

class CachingAllocatorModel {
 public:
  static constexpr std::int64_t kMinBlock = 512;                // rule 1
  static constexpr std::int64_t kSmallSize = 1 << 20;           // largest small request
  static constexpr std::int64_t kSmallSegment = 2 << 20;        // small pool segments
  static constexpr std::int64_t kLargeSegment = 20 << 20;       // for requests under kMinLargeAlloc
  static constexpr std::int64_t kMinLargeAlloc = 10 << 20;
  static constexpr std::int64_t kRoundLarge = 2 << 20;          // larger segments' rounding

  // A request of `bytes` (> 0). Returns the handle free() takes.
  int allocate(std::int64_t bytes);
  // REQUIRES: `handle` came from allocate() and was not freed since.
  void free(int handle);

  std::int64_t allocated() const { return allocated_; }
  std::int64_t reserved() const { return reserved_; }
  std::int64_t peak_allocated() const { return peak_allocated_; }
  std::int64_t peak_reserved() const { return peak_reserved_; }
  // Size of the block a live handle holds (its rounded request, or more when unsplit).
  std::int64_t block_size(int handle) const;
  int segments() const { return static_cast<int>(segment_sizes_.size()); }

  static std::int64_t round_size(std::int64_t bytes);
  static std::int64_t segment_size(std::int64_t rounded);

 private:
  struct Block {
    std::int64_t size = 0;
    int segment = 0;
    bool small = false;
    bool free = true;
  };
  // Free blocks of a pool, best fit first: (size, address).
  using FreeSet = std::set<std::pair<std::int64_t, std::int64_t>>;
  FreeSet& pool(bool small) { return small ? small_free_ : large_free_; }

  std::map<std::int64_t, Block> blocks_;  // by address; segments are laid out one after another
  FreeSet small_free_, large_free_;
  std::vector<std::int64_t> segment_sizes_;
  std::map<int, std::int64_t> live_;      // handle -> address
  std::int64_t next_address_ = 0;
  int next_handle_ = 0;
  std::int64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
};

}  // namespace longctx
