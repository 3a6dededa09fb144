// The caching allocator's policy, over host memory with a capacity limit standing in for a device.
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "core/base/error.h"
#include "core/runtime/allocator.h"

namespace oar::runtime {
namespace {

struct FakeDevice {
  size_t capacity;
  size_t used = 0;
  int mallocs = 0, frees = 0;
  std::map<void*, size_t> live;

  RawMemory Raw() {
    return {[this](size_t n) -> void* {
              if (used + n > capacity) Throw(ErrorCode::kResourceExhausted, "fake device: {} bytes left", capacity - used);
              void* p = std::malloc(n);
              live[p] = n;
              used += n;
              ++mallocs;
              return p;
            },
            [this](void* p) {
              used -= live.at(p);
              live.erase(p);
              ++frees;
              std::free(p);
            }};
  }
};

using Block = CachingAllocator::Block;
char* Ptr(Block* b) { return static_cast<char*>(CachingAllocator::BlockData(b)); }

TEST(CachingAllocator, ReusesFreedBlocksWithoutNewDeviceMallocs) {
  FakeDevice dev{64 << 20};
  CachingAllocator a("fake:0", dev.Raw());
  Block* x = a.Malloc(1000);
  ASSERT_NE(x, nullptr);
  a.Free(x);
  for (int i = 0; i < 100; ++i) a.Free(a.Malloc(1000));
  EXPECT_EQ(dev.mallocs, 1);
  EXPECT_EQ(a.stats().num_allocations, 101u);
  EXPECT_EQ(a.stats().allocated_bytes, 0u);
  EXPECT_EQ(a.Malloc(0), nullptr);
}

TEST(CachingAllocator, SplitsSmallSegmentsAndCoalescesOnFree) {
  FakeDevice dev{64 << 20};
  CachingAllocator a("fake:0", dev.Raw());
  Block* x = a.Malloc(512);
  Block* y = a.Malloc(512);
  Block* z = a.Malloc(512);
  char* x_ptr = Ptr(x);
  EXPECT_EQ(dev.mallocs, 1);  // all three come from one 2 MiB segment
  EXPECT_EQ(Ptr(y), Ptr(x) + 512);
  EXPECT_EQ(Ptr(z), Ptr(y) + 512);
  a.Free(y);
  a.Free(x);
  a.Free(z);
  // Coalesced back into one free block: three blocks' worth starts where x did. Without coalescing the
  // best fit would be the segment's tail, which starts after z.
  Block* joined = a.Malloc(3 * 512);
  EXPECT_EQ(Ptr(joined), x_ptr);
  EXPECT_EQ(a.stats().num_device_mallocs, 1u);
  a.Free(joined);
}

TEST(CachingAllocator, BestFitPicksTheSmallestAdequateBlock) {
  FakeDevice dev{64 << 20};
  CachingAllocator a("fake:0", dev.Raw());
  Block* big = a.Malloc(8 << 20);
  Block* small = a.Malloc(4 << 20);
  char* small_ptr = Ptr(small);
  a.Free(big);
  a.Free(small);
  Block* again = a.Malloc(3 << 20);
  EXPECT_EQ(Ptr(again), small_ptr);
  a.Free(again);
}

// A split done in place can leave the free tail smaller than a free block sorted before it; the pool must
// then move it, or best fit would pick the wrong block (or miss it).
TEST(CachingAllocator, BestFitStaysRightWhenASplitTailMovesInThePool) {
  FakeDevice dev{64 << 20};
  CachingAllocator a("fake:0", dev.Raw());
  Block* p = a.Malloc(300 << 10);
  Block* sep = a.Malloc(512);
  Block* f = a.Malloc(512 << 10);
  Block* sep2 = a.Malloc(512);
  char* p_ptr = Ptr(p);
  char* f_ptr = Ptr(f);
  a.Free(p);  // free: 300 KiB, then 512 KiB, then the segment's tail
  a.Free(f);
  Block* g = a.Malloc(400 << 10);  // from the 512 KiB block: 112 KiB stay free, now smaller than 300 KiB
  EXPECT_EQ(Ptr(g), f_ptr);
  Block* h = a.Malloc(100 << 10);  // the 112 KiB remainder is the best fit
  EXPECT_EQ(Ptr(h), f_ptr + (400 << 10));
  Block* k = a.Malloc(200 << 10);  // then the 300 KiB block
  EXPECT_EQ(Ptr(k), p_ptr);
  EXPECT_EQ(dev.mallocs, 1);
  for (Block* b : {sep, sep2, g, h, k}) a.Free(b);
  EXPECT_EQ(a.stats().allocated_bytes, 0u);
  Block* whole = a.Malloc(CachingAllocator::kSmallRequest);  // everything coalesced back: from the start
  EXPECT_EQ(Ptr(whole), p_ptr);
  a.Free(whole);
}

TEST(CachingAllocator, OnExhaustionFreesCacheRetriesThenReportsNumbers) {
  FakeDevice dev{10 << 20};
  CachingAllocator a("fake:0", dev.Raw());
  Block* x = a.Malloc(6 << 20);
  a.Free(x);  // 6 MiB cached
  Block* y = a.Malloc(8 << 20);  // needs the cache returned first
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(a.stats().num_cache_flushes, 1u);
  EXPECT_EQ(dev.frees, 1);
  try {
    a.Malloc(4 << 20);
    FAIL() << "allocation beyond capacity succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    const std::string m = e.what();
    EXPECT_NE(m.find("fake:0"), std::string::npos) << m;
    EXPECT_NE(m.find("requested 4194304 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("8388608 bytes in use"), std::string::npos) << m;
  }
  a.Free(y);
  EXPECT_EQ(a.stats().allocated_bytes, 0u);
}

// The allocator always asked for a 2 MiB segment: a 1 MiB device could not allocate even 4 bytes.
TEST(CachingAllocator, ADeviceSmallerThanASegmentStillAllocates) {
  FakeDevice dev{1 << 20};
  CachingAllocator a("fake:0", dev.Raw());
  Block* x = a.Malloc(4);
  ASSERT_NE(x, nullptr);
  Block* y = a.Malloc(600 << 10);
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(a.stats().allocated_bytes, 512u + (600u << 10));
  EXPECT_LE(dev.used, dev.capacity);
  a.Free(x);
  a.Free(a.Malloc(4));  // served from the cached 512-byte segment
  EXPECT_EQ(dev.mallocs, 2);
  EXPECT_THROW(a.Malloc(600 << 10), Error);  // genuinely too big now
  a.Free(y);
}

TEST(CachingAllocator, FallsBackToASmallSegmentWhenTheBigOneDoesNotFit) {
  FakeDevice dev{(2 << 20) + 4096};
  CachingAllocator a("fake:0", dev.Raw());
  Block* big = a.Malloc((1 << 20) + 512);  // a large request: a 2 MiB segment
  Block* small = a.Malloc(1000);           // no room for another 2 MiB segment; 1 KiB is there
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(a.stats().num_cache_flushes, 1u);
  a.Free(small);
  a.Free(big);
}

TEST(CachingAllocator, TeardownReturnsEverySegment) {
  FakeDevice dev{64 << 20};
  {
    CachingAllocator a("fake:0", dev.Raw());
    a.Malloc(100);
    a.Free(a.Malloc(5 << 20));
  }
  EXPECT_EQ(dev.used, 0u);
  EXPECT_EQ(dev.mallocs, dev.frees);
}

TEST(CachingAllocator, RandomWorkloadKeepsBlocksDisjointAndStatsExact) {
  FakeDevice dev{size_t{1} << 30};
  CachingAllocator a("fake:0", dev.Raw());
  std::srand(7);
  std::vector<std::pair<Block*, size_t>> live;
  size_t expected = 0;
  for (int step = 0; step < 5000; ++step) {
    if (live.empty() || std::rand() % 2 == 0) {
      const size_t n = 1 + static_cast<size_t>(std::rand()) % ((std::rand() % 10 == 0) ? (8 << 20) : 20000);
      Block* b = a.Malloc(n);
      const size_t rounded = (n + 511) / 512 * 512;
      Ptr(b)[0] = static_cast<char>(step);  // the block is writable at both ends
      Ptr(b)[n - 1] = static_cast<char>(step);
      live.push_back({b, rounded});
      expected += rounded;
    } else {
      const size_t i = static_cast<size_t>(std::rand()) % live.size();
      expected -= live[i].second;
      a.Free(live[i].first);
      live.erase(live.begin() + static_cast<long>(i));
    }
  }
  std::set<std::pair<char*, char*>> ranges;
  for (auto [b, n] : live) ranges.insert({Ptr(b), Ptr(b) + n});
  char* end = nullptr;
  for (auto [lo, hi] : ranges) {
    EXPECT_GE(lo, end);  // no overlap
    end = hi;
  }
  EXPECT_GE(a.stats().allocated_bytes, expected);  // large blocks may keep a tail of up to 1 MiB
  for (auto [b, n] : live) a.Free(b);
  EXPECT_EQ(a.stats().allocated_bytes, 0u);
}

// Streams in the allocator's model: work is "queued" and "completed" by the test; an event captures how
// much a stream had queued when it was recorded.
struct FakeStreams {
  struct Event {
    int stream;
    int position;
  };
  std::map<int, int> queued, completed;
  int current = 1;
  std::vector<std::pair<int, int>> waits;  // (waiting stream, stream waited for)
  int live_events = 0;

  static void* S(int id) { return reinterpret_cast<void*>(static_cast<intptr_t>(id)); }
  static int Id(void* s) { return static_cast<int>(reinterpret_cast<intptr_t>(s)); }

  StreamHooks Hooks() {
    return {.current = [this] { return S(current); },
            .record =
                [this](void* s) {
                  ++live_events;
                  return static_cast<void*>(new Event{Id(s), queued[Id(s)]});
                },
            .done = [this](void* e) { auto* ev = static_cast<Event*>(e); return completed[ev->stream] >= ev->position; },
            .wait = [this](void* s, void* e) { waits.push_back({Id(s), static_cast<Event*>(e)->stream}); },
            .destroy =
                [this](void* e) {
                  --live_events;
                  delete static_cast<Event*>(e);
                }};
  }
};

RawMemory WithStreams(FakeDevice& dev, FakeStreams& streams) {
  RawMemory raw = dev.Raw();
  raw.streams = streams.Hooks();
  return raw;
}

// Record-stream semantics: a block that stream 2 still reads when stream 1 frees it is not handed out again
// until stream 2's work queued at the free has completed. Without it, the next allocation of the same size
// gets the same bytes while stream 2 may still be reading them.
TEST(CachingAllocator, ABlockRecordedOnAnotherStreamWaitsForThatStreamsWork) {
  FakeDevice dev{64 << 20};
  FakeStreams streams;
  CachingAllocator a("fake:0", WithStreams(dev, streams));
  Block* x = a.Malloc(4096);
  char* x_ptr = Ptr(x);
  a.RecordStream(x, FakeStreams::S(2));
  streams.queued[2] = 1;  // stream 2 has a kernel reading x queued
  a.Free(x);
  EXPECT_EQ(a.stats().num_deferred_frees, 1u);
  Block* y = a.Malloc(4096);
  EXPECT_NE(Ptr(y), x_ptr) << "the block was reused while stream 2 may still read it";
  EXPECT_EQ(a.stats().allocated_bytes, 2u * 4096);  // x still counts until its event completes
  streams.completed[2] = 1;  // stream 2's kernel finished
  Block* z = a.Malloc(4096);
  EXPECT_EQ(Ptr(z), x_ptr) << "the block is reused once stream 2's work completed";
  EXPECT_TRUE(streams.waits.empty());  // both on stream 1 (x's own stream): stream order suffices
  EXPECT_EQ(streams.live_events, 0);
  a.Free(y);
  a.Free(z);
  EXPECT_EQ(a.stats().allocated_bytes, 0u);
}

TEST(CachingAllocator, ReuseByAnotherStreamWaitsForTheLastUsersWork) {
  FakeDevice dev{64 << 20};
  FakeStreams streams;
  CachingAllocator a("fake:0", WithStreams(dev, streams));
  Block* x = a.Malloc(1000);
  char* x_ptr = Ptr(x);
  a.Free(x);
  a.Free(a.Malloc(1000));  // same stream: no wait
  EXPECT_TRUE(streams.waits.empty());
  streams.current = 3;
  Block* y = a.Malloc(1000);
  EXPECT_EQ(Ptr(y), x_ptr);
  ASSERT_EQ(streams.waits.size(), 1u);
  EXPECT_EQ(streams.waits[0], std::make_pair(3, 1));  // stream 3 waits for stream 1's queued work
  EXPECT_EQ(a.stats().num_cross_stream_waits, 1u);
  a.Free(y);
  // A stream that is gone (idle, then destroyed) is never waited for; stream 1, whose work touched the
  // coalesced bytes too, still is.
  a.ForgetStream(FakeStreams::S(3));
  streams.current = 4;
  a.Free(a.Malloc(1000));
  ASSERT_EQ(streams.waits.size(), 2u);
  EXPECT_EQ(streams.waits[1], std::make_pair(4, 1));
  EXPECT_EQ(streams.live_events, 0);
}

TEST(CachingAllocator, CoalescedBlocksRememberEveryStreamThatUsedThem) {
  FakeDevice dev{64 << 20};
  FakeStreams streams;
  CachingAllocator a("fake:0", WithStreams(dev, streams));
  Block* x = a.Malloc(512);
  streams.current = 2;
  Block* y = a.Malloc(512);
  a.Free(x);
  a.Free(y);  // one free 2 MiB block again, touched by streams 1 and 2
  streams.current = 5;
  a.Free(a.Malloc(1024));
  ASSERT_EQ(streams.waits.size(), 2u);
  EXPECT_EQ(streams.waits[0].second + streams.waits[1].second, 3);
}

// The small-block fast path: a block freed by its own stream with nothing else recorded is handed back to
// that stream's next Malloc of its size (most recently freed first) without the pools; Mallocs it cannot
// serve see every freed block coalesced in the pools as before.
TEST(CachingAllocator, SmallBlocksFreedByAStreamGoBackToThatStreamFirst) {
  FakeDevice dev{64 << 20};
  FakeStreams streams;
  CachingAllocator a("fake:0", WithStreams(dev, streams));
  Block* x = a.Malloc(4096);
  Block* sep = a.Malloc(512);
  Block* y = a.Malloc(4096);
  char* y_ptr = Ptr(y);
  a.Free(x);
  a.Free(y);
  EXPECT_EQ(a.stats().allocated_bytes, 512u);  // listed blocks count as cached
  Block* again = a.Malloc(4000);  // rounds to 4096: the block freed last (the pools' best fit is x)
  EXPECT_EQ(Ptr(again), y_ptr);
  EXPECT_EQ(a.stats().num_fast_reuses, 1u);
  EXPECT_EQ(a.stats().allocated_bytes, 512u + 4096u);
  EXPECT_EQ(a.stats().num_allocations, 4u);
  a.Free(again);
  // Another stream does not take them: its Malloc goes to the pools, which now hold both blocks again.
  streams.current = 2;
  Block* other = a.Malloc(4096);
  EXPECT_EQ(a.stats().num_fast_reuses, 1u);
  ASSERT_EQ(streams.waits.size(), 1u);
  EXPECT_EQ(streams.waits[0], std::make_pair(2, 1));  // and waits for stream 1's work, as from the pools
  a.Free(other);
  a.Free(sep);
  EXPECT_EQ(a.stats().allocated_bytes, 0u);
  a.EmptyCache();  // listed blocks are returned with the rest
  EXPECT_EQ(dev.used, 0u);
  EXPECT_EQ(streams.live_events, 0);
}

// The lists are keyed by stream: ForgetStream empties them, so a later stream that happens to get the
// forgotten one's handle starts from the pools, and no stream waits for the forgotten one.
TEST(CachingAllocator, ForgetStreamEmptiesThatStreamsFastList) {
  FakeDevice dev{64 << 20};
  FakeStreams streams;
  CachingAllocator a("fake:0", WithStreams(dev, streams));
  streams.current = 7;
  a.Free(a.Malloc(1000));  // listed for stream 7
  a.ForgetStream(FakeStreams::S(7));
  a.Free(a.Malloc(1000));  // a new stream with the same handle
  EXPECT_EQ(a.stats().num_fast_reuses, 0u) << "a block listed for a forgotten stream was handed out";
  a.ForgetStream(FakeStreams::S(7));
  streams.current = 4;
  a.Free(a.Malloc(1000));
  EXPECT_TRUE(streams.waits.empty()) << "stream 4 waited for forgotten stream " << streams.waits[0].second;
  EXPECT_EQ(streams.live_events, 0);
}

// At most kFastBlocks blocks wait on the lists; the rest go to the pools and coalesce at once.
TEST(CachingAllocator, TheFastListsAreBounded) {
  FakeDevice dev{64 << 20};
  CachingAllocator a("fake:0", dev.Raw());
  std::vector<Block*> blocks;
  for (int i = 0; i < CachingAllocator::kFastBlocks + 8; ++i) blocks.push_back(a.Malloc(512));
  char* first = Ptr(blocks[0]);
  for (Block* b : blocks) a.Free(b);
  // The last 8 went to the pools: this Malloc, which the lists cannot serve, finds all of them coalesced
  // with the rest (the lists are emptied first), starting at the first block.
  Block* all = a.Malloc(512 * (CachingAllocator::kFastBlocks + 8));
  EXPECT_EQ(Ptr(all), first);
  EXPECT_EQ(a.stats().num_device_mallocs, 1u);
  a.Free(all);
  EXPECT_EQ(a.stats().allocated_bytes, 0u);
}

}  // namespace
}  // namespace oar::runtime
