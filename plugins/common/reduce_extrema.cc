// Folding reductions and index reductions: max, min and prod over a set of axes (keepdim output), and
// argmax / argmin along one axis (docs/ops.md).
//
// max/min/prod fold one accumulator per output with an associative operation, so they share a layout
// with sum (reduction.h): unit-stride runs of the reduced elements are folded into 16 independent
// lanes (vectorisable), and when the kept elements are the unit-stride ones a vector of accumulators
// walks the reduced rows instead. NaN propagates through max/min (a NaN accumulator never changes).
// Work is split over outputs, or over the reduced elements when there are few outputs.
//
// argmax/argmin keep the first index on ties; a NaN counts as the extreme at its first position, so a
// scan stops at the first NaN.
#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "plugins/common/elementwise.h"
#include "oar/plugin/ops.h"
#include "plugins/common/kernel_util.h"
#include "plugins/common/reduction.h"
#include "plugins/common/strided.h"
#include "plugins/common/vec_lanes.h"

namespace oar::host {
namespace {

constexpr int64_t kColumnChunk = 1024;
constexpr int64_t kOutputBlock = 4096;

// ---- max, min, prod ---------------------------------------------------------------------------

template <typename T>
struct MaxFold {
  static constexpr const char* kName = OAR_OP_MAX;
  using Acc = ComputeT<T>;
  static Acc Init() {
    if constexpr (std::is_floating_point_v<Acc>) return -std::numeric_limits<Acc>::infinity();
    return std::numeric_limits<Acc>::lowest();
  }
  static Acc Combine(Acc acc, Acc v) { return (v > acc || IsNan(v)) ? v : acc; }
};

template <typename T>
struct MinFold {
  static constexpr const char* kName = OAR_OP_MIN;
  using Acc = ComputeT<T>;
  static Acc Init() {
    if constexpr (std::is_floating_point_v<Acc>) return std::numeric_limits<Acc>::infinity();
    return std::numeric_limits<Acc>::max();
  }
  static Acc Combine(Acc acc, Acc v) { return (v < acc || IsNan(v)) ? v : acc; }
};

// Integer products wrap: they are taken in uint64 (defined overflow) and narrowed at the end, which is
// the product modulo 2^bits.
template <typename T>
struct ProdFold {
  static constexpr const char* kName = OAR_OP_PROD;
  using Acc = std::conditional_t<std::is_integral_v<T>, uint64_t, ComputeT<T>>;
  static Acc Init() { return Acc(1); }
  static Acc Combine(Acc acc, Acc v) { return acc * v; }
};

/// Fold n elements at p (element stride `stride`) into acc, 16 lanes at a time for unit strides.
template <typename T, typename Fold>
typename Fold::Acc FoldRun(const T* p, int64_t n, int64_t stride, typename Fold::Acc acc) {
  using Acc = typename Fold::Acc;
  constexpr int kLanes = 16;
  if (stride != 1 || n < 2 * kLanes) {
    for (int64_t i = 0; i < n; ++i) acc = Fold::Combine(acc, static_cast<Acc>(ComputeT<T>(p[i * stride])));
    return acc;
  }
  // float max and min: the same lanes and order in vector registers (vec_lanes.h).
  if constexpr (std::is_same_v<T, float> && std::is_same_v<Fold, MaxFold<T>>) {
    return MaxFoldRun(p, n, acc);
  } else if constexpr (std::is_same_v<T, float> && std::is_same_v<Fold, MinFold<T>>) {
    return MinFoldRun(p, n, acc);
  }
  Acc lanes[kLanes];
  std::fill(lanes, lanes + kLanes, Fold::Init());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] = Fold::Combine(lanes[l], static_cast<Acc>(ComputeT<T>(p[i + l])));
  }
  for (; i < n; ++i) acc = Fold::Combine(acc, static_cast<Acc>(ComputeT<T>(p[i])));
  for (int l = 0; l < kLanes; ++l) acc = Fold::Combine(acc, lanes[l]);
  return acc;
}

/// acc[k - k0] = fold over reduced elements [r0, r1) of output k, for k in [k0, k1).
template <typename T, typename Fold>
void FoldPartial(const ReductionPlan& plan, const char* x, int64_t k0, int64_t k1, int64_t r0, int64_t r1,
                 typename Fold::Acc* acc) {
  using Acc = typename Fold::Acc;
  constexpr int64_t kSize = sizeof(T);
  char* base = const_cast<char*>(x);
  const bool column_like =
      plan.kept.inner_stride(0) == kSize && plan.reduced.inner_stride(0) != kSize && plan.kept.inner_extent() >= 4;
  if (plan.reduced.rank == 1 && plan.reduced.inner_stride(0) == kSize) {
    // Each output's reduced elements are one unit-stride run (the last axis): its [r0, r1), what the
    // walk below would fold in one call.
    ForRange<1>(plan.kept, {base}, k0, k1,
                [&](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>& s) {
                  for (int64_t j = 0; j < n; ++j) {
                    *acc++ = FoldRun<T, Fold>(reinterpret_cast<const T*>(p[0] + j * s[0]) + r0, r1 - r0, 1, Fold::Init());
                  }
                });
    return;
  }
  if (!column_like) {
    ForRange<1>(plan.kept, {base}, k0, k1,
                [&](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>& s) {
                  for (int64_t j = 0; j < n; ++j) {
                    Acc a = Fold::Init();
                    ForRange<1>(plan.reduced, {p[0] + j * s[0]}, r0, r1,
                                [&](const std::array<char*, 1>& q, int64_t m, const std::array<int64_t, 1>& rs) {
                                  a = FoldRun<T, Fold>(reinterpret_cast<const T*>(q[0]), m, rs[0] / kSize, a);
                                });
                    *acc++ = a;
                  }
                });
    return;
  }
  ForRange<1>(plan.kept, {base}, k0, k1, [&](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>&) {
    for (int64_t j0 = 0; j0 < n; j0 += kColumnChunk) {
      const int64_t w = std::min(kColumnChunk, n - j0);
      Acc* a = acc + j0;
      std::fill(a, a + w, Fold::Init());
      ForRange<1>(plan.reduced, {p[0] + j0 * kSize}, r0, r1,
                  [&](const std::array<char*, 1>& q, int64_t m, const std::array<int64_t, 1>& rs) {
                    for (int64_t r = 0; r < m; ++r) {
                      const T* src = reinterpret_cast<const T*>(q[0] + r * rs[0]);
                      if constexpr (std::is_same_v<T, float> && std::is_same_v<Fold, MaxFold<T>>) {
                        MaxFoldColumn(a, src, w);
                        continue;
                      } else if constexpr (std::is_same_v<T, float> && std::is_same_v<Fold, MinFold<T>>) {
                        MinFoldColumn(a, src, w);
                        continue;
                      }
#pragma omp simd
                      for (int64_t j = 0; j < w; ++j) a[j] = Fold::Combine(a[j], static_cast<Acc>(ComputeT<T>(src[j])));
                    }
                  });
    }
    acc += n;
  });
}

template <typename T, template <typename> class FoldOf>
void FoldReduce(const KernelCall& call) {
  using Fold = FoldOf<T>;
  using Acc = typename Fold::Acc;
  constexpr int64_t kSize = sizeof(T);
  CheckArity(call, 1, 1);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef x = call.input(0);
  const TensorRef out = call.output(0);
  const ReductionPlan plan = PlanReduction(call, x, out, call.GetInts("axes"), kSize);
  if (plan.outputs == 0) return;
  CheckContiguous(call, out, "the output");
  T* dst = out.data<T>();
  auto finish = [](Acc a) { return T(static_cast<ComputeT<T>>(a)); };
  if (plan.count == 0) {
    if constexpr (std::is_same_v<Fold, ProdFold<T>>) {
      std::fill(dst, dst + plan.outputs, T(ComputeT<T>(1)));  // the empty product
      return;
    } else {
      Invalid(call, "cannot take the " + std::string(Fold::kName) + " of an empty set (a reduced extent is 0)");
    }
  }
  const char* src = x.data<const char>();
  const int64_t work = plan.outputs * plan.count;
  const int threads = ThreadsFor(work);
  if (threads <= 1 || plan.outputs >= 8 * threads) {
    ParallelFor(
        plan.outputs,
        [&](int64_t begin, int64_t end) {
          std::vector<Acc> acc(std::min(kOutputBlock, end - begin));
          for (int64_t k = begin; k < end; k += kOutputBlock) {
            const int64_t k1 = std::min(end, k + kOutputBlock);
            FoldPartial<T, Fold>(plan, src, k, k1, 0, plan.count, acc.data());
            for (int64_t i = k; i < k1; ++i) dst[i] = finish(acc[i - k]);
          }
        },
        work, 16);
    return;
  }
  // Few outputs, long reductions: split the reduced elements, then fold the per-thread partials.
  std::vector<Acc> parts(static_cast<size_t>(threads * plan.outputs), Fold::Init());
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    const int64_t r0 = plan.count * t / threads;
    const int64_t r1 = plan.count * (t + 1) / threads;
    if (r0 < r1) FoldPartial<T, Fold>(plan, src, 0, plan.outputs, r0, r1, parts.data() + t * plan.outputs);
  }
  for (int64_t k = 0; k < plan.outputs; ++k) {
    Acc a = Fold::Init();
    for (int t = 0; t < threads; ++t) a = Fold::Combine(a, parts[t * plan.outputs + k]);
    dst[k] = finish(a);
  }
}

// ---- argmax, argmin ---------------------------------------------------------------------------

/// Whether v replaces the current best b (at a lower index): strictly better, or the first NaN.
template <bool kMax, typename C>
bool Replaces(C v, C b) {
  return !IsNan(b) && (IsNan(v) || (kMax ? v > b : v < b));
}

/// The best of n elements at p (element stride `stride`) and its index, first on ties.
template <bool kMax, typename T>
std::pair<ComputeT<T>, int64_t> ArgScan(const T* p, int64_t n, int64_t stride) {
  using C = ComputeT<T>;
  C best = C(p[0]);
  int64_t at = 0;
  for (int64_t i = 1; i < n && !IsNan(best); ++i) {
    const C v = C(p[i * stride]);
    if (Replaces<kMax>(v, best)) best = v, at = i;
  }
  return {best, at};
}

template <typename T, bool kMax>
void ArgReduce(const KernelCall& call) {
  using C = ComputeT<T>;
  constexpr int64_t kSize = sizeof(T);
  CheckArity(call, 1, 1);
  CheckDTypes(call, {kDTypeOf<T>, OAR_DTYPE_INT64});
  const TensorRef x = call.input(0);
  const TensorRef out = call.output(0);
  const int rank = x.rank();
  const int axis = RequireAxis(call, "axis", rank);
  if (out.rank() != rank) Invalid(call, "the output must keep the input's rank " + std::to_string(rank));
  const int64_t extent = rank == 0 ? 1 : x.dim(axis);
  const int64_t axis_stride = rank == 0 ? 1 : x.stride(axis);
  int64_t kept_shape[OAR_MAX_RANK], kept_strides[OAR_MAX_RANK];
  int kept_rank = 0;
  for (int d = 0; d < rank; ++d) {
    if (out.dim(d) != (d == axis ? 1 : x.dim(d))) {
      Invalid(call, "output dimension " + std::to_string(d) + " must be " + std::to_string(d == axis ? 1 : x.dim(d)));
    }
    if (d == axis) continue;
    kept_shape[kept_rank] = x.dim(d);
    kept_strides[kept_rank++] = x.stride(d);
  }
  const int64_t outputs = out.numel();
  if (outputs == 0) return;
  CheckContiguous(call, out, "the output");
  if (extent == 0) Invalid(call, "cannot take the index of an extreme over the empty axis " + std::to_string(axis));
  const auto kept = Collapse<1>({kept_shape, static_cast<size_t>(kept_rank)},
                                {std::span<const int64_t>(kept_strides, kept_rank)}, {kSize});
  int64_t* dst = out.data<int64_t>();
  char* src = x.data<char>();
  const int64_t work = outputs * extent;

  if (outputs < ThreadsFor(work)) {
    // A few long scans: split each along the axis and merge the pieces in order (an earlier piece wins
    // ties, so the first index on ties survives).
    ForRange<1>(kept, {src}, 0, outputs,
                [&](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>& s) {
                  for (int64_t j = 0; j < n; ++j, ++dst) {
                    const T* row = reinterpret_cast<const T*>(p[0] + j * s[0]);
                    const int pieces = ThreadsFor(extent);
                    std::vector<std::pair<C, int64_t>> part(pieces);
                    ParallelFor(
                        pieces,
                        [&](int64_t b, int64_t e) {
                          for (int64_t t = b; t < e; ++t) {
                            const int64_t i0 = extent * t / pieces, i1 = extent * (t + 1) / pieces;
                            part[t] = ArgScan<kMax>(row + i0 * axis_stride, i1 - i0, axis_stride);
                            part[t].second += i0;
                          }
                        },
                        extent);
                    std::pair<C, int64_t> best = part[0];
                    for (int t = 1; t < pieces; ++t) {
                      if (Replaces<kMax>(part[t].first, best.first)) best = part[t];
                    }
                    *dst = best.second;
                  }
                });
    return;
  }
  const bool column_like = kept.inner_stride(0) == kSize && axis_stride != 1 && kept.inner_extent() >= 4;
  ParallelFor(
      outputs,
      [&](int64_t begin, int64_t end) {
        int64_t* o = dst + begin;
        ForRange<1>(kept, {src}, begin, end,
                    [&](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>& s) {
                      if (!column_like) {
                        for (int64_t j = 0; j < n; ++j) {
                          *o++ = ArgScan<kMax>(reinterpret_cast<const T*>(p[0] + j * s[0]), extent, axis_stride).second;
                        }
                        return;
                      }
                      // Consecutive outputs are consecutive elements: walk the axis with a vector of bests.
                      for (int64_t j0 = 0; j0 < n; j0 += kColumnChunk) {
                        const int64_t w = std::min(kColumnChunk, n - j0);
                        C best[kColumnChunk];
                        const T* first = reinterpret_cast<const T*>(p[0]) + j0;
                        for (int64_t j = 0; j < w; ++j) best[j] = C(first[j]), o[j] = 0;
                        for (int64_t i = 1; i < extent; ++i) {
                          const T* row = first + i * axis_stride;
#pragma omp simd
                          for (int64_t j = 0; j < w; ++j) {
                            const C v = C(row[j]);
                            const bool take = Replaces<kMax>(v, best[j]);
                            best[j] = take ? v : best[j];
                            o[j] = take ? i : o[j];
                          }
                        }
                        o += w;
                      }
                    });
      },
      work, 16);
}

template <template <typename> class FoldOf, typename... Ts>
void AddFolds(std::vector<HostKernel>* kernels, TypeList<Ts...>) {
  (AddKernel(kernels, FoldOf<float>::kName, {kDTypeOf<Ts>, kDTypeOf<Ts>}, &GuardedKernel<&FoldReduce<Ts, FoldOf>>),
   ...);
}

template <typename... Ts>
void AddArgs(std::vector<HostKernel>* kernels, TypeList<Ts...>) {
  (AddKernel(kernels, "argmax", {kDTypeOf<Ts>, OAR_DTYPE_INT64}, &GuardedKernel<&ArgReduce<Ts, true>>), ...);
  (AddKernel(kernels, "argmin", {kDTypeOf<Ts>, OAR_DTYPE_INT64}, &GuardedKernel<&ArgReduce<Ts, false>>), ...);
}

}  // namespace

void AppendReduceExtremaKernels(std::vector<HostKernel>* kernels) {
  AddFolds<MaxFold>(kernels, NumericTypes{});
  AddFolds<MinFold>(kernels, NumericTypes{});
  AddFolds<ProdFold>(kernels, TypeList<float, double, Half, BFloat16, int32_t, int64_t>{});
  AddArgs(kernels, NumericTypes{});
}

}  // namespace oar::host
