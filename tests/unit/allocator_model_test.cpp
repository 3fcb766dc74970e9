// The allocator model's claims (allocator_model.h, rules 1-5), each held against a sequence
// of requests whose allocated and reserved bytes are worked out by hand in the comments.
#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "planner/graph/allocator_model.h"
#include "planner/graph/free_blocks.h"

namespace longctx {
namespace {

constexpr std::int64_t KiB = 1024, MiB = 1024 * 1024;

TEST(AllocatorModel, CpuBooksExactlyWhatIsRequested) {
  EXPECT_EQ(allocated_bytes(Backend::Cpu, 1), 1);
  EXPECT_EQ(allocated_bytes(Backend::Cpu, 1000), 1000);
  EXPECT_EQ(allocated_bytes(Backend::Cpu, 0), 0);
}

TEST(AllocatorModel, CudaRoundsEveryRequestUpToA512ByteMultiple) {
  // Rule 1: ceil(n / 512) * 512, at least 512.
  EXPECT_EQ(allocated_bytes(Backend::Cuda, 1), 512);
  EXPECT_EQ(allocated_bytes(Backend::Cuda, 512), 512);
  EXPECT_EQ(allocated_bytes(Backend::Cuda, 513), 1024);
  EXPECT_EQ(allocated_bytes(Backend::Cuda, 4000), 4096);  // 4000 / 512 = 7.8 -> 8 x 512
  EXPECT_EQ(allocated_bytes(Backend::Cuda, 0), 0);
  // The simulation's figure is the model's block for a fresh request.
  CachingAllocatorModel m;
  const int a = m.allocate(4000);
  EXPECT_EQ(m.block_size(a), 4096);
  EXPECT_EQ(m.allocated(), 4096);
}

TEST(AllocatorModel, SmallRequestsShareTwoMiBSegments) {
  CachingAllocatorModel m;
  // 1 byte -> a 512-byte block split off a new 2 MiB small segment (rule 2; remainder
  // 2 MiB - 512 >= 512, so split: rule 4).
  const int a = m.allocate(1);
  EXPECT_EQ(m.allocated(), 512);
  EXPECT_EQ(m.reserved(), 2 * MiB);
  // 1000 bytes -> 1024 from the same segment's free remainder: nothing new reserved.
  m.allocate(1000);
  EXPECT_EQ(m.allocated(), 512 + 1024);
  EXPECT_EQ(m.reserved(), 2 * MiB);
  // Exactly 1 MiB is still small (rule 2: up to 1 MiB): 1 MiB more from the same segment,
  // whose free remainder is 2 MiB - 512 - 1024 = 2095616 >= 1048576.
  m.allocate(MiB);
  EXPECT_EQ(m.allocated(), 512 + 1024 + MiB);
  EXPECT_EQ(m.reserved(), 2 * MiB);
  EXPECT_EQ(m.segments(), 1);
  // Freed and asked again, the block is reused (rule 5 then 3).
  m.free(a);
  m.allocate(300);
  EXPECT_EQ(m.allocated(), 512 + 1024 + MiB);
  EXPECT_EQ(m.reserved(), 2 * MiB);
}

TEST(AllocatorModel, AFullSmallSegmentOpensAnother) {
  CachingAllocatorModel m;
  // 2048 blocks of 1 KiB fill 2 MiB exactly: the last split leaves 1 KiB, then 0 (no split).
  for (int i = 0; i < 2048; ++i) m.allocate(KiB);
  EXPECT_EQ(m.allocated(), 2 * MiB);
  EXPECT_EQ(m.reserved(), 2 * MiB);
  // The 2049th needs a second segment.
  m.allocate(KiB);
  EXPECT_EQ(m.allocated(), 2 * MiB + KiB);
  EXPECT_EQ(m.reserved(), 4 * MiB);
  EXPECT_EQ(m.segments(), 2);
}

TEST(AllocatorModel, LargeRequestsUnderTenMiBGetTwentyMiBSegmentsAndSplitThem) {
  CachingAllocatorModel m;
  // 4 MiB: large pool (> 1 MiB), under 10 MiB -> a 20 MiB segment; remainder 16 MiB > 1 MiB
  // is split off (rule 4).
  const int a = m.allocate(4 * MiB);
  EXPECT_EQ(m.block_size(a), 4 * MiB);
  EXPECT_EQ(m.allocated(), 4 * MiB);
  EXPECT_EQ(m.reserved(), 20 * MiB);
  // 16 MiB fits the free 16 MiB block exactly (rule 3): no new segment.
  m.allocate(16 * MiB);
  EXPECT_EQ(m.allocated(), 20 * MiB);
  EXPECT_EQ(m.reserved(), 20 * MiB);
  EXPECT_EQ(m.segments(), 1);
}

TEST(AllocatorModel, AnUnsplitRemainderUnderOneMiBCountsAsAllocated) {
  CachingAllocatorModel m;
  m.allocate(4 * MiB);  // 20 MiB segment: 4 MiB used, 16 MiB free
  // 15.5 MiB takes the 16 MiB block; the remainder, 0.5 MiB, is not more than 1 MiB, so it is
  // not split and the whole 16 MiB counts (rule 4): allocated 4 + 16 = 20 MiB for 19.5 asked.
  const int b = m.allocate(15 * MiB + 512 * KiB);
  EXPECT_EQ(m.block_size(b), 16 * MiB);
  EXPECT_EQ(m.allocated(), 20 * MiB);
  EXPECT_EQ(allocated_bytes(Backend::Cuda, 15 * MiB + 512 * KiB), 15 * MiB + 512 * KiB);  // the simulation's figure
  // A remainder of exactly 1 MiB is not split either: 11 MiB (>= 10 MiB) reserves a segment
  // of 11 MiB rounded up to 2 MiB, 12 MiB, and keeps all of it.
  CachingAllocatorModel n;
  const int c = n.allocate(11 * MiB);
  EXPECT_EQ(n.reserved(), 12 * MiB);
  EXPECT_EQ(n.block_size(c), 12 * MiB);
  EXPECT_EQ(n.allocated(), 12 * MiB);
  // One byte over 10 MiB: rounded to 10 MiB + 512, segment 12 MiB, remainder 2 MiB - 512
  // > 1 MiB: split, and only the rounded request counts.
  CachingAllocatorModel k;
  const int d = k.allocate(10 * MiB + 1);
  EXPECT_EQ(k.reserved(), 12 * MiB);
  EXPECT_EQ(k.block_size(d), 10 * MiB + 512);
  EXPECT_EQ(k.allocated(), 10 * MiB + 512);
}

TEST(AllocatorModel, RequestsOfTenMiBAndMoreGetSegmentsRoundedToTwoMiB) {
  CachingAllocatorModel m;
  m.allocate(10 * MiB);  // exactly 10 MiB: not under 10 MiB, so a segment of 10 MiB itself
  EXPECT_EQ(m.reserved(), 10 * MiB);
  m.allocate(33 * MiB);  // 33 MiB rounded up to a multiple of 2 MiB: 34 MiB
  EXPECT_EQ(m.reserved(), 44 * MiB);
  EXPECT_EQ(m.allocated(), 10 * MiB + 34 * MiB);  // remainder 1 MiB: not split
}

TEST(AllocatorModel, FreedNeighboursMergeAndTheBestFitWins) {
  CachingAllocatorModel m;
  // Two 4 MiB blocks from one 20 MiB segment: [a 4][b 4][free 12].
  const int a = m.allocate(4 * MiB);
  const int b = m.allocate(4 * MiB);
  EXPECT_EQ(m.reserved(), 20 * MiB);
  // Freed, a and b merge with each other and with the free 12 MiB: one free 20 MiB block
  // (rule 5), so 18 MiB fits without a new segment (remainder 2 MiB > 1 MiB: split).
  m.free(a);
  m.free(b);
  EXPECT_EQ(m.allocated(), 0);
  EXPECT_EQ(m.reserved(), 20 * MiB);  // segments are never given back
  const int c = m.allocate(18 * MiB);
  EXPECT_EQ(m.block_size(c), 18 * MiB);
  EXPECT_EQ(m.reserved(), 20 * MiB);
  EXPECT_EQ(m.segments(), 1);

  // Best fit: free blocks of 6 MiB and 3 MiB in two 20 MiB segments; 2.5 MiB takes the
  // 3 MiB one (the smallest that fits), whose 0.5 MiB remainder stays in the block.
  CachingAllocatorModel n;
  const int s1 = n.allocate(9 * MiB);  // segment 1: [9][free 11]
  n.allocate(5 * MiB);                 // best fit 11: [9][5][free 6]
  n.allocate(9 * MiB);                 // 6 is too small: segment 2, [9][free 11]
  n.allocate(8 * MiB);                 // best fit among 6 and 11 is 11: [9][8][free 3]
  EXPECT_EQ(n.reserved(), 40 * MiB);
  EXPECT_EQ(n.allocated(), 31 * MiB);
  const int fit = n.allocate(2 * MiB + 512 * KiB);
  EXPECT_EQ(n.block_size(fit), 3 * MiB);
  EXPECT_EQ(n.allocated(), 34 * MiB);
  // Then 5 MiB goes to the 6 MiB block (remainder 1 MiB, not split): no third segment.
  n.allocate(5 * MiB);
  EXPECT_EQ(n.allocated(), 40 * MiB);
  EXPECT_EQ(n.reserved(), 40 * MiB);
  EXPECT_EQ(n.segments(), 2);
  n.free(s1);
  EXPECT_EQ(n.allocated(), 31 * MiB);
  // The freed 9 MiB has no free neighbour (the 5 MiB block after it is in use): a 9 MiB
  // request reuses it.
  n.allocate(9 * MiB);
  EXPECT_EQ(n.reserved(), 40 * MiB);
}

TEST(AllocatorModel, PoolsDoNotShareBlocks) {
  CachingAllocatorModel m;
  // A free large block does not serve a small request: 20 MiB free in the large pool, and a
  // 1 KiB request still reserves a 2 MiB small segment.
  m.free(m.allocate(4 * MiB));
  EXPECT_EQ(m.reserved(), 20 * MiB);
  m.allocate(KiB);
  EXPECT_EQ(m.reserved(), 22 * MiB);
  // Nor a free small block a large one: 1 MiB + 512 is large, and the small segment's free
  // 2 MiB - 1 KiB would fit it; it takes the free 20 MiB large block instead.
  const int big = m.allocate(MiB + 512);
  EXPECT_EQ(m.block_size(big), MiB + 512);
  EXPECT_EQ(m.reserved(), 22 * MiB);
  EXPECT_EQ(m.peak_reserved(), 22 * MiB);
  EXPECT_EQ(m.peak_allocated(), 4 * MiB);
}

TEST(AllocatorModel, OutOfMemoryReleasesWholeFreeSegmentsAndAsksAgain) {
  // Rule 6 with 40 MiB of capacity.
  CachingAllocatorModel m({.expandable_segments = false, .capacity = 40 * MiB});
  // 12 MiB >= 10 MiB: a segment of exactly 12 MiB (rounded to 2 MiB), twice.
  const int a = m.allocate(12 * MiB);
  m.allocate(12 * MiB);
  EXPECT_EQ(m.reserved(), 24 * MiB);
  m.free(a);  // the first segment is now wholly free, and stays cached
  EXPECT_EQ(m.reserved(), 24 * MiB);
  // 20 MiB fits no free block (12 MiB); a new 20 MiB segment would make 44 > 40: the free
  // segment is released (24 - 12 = 12), and 12 + 20 = 32 fits.
  m.allocate(20 * MiB);
  EXPECT_EQ(m.reserved(), 32 * MiB);
  EXPECT_EQ(m.segments(), 2);
  EXPECT_EQ(m.failures(), 0);
  EXPECT_EQ(m.peak_reserved(), 32 * MiB);
  // 10 MiB more: no free block, 32 + 10 > 40, and nothing to release: the request fails.
  // It is booked anyway so the replay can go on and report by how much.
  m.allocate(10 * MiB);
  EXPECT_EQ(m.failures(), 1);
  EXPECT_EQ(m.reserved(), 42 * MiB);
}

TEST(AllocatorModel, ReleasingTheCacheKeepsSplitSegments) {
  CachingAllocatorModel m;
  // A 4 MiB block split off a 20 MiB segment: freed, the segment is whole and free again.
  m.free(m.allocate(4 * MiB));
  // Two 4 MiB blocks, one freed: the segment holds a block in use and is not released.
  const int b = m.allocate(4 * MiB);
  const int c = m.allocate(4 * MiB);
  m.free(b);
  m.release_cached();
  EXPECT_EQ(m.reserved(), 20 * MiB);
  m.free(c);
  m.release_cached();
  EXPECT_EQ(m.reserved(), 0);
  EXPECT_EQ(m.segments(), 0);
}

TEST(AllocatorModel, ExpandableSegmentsMapPagesOntoTheFreeTail) {
  // Rule 7: the large pool maps 20 MiB pages.
  CachingAllocatorModel e({.expandable_segments = true});
  // 4 MiB: one page mapped; the 16 MiB left is split off (16 > 1 MiB).
  e.allocate(4 * MiB);
  EXPECT_EQ(e.reserved(), 20 * MiB);
  // 30 MiB fits no free block; the free 16 MiB tail is extended by the shortfall, 14 MiB,
  // rounded up to one page: 40 MiB mapped, the request takes 30 of the 36 MiB block.
  const int b = e.allocate(30 * MiB);
  EXPECT_EQ(e.block_size(b), 30 * MiB);
  EXPECT_EQ(e.reserved(), 40 * MiB);
  EXPECT_EQ(e.allocated(), 34 * MiB);
  // Without expandable segments the same two requests reserve a 20 MiB and a 30 MiB segment.
  CachingAllocatorModel d;
  d.allocate(4 * MiB);
  d.allocate(30 * MiB);
  EXPECT_EQ(d.reserved(), 50 * MiB);
}

TEST(AllocatorModel, ExpandableSegmentsUnmapFreePagesWhenOutOfMemory) {
  // Rule 8 with 60 MiB of capacity; the same requests fail without expandable segments.
  for (bool expandable : {true, false}) {
    CachingAllocatorModel m({.expandable_segments = expandable, .capacity = 60 * MiB});
    const int a = m.allocate(40 * MiB);  // expandable: pages [0, 40) mapped; else a 40 MiB segment
    m.allocate(4 * MiB);                 // expandable: one page [40, 60), block [40, 44); else a 20 MiB segment
    EXPECT_EQ(m.reserved(), 60 * MiB);
    m.free(a);
    // 50 MiB: no free block fits (40 and 16 MiB). Expandable: extending the free tail
    // [44, 60) by 34 MiB needs 40 MiB more (100 > 60); the two whole free pages [0, 40) are
    // unmapped (reserved 20), then 20 + 40 = 60 fits. Default: a 50 MiB segment needs 110;
    // releasing the wholly free 40 MiB segment leaves 20 + 50 = 70 > 60: it fails.
    m.allocate(50 * MiB);
    EXPECT_EQ(m.reserved(), expandable ? 60 * MiB : 70 * MiB) << expandable;
    EXPECT_EQ(m.failures(), expandable ? 0 : 1) << expandable;
    EXPECT_EQ(m.allocated(), 54 * MiB) << expandable;
  }
}

TEST(AllocatorModel, MaxSplitSizeKeepsOversizeBlocksWholeAndReleasesThemFirst) {
  // Rule 9 with max_split_size_mb:32 and 100 MiB of capacity.
  CachingAllocatorModel m({.expandable_segments = false, .capacity = 100 * MiB, .max_split_size = 32 * MiB});
  m.free(m.allocate(40 * MiB));  // a 40 MiB segment, cached: oversize (>= 32 MiB)
  // 4 MiB is under max_split_size and may not take the oversize block: a 20 MiB segment.
  const int small = m.allocate(4 * MiB);
  EXPECT_EQ(m.reserved(), 60 * MiB);
  // 36 MiB may take it (40 < 36 + 20), and being oversize gets the whole block unsplit.
  const int big = m.allocate(36 * MiB);
  EXPECT_EQ(m.block_size(big), 40 * MiB);
  EXPECT_EQ(m.allocated(), 44 * MiB);
  EXPECT_EQ(m.reserved(), 60 * MiB);
  m.free(big);
  // 45 MiB: no free block fits (40, and the 16 MiB left of the small segment); a 46 MiB
  // segment would make 106 > 100. The oversize 40 MiB block is released first (60 - 40 =
  // 20), and 20 + 46 = 66 fits; the small segment, in use, stays.
  m.allocate(45 * MiB);
  EXPECT_EQ(m.reserved(), 66 * MiB);
  EXPECT_EQ(m.failures(), 0);
  m.free(small);
  // Without max_split_size the 36 MiB request would have split the 40 MiB block.
  CachingAllocatorModel d;
  d.free(d.allocate(40 * MiB));
  EXPECT_EQ(d.block_size(d.allocate(36 * MiB)), 36 * MiB);
}

// hold_transient: a request returned before anything else is asked of the model leaves it as
// allocate() then free() leave it, and books what allocate() would hold; serves_from_cache and
// a look at the cache (CachingAllocatorModel::look) say beforehand whether it will. Two models run the
// same drawn requests and returns (drawn afresh each run, under each allocator setting, with
// a capacity that makes requests fail and release the cache), one taking every request its
// next step returns as a transient where hold_transient serves it; their states, described
// block by block with each holder named by its request, stay equal throughout.
TEST(AllocatorModel, ATransientRequestLeavesTheModelAsTakingAndReturningIt) {
  // A fresh seed, or LONGCTX_PROPERTIES_SEED's, to replay a printed one.
  const char* given = std::getenv("LONGCTX_PROPERTIES_SEED");
  const std::uint64_t seed = given != nullptr && *given ? std::strtoull(given, nullptr, 10) : std::random_device{}();
  std::mt19937_64 draw(seed);
  int served = 0, not_served = 0;
  for (int setting = 0; setting < 3; ++setting) {
    AllocatorSettings settings;
    settings.capacity = 600 * MiB;
    if (setting == 1) settings.expandable_segments = true;
    if (setting == 2) settings.max_split_size = 40 * MiB;
    CachingAllocatorModel plain(settings), quick(settings);
    std::vector<int> request_of_plain, request_of_quick;  // handle -> the request that made it
    std::vector<std::pair<int, int>> held;                 // (plain's handle, quick's handle)
    auto describe = [](const CachingAllocatorModel& m, const std::vector<int>& request_of) {
      std::vector<std::int64_t> words;
      m.describe(words, [&](int handle) { return std::int64_t{request_of[static_cast<std::size_t>(handle)]}; });
      return words;
    };
    for (int step = 0; step < 3000; ++step) {
      const std::string what = fmt::format("seed {}, setting {}, step {}", seed, setting, step);
      // Sizes from a few hundred bytes (small pool) to tens of MiB, some equal to earlier ones.
      const std::int64_t bytes = std::int64_t{1} << (9 + draw() % 17);
      const auto times = static_cast<std::int64_t>(draw() % 3);  // one draw a statement: a seed replays alike
      const std::int64_t request = bytes + times * static_cast<std::int64_t>(draw() % static_cast<std::uint64_t>(bytes));
      const int kind = static_cast<int>(draw() % 4);
      if (kind == 0 && !held.empty()) {  // a return of something held
        const std::size_t k = draw() % held.size();
        plain.free(held[k].first);
        quick.free(held[k].second);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
      } else if (kind == 1) {  // a transient
        const std::int64_t before = quick.allocated();
        // A look at the cache tells, where best fit refuses nothing, what serves_from_cache and
        // hold_transient find.
        const bool serves = quick.serves_from_cache(request);
        if (settings.splits_every_block()) EXPECT_EQ(quick.look().serves(request), serves) << what;
        const std::int64_t booked = quick.hold_transient(request);
        EXPECT_EQ(booked > 0, serves) << what;
        const int h = plain.allocate(request);
        request_of_plain.resize(static_cast<std::size_t>(h) + 1, step);
        if (booked > 0) {
          ++served;
          EXPECT_EQ(quick.allocated(), before + booked) << what;
          EXPECT_EQ(plain.block_size(h), booked) << what;
          quick.return_transient(booked);
        } else {
          ++not_served;
          const int q = quick.allocate(request);
          request_of_quick.resize(static_cast<std::size_t>(q) + 1, step);
          quick.free(q);
        }
        plain.free(h);
      } else {  // a request held on
        const int h = plain.allocate(request), q = quick.allocate(request);
        request_of_plain.resize(static_cast<std::size_t>(h) + 1, step);
        request_of_quick.resize(static_cast<std::size_t>(q) + 1, step);
        held.emplace_back(h, q);
      }
      ASSERT_EQ(describe(quick, request_of_quick), describe(plain, request_of_plain)) << what;
      ASSERT_EQ(quick.allocated(), plain.allocated()) << what;
      ASSERT_EQ(quick.peak_reserved(), plain.peak_reserved()) << what;
      ASSERT_EQ(quick.peak_allocated(), plain.peak_allocated()) << what;
    }
  }
  // The draws exercise both branches.
  EXPECT_GT(served, 100) << "seed " << seed;
  EXPECT_GT(not_served, 10) << "seed " << seed;
}

// The free-block list against an ordered set, through thousands of entries (past the size at
// which it splits into chunks) and back to none: the same order, best fit and largest after
// every change.
TEST(FreeBlocks, KeepsBestFitOrderThroughThousandsOfEntries) {
  auto less = [](const FreeBlocks::Entry& a, const FreeBlocks::Entry& b) {
    return a.size != b.size ? a.size < b.size : a.address < b.address;
  };
  std::set<FreeBlocks::Entry, decltype(less)> want(less);
  FreeBlocks blocks;
  std::mt19937_64 draw(20261129);
  auto check = [&] {
    ASSERT_EQ(blocks.size(), want.size());
    if (want.empty()) return;
    EXPECT_EQ(blocks.largest().address, want.rbegin()->address);
    const std::int64_t size = static_cast<std::int64_t>(draw() % 40) * 512;
    const auto fit = want.lower_bound({size, INT64_MIN, -1});
    const std::size_t at = blocks.lower_bound(size);
    ASSERT_EQ(at, static_cast<std::size_t>(std::distance(want.begin(), fit)));
    if (fit != want.end()) EXPECT_EQ(blocks.at(at).block, fit->block);
  };
  int next = 0;
  for (const int target : {3000, 200, 2500, 0}) {
    while (static_cast<int>(want.size()) != target) {
      const bool grow = static_cast<int>(want.size()) < target ? draw() % 4 != 0 : draw() % 4 == 0;
      if (grow) {
        // Sizes repeat (40 of them), addresses do not: ties are broken by address.
        const FreeBlocks::Entry e{static_cast<std::int64_t>(draw() % 40) * 512, static_cast<std::int64_t>(next) * 4096,
                                  next};
        ++next;
        want.insert(e);
        blocks.insert(e);
      } else if (!want.empty()) {
        const std::size_t i = draw() % want.size();
        auto it = std::next(want.begin(), static_cast<std::ptrdiff_t>(i));
        ASSERT_EQ(blocks.at(i).block, it->block);
        if (draw() % 2) blocks.erase_at(i);
        else blocks.erase(it->size, it->address);
        blocks.erase(it->size, it->address);  // a second time: no entry, nothing removed
        want.erase(it);
      }
      if (want.size() % 97 == 0) check();
    }
    check();
  }
  std::size_t i = 0;
  for (const auto& e : want) EXPECT_EQ(blocks.at(i++).block, e.block);
}

}  // namespace
}  // namespace longctx
