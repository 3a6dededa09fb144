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
#include <cmath>
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

// The source of a reduction: x's elements themselves (fn null), or the values fn(ctx, offset, n, stride, k,
// k_step, out) writes: out[j] = f(element at `offset + j * stride`, output index `k + j * k_step`) for j < n
// (offsets in elements of a contiguous x). batch_norm's kernels sum (x - mean)^2 and products of the gradient
// with x that way, through the same loops in the same order as the composed ops sum the full-size tensors
// they would write first. Type-erased, so that one compiled Reducer<T> serves both: the additions, and which
// of two NaNs an addition keeps (the compiler's choice of operand order), are the same code.
template <typename T>
struct SourceMap {
  void (*fn)(const void* ctx, int64_t offset, int64_t n, int64_t stride, int64_t k, int64_t k_step, T* out) = nullptr;
  const void* ctx = nullptr;
};

template <typename T>
class Reducer {
 public:
  using Acc = AccT<T>;
  static constexpr int64_t kSize = sizeof(T);

  Reducer(const StridedLayout<1>& kept, const StridedLayout<1>& reduced, const char* x, SourceMap<T> map = {})
      : kept_(kept), reduced_(reduced), x_(const_cast<char*>(x)), map_(map) {
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
  // The mapped values of n elements from p (element stride *stride) for output k (+ k_step per element), in
  // `scratch` (*stride becomes 1); or p itself when nothing is mapped.
  const T* Source(const char* p, int64_t n, int64_t* stride, int64_t k, int64_t k_step, std::vector<T>* scratch) const {
    if (map_.fn == nullptr) return reinterpret_cast<const T*>(p);
    if (static_cast<int64_t>(scratch->size()) < n) scratch->resize(static_cast<size_t>(n));
    map_.fn(map_.ctx, (p - x_) / kSize, n, *stride, k, k_step, scratch->data());
    *stride = 1;
    return scratch->data();
  }

  void Rows(int64_t k0, int64_t k1, int64_t r0, int64_t r1, Acc* acc) const {
    std::vector<T> scratch;
    int64_t k = k0;
    if (reduced_.rank == 1 && reduced_.inner_stride(0) == kSize) {
      // Each output's reduced elements are one unit-stride run (sum over the last axis): the run is
      // [r0, r1) of it, what the walk below would visit in one call (0 + the run's sum, as there).
      ForRange<1>(kept_, {x_}, k0, k1, [&](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>& s) {
        for (int64_t j = 0; j < n; ++j, ++k) {
          Acc sum = 0;
          int64_t stride = 1;
          const T* src = Source(p[0] + j * s[0] + r0 * kSize, r1 - r0, &stride, k, 0, &scratch);
          sum += SumRun<T, Acc>(src, r1 - r0, stride);
          *acc++ = sum;
        }
      });
      return;
    }
    ForRange<1>(kept_, {x_}, k0, k1, [&](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>& s) {
      for (int64_t j = 0; j < n; ++j, ++k) {
        Acc sum = 0;
        ForRange<1>(reduced_, {p[0] + j * s[0]}, r0, r1,
                    [&](const std::array<char*, 1>& q, int64_t m, const std::array<int64_t, 1>& rs) {
                      int64_t stride = rs[0] / kSize;
                      const T* src = Source(q[0], m, &stride, k, 0, &scratch);
                      sum += SumRun<T, Acc>(src, m, stride);
                    });
        *acc++ = sum;
      }
    });
  }

  void Columns(int64_t k0, int64_t k1, int64_t r0, int64_t r1, Acc* acc) const {
    std::vector<T> scratch[4];
    int64_t unit = 1;  // a row's kept elements are unit-stride (column_like_), mapped or not
    int64_t k = k0;    // the output index of p[0]
    ForRange<1>(kept_, {x_}, k0, k1, [&](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>&) {
      for (int64_t j0 = 0; j0 < n; j0 += kColumnChunk) {
        const int64_t w = std::min(kColumnChunk, n - j0);
        const int64_t kj = k + j0;
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
                        const T* s0 = Source(q[0] + r * rs[0], w, &unit, kj, 1, &scratch[0]);
                        const T* s1 = Source(q[0] + (r + 1) * rs[0], w, &unit, kj, 1, &scratch[1]);
                        const T* s2 = Source(q[0] + (r + 2) * rs[0], w, &unit, kj, 1, &scratch[2]);
                        const T* s3 = Source(q[0] + (r + 3) * rs[0], w, &unit, kj, 1, &scratch[3]);
#pragma omp simd
                        for (int64_t j = 0; j < w; ++j) {
                          block[j] += (static_cast<Acc>(s0[j]) + static_cast<Acc>(s1[j])) +
                                      (static_cast<Acc>(s2[j]) + static_cast<Acc>(s3[j]));
                        }
                        if ((rows += 4) >= kFlush) flush();
                      }
                      for (; r < m; ++r) {
                        const T* src = Source(q[0] + r * rs[0], w, &unit, kj, 1, &scratch[0]);
#pragma omp simd
                        for (int64_t j = 0; j < w; ++j) block[j] += static_cast<Acc>(src[j]);
                        if (++rows >= kFlush) flush();
                      }
                    });
        flush();
        std::copy(total, total + w, acc);
        acc += w;
      }
      k += n;
    });
  }

  StridedLayout<1> kept_;
  StridedLayout<1> reduced_;
  char* x_;
  SourceMap<T> map_;
  bool column_like_ = false;
};

template <typename T, bool kMean>
T Finish(AccT<T> a, int64_t count) {
  if constexpr (kMean) {
    return T(static_cast<ComputeT<T>>(static_cast<double>(a) / static_cast<double>(count)));
  } else {
    return T(static_cast<ComputeT<T>>(a));
  }
}

/// dst[k] = the sum (or mean) of output k's `plan.count` > 1 reduced elements of the source (Reducer):
/// the outputs split over threads when there are enough of them, otherwise the reduced elements, with
/// per-thread partial sums added in thread order (so the bits depend on the thread count, as they did).
template <typename T, bool kMean>
void ReduceInto(const ReductionPlan& plan, const char* x, T* dst, SourceMap<T> map = {}) {
  using Acc = AccT<T>;
  const int64_t outputs = plan.outputs;
  const int64_t count = plan.count;
  const Reducer<T> reducer(plan.kept, plan.reduced, x, map);
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
            for (int64_t i = k; i < k1; ++i) dst[i] = Finish<T, kMean>(acc[i - k], count);
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
    dst[k] = Finish<T, kMean>(sum, count);
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
  if (outputs == 0) return;
  CheckContiguous(call, out, "the output");
  T* dst = out.data<T>();

  if (plan.count == 0) {  // reducing an empty set: the sum's identity, and 0/0 for the mean
    const T value = kMean ? Convert<T>(std::numeric_limits<double>::quiet_NaN()) : T(0);
    std::fill(dst, dst + outputs, value);
    return;
  }
  if (plan.count == 1) {  // nothing to add up: a strided copy (x / 1 is exact for the mean too)
    const auto l = Collapse<2>(out.shape(), {out.strides(), x.strides()}, {kSize, kSize});
    ForEach<2>(l, {out.data<char>(), x.data<char>()},
               [](const std::array<char*, 2>& p, int64_t n, const std::array<int64_t, 2>& s) {
                 for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], p[1] + i * s[1], kSize);
               });
    return;
  }
  ReduceInto<T, kMean>(plan, x.data<const char>(), dst);
}

// ---- batch_norm_train, batch_norm_train_grad ------------------------------------------------------------
// x [N, C] or [N, C, H, W], contiguous, with per-channel statistics over axes {0} or {0, 2, 3}. These are the
// composed ops of core/ops/nn.cc's batch_norm and of its VJP's chain, without the full-size tensors they
// write: each such tensor's elements are computed where they are read, with the same operations rounded to T
// in the same order, and every sum runs through ReduceInto with the plan the composed `mean` / `sum` make for
// a contiguous tensor of x's shape (the same split over threads, the same summation order). So the results
// are the composed ops' bit for bit, at every thread count (docs/ops.md, "batch_norm_train").

// Which channel element i of a contiguous x is in.
struct Channels {
  int64_t channels = 1;
  int64_t inner = 1;  // H * W, or 1 for [N, C]
  int64_t Of(int64_t i) const { return (i / inner) % channels; }
};

struct BatchNormPlans {
  Channels ch;
  ReductionPlan mean;  // `mean` over {0, 2, 3} (or {0}): batch_norm's statistics
  ReductionPlan sum;   // `sum` over the axes SumTo(t, [1, C, 1, 1]) reduces: the gradients' sums
};

BatchNormPlans PlanBatchNorm(const KernelCall& call, const TensorRef& x, int64_t elem_size) {
  const int rank = x.rank();
  if (rank != 2 && rank != 4) {
    Invalid(call, "x must be [N, C] or [N, C, H, W], got rank " + std::to_string(rank));
  }
  CheckContiguous(call, x, "x");
  BatchNormPlans p;
  p.ch.channels = x.dim(1);
  p.ch.inner = rank == 4 ? x.dim(2) * x.dim(3) : 1;
  std::vector<int64_t> mean_axes, sum_axes;
  for (int d = 0; d < rank; ++d) {
    if (d == 1) continue;
    mean_axes.push_back(d);
    if (x.dim(d) != 1) sum_axes.push_back(d);
  }
  p.mean = SplitReduction(x.shape(), x.strides(), mean_axes, elem_size);
  p.sum = SplitReduction(x.shape(), x.strides(), sum_axes, elem_size);
  return p;
}

// A SourceMap calling `map` (which must outlive it) as map(offset, n, stride, k, k_step, out).
template <typename T, typename Map>
SourceMap<T> MapOf(const Map& map) {
  return {[](const void* ctx, int64_t off, int64_t n, int64_t stride, int64_t k, int64_t k_step, T* out) {
            (*static_cast<const Map*>(ctx))(off, n, stride, k, k_step, out);
          },
          &map};
}

// dst[k] = the sum or mean of output k's elements (of x, or of what `map` makes of them) as the composed op
// gives it: an empty set sums to 0 and averages to NaN, a single element is copied (the composed ops' count
// == 1 path), else ReduceInto.
template <typename T, bool kMean>
void ReduceChannels(const ReductionPlan& plan, const T* x, T* dst, SourceMap<T> map = {}) {
  if (plan.count == 0) {
    std::fill(dst, dst + plan.outputs, kMean ? Convert<T>(std::numeric_limits<double>::quiet_NaN()) : T(0));
  } else if (plan.count == 1) {
    int64_t k = 0;
    ForRange<1>(plan.kept, {reinterpret_cast<char*>(const_cast<T*>(x))}, 0, plan.outputs,
                [&](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>& s) {
                  for (int64_t j = 0; j < n; ++j, ++k) {
                    const int64_t off = (p[0] + j * s[0] - reinterpret_cast<const char*>(x)) / int64_t{sizeof(T)};
                    if (map.fn == nullptr) {
                      dst[k] = x[off];
                    } else {
                      map.fn(map.ctx, off, 1, 1, k, 0, dst + k);
                    }
                  }
                });
  } else {
    ReduceInto<T, kMean>(plan, reinterpret_cast<const char*>(x), dst, map);
  }
}

// Every element of a contiguous [N, C, (H * W)] tensor with its channel, split over threads:
// fn(i0, n, c) for runs of n elements from i0 in channel c.
template <typename Fn>
void ForChannelRuns(const Channels& ch, int64_t numel, Fn&& fn) {
  const int64_t runs = ch.inner == 0 ? 0 : numel / ch.inner;
  ParallelFor(
      runs,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) fn(r * ch.inner, ch.inner, r % ch.channels);
      },
      numel);
}

template <typename T>
void CheckChannelVector(const KernelCall& call, const TensorRef& t, int64_t channels, const char* what) {
  if (t.rank() != 1 || t.dim(0) != channels) {
    Invalid(call, std::string(what) + " must be [" + std::to_string(channels) + "] (x's channels)");
  }
  CheckContiguous(call, t, what);
}

template <typename T>
void CheckStatistic(const KernelCall& call, const TensorRef& x, const TensorRef& t, const char* what) {
  bool ok = t.rank() == x.rank();
  for (int d = 0; ok && d < x.rank(); ++d) ok = t.dim(d) == (d == 1 ? x.dim(1) : 1);
  if (!ok) Invalid(call, std::string(what) + " must have x's keepdim statistics shape [1, C(, 1, 1)]");
  CheckContiguous(call, t, what);
}

// The operands of a BatchNormStep (vec_lanes.h) over a contiguous x: x and g full-size (g may be null), m,
// a and b per channel (a and b may be null: 0), and where kGradD stores d's gradient (full-size, or null).
template <typename T>
struct StepOperands {
  const T* x = nullptr;
  const T* g = nullptr;
  const T* m = nullptr;
  const T* a = nullptr;
  const T* b = nullptr;
  T* gd = nullptr;
};

// out[j] = BatchNormStep<kOp> of element `off + j * stride` in channel `k + j * ks`, for j < n (a SourceMap's
// contract): float32 runs within one channel as one vector run (BatchNormRun), the rest element by element;
// the same operations either way.
template <VecBatchNorm kOp, typename T>
void StepRun(const StepOperands<T>& o, int64_t off, int64_t n, int64_t stride, int64_t k, int64_t ks, T* out) {
  const auto at = [](const T* p, int64_t c) { return p == nullptr ? T(0) : p[c]; };
  if constexpr (std::is_same_v<T, float>) {
    if (stride == 1 && ks == 0) {
      BatchNormRun(kOp, o.x + off, o.g == nullptr ? nullptr : o.g + off, o.m[k], at(o.a, k), at(o.b, k), out,
                   o.gd == nullptr ? nullptr : o.gd + off, n);
      return;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    const int64_t i = off + j * stride, c = k + j * ks;
    T gd = 0;
    out[j] = BatchNormStep<kOp>(o.x[i], o.g == nullptr ? T(0) : o.g[i], o.m[c], at(o.a, c), at(o.b, c), &gd);
    if (kOp == VecBatchNorm::kGradD && o.gd != nullptr) o.gd[i] = gd;
  }
}

// dst[k] = the sum (kMean: mean) over `plan` of BatchNormStep<kOp>'s values, as ReduceChannels sums a tensor
// of them.
template <VecBatchNorm kOp, bool kMean, typename T>
void ReduceSteps(const ReductionPlan& plan, const StepOperands<T>& o, T* dst) {
  const auto map = [&o](int64_t off, int64_t n, int64_t stride, int64_t k, int64_t ks, T* out) {
    StepRun<kOp>(o, off, n, stride, k, ks, out);
  };
  ReduceChannels<T, kMean>(plan, o.x, dst, MapOf<T>(map));
}

// The statistics: mean = mean(x), var = mean((x - mean) * (x - mean)) per channel.
template <typename T>
void Statistics(const BatchNormPlans& p, const T* x, T* mean, T* var) {
  ReduceChannels<T, true>(p.mean, x, mean);
  ReduceSteps<VecBatchNorm::kSquare, true>(p.mean, StepOperands<T>{.x = x, .m = mean}, var);
}

// rsqrt(var + eps) as the add and rsqrt kernels give it (eps rounded to T first, as the 0-d constant is).
template <typename T>
T RsqrtOf(T t) {
  return T(1) / std::sqrt(t);
}

// What both kernels check first: six operands of T, x's layout (its plans returned), weight [C]; and eps.
template <typename T>
BatchNormPlans CheckBatchNorm(const KernelCall& call, const TensorRef& x, const TensorRef& w, T* eps) {
  constexpr int32_t t = kDTypeOf<T>;
  CheckArity(call, 3, 3);
  CheckDTypes(call, {t, t, t, t, t, t});
  BatchNormPlans p = PlanBatchNorm(call, x, sizeof(T));
  CheckChannelVector<T>(call, w, p.ch.channels, "weight");
  *eps = Convert<T>(RequireFloat(call, "eps"));
  return p;
}

// y = ((x - mean) * scale) + bias, scale = rsqrt(var + eps) * weight: batch_norm's training forward.
template <typename T>
void BatchNormTrain(const KernelCall& call) {
  const TensorRef x = call.input(0), w = call.input(1), b = call.input(2);
  const TensorRef y = call.output(0), mean = call.output(1), var = call.output(2);
  T eps;
  const BatchNormPlans p = CheckBatchNorm<T>(call, x, w, &eps);
  const int64_t channels = p.ch.channels;
  CheckChannelVector<T>(call, b, channels, "bias");
  CheckStatistic<T>(call, x, mean, "the mean");
  CheckStatistic<T>(call, x, var, "the variance");
  CheckSameShape(call, y, x, "y");
  CheckContiguous(call, y, "y");
  const T* xp = x.data<const T>();
  T* m = mean.data<T>();
  T* v = var.data<T>();
  Statistics<T>(p, xp, m, v);
  std::vector<T> scale(static_cast<size_t>(channels));
  const T* wp = w.data<const T>();
  const T* bp = b.data<const T>();
  for (int64_t c = 0; c < channels; ++c) scale[c] = RsqrtOf<T>(v[c] + eps) * wp[c];
  T* yp = y.data<T>();
  const StepOperands<T> affine{.x = xp, .m = m, .a = scale.data(), .b = bp};
  ForChannelRuns(p.ch, x.numel(), [&](int64_t i0, int64_t n, int64_t c) {
    StepRun<VecBatchNorm::kAffine>(affine, i0, n, 1, c, 0, yp + i0);
  });
}

// The gradients of batch_norm_train's y with respect to x, weight and bias: the composed ops' VJP chain
// (core/ops/vjp.cc, BatchNormTrainComposed), the statistics recomputed from x.
template <typename T>
void BatchNormTrainGrad(const KernelCall& call) {
  const TensorRef g = call.input(0), x = call.input(1), w = call.input(2);
  const TensorRef gx = call.output(0), gw = call.output(1), gb = call.output(2);
  T eps;
  const BatchNormPlans p = CheckBatchNorm<T>(call, x, w, &eps);
  const int64_t channels = p.ch.channels;
  CheckChannelVector<T>(call, gw, channels, "grad_weight");
  CheckChannelVector<T>(call, gb, channels, "grad_bias");
  CheckSameShape(call, g, x, "grad");
  CheckSameShape(call, gx, x, "grad_x");
  CheckContiguous(call, g, "grad");
  CheckContiguous(call, gx, "grad_x");
  const T* xp = x.data<const T>();
  const T* gp = g.data<const T>();
  const T* wp = w.data<const T>();
  const auto n_size = static_cast<size_t>(channels);
  std::vector<T> m(n_size), v(n_size), r(n_size), scale(n_size), gsc(n_size), c2(n_size), gm(n_size);
  Statistics<T>(p, xp, m.data(), v.data());
  for (int64_t c = 0; c < channels; ++c) {
    r[c] = RsqrtOf<T>(v[c] + eps);
    scale[c] = r[c] * wp[c];
  }
  // grad_bias = SumTo(g): the bias add's VJP.
  ReduceChannels<T, false>(p.sum, gp, gb.data<T>());
  // SumTo(g * d), d = x - mean: the scale's gradient (d * scale's VJP).
  ReduceSteps<VecBatchNorm::kProduct, false>(p.sum, StepOperands<T>{.x = xp, .g = gp, .m = m.data()}, gsc.data());
  // scale = rsqrt(var + eps) * weight, then rsqrt's VJP (g * rsqrt(t) / t * -0.5), the eps add's (identity)
  // and the variance mean's (g / n, broadcast): c2 multiplies d in each of d * d's two gradients.
  const T count = Convert<T>(static_cast<double>(std::max<int64_t>(p.mean.count, 1)));
  T* gwp = gw.data<T>();
  for (int64_t c = 0; c < channels; ++c) {
    const T gr = gsc[c] * wp[c];
    gwp[c] = gsc[c] * r[c];
    const T tv = v[c] + eps;
    const T gt = ((gr * RsqrtOf<T>(tv)) / tv) * T(-0.5);
    c2[c] = gt / count;
  }
  // d's gradient gd = (g * scale + q) + q with q = c2 * d (the engine adds the contributions in that order),
  // kept in grad_x as it is computed (each element once); x - mean's VJP sends -SumTo(gd) to the mean.
  T* gxp = gx.data<T>();
  ReduceSteps<VecBatchNorm::kGradD, false>(
      p.sum, StepOperands<T>{.x = xp, .g = gp, .m = m.data(), .a = scale.data(), .b = c2.data(), .gd = gxp}, gm.data());
  // x's gradient: d's, then the mean's (its gradient / n, broadcast) added to it.
  for (int64_t c = 0; c < channels; ++c) gm[c] = gm[c] / count;
  ForChannelRuns(p.ch, x.numel(), [&](int64_t i0, int64_t n, int64_t c) {
    const T e = gm[c];
    if constexpr (std::is_same_v<T, float>) {
      BinaryRun(VecBinary::kAdd, gxp + i0, 1, &e, 0, gxp + i0, n);  // gd + e, as the add kernel runs it
    } else {
      for (int64_t i = i0; i < i0 + n; ++i) gxp[i] = gxp[i] + e;
    }
  });
}

template <typename... Ts>
void AddBatchNorm(std::vector<HostKernel>* kernels, TypeList<Ts...>) {
  (AddKernel(kernels, "batch_norm_train",
             {kDTypeOf<Ts>, kDTypeOf<Ts>, kDTypeOf<Ts>, kDTypeOf<Ts>, kDTypeOf<Ts>, kDTypeOf<Ts>},
             &GuardedKernel<&BatchNormTrain<Ts>>),
   ...);
  (AddKernel(kernels, "batch_norm_train_grad",
             {kDTypeOf<Ts>, kDTypeOf<Ts>, kDTypeOf<Ts>, kDTypeOf<Ts>, kDTypeOf<Ts>, kDTypeOf<Ts>},
             &GuardedKernel<&BatchNormTrainGrad<Ts>>),
   ...);
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
  return Finish<T, false>(sum, n);
}
template float SumKernelRow(const float*, int64_t);
template double SumKernelRow(const double*, int64_t);

bool SumKernelByOutputs(int64_t outputs, int64_t count) {
  const int threads = ThreadsFor(outputs * count);
  return threads <= 1 || outputs >= 8 * threads;
}

template <typename T>
void SumKernelLastAxis(std::span<const int64_t> shape, const T* x, T* out) {
  const int rank = static_cast<int>(shape.size());
  int64_t strides[OAR_MAX_RANK];
  for (int d = rank - 1; d >= 0; --d) {
    strides[d] = d == rank - 1 ? 1 : strides[d + 1] * shape[static_cast<size_t>(d + 1)];
  }
  // PlanReduction's split of a contiguous x reduced over its last dimension.
  const int64_t last[1] = {rank - 1};
  const ReductionPlan plan =
      SplitReduction(shape, std::span<const int64_t>(strides, static_cast<size_t>(rank)), last, sizeof(T));
  if (plan.outputs == 0 || plan.count == 0) return;
  if (plan.count == 1) {
    std::copy(x, x + plan.outputs, out);
    return;
  }
  ReduceInto<T, false>(plan, reinterpret_cast<const char*>(x), out);
}
template void SumKernelLastAxis(std::span<const int64_t>, const float*, float*);
template void SumKernelLastAxis(std::span<const int64_t>, const double*, double*);

void AppendReduceKernels(std::vector<HostKernel>* kernels) {
  AddSums(kernels, TypeList<float, double, Half, BFloat16, int32_t, int64_t>{});
  AddMeans(kernels, FloatTypes{});
  AddBatchNorm(kernels, TypeList<float, double>{});
}

}  // namespace oar::host
