#pragma once
// A pool's free blocks in best-fit order (allocator_model.h, rule 3): by size, then by
// address. Sorted arrays rather than a tree: a pool usually holds tens to hundreds of free
// blocks, and the caching-allocator replay asks for the best fit at every request of every
// step it replays, where a balanced tree's allocation per insertion and pointer chasing cost
// more than moving a few hundred bytes. A deep model's step (hundreds of layers, none
// checkpointed) leaves thousands, where moving a whole array at every insertion made a replay
// quadratic in the layers (a 629-layer plan: a quarter of its CPU time in memmove); so the
// entries live in consecutive chunks of at most 2 * kChunk, and an insertion moves one chunk.
// With up to 2 * kChunk entries there is one chunk: a sorted array, as before. (A plan far over
// its budget, Llama-3.1-70B on 8 GPUs at 64M tokens, holds thousands in every replay: chunks of
// 512 spent a quarter of its CPU time moving entries; of 128, 8% less time in all, where a
// query of the usual sizes moves within the noise.)
#include <algorithm>
#include <cstdint>
#include <vector>

namespace longctx {

class FreeBlocks {
 public:
  struct Entry {
    std::int64_t size = 0;
    std::int64_t address = 0;
    int block = -1;  // the allocator's index of the block
  };

  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  const Entry& largest() const { return chunks_.back().back(); }  // REQUIRES: !empty()
  // The i-th entry in best-fit order. REQUIRES: i < size().
  const Entry& at(std::size_t i) const {
    const auto [c, offset] = locate(i);
    return chunks_[c][offset];
  }

  void insert(const Entry& e) {
    ++size_;
    if (chunks_.empty()) {
      chunks_.push_back({e});
      return;
    }
    // The first chunk whose last entry is not before e, else the last chunk.
    std::size_t c = first_chunk_reaching(e.size, e.address);
    if (c == chunks_.size()) --c;
    std::vector<Entry>& chunk = chunks_[c];
    chunk.insert(std::lower_bound(chunk.begin(), chunk.end(), e, before), e);
    if (chunk.size() > 2 * kChunk) {
      std::vector<Entry> upper(chunk.begin() + kChunk, chunk.end());
      chunk.resize(kChunk);
      chunks_.insert(chunks_.begin() + static_cast<std::ptrdiff_t>(c) + 1, std::move(upper));
    }
  }
  // Removes the entry of (size, address) if there is one (an unmapped or just-made block has
  // none).
  void erase(std::int64_t size, std::int64_t address) {
    const std::size_t c = first_chunk_reaching(size, address);
    if (c == chunks_.size()) return;
    std::vector<Entry>& chunk = chunks_[c];
    const auto it = std::lower_bound(chunk.begin(), chunk.end(), Entry{size, address, -1}, before);
    if (it != chunk.end() && it->size == size && it->address == address) erase_in(c, it);
  }
  // REQUIRES: i < size().
  void erase_at(std::size_t i) {
    const auto [c, offset] = locate(i);
    erase_in(c, chunks_[c].begin() + static_cast<std::ptrdiff_t>(offset));
  }
  // The first entry of at least `size` bytes (the lowest address among equals): its index, or
  // size() if none.
  std::size_t lower_bound(std::int64_t size) const {
    const Entry key{size, INT64_MIN, -1};
    std::size_t before_chunk = 0;
    for (const std::vector<Entry>& chunk : chunks_) {
      if (!before(chunk.back(), key))
        return before_chunk +
               static_cast<std::size_t>(std::lower_bound(chunk.begin(), chunk.end(), key, before) - chunk.begin());
      before_chunk += chunk.size();
    }
    return size_;
  }

 private:
  static constexpr std::size_t kChunk = 128;

  static bool before(const Entry& a, const Entry& b) {
    return a.size != b.size ? a.size < b.size : a.address < b.address;
  }
  // The first chunk whose last entry is not before (size, address); chunks_.size() if none.
  // No chunk is empty.
  std::size_t first_chunk_reaching(std::int64_t size, std::int64_t address) const {
    const Entry key{size, address, -1};
    std::size_t c = 0;
    while (c < chunks_.size() && before(chunks_[c].back(), key)) ++c;
    return c;
  }
  struct Place {
    std::size_t chunk, offset;
  };
  Place locate(std::size_t i) const {
    std::size_t c = 0;
    while (i >= chunks_[c].size()) i -= chunks_[c++].size();
    return {c, i};
  }
  void erase_in(std::size_t c, std::vector<Entry>::iterator it) {
    chunks_[c].erase(it);
    --size_;
    if (chunks_[c].empty()) chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(c));
  }

  std::vector<std::vector<Entry>> chunks_;  // consecutive runs of the order, none empty
  std::size_t size_ = 0;
};

}  // namespace longctx
