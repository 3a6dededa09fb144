// CachingAllocator: per-device memory cache in front of the plugin's malloc/free.
//
// Requests are rounded up to 512 bytes. Small requests (<= 1 MiB) are carved from 2 MiB segments, large
// ones from segments rounded up to 2 MiB; the retry after a RESOURCE_EXHAUSTED asks for a segment of just
// the rounded request, and once the device refused a segment while the allocator held none (a device
// smaller than 2 MiB) every segment is of just the request. Freed blocks go back to a best-fit pool
// (ordered by size, then address), are split when the remainder is worth keeping and coalesce with free neighbours of the same
// segment. When the device reports RESOURCE_EXHAUSTED the allocator returns every wholly free segment to
// the device and retries once; if that fails too it throws oar::Error(kResourceExhausted) stating the
// bytes requested, in use and cached.
//
// Stream semantics (record-stream, as CUDA caching allocators): every block is handed out for the stream
// that is current on the calling thread (RawMemory::streams.current: the device's compute stream, or the
// one a runtime::ScopedStream installed). A block freed while kernels that use it are still queued may be
// reused at once by later work on that same stream (stream order makes that safe). A block that work on
// other streams uses must be told so with RecordStream; when it is freed, an event is recorded on each of
// those streams and the block is not reused until every one has completed (the work those streams had
// queued at free time). A free block last used by stream X and handed out for stream Y != X makes Y wait
// for X's work queued so far (an event recorded on X, waited for on Y) before Y's first use.
//
// Small-block fast path: a block of at most kFastMax bytes freed with no other stream recorded goes onto a
// free list of its own stream and size (not coalesced, still counted as cached); the next Malloc of that
// size for that stream takes it back without the pool's tree. That is the reuse stream order already makes
// safe (the same stream, nothing else recorded), so it needs no event. Any Malloc the lists cannot serve
// first returns every listed block to the pools (coalescing as Free would have), so everything else —
// best fit, coalescing, cross-stream waits, ForgetStream, EmptyCache, the retry on exhaustion — sees the
// same free blocks as without the lists. At most kFastBlocks blocks are listed at a time.
//
// Thread-safety: all methods are thread-safe.
#ifndef OAR_CORE_RUNTIME_ALLOCATOR_H_
#define OAR_CORE_RUNTIME_ALLOCATOR_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/tensor/storage.h"
#include "core/tensor/tensor.h"

namespace oar::runtime {

/// The device's streams and events as the allocator needs them (opaque handles). Left empty, the allocator
/// assumes a single stream and never waits.
struct StreamHooks {
  std::function<void*()> current;                        ///< the calling thread's current stream
  std::function<void*(void* stream)> record;             ///< a new event capturing `stream`'s queued work
  std::function<bool(void* event)> done;                 ///< that work has completed
  std::function<void(void* stream, void* event)> wait;   ///< later work on `stream` waits for `event`
  std::function<void(void* event)> destroy;              ///< release an event
};

/// The device memory the allocator draws from. `malloc` throws oar::Error on failure.
struct RawMemory {
  std::function<void*(size_t)> malloc;
  std::function<void(void*)> free;
  StreamHooks streams;
};

struct AllocatorStats {
  uint64_t allocated_bytes = 0;       // in blocks handed out
  uint64_t peak_allocated_bytes = 0;
  uint64_t reserved_bytes = 0;        // in segments obtained from the device
  uint64_t peak_reserved_bytes = 0;
  uint64_t num_allocations = 0;       // Malloc calls served
  uint64_t num_device_mallocs = 0;    // segments obtained
  uint64_t num_device_frees = 0;      // segments returned
  uint64_t num_cache_flushes = 0;     // times the cache was emptied to satisfy a request
  uint64_t num_deferred_frees = 0;    // frees that waited for other streams' events (RecordStream)
  uint64_t num_cross_stream_waits = 0;  // reuses by another stream that had to wait for the last user's work
  uint64_t num_fast_reuses = 0;       // Mallocs served by the small-block fast path
  uint64_t cached_bytes() const { return reserved_bytes - allocated_bytes; }
};

class CachingAllocator {
 public:
  struct Block;

  static constexpr size_t kRound = 512;
  static constexpr size_t kSmallRequest = 1 << 20;
  static constexpr size_t kSmallSegment = 2 << 20;
  static constexpr size_t kLargeRound = 2 << 20;
  /// The small-block fast path: sizes up to this (rounded) and at most this many blocks listed.
  static constexpr size_t kFastMax = 32 << 10;
  static constexpr int kFastBlocks = 64;

  /// `device` names the device in error messages.
  CachingAllocator(std::string device, RawMemory raw);
  ~CachingAllocator();  // returns every segment to the device
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// A block of at least `nbytes` (nullptr for 0 bytes).
  Block* Malloc(size_t nbytes);
  void Free(Block* block);
  static void* BlockData(const Block* block);

  /// A Storage on `device` owning a fresh block.
  std::shared_ptr<Storage> AllocateStorage(Device device, size_t nbytes);
  /// A tensor (offset 0) of `dtype`, `shape` and `strides` viewing a fresh block of `nbytes` on `device`:
  /// the same as Tensor(AllocateStorage(device, nbytes), ...), with the Storage and the tensor's metadata in
  /// one heap allocation.
  Tensor AllocateTensor(Device device, size_t nbytes, DType dtype, const Dims& shape, const Dims& strides);

  /// Work on `stream` (not the block's own) uses `block`: when it is freed, the block is not reused until
  /// the work `stream` has queued by then completes.
  void RecordStream(Block* block, void* stream);
  /// The same for the block behind `storage`; false (nothing recorded) when this allocator does not own it.
  bool RecordStream(const Storage& storage, void* stream);
  /// `stream` is idle and about to be destroyed: forget it (no later wait names it).
  void ForgetStream(void* stream);

  /// Return every wholly free segment to the device.
  void EmptyCache();
  AllocatorStats stats() const;
  /// Restart the peaks at the current values (a profile of one run measures that run's peak).
  void ResetPeakStats();

 private:
  /// A pool lookup key: the smallest block of at least `size` bytes (then the lowest address).
  struct SizeKey {
    size_t size;
  };
  struct BySize {
    using is_transparent = void;  // lower_bound by SizeKey: no Block to build per lookup
    bool operator()(const Block* a, const Block* b) const;
    bool operator()(const Block* a, SizeKey k) const;
    bool operator()(SizeKey k, const Block* b) const;
  };
  using Pool = std::set<Block*, BySize>;

  /// `exact`: a segment of just `rounded` bytes rather than the size class's.
  Block* TryMalloc(size_t rounded, bool small, bool exact, void* stream);
  /// Make `block` (just taken from a pool) safe for work on `stream`.
  void OrderForStream(Block* block, void* stream);
  void* CurrentStream() const { return raw_.streams.current ? raw_.streams.current() : nullptr; }
  /// Return `block` to its pool (coalescing); the lock is held.
  void FreeLocked(Block* block);
  /// Release the deferred frees whose events have completed; the lock is held.
  void ProcessPending();
  void ReleaseFreeSegments();
  /// Every block on the fast path's lists back to the pools; the lock is held.
  void FlushFast();
  Block* NewBlock();
  void DeleteBlock(Block* b);

  /// A mutex whose uncontended lock and unlock are one atomic operation each (std::mutex goes through
  /// pthread_mutex_lock / unlock, about a third of a Malloc + Free pair); contended waiters sleep on the
  /// atomic (a futex) rather than spin, since a holder may be inside the device's malloc.
  class Lock {
   public:
    void lock() {
      int expected = 0;
      if (state_.compare_exchange_strong(expected, 1, std::memory_order_acquire)) return;
      // 2: locked, and someone may be waiting (unlock must wake).
      while (state_.exchange(2, std::memory_order_acquire) != 0) state_.wait(2, std::memory_order_relaxed);
    }
    void unlock() {
      if (state_.exchange(0, std::memory_order_release) == 2) state_.notify_one();
    }

   private:
    std::atomic<int> state_{0};
  };

  std::string device_;
  RawMemory raw_;
  mutable Lock mutex_;
  Pool small_pool_, large_pool_;
  void PoolInsert(Pool& pool, Block* block);
  void PoolErase(Pool& pool, Pool::iterator it);

  std::vector<Block*> spare_blocks_;  // recycled Block records (no heap traffic on the hot path)
  std::vector<Pool::node_type> spare_nodes_;  // recycled set nodes, for the same reason
  std::vector<Block*> segments_;      // first block of every segment (for teardown)
  std::vector<Block*> pending_;       // freed, waiting for other streams' events
  /// The fast path's lists of one stream: head[i] holds blocks of (i + 1) * kRound bytes, linked by
  /// Block::next_fast.
  struct FastLists {
    void* stream = nullptr;
    std::array<Block*, kFastMax / kRound> head{};
  };
  std::vector<FastLists> fast_;       // one per stream that freed a listed block (few)
  int num_fast_ = 0;                  // blocks listed
  bool exact_segments_ = false;       // the device is smaller than a segment
  AllocatorStats stats_;
};

}  // namespace oar::runtime

#endif  // OAR_CORE_RUNTIME_ALLOCATOR_H_
