#include "core/runtime/allocator.h"

#include <algorithm>
#include <array>

#include "core/base/error.h"
#include "core/base/logging.h"

namespace oar::runtime {

namespace {
constexpr int kMaxTags = 4;

void DeleteBlockStorage(void* context, void*, size_t);
}  // namespace

struct CachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;
  bool allocated = false;
  bool small = false;        // which pool it returns to
  Block* prev = nullptr;     // neighbours within the same segment
  Block* next = nullptr;
  CachingAllocator* owner = nullptr;
  Block* next_fast = nullptr;  // on a fast-path list (still `allocated` as far as the pools know)
  size_t segment = 0;        // for the first block of a segment: its index in segments_
  // Allocated: the stream it was handed out for, and other streams that use it (RecordStream).
  void* stream = nullptr;
  std::vector<void*> recorded;
  std::vector<void*> events;  // pending: one per recorded stream, captured at Free
  // Free: the streams whose work queued before the free may still touch these bytes.
  std::array<void*, kMaxTags> tags{};
  int num_tags = 0;

  void SetTag(void* s) {
    num_tags = s != nullptr ? 1 : 0;
    tags[0] = s;
  }
  bool HasTag(void* s) const { return std::find(tags.begin(), tags.begin() + num_tags, s) != tags.begin() + num_tags; }
  /// Add `other`'s tags; false (nothing changed) when the union does not fit.
  bool MergeTags(const Block& other) {
    if (other.num_tags == 0 || (num_tags == 1 && other.num_tags == 1 && tags[0] == other.tags[0])) return true;
    if (num_tags == 0) {
      tags = other.tags;
      num_tags = other.num_tags;
      return true;
    }
    std::array<void*, kMaxTags> merged = tags;
    int n = num_tags;
    for (int i = 0; i < other.num_tags; ++i) {
      if (std::find(merged.begin(), merged.begin() + n, other.tags[i]) != merged.begin() + n) continue;
      if (n == kMaxTags) return false;
      merged[n++] = other.tags[i];
    }
    tags = merged;
    num_tags = n;
    return true;
  }
};

namespace {
void DeleteBlockStorage(void* context, void*, size_t) {
  auto* b = static_cast<CachingAllocator::Block*>(context);
  b->owner->Free(b);
}
}  // namespace

bool CachingAllocator::BySize::operator()(const Block* a, const Block* b) const {
  return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
}
// A key sorts before every block of its size: lower_bound finds the lowest address among the smallest fits.
bool CachingAllocator::BySize::operator()(const Block* a, SizeKey k) const { return a->size < k.size; }
bool CachingAllocator::BySize::operator()(SizeKey k, const Block* b) const { return k.size <= b->size; }

CachingAllocator::CachingAllocator(std::string device, RawMemory raw)
    : device_(std::move(device)), raw_(std::move(raw)) {}

CachingAllocator::~CachingAllocator() {
  for (Block* b : pending_) {
    for (void* e : b->events) raw_.streams.destroy(e);
  }
  for (Block* head : segments_) {
    try {
      raw_.free(head->ptr);
    } catch (const std::exception& e) {
      OAR_LOG_WARNING("{}: freeing a memory segment at teardown failed: {}", device_, e.what());
    }
    for (Block* b = head; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
  for (Block* b : spare_blocks_) delete b;
}

CachingAllocator::Block* CachingAllocator::NewBlock() {
  if (spare_blocks_.empty()) return new Block();
  Block* b = spare_blocks_.back();
  spare_blocks_.pop_back();
  // Field by field: the vectors keep their (usually empty) storage, so the hot path allocates nothing.
  b->ptr = nullptr;
  b->size = 0;
  b->allocated = b->small = false;
  b->prev = b->next = nullptr;
  b->owner = nullptr;
  b->next_fast = nullptr;
  b->segment = 0;
  b->stream = nullptr;
  b->recorded.clear();
  b->events.clear();
  b->num_tags = 0;
  return b;
}

void CachingAllocator::DeleteBlock(Block* b) { spare_blocks_.push_back(b); }

void CachingAllocator::PoolInsert(Pool& pool, Block* block) {
  if (spare_nodes_.empty()) {
    pool.insert(block);
    return;
  }
  Pool::node_type node = std::move(spare_nodes_.back());
  spare_nodes_.pop_back();
  node.value() = block;
  pool.insert(std::move(node));
}

void CachingAllocator::PoolErase(Pool& pool, Pool::iterator it) { spare_nodes_.push_back(pool.extract(it)); }

namespace {
/// The block at `it` had its size or address changed in place: if it still sorts between its neighbours
/// the tree is valid as it is (the common case: a split segment's tail is the largest block of its
/// pool), otherwise it is moved to its new place, reusing its node. extract() by iterator compares nothing,
/// so the tree's momentarily wrong order does not matter.
template <typename Pool>
void Rekeyed(Pool& pool, typename Pool::iterator it) {
  const auto& less = pool.key_comp();
  const bool after_prev = it == pool.begin() || less(*std::prev(it), *it);
  const bool before_next = std::next(it) == pool.end() || less(*it, *std::next(it));
  if (after_prev && before_next) return;
  pool.insert(pool.extract(it));
}

/// `head` is now the first block of its segment (`head->segment`).
void SetSegmentHead(std::vector<CachingAllocator::Block*>& segments, CachingAllocator::Block* head) {
  head->prev = nullptr;
  segments[head->segment] = head;
}
}  // namespace

void* CachingAllocator::BlockData(const Block* block) { return block ? block->ptr : nullptr; }

CachingAllocator::Block* CachingAllocator::TryMalloc(size_t rounded, bool small, bool exact, void* stream) {
  Pool& pool = small ? small_pool_ : large_pool_;
  // The block, out of the pools, becomes allocated for `stream`.
  const auto finish = [this, stream](Block* block) {
    block->allocated = true;
    block->owner = this;
    try {
      OrderForStream(block, stream);
    } catch (...) {
      FreeLocked(block);
      throw;
    }
    return block;
  };
  auto it = pool.lower_bound(SizeKey{rounded});
  Block* block = nullptr;
  if (it != pool.end()) {
    Block* found = *it;
    const size_t remaining = found->size - rounded;
    if ((small && remaining >= kRound) || (!small && remaining > kSmallRequest)) {
      // Split without touching the tree: `found` keeps its node and becomes the free tail (smaller, at a
      // higher address; usually still in order), a new record is the allocated head. Same blocks, same
      // addresses and stream tags as erasing `found` and inserting the tail.
      block = NewBlock();
      block->ptr = found->ptr;
      block->size = rounded;
      block->small = small;
      block->tags = found->tags;
      block->num_tags = found->num_tags;
      block->prev = found->prev;
      block->next = found;
      if (found->prev != nullptr) {
        found->prev->next = block;
      } else {
        block->segment = found->segment;
        SetSegmentHead(segments_, block);
      }
      found->prev = block;
      found->ptr += rounded;
      found->size = remaining;
      Rekeyed(pool, it);
      return finish(block);
    }
    block = found;
    PoolErase(pool, it);
  } else {
    const size_t segment = exact || exact_segments_ ? rounded
                           : small                  ? kSmallSegment
                                                    : (rounded + kLargeRound - 1) / kLargeRound * kLargeRound;
    void* ptr = nullptr;
    try {
      ptr = raw_.malloc(segment);  // throws on failure
    } catch (const Error& e) {
      // Refused while we hold nothing: the device is smaller than a segment (a 1 MiB simulator), so from
      // now on every segment is of just the request.
      if (e.code() == ErrorCode::kResourceExhausted && segment > rounded && segments_.empty()) exact_segments_ = true;
      throw;
    }
    block = NewBlock();
    block->ptr = static_cast<char*>(ptr);
    block->size = segment;
    block->small = small;
    block->segment = segments_.size();
    segments_.push_back(block);
    ++stats_.num_device_mallocs;
    stats_.reserved_bytes += segment;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  }
  // Split off the tail when it is worth keeping: any remainder for small blocks, > 1 MiB for large ones
  // (smaller large tails would mostly fragment).
  const size_t remaining = block->size - rounded;
  if ((small && remaining >= kRound) || (!small && remaining > kSmallRequest)) {
    Block* rest = NewBlock();
    rest->ptr = block->ptr + rounded;
    rest->size = remaining;
    rest->small = small;
    rest->prev = block;
    rest->next = block->next;
    rest->tags = block->tags;  // the streams that used the whole block may still touch its tail
    rest->num_tags = block->num_tags;
    if (block->next) block->next->prev = rest;
    block->next = rest;
    block->size = rounded;
    PoolInsert(pool, rest);
  }
  return finish(block);
}

void CachingAllocator::OrderForStream(Block* block, void* stream) {
  block->stream = stream;
  if (block->num_tags == 0 || (block->num_tags == 1 && block->tags[0] == stream)) {  // the common case
    block->num_tags = 0;
    return;
  }
  for (int i = 0; i < block->num_tags; ++i) {
    void* last = block->tags[i];
    if (last == nullptr || last == stream) continue;
    // Work another stream queued before the free may still touch the bytes: `stream` waits for it.
    void* event = raw_.streams.record(last);
    struct Destroy {
      const StreamHooks& h;
      void* e;
      ~Destroy() { h.destroy(e); }
    } destroy{raw_.streams, event};
    raw_.streams.wait(stream, event);
    ++stats_.num_cross_stream_waits;
  }
  block->num_tags = 0;
}

CachingAllocator::Block* CachingAllocator::Malloc(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const size_t rounded = (nbytes + kRound - 1) / kRound * kRound;
  const bool small = rounded <= kSmallRequest;
  void* stream = CurrentStream();
  std::lock_guard<Lock> lock(mutex_);
  if (!pending_.empty()) ProcessPending();
  if (num_fast_ > 0) {
    if (rounded <= kFastMax) {
      for (FastLists& lists : fast_) {
        if (lists.stream != stream) continue;
        Block*& head = lists.head[rounded / kRound - 1];
        Block* block = head;
        if (block == nullptr) break;
        // Freed by this stream with nothing else recorded: stream order makes the reuse safe, as it does
        // for a block from the pools whose only tag is this stream (OrderForStream waits for nothing).
        head = block->next_fast;
        block->next_fast = nullptr;
        --num_fast_;
        stats_.allocated_bytes += block->size;
        stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
        ++stats_.num_allocations;
        ++stats_.num_fast_reuses;
        return block;
      }
    }
    FlushFast();  // the pools serve this one: they see every free block, coalesced
  }
  Block* block = nullptr;
  try {
    block = TryMalloc(rounded, small, /*exact=*/false, stream);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kResourceExhausted) throw;
    ++stats_.num_cache_flushes;
    const uint64_t cached_before = stats_.cached_bytes();
    ReleaseFreeSegments();
    try {
      // The retry asks for just the request: a device with less free memory than a segment still has it.
      block = TryMalloc(rounded, small, /*exact=*/true, stream);
    } catch (const Error& retry) {
      if (retry.code() != ErrorCode::kResourceExhausted) throw;
      Throw(ErrorCode::kResourceExhausted,
            "{}: out of device memory: requested {} bytes ({} rounded); {} bytes in use by tensors, {} bytes "
            "were cached and {} remain cached after returning free segments; device said: {}",
            device_, nbytes, rounded, stats_.allocated_bytes, cached_before, stats_.cached_bytes(),
            retry.what());
    }
  }
  stats_.allocated_bytes += block->size;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  ++stats_.num_allocations;
  return block;
}

void CachingAllocator::Free(Block* block) {
  if (block == nullptr) return;
  std::lock_guard<Lock> lock(mutex_);
  if (block->size <= kFastMax && block->recorded.empty() && num_fast_ < kFastBlocks) {
    FastLists* lists = nullptr;
    for (FastLists& l : fast_) {
      if (l.stream == block->stream) lists = &l;
    }
    if (lists == nullptr) lists = &fast_.emplace_back(FastLists{.stream = block->stream});
    Block*& head = lists->head[block->size / kRound - 1];
    block->next_fast = head;
    head = block;
    ++num_fast_;
    stats_.allocated_bytes -= block->size;
    return;
  }
  if (!block->recorded.empty()) {
    // Other streams use the block: it waits until the work they have queued by now has completed.
    try {
      for (void* s : block->recorded) block->events.push_back(raw_.streams.record(s));
    } catch (const std::exception& e) {
      // Never reuse what may still be read or written: the block stays out of the pools (leaked).
      OAR_LOG_ERROR("{}: recording a stream event for a freed block failed ({}); its {} bytes are not reused",
                    device_, e.what(), block->size);
      return;
    }
    block->recorded.clear();
    ++stats_.num_deferred_frees;
    pending_.push_back(block);
    ProcessPending();
    return;
  }
  FreeLocked(block);
}

void CachingAllocator::FlushFast() {
  if (num_fast_ == 0) return;
  for (FastLists& lists : fast_) {
    for (Block*& head : lists.head) {
      while (head != nullptr) {
        Block* b = head;
        head = b->next_fast;
        b->next_fast = nullptr;
        stats_.allocated_bytes += b->size;  // FreeLocked counts it out again
        FreeLocked(b);
      }
    }
  }
  num_fast_ = 0;
}

void CachingAllocator::ProcessPending() {
  if (pending_.empty()) return;
  size_t kept = 0;
  for (Block* b : pending_) {
    bool done = true;
    for (void* e : b->events) done = done && raw_.streams.done(e);
    if (!done) {
      pending_[kept++] = b;
      continue;
    }
    for (void* e : b->events) raw_.streams.destroy(e);
    b->events.clear();
    FreeLocked(b);
  }
  pending_.resize(kept);
}

void CachingAllocator::FreeLocked(Block* block) {
  Pool& pool = block->small ? small_pool_ : large_pool_;
  stats_.allocated_bytes -= block->size;
  block->allocated = false;
  block->SetTag(block->stream);
  // Coalesce with free neighbours (when the streams that may still touch both fit in one record). The
  // same blocks as erasing the neighbours and inserting the union, but the union takes over a neighbour's
  // tree node and record, so the common case (the freed block rejoins the tail it was split from) changes
  // a key in place instead of rebalancing the tree twice.
  Pool::iterator kept = pool.end();  // the node of the free block that absorbs the others
  if (Block* next = block->next; next != nullptr && !next->allocated && block->MergeTags(*next)) {
    // `next` absorbs `block`: it starts where `block` did.
    kept = pool.find(next);
    next->tags = block->tags;
    next->num_tags = block->num_tags;
    next->ptr = block->ptr;
    next->size += block->size;
    next->prev = block->prev;
    if (block->prev != nullptr) {
      block->prev->next = next;
    } else {
      next->segment = block->segment;
      SetSegmentHead(segments_, next);
    }
    DeleteBlock(block);
    block = next;
  }
  if (Block* prev = block->prev; prev != nullptr && !prev->allocated && prev->MergeTags(*block)) {
    if (kept != pool.end()) PoolErase(pool, kept);
    kept = pool.find(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next) block->next->prev = prev;
    DeleteBlock(block);
    block = prev;
  }
  if (kept != pool.end()) {
    Rekeyed(pool, kept);
  } else {
    PoolInsert(pool, block);
  }
}

void CachingAllocator::ReleaseFreeSegments() {
  std::vector<Block*> kept;
  for (Block* head : segments_) {
    if (head->allocated || head->next != nullptr) {  // in use or split: keep
      kept.push_back(head);
      continue;
    }
    Pool& pool = head->small ? small_pool_ : large_pool_;
    PoolErase(pool, pool.find(head));
    stats_.reserved_bytes -= head->size;
    ++stats_.num_device_frees;
    try {
      raw_.free(head->ptr);
    } catch (const std::exception& e) {
      OAR_LOG_WARNING("{}: returning a free segment to the device failed: {}", device_, e.what());
    }
    DeleteBlock(head);
  }
  segments_ = std::move(kept);
  for (size_t i = 0; i < segments_.size(); ++i) segments_[i]->segment = i;
}

void CachingAllocator::EmptyCache() {
  std::lock_guard<Lock> lock(mutex_);
  ProcessPending();
  FlushFast();
  ReleaseFreeSegments();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<Lock> lock(mutex_);
  return stats_;
}

void CachingAllocator::ResetPeakStats() {
  std::lock_guard<Lock> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

void CachingAllocator::RecordStream(Block* block, void* stream) {
  if (block == nullptr || stream == nullptr) return;
  std::lock_guard<Lock> lock(mutex_);
  OAR_CHECK(block->allocated, kInternal, "{}: RecordStream on a block that is not allocated", device_);
  if (block->stream == stream) return;
  if (std::find(block->recorded.begin(), block->recorded.end(), stream) != block->recorded.end()) return;
  block->recorded.push_back(stream);
}

bool CachingAllocator::RecordStream(const Storage& storage, void* stream) {
  if (storage.deleter() != &DeleteBlockStorage) return false;
  auto* block = static_cast<Block*>(storage.context());
  if (block == nullptr || block->owner != this) return false;
  RecordStream(block, stream);
  return true;
}

void CachingAllocator::ForgetStream(void* stream) {
  if (stream == nullptr) return;
  std::lock_guard<Lock> lock(mutex_);
  ProcessPending();
  FlushFast();  // the lists are keyed by stream: a later stream at the same address must not find them
  for (Block* head : segments_) {
    for (Block* b = head; b != nullptr; b = b->next) {
      if (b->stream == stream) b->stream = nullptr;
      std::erase(b->recorded, stream);
      int n = 0;
      for (int i = 0; i < b->num_tags; ++i) {
        if (b->tags[i] != stream) b->tags[n++] = b->tags[i];
      }
      b->num_tags = n;
    }
  }
}

std::shared_ptr<Storage> CachingAllocator::AllocateStorage(Device device, size_t nbytes) {
  Block* block = Malloc(nbytes);
  if (block == nullptr) return std::make_shared<Storage>(device, nullptr, 0, nullptr, nullptr);
  return std::make_shared<Storage>(device, block->ptr, nbytes, &DeleteBlockStorage, block);
}

Tensor CachingAllocator::AllocateTensor(Device device, size_t nbytes, DType dtype, const Dims& shape,
                                        const Dims& strides) {
  Block* block = Malloc(nbytes);
  if (block == nullptr) return Tensor::WithNewStorage(device, nullptr, 0, nullptr, nullptr, dtype, shape, strides);
  try {
    return Tensor::WithNewStorage(device, block->ptr, nbytes, &DeleteBlockStorage, block, dtype, shape, strides);
  } catch (...) {
    Free(block);
    throw;
  }
}

}  // namespace oar::runtime
