// Simulated device memory: a separate address space that the host cannot dereference.
//
// Each device reserves `capacity` bytes of virtual address space with PROT_NONE: device pointers are
// handed out inside it, so a host dereference of a device pointer faults at once (SIGSEGV), as it would
// on a discrete accelerator. The bytes live in a second, read-write "shadow" mapping of the same size
// (anonymous, MAP_NORESERVE: physical pages are only committed when touched); the simulator translates
// a device address to its shadow address, after checking that the whole accessed range lies inside one
// live allocation. A best-fit allocator with coalescing hands out blocks aligned to the device's
// alignment; capacity is finite and exhaustion is RESOURCE_EXHAUSTED naming requested and free bytes.
//
// Thread-safety: every member may be called from any thread.
#ifndef OAR_PLUGINS_COMMON_SIM_MEMORY_H_
#define OAR_PLUGINS_COMMON_SIM_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

namespace oar::sim {

class DeviceMemory {
 public:
  struct Stats {
    uint64_t bytes_in_use = 0;       ///< Sum of the sizes asked for by live allocations.
    uint64_t peak_bytes_in_use = 0;  ///< High-water mark of bytes_in_use.
    uint64_t reserved_bytes = 0;     ///< Sum of live blocks after rounding to the alignment.
    uint64_t capacity = 0;
    uint64_t num_allocs = 0;  ///< Live allocations.
    uint64_t largest_free_block = 0;
  };

  /// Reserve the address space and its shadow. `where` ("kunlun_sim:0") prefixes every message.
  /// Throws StatusError(RESOURCE_EXHAUSTED) when the host refuses the mappings.
  DeviceMemory(std::string where, uint64_t capacity, uint64_t alignment);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  /// A device address of a fresh block of `size` bytes (size 0 gets a unique one-alignment block).
  /// Throws StatusError(RESOURCE_EXHAUSTED) naming the device, the request and the free bytes.
  void* Allocate(size_t size);
  /// Release a block. Throws StatusError(INVALID_ARGUMENT) for a pointer outside this device's range,
  /// not returned by Allocate, or already freed. NULL is accepted and ignored.
  void Free(void* ptr);
  /// The shadow (host) address of device range [ptr, ptr + size), which must lie inside one live
  /// allocation; throws StatusError(INVALID_ARGUMENT) naming `what` ("memcpy_d2h source") otherwise.
  /// size 0 returns nullptr without checking.
  char* Translate(const void* ptr, size_t size, const std::string& what) const;
  /// True when `ptr` lies inside this device's address range (allocated or not).
  bool InRange(const void* ptr) const;

  Stats stats() const;
  uint64_t capacity() const { return capacity_; }
  uint64_t alignment() const { return alignment_; }
  /// The reserved device address range, for messages and tests.
  uintptr_t base() const { return reinterpret_cast<uintptr_t>(base_); }

 private:
  struct Block {
    uint64_t size;     // as requested
    uint64_t rounded;  // as reserved
  };
  void InsertFree(uint64_t offset, uint64_t size);  // coalesces with neighbours; needs mu_
  std::string Hex(uintptr_t p) const;

  const std::string where_;
  const uint64_t capacity_;
  const uint64_t alignment_;
  char* base_ = nullptr;    // PROT_NONE device address space
  char* shadow_ = nullptr;  // read-write backing store
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_by_offset_;           // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;  // (size, offset): best fit = lower_bound
  std::map<uint64_t, Block> live_;                        // offset -> block
  uint64_t bytes_in_use_ = 0, peak_bytes_in_use_ = 0, reserved_bytes_ = 0;
};

}  // namespace oar::sim

#endif  // OAR_PLUGINS_COMMON_SIM_MEMORY_H_
