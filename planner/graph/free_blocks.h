#pragma once
// A pool's free blocks in best-fit order (allocator_model.h, rule 3): by size, then by
// address. A sorted array rather than a tree: a pool holds tens to hundreds of free blocks,
// and the caching-allocator replay asks for the best fit at every request of every step it
// replays, where a balanced tree's allocation per insertion and pointer chasing cost more
// than moving a few hundred bytes.
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

  bool empty() const { return entries_.empty(); }
  std::size_t size() const { return entries_.size(); }
  const Entry& largest() const { return entries_.back(); }  // REQUIRES: !empty()
  const Entry& at(std::size_t i) const { return entries_[i]; }

  void insert(const Entry& e) { entries_.insert(position(e.size, e.address), e); }
  // Removes the entry of (size, address) if there is one (an unmapped or just-made block has
  // none).
  void erase(std::int64_t size, std::int64_t address) {
    const auto it = position(size, address);
    if (it != entries_.end() && it->size == size && it->address == address) entries_.erase(it);
  }
  void erase_at(std::size_t i) { entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i)); }
  // The first entry of at least `size` bytes (the lowest address among equals): its index, or
  // size() if none.
  std::size_t lower_bound(std::int64_t size) const {
    return static_cast<std::size_t>(position(size, INT64_MIN) - entries_.begin());
  }

 private:
  std::vector<Entry>::iterator position(std::int64_t size, std::int64_t address) {
    return std::lower_bound(entries_.begin(), entries_.end(), Entry{size, address, -1}, before);
  }
  std::vector<Entry>::const_iterator position(std::int64_t size, std::int64_t address) const {
    return std::lower_bound(entries_.begin(), entries_.end(), Entry{size, address, -1}, before);
  }
  static bool before(const Entry& a, const Entry& b) {
    return a.size != b.size ? a.size < b.size : a.address < b.address;
  }

  std::vector<Entry> entries_;
};

}  // namespace longctx
