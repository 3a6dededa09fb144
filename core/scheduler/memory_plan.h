// Static memory planning: given every buffer's size and live range (the instruction positions of its first
// write and last use), place the buffers at offsets in one arena so that no two buffers live at the same
// time share a byte, keeping the arena small. Greedy best-fit over decreasing size, as XLA's buffer
// assignment and ONNX Runtime / TFLite's "greedy by size" arena planners do. A checker proves a plan sound.
#ifndef OAR_CORE_SCHEDULER_MEMORY_PLAN_H_
#define OAR_CORE_SCHEDULER_MEMORY_PLAN_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace oar::scheduler {

/// One buffer to place: `bytes` live from position `first` through position `last` (inclusive).
struct BufferRequest {
  uint64_t bytes = 0;
  int first = 0;
  int last = 0;
  std::string name;  ///< for messages ("%h1 = kernel.add at 4:3")
};

struct ArenaPlan {
  std::vector<uint64_t> offsets;  ///< per request, a multiple of the alignment
  uint64_t arena_bytes = 0;       ///< the arena the plan needs
};

/// Two buffers' live ranges share a position.
inline bool LiveTogether(const BufferRequest& a, const BufferRequest& b) {
  return a.first <= b.last && b.first <= a.last;
}

/// Place `buffers` (every offset a multiple of `alignment`, a power of two): largest first, each in the
/// smallest gap left by the already placed buffers it lives together with, or above them all.
ArenaPlan PlanArena(std::span<const BufferRequest> buffers, uint64_t alignment);

/// Throws oar::Error(kInternal) naming both buffers, their ranges and bytes when two buffers that live
/// together overlap in the arena, a buffer runs past the arena's end or an offset is misaligned.
void CheckArenaPlan(std::span<const BufferRequest> buffers, const ArenaPlan& plan, uint64_t alignment);

/// The bytes the buffers would hold with no reuse at all (each its own allocation).
uint64_t UnplannedBytes(std::span<const BufferRequest> buffers, uint64_t alignment);

}  // namespace oar::scheduler

#endif  // OAR_CORE_SCHEDULER_MEMORY_PLAN_H_
