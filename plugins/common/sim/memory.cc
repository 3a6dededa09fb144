#include "plugins/common/sim/memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "plugins/common/sim/config.h"

namespace oar::sim {
namespace {

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

uint64_t PageSize() {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// Freed blocks at least this large give their whole pages back to the host.
constexpr uint64_t kReleaseThreshold = uint64_t{1} << 20;

}  // namespace

DeviceMemory::DeviceMemory(std::string where, uint64_t capacity, uint64_t alignment)
    : where_(std::move(where)), capacity_(RoundUp(capacity, PageSize())), alignment_(alignment) {
  void* base = mmap(nullptr, capacity_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    Throw(OAR_STATUS_RESOURCE_EXHAUSTED,
          where_ + ": cannot reserve " + std::to_string(capacity_) + " bytes of address space for the device");
  }
  void* shadow = mmap(nullptr, capacity_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (shadow == MAP_FAILED) {
    munmap(base, capacity_);
    Throw(OAR_STATUS_RESOURCE_EXHAUSTED,
          where_ + ": cannot map " + std::to_string(capacity_) + " bytes of backing store for the device");
  }
  base_ = static_cast<char*>(base);
  shadow_ = static_cast<char*>(shadow);
  InsertFree(0, capacity_);
}

DeviceMemory::~DeviceMemory() {
  munmap(base_, capacity_);
  munmap(shadow_, capacity_);
}

std::string DeviceMemory::Hex(uintptr_t p) const {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(p));
  return buf;
}

void DeviceMemory::InsertFree(uint64_t offset, uint64_t size) {
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && offset + size == next->first) {
    free_by_size_.erase({next->second, next->first});
    size += next->second;
    next = free_by_offset_.erase(next);
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      free_by_size_.erase({prev->second, prev->first});
      offset = prev->first;
      size += prev->second;
      free_by_offset_.erase(prev);
    }
  }
  free_by_offset_[offset] = size;
  free_by_size_.insert({size, offset});
}

void* DeviceMemory::Allocate(size_t size) {
  const uint64_t rounded = RoundUp(std::max<uint64_t>(size, 1), alignment_);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rounded < size ? free_by_size_.end() : free_by_size_.lower_bound({rounded, 0});
  if (it == free_by_size_.end()) {
    const uint64_t largest = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
    Throw(OAR_STATUS_RESOURCE_EXHAUSTED, where_ + ": out of device memory: requested " + std::to_string(size) +
                                             " bytes, " + std::to_string(capacity_ - reserved_bytes_) +
                                             " bytes free of " + std::to_string(capacity_) + " (largest free block " +
                                             std::to_string(largest) + " bytes)");
  }
  const auto [block_size, offset] = *it;
  free_by_size_.erase(it);
  free_by_offset_.erase(offset);
  if (block_size > rounded) InsertFree(offset + rounded, block_size - rounded);
  live_[offset] = Block{size, rounded};
  bytes_in_use_ += size;
  reserved_bytes_ += rounded;
  peak_bytes_in_use_ = std::max(peak_bytes_in_use_, bytes_in_use_);
  return base_ + offset;
}

void DeviceMemory::Free(void* ptr) {
  if (ptr == nullptr) return;
  if (!InRange(ptr)) {
    Throw(OAR_STATUS_INVALID_ARGUMENT, where_ + ": free: " + Hex(reinterpret_cast<uintptr_t>(ptr)) +
                                           " is not an address of this device (its memory is " + Hex(base()) + ".." +
                                           Hex(base() + capacity_) + ")");
  }
  const uint64_t offset = static_cast<uint64_t>(static_cast<char*>(ptr) - base_);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(offset);
  if (it == live_.end()) {
    Throw(OAR_STATUS_INVALID_ARGUMENT, where_ + ": free: " + Hex(reinterpret_cast<uintptr_t>(ptr)) +
                                           " was not returned by malloc on this device or was already freed");
  }
  const Block block = it->second;
  live_.erase(it);
  bytes_in_use_ -= block.size;
  reserved_bytes_ -= block.rounded;
  if (block.rounded >= kReleaseThreshold) {
    // Give whole pages back to the host so a long run does not keep every page it ever touched.
    const uint64_t first = RoundUp(offset, PageSize());
    const uint64_t last = (offset + block.rounded) / PageSize() * PageSize();
    if (last > first) madvise(shadow_ + first, last - first, MADV_DONTNEED);
  }
  InsertFree(offset, block.rounded);
}

bool DeviceMemory::InRange(const void* ptr) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  return p >= base() && p < base() + capacity_;
}

char* DeviceMemory::Translate(const void* ptr, size_t size, const std::string& what) const {
  if (size == 0) return nullptr;
  if (!InRange(ptr)) {
    Throw(OAR_STATUS_INVALID_ARGUMENT, where_ + ": " + what + " " + Hex(reinterpret_cast<uintptr_t>(ptr)) +
                                           " is not a device address of this device (its memory is " + Hex(base()) +
                                           ".." + Hex(base() + capacity_) + ")");
  }
  const uint64_t offset = static_cast<uint64_t>(static_cast<const char*>(ptr) - base_);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.upper_bound(offset);
  if (size > capacity_ || it == live_.begin() || (--it, offset + size > it->first + it->second.size)) {
    Throw(OAR_STATUS_INVALID_ARGUMENT, where_ + ": " + what + " range " + Hex(reinterpret_cast<uintptr_t>(ptr)) +
                                           " + " + std::to_string(size) +
                                           " bytes is not inside one live allocation of this device");
  }
  return shadow_ + offset;
}

DeviceMemory::Stats DeviceMemory::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s;
  s.bytes_in_use = bytes_in_use_;
  s.peak_bytes_in_use = peak_bytes_in_use_;
  s.reserved_bytes = reserved_bytes_;
  s.capacity = capacity_;
  s.num_allocs = live_.size();
  s.largest_free_block = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
  return s;
}

}  // namespace oar::sim
