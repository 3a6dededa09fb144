#include "core/scheduler/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "core/base/error.h"

namespace oar::scheduler {
namespace {

uint64_t Align(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

}  // namespace

ArenaPlan PlanArena(std::span<const BufferRequest> buffers, uint64_t alignment) {
  OAR_CHECK_ARG(alignment > 0 && (alignment & (alignment - 1)) == 0, "PlanArena: alignment {} is not a power of two",
                alignment);
  ArenaPlan plan;
  plan.offsets.assign(buffers.size(), 0);
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; ties by earlier start, then index, so the plan is deterministic.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].first < buffers[b].first;
  });
  std::vector<size_t> placed;
  std::vector<std::pair<uint64_t, uint64_t>> busy;  // [offset, end) of placed buffers living together with this one
  for (size_t i : order) {
    const uint64_t size = Align(std::max<uint64_t>(buffers[i].bytes, 1), alignment);
    busy.clear();
    for (size_t j : placed) {
      if (LiveTogether(buffers[i], buffers[j])) {
        busy.push_back({plan.offsets[j], plan.offsets[j] + Align(std::max<uint64_t>(buffers[j].bytes, 1), alignment)});
      }
    }
    std::sort(busy.begin(), busy.end());
    // Best fit: the smallest gap between busy ranges that holds `size`; else above the highest.
    uint64_t best = UINT64_MAX, best_gap = UINT64_MAX, cursor = 0;
    for (const auto& [lo, hi] : busy) {
      if (lo > cursor && lo - cursor >= size && lo - cursor < best_gap) {
        best = cursor;
        best_gap = lo - cursor;
      }
      cursor = std::max(cursor, hi);
    }
    plan.offsets[i] = best != UINT64_MAX ? best : cursor;
    plan.arena_bytes = std::max(plan.arena_bytes, plan.offsets[i] + size);
    placed.push_back(i);
  }
  return plan;
}

void CheckArenaPlan(std::span<const BufferRequest> buffers, const ArenaPlan& plan, uint64_t alignment) {
  OAR_CHECK(plan.offsets.size() == buffers.size(), kInternal, "memory plan: {} offsets for {} buffers",
            plan.offsets.size(), buffers.size());
  auto describe = [&](size_t i) {
    const BufferRequest& b = buffers[i];
    return fmt::format("buffer {} ({}{}{} bytes at [{}, {}), live {}..{})", i, b.name, b.name.empty() ? "" : ", ",
                       b.bytes, plan.offsets[i], plan.offsets[i] + b.bytes, b.first, b.last);
  };
  // Sweep over positions: sort by offset and compare each buffer with the ones whose bytes it may reach.
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return plan.offsets[a] < plan.offsets[b]; });
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    OAR_CHECK(plan.offsets[i] % alignment == 0, kInternal, "memory plan: {} is not aligned to {} bytes", describe(i),
              alignment);
    OAR_CHECK(plan.offsets[i] + buffers[i].bytes <= plan.arena_bytes, kInternal,
              "memory plan: {} runs past the arena's {} bytes", describe(i), plan.arena_bytes);
    for (size_t m = k + 1; m < order.size(); ++m) {
      const size_t j = order[m];
      if (plan.offsets[j] >= plan.offsets[i] + buffers[i].bytes) break;  // sorted: no later one overlaps i
      if (buffers[i].bytes == 0 || buffers[j].bytes == 0) continue;
      OAR_CHECK(!LiveTogether(buffers[i], buffers[j]), kInternal,
                "memory plan: {} and {} are live at the same time but overlap in the arena", describe(i), describe(j));
    }
  }
}

uint64_t UnplannedBytes(std::span<const BufferRequest> buffers, uint64_t alignment) {
  uint64_t total = 0;
  for (const BufferRequest& b : buffers) total += Align(b.bytes, alignment);
  return total;
}

}  // namespace oar::scheduler
