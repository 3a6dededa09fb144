// Reduction host kernels: sum and mean over a set of axes, keeping reduced dimensions as extent 1.
//
// The input's dimensions split into "kept" ones (one output element each, in output order) and
// "reduced" ones; each group is collapsed on its own. Two layouts get dedicated loops:
//  - row-like: the reduced elements of one output lie in unit-stride runs -> pairwise summation of
//    each run (vectorised partial sums inside blocks), one output at a time;
//  - column-like: the kept elements are the unit-stride ones -> a vector of running sums over the
//    reduced rows, flushed every kFlush rows so float32 error grows with kFlush + n / kFlush, not n.
// Work is split over outputs when there are enough of them, otherwise over the reduced elements with
// per-thread partial sums.
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "plugins/common/kernel_util.h"
#include "plugins/common/reduction.h"
#include "plugins/common/strided.h"
#include "plugins/common/vec_lanes.h"

namespace oar::host {
namespace {

// float32 and the 16-bit floats accumulate in float, float64 in double, integers in uint64 (wrapping,
// so overflow is defined; the result is narrowed modulo 2^bits like every integer op here).
template <typename T>
using AccT =
    std::conditional_t<std::is_same_v<T, double>, double, std::conditional_t<std::is_integral_v<T>, uint64_t, float>>;

constexpr int64_t kPairwiseBlock = 256;
constexpr int64_t kColumnChunk = 1024;
constexpr int64_t kFlush = 256;
constexpr int64_t kOutputBlock = 4096;

/// Pairwise sum of n elements at p with element stride `stride`. Leaves of kPairwiseBlock elements
/// are summed into kLanes independent partial sums (which also vectorises the unit-stride loop), so
/// each rounding chain is at most kPairwiseBlock / kLanes additions long.
template <typename T, typename Acc>
Acc SumRun(const T* p, int64_t n, int64_t stride) {
  if (n <= kPairwiseBlock) {
    if constexpr (std::is_same_v<T, float> && std::is_same_v<Acc, float>) {
      if (stride == 1) return SumLeaf(p, n);  // the same lanes, in vector registers (vec_lanes.h)
    }
    constexpr int kLanes = 16;
    Acc lanes[kLanes] = {};
    int64_t i = 0;
    if (stride == 1) {
      for (; i + kLanes <= n; i += kLanes) {
        for (int l = 0; l < kLanes; ++l) lanes[l] += static_cast<Acc>(p[i + l]);
      }
    } else {
      for (; i + kLanes <= n; i += kLanes) {
        for (int l = 0; l < kLanes; ++l) lanes[l] += static_cast<Acc>(p[(i + l) * stride]);
      }
    }
    for (; i < n; ++i) lanes[i % kLanes] += static_cast<Acc>(p[i * stride]);
    for (int width = kLanes / 2; width > 0; width /= 2) {
      for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
    }
    return lanes[0];
  }
  const int64_t half = n / 2 / 32 * 32;  // keep the left halves aligned for the vector loop
  return SumRun<T, Acc>(p, half, stride) + SumRun<T, Acc>(p + half * stride, n - half, stride);
}

template <typename T>
class Reducer {
 public:
  using Acc = AccT<T>;
  static constexpr int64_t kSize = sizeof(T);

  Reducer(const StridedLayout<1>& kept, const StridedLayout<1>& reduced, const char* x)
      : kept_(kept), reduced_(reduced), x_(const_cast<char*>(x)) {
    column_like_ = kept_.inner_stride(0) == kSize && reduced_.inner_stride(0) != kSize && kept_.inner_extent() >= 4;
  }

  /// acc[k - k0] = sum over reduced elements [r0, r1) of output k, for k in [k0, k1).
  void Partial(int64_t k0, int64_t k1, int64_t r0, int64_t r1, Acc* acc) const {
    if (column_like_) {
      Columns(k0, k1, r0, r1, acc);
    } else {
      Rows(k0, k1, r0, r1, acc);
    }
  }

 private:
  void Rows(int64_t k0, int64_t k1, int64_t r0, int64_t r1, Acc* acc) const {
    if (reduced_.rank == 1 && reduced_.inner_stride(0) == kSize) {
      // Each output's reduced elements are one unit-stride run (sum over the last axis): the run is
      // [r0, r1) of it, what the walk below would visit in one call (0 + the run's sum, as there).
      ForRange<1>(kept_, {x_}, k0, k1, [&](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>& s) {
        for (int64_t j = 0; j < n; ++j) {
          Acc sum = 0;
          sum += SumRun<T, Acc>(reinterpret_cast<const T*>(p[0] + j * s[0]) + r0, r1 - r0, 1);
          *acc++ = sum;
        }
      });
      return;
    }
    ForRange<1>(kept_, {x_}, k0, k1, [&](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>& s) {
      for (int64_t j = 0; j < n; ++j) {
        Acc sum = 0;
        ForRange<1>(reduced_, {p[0] + j * s[0]}, r0, r1,
                    [&](const std::array<char*, 1>& q, int64_t m, const std::array<int64_t, 1>& rs) {
                      sum += SumRun<T, Acc>(reinterpret_cast<const T*>(q[0]), m, rs[0] / kSize);
                    });
        *acc++ = sum;
      }
    });
  }

  void Columns(int64_t k0, int64_t k1, int64_t r0, int64_t r1, Acc* acc) const {
    ForRange<1>(kept_, {x_}, k0, k1, [&](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>&) {
      for (int64_t j0 = 0; j0 < n; j0 += kColumnChunk) {
        const int64_t w = std::min(kColumnChunk, n - j0);
        Acc total[kColumnChunk] = {};
        Acc block[kColumnChunk] = {};
        int64_t rows = 0;
        auto flush = [&] {
          for (int64_t j = 0; j < w; ++j) total[j] += block[j];
          std::fill(block, block + w, Acc(0));
          rows = 0;
        };
        ForRange<1>(reduced_, {p[0] + j0 * kSize}, r0, r1,
                    [&](const std::array<char*, 1>& q, int64_t m, const std::array<int64_t, 1>& rs) {
                      int64_t r = 0;
                      // Four rows per pass: a quarter of the loads and stores of `block`.
                      for (; r + 4 <= m; r += 4) {
                        const T* s0 = reinterpret_cast<const T*>(q[0] + r * rs[0]);
                        const T* s1 = reinterpret_cast<const T*>(q[0] + (r + 1) * rs[0]);
                        const T* s2 = reinterpret_cast<const T*>(q[0] + (r + 2) * rs[0]);
                        const T* s3 = reinterpret_cast<const T*>(q[0] + (r + 3) * rs[0]);
#pragma omp simd
                        for (int64_t j = 0; j < w; ++j) {
                          block[j] += (static_cast<Acc>(s0[j]) + static_cast<Acc>(s1[j])) +
                                      (static_cast<Acc>(s2[j]) + static_cast<Acc>(s3[j]));
                        }
                        if ((rows += 4) >= kFlush) flush();
                      }
                      for (; r < m; ++r) {
                        const T* src = reinterpret_cast<const T*>(q[0] + r * rs[0]);
#pragma omp simd
                        for (int64_t j = 0; j < w; ++j) block[j] += static_cast<Acc>(src[j]);
                        if (++rows >= kFlush) flush();
                      }
                    });
        flush();
        std::copy(total, total + w, acc);
        acc += w;
      }
    });
  }

  StridedLayout<1> kept_;
  StridedLayout<1> reduced_;
  char* x_;
  bool column_like_ = false;
};

/// dst[k] = the sum (kMean: the mean) of output k's `count` reduced elements (count >= 2), for k in
/// [0, outputs): one thread per range of outputs when there are enough of them, else the reduced elements
/// split over threads with per-thread partial sums.
template <typename T, bool kMean>
void ReduceOutputs(const Reducer<T>& reducer, int64_t outputs, int64_t count, T* dst) {
  using Acc = AccT<T>;
  auto finish = [count](Acc a) -> T {
    if constexpr (kMean) {
      return T(static_cast<ComputeT<T>>(static_cast<double>(a) / static_cast<double>(count)));
    } else {
      return T(static_cast<ComputeT<T>>(a));
    }
  };

  const int64_t work = outputs * count;
  const int threads = ThreadsFor(work);
  if (threads <= 1 || outputs >= 8 * threads) {
    // Enough outputs to share out: each thread owns a range of them and sums their full extent.
    ParallelFor(
        outputs,
        [&](int64_t begin, int64_t end) {
          std::vector<Acc> acc(std::min(kOutputBlock, end - begin));
          for (int64_t k = begin; k < end; k += kOutputBlock) {
            const int64_t k1 = std::min(end, k + kOutputBlock);
            reducer.Partial(k, k1, 0, count, acc.data());
            for (int64_t i = k; i < k1; ++i) dst[i] = finish(acc[i - k]);
          }
        },
        work, 16);
    return;
  }
  // Few outputs, long reductions: split the reduced elements, then add the per-thread partial sums.
  std::vector<Acc> parts(static_cast<size_t>(threads * outputs), Acc(0));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    const int64_t r0 = count * t / threads;
    const int64_t r1 = count * (t + 1) / threads;
    if (r0 < r1) reducer.Partial(0, outputs, r0, r1, parts.data() + t * outputs);
  }
  for (int64_t k = 0; k < outputs; ++k) {
    Acc sum = 0;
    for (int t = 0; t < threads; ++t) sum += parts[t * outputs + k];
    dst[k] = finish(sum);
  }
}

template <typename T, bool kMean>
void Reduce(const KernelCall& call) {
  constexpr int64_t kSize = sizeof(T);
  CheckArity(call, 1, 1);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef x = call.input(0);
  const TensorRef out = call.output(0);
  const ReductionPlan plan = PlanReduction(call, x, out, call.GetInts("axes"), kSize);
  const int64_t outputs = plan.outputs;
  const int64_t count = plan.count;
  if (outputs == 0) return;
  CheckContiguous(call, out, "the output");
  T* dst = out.data<T>();

  if (count == 0) {  // reducing an empty set: the sum's identity, and 0/0 for the mean
    const T value = kMean ? Convert<T>(std::numeric_limits<double>::quiet_NaN()) : T(0);
    std::fill(dst, dst + outputs, value);
    return;
  }
  if (count == 1) {  // nothing to add up: a strided copy (x / 1 is exact for the mean too)
    const auto l = Collapse<2>(out.shape(), {out.strides(), x.strides()}, {kSize, kSize});
    ForEach<2>(l, {out.data<char>(), x.data<char>()},
               [](const std::array<char*, 2>& p, int64_t n, const std::array<int64_t, 2>& s) {
                 for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], p[1] + i * s[1], kSize);
               });
    return;
  }

  ReduceOutputs<T, kMean>(Reducer<T>(plan.kept, plan.reduced, x.data<const char>()), outputs, count, dst);
}

template <typename... Ts>
void AddSums(std::vector<HostKernel>* kernels, TypeList<Ts...>) {
  (kernels->push_back({"sum", {kDTypeOf<Ts>, kDTypeOf<Ts>, 0}, 2, &GuardedKernel<&Reduce<Ts, false>>}), ...);
}

template <typename... Ts>
void AddMeans(std::vector<HostKernel>* kernels, TypeList<Ts...>) {
  (kernels->push_back({"mean", {kDTypeOf<Ts>, kDTypeOf<Ts>, 0}, 2, &GuardedKernel<&Reduce<Ts, true>>}), ...);
}

}  // namespace

template <typename T>
T SumKernelRow(const T* p, int64_t n) {
  if (n == 1) return p[0];  // the kernel's copy
  AccT<T> sum = 0;
  sum += SumRun<T, AccT<T>>(p, n, 1);
  return T(static_cast<ComputeT<T>>(sum));
}
template float SumKernelRow(const float*, int64_t);
template double SumKernelRow(const double*, int64_t);

bool SumKernelByOutputs(int64_t outputs, int64_t count) {
  const int threads = ThreadsFor(outputs * count);
  return threads <= 1 || outputs >= 8 * threads;
}

template <typename T>
void SumKernelLastAxis(std::span<const int64_t> shape, const T* x, T* out) {
  constexpr int64_t kSize = sizeof(T);
  const int rank = static_cast<int>(shape.size());
  const int64_t count = shape[static_cast<size_t>(rank - 1)];
  int64_t outputs = 1;
  int64_t strides[OAR_MAX_RANK];
  for (int d = rank - 1; d >= 0; --d) {
    strides[d] = d == rank - 1 ? 1 : strides[d + 1] * shape[static_cast<size_t>(d + 1)];
    if (d < rank - 1) outputs *= shape[static_cast<size_t>(d)];
  }
  if (outputs == 0 || count == 0) return;
  if (count == 1) {
    std::copy(x, x + outputs, out);
    return;
  }
  // PlanReduction's split of a contiguous x reduced over its last dimension.
  const StridedLayout<1> kept =
      Collapse<1>(shape.first(static_cast<size_t>(rank - 1)), {std::span<const int64_t>(strides, rank - 1)}, {kSize});
  const StridedLayout<1> reduced =
      Collapse<1>(shape.last(1), {std::span<const int64_t>(strides + rank - 1, 1)}, {kSize});
  ReduceOutputs<T, false>(Reducer<T>(kept, reduced, reinterpret_cast<const char*>(x)), outputs, count, out);
}
template void SumKernelLastAxis(std::span<const int64_t>, const float*, float*);
template void SumKernelLastAxis(std::span<const int64_t>, const double*, double*);

void AppendReduceKernels(std::vector<HostKernel>* kernels) {
  AddSums(kernels, TypeList<float, double, Half, BFloat16, int32_t, int64_t>{});
  AddMeans(kernels, FloatTypes{});
}

}  // namespace oar::host
