// Strided iteration for host kernels: collapse dimensions, walk N-d indices, split work over OpenMP.
//
// Kernels describe up to N operands that share one shape, each with its own strides. The iterator
// drops extent-1 dimensions and merges adjacent ones that are contiguous relative to each other in
// every operand, so a dense tensor (or a broadcast scalar, or a plain transpose) becomes one or two
// loops. Work is handed to a callback one "row" (a run along the innermost collapsed dimension) at a
// time, with byte pointers and byte strides, so the callback can pick a vectorisable loop when the
// strides are unit (or zero).
#ifndef OAR_PLUGINS_COMMON_STRIDED_H_
#define OAR_PLUGINS_COMMON_STRIDED_H_

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>

#include "oar/plugin/kernel.h"

namespace oar::host {

/// Below this many elements a kernel runs on the calling thread: a parallel region costs a few
/// microseconds, more than the work it would split.
inline constexpr int64_t kParallelThreshold = 32768;

/// Threads worth using for `work` elements (1 inside an enclosing parallel region: never nest).
inline int ThreadsFor(int64_t work, int64_t grain = kParallelThreshold / 2) {
  if (work < kParallelThreshold || omp_in_parallel()) return 1;
  const int64_t by_work = std::max<int64_t>(1, work / grain);
  return static_cast<int>(std::min<int64_t>(omp_get_max_threads(), by_work));
}

/// Run fn(begin, end) over [0, n) split into contiguous pieces, one per thread. `work` is the total
/// cost in elements (defaults to n) and decides the thread count; `align` rounds the split points so
/// that threads do not write the same cache line.
template <typename Fn>
void ParallelFor(int64_t n, Fn&& fn, int64_t work = -1, int64_t align = 1) {
  if (n <= 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(ThreadsFor(work < 0 ? n : work), n));
  if (threads <= 1) {
    fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
    auto split = [&](int64_t i) {
      if (i >= nt) return n;
      return std::min(n, (n * i / nt) / align * align);
    };
    const int64_t begin = split(t);
    const int64_t end = split(t + 1);
    if (begin < end) fn(begin, end);
  }
}

/// N operands of one shape after collapsing. Strides are in bytes.
template <int N>
struct StridedLayout {
  int rank = 0;  // >= 1 unless numel == 0
  int64_t numel = 0;
  std::array<int64_t, OAR_MAX_RANK> shape{};
  std::array<std::array<int64_t, OAR_MAX_RANK>, N> strides{};

  /// Innermost byte stride of operand k.
  int64_t inner_stride(int k) const { return strides[k][rank - 1]; }
  int64_t inner_extent() const { return shape[rank - 1]; }
};

/// Collapse `shape` (rank <= OAR_MAX_RANK) with per-operand element strides and element sizes.
template <int N>
StridedLayout<N> Collapse(std::span<const int64_t> shape, const std::array<std::span<const int64_t>, N>& elem_strides,
                          const std::array<int64_t, N>& elem_sizes) {
  StridedLayout<N> l;
  l.numel = 1;
  for (int64_t e : shape) l.numel *= e;
  if (l.numel == 0) return l;
  // Walk from the innermost dimension outwards, keeping the collapsed dims innermost-first, then flip.
  int r = 0;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    bool merge = r > 0;
    for (int k = 0; k < N && merge; ++k) {
      merge = elem_strides[k][d] * elem_sizes[k] == l.strides[k][r - 1] * l.shape[r - 1];
    }
    if (merge) {
      l.shape[r - 1] *= shape[d];
      continue;
    }
    l.shape[r] = shape[d];
    for (int k = 0; k < N; ++k) l.strides[k][r] = elem_strides[k][d] * elem_sizes[k];
    ++r;
  }
  if (r == 0) {  // every extent is 1: a single element
    l.shape[0] = 1;
    for (int k = 0; k < N; ++k) l.strides[k][0] = elem_sizes[k];
    r = 1;
  }
  std::reverse(l.shape.begin(), l.shape.begin() + r);
  for (int k = 0; k < N; ++k) std::reverse(l.strides[k].begin(), l.strides[k].begin() + r);
  l.rank = r;
  return l;
}

/// Call row(ptrs, n, inner_strides) for the elements [begin, end) of the layout in row-major order,
/// one run along the innermost dimension at a time. ptrs[k] points at the run's first element of
/// operand k; inner_strides[k] is its byte stride within the run.
template <int N, typename RowFn>
void ForRange(const StridedLayout<N>& l, const std::array<char*, N>& base, int64_t begin, int64_t end, RowFn&& row) {
  if (begin >= end) return;
  const int last = l.rank - 1;
  std::array<int64_t, OAR_MAX_RANK> idx{};
  std::array<char*, N> p = base;  // points at (idx[0..last-1], 0)
  int64_t rest = begin;
  for (int d = last; d >= 0; --d) {
    idx[d] = rest % l.shape[d];
    rest /= l.shape[d];
  }
  for (int d = 0; d < last; ++d) {
    for (int k = 0; k < N; ++k) p[k] += idx[d] * l.strides[k][d];
  }
  std::array<int64_t, N> inner;
  for (int k = 0; k < N; ++k) inner[k] = l.strides[k][last];
  int64_t col = idx[last];
  int64_t pos = begin;
  while (pos < end) {
    const int64_t n = std::min(l.shape[last] - col, end - pos);
    std::array<char*, N> q;
    for (int k = 0; k < N; ++k) q[k] = p[k] + col * inner[k];
    row(q, n, inner);
    pos += n;
    col = 0;
    // Carry into the outer dimensions.
    for (int d = last - 1; d >= 0; --d) {
      for (int k = 0; k < N; ++k) p[k] += l.strides[k][d];
      if (++idx[d] < l.shape[d]) break;
      for (int k = 0; k < N; ++k) p[k] -= l.strides[k][d] * l.shape[d];
      idx[d] = 0;
    }
  }
}

/// Visit every element of the layout, in parallel above kParallelThreshold elements. Split points are
/// aligned to 64 elements so that threads writing a contiguous output share no cache line.
template <int N, typename RowFn>
void ForEach(const StridedLayout<N>& l, const std::array<char*, N>& base, RowFn&& row) {
  if (l.numel == 0) return;
  ParallelFor(
      l.numel, [&](int64_t begin, int64_t end) { ForRange<N>(l, base, begin, end, row); }, l.numel, 64);
}

}  // namespace oar::host

#endif  // OAR_PLUGINS_COMMON_STRIDED_H_
