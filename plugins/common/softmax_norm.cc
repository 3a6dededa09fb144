// Softmax, log_softmax and layer_norm host kernels (docs/ops.md).
//
// softmax / log_softmax view the output as [outer, A, inner] with A the axis. When inner is 1 each row
// of A elements is contiguous in the output and is processed on its own (read straight from the input
// when that is unit-stride, through a float/double scratch row otherwise). Otherwise a block of up to
// kColumnBlock neighbouring columns (fewer for long axes, so the block stays in cache) is processed
// together, walking the axis three times (max, sum of exponentials, result), so the loops over the
// block are unit-stride. The maximum is subtracted before exponentiating, so no input overflows; sums
// of exponentials accumulate in double. Exponentials of float go through ExpN (vec_exp.h), four at a time.
//
// layer_norm normalises each row of the trailing N = prod(shape[axis:]) elements with two passes (mean,
// then the mean squared deviation), accumulated in double with 16 partial sums per pairwise block, then
// applies the weight and bias (in double, rounded once).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "oar/plugin/ops.h"
#include "plugins/common/kernel_util.h"
#include "plugins/common/pack.h"
#include "plugins/common/reduction.h"
#include "plugins/common/strided.h"
#include "plugins/common/vec_exp.h"
#include "plugins/common/vec_lanes.h"

namespace oar::host {
namespace {

constexpr int64_t kColumnBlock = 256;
// Exponentials and logarithms cost several times a load: weigh the work when deciding on threads.
constexpr int64_t kTranscendentalCost = 8;

/// float for float32 and the 16-bit floats, double for float64.
template <typename T>
using StatT = std::conditional_t<std::is_same_v<T, double>, double, float>;

/// Pairwise sum of f(i) for i in [0, n), with 16 partial sums in each block of 256.
template <typename Acc, typename F>
Acc PairwiseSum(int64_t n, F&& f, int64_t offset = 0) {
  if (n <= 256) {
    constexpr int kLanes = 16;
    Acc lanes[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) lanes[l] += f(offset + i + l);
    }
    for (; i < n; ++i) lanes[i % kLanes] += f(offset + i);
    for (int width = kLanes / 2; width > 0; width /= 2) {
      for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
    }
    return lanes[0];
  }
  const int64_t half = n / 2 / 32 * 32;
  return PairwiseSum<Acc>(half, f, offset) + PairwiseSum<Acc>(n - half, f, offset + half);
}

/// PairwiseSum<double> of double(p[i]) for float data (or for float data already widened to double): the
/// same recursion, with the leaves in vector registers (vec_lanes.h); bitwise the same sum.
template <typename In>
double PairwiseSumOf(const In* p, int64_t n) {
  if (n <= 256) return SumLeafAsDouble(p, n);
  const int64_t half = n / 2 / 32 * 32;
  return PairwiseSumOf(p, half) + PairwiseSumOf(p + half, n - half);
}

/// d[i] = double(p[i]) and PairwiseSumOf(d, n), in one pass over p (WidenSumLeaf's leaves).
inline double PairwiseWidenSum(const float* p, double* d, int64_t n) {
  if (n <= 256) return WidenSumLeaf(p, d, n);
  const int64_t half = n / 2 / 32 * 32;
  return PairwiseWidenSum(p, d, half) + PairwiseWidenSum(p + half, d + half, n - half);
}

/// PairwiseSum<double> of (double(p[i]) - mean)^2 for float data, likewise.
template <typename In>
double PairwiseSquaredDeviation(const In* p, int64_t n, double mean) {
  if (n <= 256) return SquaredDeviationLeaf(p, n, mean);
  const int64_t half = n / 2 / 32 * 32;
  return PairwiseSquaredDeviation(p, half, mean) + PairwiseSquaredDeviation(p + half, n - half, mean);
}

/// Sum of double(v[i]) (PairwiseSum; vectorised for float).
template <typename C>
double SumAsDouble(const C* v, int64_t n) {
  if constexpr (std::is_same_v<C, float>) {
    return PairwiseSumOf(v, n);
  } else {
    return PairwiseSum<double>(n, [&](int64_t i) { return static_cast<double>(v[i]); });
  }
}

/// Element strides of x's dimensions [begin, end) and their extents.
struct DimRange {
  int rank = 0;
  int64_t shape[OAR_MAX_RANK] = {};
  int64_t strides[OAR_MAX_RANK] = {};

  DimRange(const TensorRef& t, int begin, int end) {
    for (int d = begin; d < end; ++d) {
      shape[rank] = t.dim(d);
      strides[rank++] = t.stride(d);
    }
  }
  StridedLayout<1> Layout(int64_t elem_size) const {
    return Collapse<1>({shape, static_cast<size_t>(rank)}, {std::span<const int64_t>(strides, rank)}, {elem_size});
  }
};

// ---- softmax, log_softmax ---------------------------------------------------------------------

/// Softmax (or log-softmax) of the n values v[0..n) into r[0..n) (r may alias v).
template <bool kLog, typename C>
void SoftmaxRow(const C* v, C* r, int64_t n) {
  // A NaN is skipped here but poisons the sum below, so its whole row becomes NaN either way.
  C m = -std::numeric_limits<C>::infinity();
  if constexpr (std::is_same_v<C, float>) {
    m = RowMax(v, n);  // the same loop's result, vectorised (vec_lanes.h)
  } else {
    for (int64_t i = 0; i < n; ++i) m = v[i] > m ? v[i] : m;
  }
  if constexpr (kLog) {
    // r may alias v, which is still needed: the exponentials go through a block on the stack.
    constexpr int64_t kBlock = 256;
    [[maybe_unused]] C e[kBlock];
    double sum = 0;
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t w = std::min(kBlock, n - b);
      if constexpr (std::is_same_v<C, float>) {
        // e^(v - m), the difference rounded first, summed as SumAsDouble(e, w) (one leaf) in one pass
        // without storing e (vec_exp.h)
        sum += ExpOfDifferenceSumLeaf(v + b, m, w);
      } else {
        for (int64_t i = 0; i < w; ++i) e[i] = v[b + i] - m;
        ExpN(e, e, w);
        sum += SumAsDouble(e, w);
      }
    }
    // (v - m) - log(sum), never v - (m + log(sum)): near |m| = 1e4 the float sum m + log(sum) would
    // round to m's ulp (~1e-3).
    const C lse = static_cast<C>(std::log(sum));
    if constexpr (std::is_same_v<C, float>) {  // the same two subtractions per element, on wide vectors
      SubTwiceRun(v, m, lse, r, n);
    } else {
      for (int64_t i = 0; i < n; ++i) r[i] = (v[i] - m) - lse;
    }
  } else {
    // The exponentials are stored for the scaling below: summing them in the same loop (ExpOfDifferenceSumLeaf's
    // loop with a store, tried) ran fewer instructions but slower (docs/PERFORMANCE.md, h18d).
    if constexpr (std::is_same_v<C, float>) {
      ExpOfDifferenceN(v, m, r, n);
    } else {
      for (int64_t i = 0; i < n; ++i) r[i] = v[i] - m;
      ExpN(r, r, n);
    }
    const C inv = static_cast<C>(1.0 / SumAsDouble(r, n));
    if constexpr (std::is_same_v<C, float>) {
      BinaryRun(VecBinary::kMul, r, 1, &inv, 0, r, n);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) r[i] *= inv;
    }
  }
}

/// Softmax (kLog: log_softmax) of x along `axis` into out (x's shape, contiguous, checked by the caller).
template <typename T, bool kLog>
void SoftmaxInto(const TensorRef& x, const TensorRef& out, int axis) {
  using C = StatT<T>;
  constexpr int64_t kSize = sizeof(T);
  const int rank = x.rank();
  const int64_t extent = rank == 0 ? 1 : x.dim(axis);
  const int64_t axis_stride = rank == 0 ? 1 : x.stride(axis);
  int64_t inner = 1;
  for (int d = axis + 1; d < rank; ++d) inner *= x.dim(d);
  const int64_t outer = out.numel() / (extent * inner);
  const auto outer_layout = DimRange(x, 0, std::min(axis, rank)).Layout(kSize);
  char* src = x.data<char>();
  T* dst = out.data<T>();
  const int64_t work = out.numel() * kTranscendentalCost;

  if (inner == 1) {
    ParallelFor(
        outer,
        [&](int64_t begin, int64_t end) {
          std::vector<C> scratch;
          T* o = dst + begin * extent;
          ForRange<1>(outer_layout, {src}, begin, end,
                      [&](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>& s) {
                        for (int64_t j = 0; j < n; ++j, o += extent) {
                          const T* row = reinterpret_cast<const T*>(p[0] + j * s[0]);
                          if constexpr (std::is_same_v<T, C>) {
                            if (axis_stride == 1) {
                              SoftmaxRow<kLog>(row, o, extent);
                              continue;
                            }
                            for (int64_t i = 0; i < extent; ++i) o[i] = row[i * axis_stride];
                            SoftmaxRow<kLog>(o, o, extent);
                          } else {
                            scratch.resize(extent);
                            for (int64_t i = 0; i < extent; ++i) scratch[i] = C(row[i * axis_stride]);
                            SoftmaxRow<kLog>(scratch.data(), scratch.data(), extent);
                            for (int64_t i = 0; i < extent; ++i) o[i] = T(scratch[i]);
                          }
                        }
                      });
        },
        work);
    return;
  }

  // Columns: blocks of up to kColumnBlock neighbouring inner positions of one outer index.
  const auto inner_layout = DimRange(x, axis + 1, rank).Layout(kSize);
  const bool inner_dense = inner_layout.rank == 1 && inner_layout.inner_stride(0) == kSize;
  // Narrow the block for long axes so that its three walks stay in cache (~128 KiB per block).
  const int64_t block = std::clamp<int64_t>((int64_t{128} << 10) / (extent * kSize), 16, kColumnBlock);
  const int64_t blocks_per_outer = (inner + block - 1) / block;
  std::vector<char*> outer_base(outer);
  ForRange<1>(outer_layout, {src}, 0, outer,
              [&, k = int64_t{0}](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>& s) mutable {
                for (int64_t j = 0; j < n; ++j) outer_base[k++] = p[0] + j * s[0];
              });
  ParallelFor(
      outer * blocks_per_outer,
      [&](int64_t begin, int64_t end) {
        C v[kColumnBlock], m[kColumnBlock];
        [[maybe_unused]] C lse[kColumnBlock];  // log_softmax only
        double sum[kColumnBlock];
        for (int64_t b = begin; b < end; ++b) {
          const int64_t o = b / blocks_per_outer;
          const int64_t j0 = (b % blocks_per_outer) * block;
          const int64_t w = std::min(block, inner - j0);
          T* out_plane = dst + o * extent * inner + j0;
          // Converts row a of the block into v.
          auto load = [&](int64_t a) {
            char* row = outer_base[o] + a * axis_stride * kSize;
            if (inner_dense) {
              const T* r = reinterpret_cast<const T*>(row) + j0;
              for (int64_t j = 0; j < w; ++j) v[j] = C(r[j]);
              return;
            }
            int64_t j = 0;
            ForRange<1>(inner_layout, {row}, j0, j0 + w,
                        [&](const std::array<char*, 1>& q, int64_t n, const std::array<int64_t, 1>& qs) {
                          for (int64_t i = 0; i < n; ++i) v[j++] = C(*reinterpret_cast<const T*>(q[0] + i * qs[0]));
                        });
          };
          std::fill(m, m + w, -std::numeric_limits<C>::infinity());
          for (int64_t a = 0; a < extent; ++a) {
            load(a);
            for (int64_t j = 0; j < w; ++j) m[j] = (v[j] > m[j] || v[j] != v[j]) ? v[j] : m[j];
          }
          std::fill(sum, sum + w, 0.0);
          for (int64_t a = 0; a < extent; ++a) {
            load(a);
            T* r = out_plane + a * inner;
            for (int64_t j = 0; j < w; ++j) v[j] -= m[j];
            ExpN(v, v, w);
            for (int64_t j = 0; j < w; ++j) {
              sum[j] += v[j];
              if constexpr (std::is_same_v<T, C> && !kLog) r[j] = v[j];  // rescaled below, not recomputed
            }
          }
          for (int64_t j = 0; j < w; ++j) {
            if constexpr (kLog) {
              lse[j] = static_cast<C>(std::log(sum[j]));  // applied as (x - max) - lse, as in SoftmaxRow
            } else {
              sum[j] = 1.0 / sum[j];
            }
          }
          for (int64_t a = 0; a < extent; ++a) {
            T* r = out_plane + a * inner;
            if constexpr (std::is_same_v<T, C> && !kLog) {
              for (int64_t j = 0; j < w; ++j) r[j] = r[j] * static_cast<C>(sum[j]);
              continue;
            }
            load(a);
            for (int64_t j = 0; j < w; ++j) {
              if constexpr (kLog) {
                r[j] = T((v[j] - m[j]) - lse[j]);
              } else {
                r[j] = T(std::exp(v[j] - m[j]) * static_cast<C>(sum[j]));
              }
            }
          }
        }
      },
      work);
}

template <typename T, bool kLog>
void Softmax(const KernelCall& call) {
  CheckArity(call, 1, 1);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef x = call.input(0);
  const TensorRef out = call.output(0);
  CheckSameShape(call, x, out, "input 0");
  const int axis = RequireAxis(call, "axis", x.rank());
  if (out.numel() == 0) return;
  CheckContiguous(call, out, "the output");
  SoftmaxInto<T, kLog>(x, out, axis);
}

/// SoftmaxRow<true> into l and SoftmaxRow<false> into r of one float row, n <= 256 (one block of the log
/// path's exponentials): the maximum, the exponentials of the differences (written to r, as SoftmaxRow<false>
/// writes them) and their sum are the same values in both, so they are computed once; every other operation
/// is the one SoftmaxRow performs. No aliasing among v, l and r.
void SoftmaxPairRow(const float* v, float* l, float* r, int64_t n) {
  const float m = RowMax(v, n);
  ExpOfDifferenceN(v, m, r, n);
  const double s = SumAsDouble(r, n);  // the log path's sum over its one block (0 + s is s: s >= 0 or NaN)
  const float lse = static_cast<float>(std::log(s));
  SubTwiceRun(v, m, lse, l, n);
  const float inv = static_cast<float>(1.0 / s);
  BinaryRun(VecBinary::kMul, r, 1, &inv, 0, r, n);
}

/// fused_log_softmax: log_softmax(x) into output 0 and softmax(x) into output 1, bitwise the two kernels'
/// results. Float32 rows of up to 256 contiguous elements along the last axis share the maximum, the
/// exponentials and their sum (SoftmaxPairRow); any other case runs the two kernels' code one after the other.
template <typename T>
void FusedLogSoftmax(const KernelCall& call) {
  CheckArity(call, 1, 2);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef x = call.input(0);
  const TensorRef lo = call.output(0);
  const TensorRef so = call.output(1);
  CheckSameShape(call, x, lo, "input 0");
  CheckSameShape(call, x, so, "input 0");
  const int rank = x.rank();
  // A direct op: its axis reaches the kernel as given, so a negative one counts from the end here.
  int64_t given = RequireInt(call, OAR_OP_FUSED_LOG_SOFTMAX_ATTR_AXIS);
  if (given < 0) given += std::max(rank, 1);
  if (given < 0 || given >= std::max(rank, 1)) {
    Invalid(call, "attribute 'axis' is out of range for a rank-" + std::to_string(rank) + " x");
  }
  const int axis = static_cast<int>(given);
  if (x.numel() == 0) return;
  CheckContiguous(call, lo, "output 0");
  CheckContiguous(call, so, "output 1");
  // The shared row loop writes the exponentials into the softmax result before it reads x again.
  if (lo.data<char>() == so.data<char>() || so.data<char>() == x.data<char>()) {
    Invalid(call, "the outputs must not share memory with each other, nor the softmax result with x");
  }
  const int64_t extent = rank == 0 ? 1 : x.dim(axis);
  if constexpr (std::is_same_v<T, float>) {
    if (rank >= 1 && axis == rank - 1 && x.stride(axis) == 1 && extent <= 256) {
      const int64_t outer = x.numel() / extent;
      const auto outer_layout = DimRange(x, 0, axis).Layout(sizeof(float));
      char* src = x.data<char>();
      ParallelFor(
          outer,
          [&](int64_t begin, int64_t end) {
            float* l = lo.data<float>() + begin * extent;
            float* r = so.data<float>() + begin * extent;
            ForRange<1>(outer_layout, {src}, begin, end,
                        [&](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>& s) {
                          for (int64_t j = 0; j < n; ++j, l += extent, r += extent) {
                            SoftmaxPairRow(reinterpret_cast<const float*>(p[0] + j * s[0]), l, r, extent);
                          }
                        });
          },
          x.numel() * kTranscendentalCost);
      return;
    }
  }
  SoftmaxInto<T, true>(x, lo, axis);
  SoftmaxInto<T, false>(x, so, axis);
}

// ---- fused_masked_softmax, fused_masked_softmax_grad ------------------------------------------------

/// The rows of a masked softmax's operands: x's (or grad's) leading dims, with the byte strides of up to three
/// T operands (x; or grad, y) and the bool mask broadcast against them (right-aligned; extent 1 or absent: 0).
template <int N>
struct MaskedRows {
  int64_t rows = 0, n = 0;        // rows of n elements along the last axis
  std::array<int64_t, N> step{};  // each operand's element stride along the last axis (0: broadcast)
  StridedLayout<N> outer;         // the leading dims, byte strides (operands, then mask, then out)
};

template <int N>
MaskedRows<N> PlanMaskedRows(const KernelCall& call, std::span<const TensorRef> ts, const TensorRef& mask,
                             const TensorRef& out, std::array<int64_t, N> sizes) {
  const TensorRef& x = ts[0];
  const int r = x.rank();
  if (r < 1) Invalid(call, "the softmax operand must have rank >= 1");
  if (mask.rank() > r) Invalid(call, "the mask must broadcast against " + x.ShapeString());
  std::array<std::array<int64_t, OAR_MAX_RANK>, N> st{};
  for (size_t k = 0; k < ts.size(); ++k) {
    for (int d = 0; d < r; ++d) st[k][static_cast<size_t>(d)] = ts[k].stride(d);
  }
  for (int d = 0; d < r; ++d) {
    const int dm = d - (r - mask.rank());
    if (dm < 0 || mask.dim(dm) == 1) continue;  // broadcast: stride 0
    if (mask.dim(dm) != x.dim(d))
      Invalid(call, "the mask " + mask.ShapeString() + " must broadcast against " + x.ShapeString());
    st[ts.size()][static_cast<size_t>(d)] = mask.stride(dm);
  }
  for (int d = 0; d < r; ++d) st[N - 1][static_cast<size_t>(d)] = out.stride(d);
  MaskedRows<N> m;
  m.n = x.dim(r - 1);
  m.rows = x.numel() / std::max<int64_t>(m.n, 1);
  for (int k = 0; k < N; ++k) m.step[static_cast<size_t>(k)] = st[static_cast<size_t>(k)][static_cast<size_t>(r - 1)];
  std::array<std::span<const int64_t>, N> spans;
  for (int k = 0; k < N; ++k)
    spans[static_cast<size_t>(k)] = std::span<const int64_t>(st[static_cast<size_t>(k)].data(), r - 1);
  m.outer = Collapse<N>(x.shape().first(static_cast<size_t>(r - 1)), spans, sizes);
  return m;
}

/// o[i] = src[i * step] (o contiguous, not src).
template <typename T>
inline void GatherRow(const T* src, int64_t step, T* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = src[i * step];
}

/// o[i] = a[i] * b (b broadcast) or a[i] * c[i], one IEEE multiplication each, the operands in this order (the
/// mul kernel's: BinaryRun for float, whose every width gives these bits).
template <typename T>
inline void MulRun(const T* a, const T* b, int64_t b_step, T* o, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    BinaryRun(VecBinary::kMul, a, 1, b, b_step, o, n);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = a[i] * b[i * b_step];
  }
}

#if defined(__x86_64__)
/// SelectRun's unit-stride float loop, eight lanes at a time: a blend moves the bits of either side.
[[gnu::target("avx2")]] void SelectRunAvx2(const bool* mask, float value, float* o, int64_t n) {
  const __m256 v = _mm256_set1_ps(value);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i m = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mask + i)));
    const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(m, _mm256_setzero_si256()));
    _mm256_storeu_ps(o + i, _mm256_blendv_ps(v, _mm256_loadu_ps(o + i), keep));
  }
  for (; i < n; ++i) {
    if (!mask[i]) o[i] = value;
  }
}
#endif

/// o[i] = mask[i * step] ? o[i] : value (where's selection, moved as bits).
template <typename T>
void SelectRun(const bool* mask, int64_t step, T value, T* o, int64_t n) {
  if (step == 0) {
    if (!mask[0]) std::fill(o, o + n, value);
    return;
  }
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    static const bool avx2 = __builtin_cpu_supports("avx2");
    if (step == 1 && avx2) {
      SelectRunAvx2(mask, value, o, n);
      return;
    }
  }
#endif
  for (int64_t i = 0; i < n; ++i) {
    if (!mask[i * step]) o[i] = value;
  }
}

/// fused_masked_softmax(x, scale, mask, fill) = softmax(where(mask, x * scale, fill)) over x's last axis, bitwise
/// the mul, where and softmax kernels: each row is x * scale (mul), the mask's selection (where), then the
/// softmax kernel's row (SoftmaxRow, as the kernel runs it on a contiguous row of the last axis), computed in
/// the output row.
template <typename T>
void FusedMaskedSoftmax(const KernelCall& call) {
  CheckArity(call, 4, 1);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>, OAR_DTYPE_BOOL, kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef x = call.input(0), mask = call.input(2), out = call.output(0);
  CheckSameShape(call, x, out, "input 0 (x)");
  if (call.input(1).rank() != 0 || call.input(3).rank() != 0) Invalid(call, "scale and fill must be 0-d");
  if (x.numel() == 0) return;
  CheckContiguous(call, out, "the output");
  if (out.data<char>() == x.data<char>()) Invalid(call, "the output must not be x's memory");
  const T scale = *call.input(1).data<const T>(), fill = *call.input(3).data<const T>();
  const TensorRef ts[] = {x};
  const MaskedRows<3> m = PlanMaskedRows<3>(call, ts, mask, out, {sizeof(T), 1, sizeof(T)});
  const int64_t n = m.n;
  ParallelFor(
      m.rows,
      [&](int64_t begin, int64_t end) {
        ForRange<3>(m.outer, {x.data<char>(), mask.data<char>(), out.data<char>()}, begin, end,
                    [&](const std::array<char*, 3>& p, int64_t rows, const std::array<int64_t, 3>& s) {
                      for (int64_t j = 0; j < rows; ++j) {
                        const T* xr = reinterpret_cast<const T*>(p[0] + j * s[0]);
                        const bool* mr = reinterpret_cast<const bool*>(p[1] + j * s[1]);
                        T* o = reinterpret_cast<T*>(p[2] + j * s[2]);
                        if (m.step[0] == 1) {
                          MulRun(xr, &scale, 0, o, n);
                        } else {
                          GatherRow(xr, m.step[0], o, n);
                          MulRun(o, &scale, 0, o, n);
                        }
                        SelectRun(mr, m.step[1], fill, o, n);
                        SoftmaxRow<false>(o, o, n);
                      }
                    });
      },
      x.numel() * kTranscendentalCost);
}

/// fused_masked_softmax_grad(grad, y, mask, zero, scale) = where(mask, y * (grad - sum(grad * y)), zero) * scale,
/// the sum over the last axis: bitwise the mul, sum, sub, mul, where and mul kernels. The products grad * y go
/// into the output row and are summed there as the sum kernel sums a row (SumKernelRow) where that kernel sums
/// each output whole on one thread; otherwise the products of all rows are written first and summed by the
/// kernel's own split (SumKernelLastAxis). Then, per row: grad - s, y * that, the mask's selection, * scale.
template <typename T>
void FusedMaskedSoftmaxGrad(const KernelCall& call) {
  CheckArity(call, 5, 1);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>, OAR_DTYPE_BOOL, kDTypeOf<T>, kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef g = call.input(0), y = call.input(1), mask = call.input(2), out = call.output(0);
  CheckSameShape(call, g, out, "input 0 (grad)");
  CheckSameShape(call, y, out, "input 1 (y)");
  if (call.input(3).rank() != 0 || call.input(4).rank() != 0) Invalid(call, "zero and scale must be 0-d");
  if (g.numel() == 0) return;
  CheckContiguous(call, out, "the output");
  // The output row holds the products (and then grad - s) while grad and y are still read.
  if (out.data<char>() == g.data<char>() || out.data<char>() == y.data<char>()) {
    Invalid(call, "the output must not be grad's or y's memory");
  }
  const T zero = *call.input(3).data<const T>(), scale = *call.input(4).data<const T>();
  const TensorRef ts[] = {g, y};
  const MaskedRows<4> m = PlanMaskedRows<4>(call, ts, mask, out, {sizeof(T), sizeof(T), 1, sizeof(T)});
  const int64_t n = m.n;
  const bool by_rows = SumKernelByOutputs(m.rows, n);
  std::vector<T> sums(by_rows ? 0 : static_cast<size_t>(m.rows));
  const std::array<char*, 4> base = {g.data<char>(), y.data<char>(), mask.data<char>(), out.data<char>()};
  // pass 0 (only when the sum kernel splits rows over threads): every row's products, then their sums;
  // pass 1: each row's result.
  for (int pass = by_rows ? 1 : 0; pass < 2; ++pass) {
    if (pass == 1 && !by_rows) SumKernelLastAxis<T>(out.shape(), out.data<const T>(), sums.data());
    ParallelFor(
        m.rows,
        [&](int64_t begin, int64_t end) {
          std::vector<T> gt, yt;  // grad's and y's row when not contiguous
          int64_t row = begin;
          ForRange<4>(m.outer, base, begin, end,
                      [&](const std::array<char*, 4>& p, int64_t rows, const std::array<int64_t, 4>& s) {
                        for (int64_t j = 0; j < rows; ++j, ++row) {
                          const T* gr = reinterpret_cast<const T*>(p[0] + j * s[0]);
                          const T* yr = reinterpret_cast<const T*>(p[1] + j * s[1]);
                          const bool* mr = reinterpret_cast<const bool*>(p[2] + j * s[2]);
                          T* o = reinterpret_cast<T*>(p[3] + j * s[3]);
                          if (m.step[0] != 1) {
                            gt.resize(static_cast<size_t>(n));
                            GatherRow(gr, m.step[0], gt.data(), n);
                            gr = gt.data();
                          }
                          if (m.step[1] != 1) {
                            yt.resize(static_cast<size_t>(n));
                            GatherRow(yr, m.step[1], yt.data(), n);
                            yr = yt.data();
                          }
                          if (pass == 0) {
                            MulRun(gr, yr, 1, o, n);  // mul(grad, y)
                            continue;
                          }
                          T sum;
                          if (by_rows) {
                            MulRun(gr, yr, 1, o, n);
                            sum = SumKernelRow(o, n);
                          } else {
                            sum = sums[static_cast<size_t>(row)];
                          }
                          if constexpr (std::is_same_v<T, float>) {  // sub(grad, s)
                            BinaryRun(VecBinary::kSub, gr, 1, &sum, 0, o, n);
                          } else {
                            for (int64_t i = 0; i < n; ++i) o[i] = gr[i] - sum;
                          }
                          MulRun(yr, o, 1, o, n);  // mul(y, d)
                          SelectRun(mr, m.step[2], zero, o, n);
                          MulRun(o, &scale, 0, o, n);
                        }
                      });
        },
        g.numel() * 4);
  }
}

// ---- layer_norm -------------------------------------------------------------------------------

template <typename T>
void LayerNorm(const KernelCall& call) {
  using S = StatT<T>;
  constexpr int64_t kSize = sizeof(T);
  CheckArity(call, 3, 3);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>, kDTypeOf<T>, kDTypeOf<T>, kDTypeOf<S>, kDTypeOf<S>});
  const TensorRef x = call.input(0);
  const TensorRef weight = call.input(1);
  const TensorRef bias = call.input(2);
  const TensorRef y = call.output(0);
  const TensorRef mean_out = call.output(1);
  const TensorRef rstd_out = call.output(2);
  const int rank = x.rank();
  const int axis = RequireAxis(call, "axis", rank);
  const double eps = RequireFloat(call, "eps");
  CheckSameShape(call, y, x, "output 0 (y)");
  const int norm_rank = std::max(rank - axis, 0);
  for (const auto& [t, what] : {std::pair{&weight, "input 1 (weight)"}, std::pair{&bias, "input 2 (bias)"}}) {
    bool ok = t->rank() == norm_rank;
    for (int d = 0; ok && d < norm_rank; ++d) ok = t->dim(d) == x.dim(axis + d);
    if (!ok) {
      Invalid(call, std::string(what) + " must have the normalised shape x.shape[" + std::to_string(axis) + ":]");
    }
  }
  for (const auto& [t, what] : {std::pair{&mean_out, "output 1 (mean)"}, std::pair{&rstd_out, "output 2 (rstd)"}}) {
    bool ok = t->rank() == rank;
    for (int d = 0; ok && d < rank; ++d) ok = t->dim(d) == (d < axis ? x.dim(d) : 1);
    if (!ok) Invalid(call, std::string(what) + " must have x's shape with the normalised dimensions as 1");
  }
  const int64_t rows = mean_out.numel();
  if (rows == 0) return;
  CheckContiguous(call, y, "output 0 (y)");
  CheckContiguous(call, mean_out, "output 1 (mean)");
  CheckContiguous(call, rstd_out, "output 2 (rstd)");
  const int64_t n = x.numel() / rows;
  S* mean_dst = mean_out.data<S>();
  S* rstd_dst = rstd_out.data<S>();
  if (n == 0) {  // statistics of an empty set: 0/0
    std::fill(mean_dst, mean_dst + rows, std::numeric_limits<S>::quiet_NaN());
    std::fill(rstd_dst, rstd_dst + rows, std::numeric_limits<S>::quiet_NaN());
    return;
  }
  const std::vector<S> w = DenseCopy<T, S>(weight);
  const std::vector<S> b = DenseCopy<T, S>(bias);
  // float rows: the weight and bias widened once, each row once (LayerNormRow computes in double).
  std::vector<double> wd, bd;
  if constexpr (std::is_same_v<T, float>) wd = DenseCopy<T, double>(weight), bd = DenseCopy<T, double>(bias);
  const auto row_layout = DimRange(x, 0, axis).Layout(kSize);
  const auto norm_layout = DimRange(x, axis, rank).Layout(kSize);
  const bool dense_rows = norm_layout.rank == 1 && norm_layout.inner_stride(0) == kSize;
  T* dst = y.data<T>();
  ParallelFor(
      rows,
      [&](int64_t begin, int64_t end) {
        std::vector<S> scratch;
        std::vector<double> wide;
        int64_t r = begin;
        ForRange<1>(row_layout, {x.data<char>()}, begin, end,
                    [&](const std::array<char*, 1>& p, int64_t count, const std::array<int64_t, 1>& s) {
                      for (int64_t j = 0; j < count; ++j, ++r) {
                        char* row = p[0] + j * s[0];
                        const S* v;
                        if (std::is_same_v<T, S> && dense_rows) {
                          v = reinterpret_cast<const S*>(row);
                        } else {
                          scratch.resize(n);
                          int64_t k = 0;
                          ForRange<1>(norm_layout, {row}, 0, n,
                                      [&](const std::array<char*, 1>& q, int64_t m, const std::array<int64_t, 1>& qs) {
                                        for (int64_t i = 0; i < m; ++i) {
                                          scratch[k++] = S(ComputeT<T>(*reinterpret_cast<const T*>(q[0] + i * qs[0])));
                                        }
                                      });
                          v = scratch.data();
                        }
                        // Double throughout: on offset data (|mean| >> std) a float mean is off by many
                        // of its ulps and x - mean loses as many digits of every normalised value.
                        double mean, var;
                        if constexpr (std::is_same_v<T, float>) {  // vectorised leaves, the same sums
                          wide.resize(n);
                          mean = PairwiseWidenSum(v, wide.data(), n) / static_cast<double>(n);
                          var = PairwiseSquaredDeviation(wide.data(), n, mean) / static_cast<double>(n);
                        } else if constexpr (std::is_same_v<S, float>) {
                          mean = PairwiseSumOf(v, n) / static_cast<double>(n);
                          var = PairwiseSquaredDeviation(v, n, mean) / static_cast<double>(n);
                        } else {
                          mean = PairwiseSum<double>(n, [&](int64_t i) { return static_cast<double>(v[i]); }) /
                                 static_cast<double>(n);
                          var = PairwiseSum<double>(n, [&](int64_t i) {
                                  const double d = static_cast<double>(v[i]) - mean;
                                  return d * d;
                                }) /
                                static_cast<double>(n);
                        }
                        const double rstd = 1.0 / std::sqrt(var + eps);
                        T* o = dst + r * n;
                        if constexpr (std::is_same_v<T, float>) {
                          LayerNormRow(wide.data(), wd.data(), bd.data(), o, n, mean, rstd);
                        } else {
#pragma omp simd
                          for (int64_t i = 0; i < n; ++i) {
                            o[i] = T(static_cast<S>((static_cast<double>(v[i]) - mean) * rstd * w[i] + b[i]));
                          }
                        }
                        mean_dst[r] = static_cast<S>(mean);
                        rstd_dst[r] = static_cast<S>(rstd);
                      }
                    });
      },
      rows * n * 4);
}

template <typename... Ts>
void AddAll(std::vector<HostKernel>* kernels, TypeList<Ts...>) {
  (AddKernel(kernels, "softmax", {kDTypeOf<Ts>, kDTypeOf<Ts>}, &GuardedKernel<&Softmax<Ts, false>>), ...);
  (AddKernel(kernels, "log_softmax", {kDTypeOf<Ts>, kDTypeOf<Ts>}, &GuardedKernel<&Softmax<Ts, true>>), ...);
  (AddKernel(kernels, "layer_norm",
             {kDTypeOf<Ts>, kDTypeOf<Ts>, kDTypeOf<Ts>, kDTypeOf<Ts>, kDTypeOf<StatT<Ts>>, kDTypeOf<StatT<Ts>>},
             &GuardedKernel<&LayerNorm<Ts>>),
   ...);
}

}  // namespace

void AppendSoftmaxNormKernels(std::vector<HostKernel>* kernels) {
  AddAll(kernels, FloatTypes{});
  // float32 and float64, as its schema (core/ops/schema_nn.cc) accepts.
  AddKernel(kernels, "fused_log_softmax", {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32},
            &GuardedKernel<&FusedLogSoftmax<float>>);
  AddKernel(kernels, "fused_log_softmax", {OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64},
            &GuardedKernel<&FusedLogSoftmax<double>>);
  AddKernel(kernels, "fused_masked_softmax",
            {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_BOOL, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32},
            &GuardedKernel<&FusedMaskedSoftmax<float>>);
  AddKernel(kernels, "fused_masked_softmax",
            {OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64, OAR_DTYPE_BOOL, OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64},
            &GuardedKernel<&FusedMaskedSoftmax<double>>);
  AddKernel(
      kernels, "fused_masked_softmax_grad",
      {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_BOOL, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32},
      &GuardedKernel<&FusedMaskedSoftmaxGrad<float>>);
  AddKernel(
      kernels, "fused_masked_softmax_grad",
      {OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64, OAR_DTYPE_BOOL, OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64},
      &GuardedKernel<&FusedMaskedSoftmaxGrad<double>>);
}

}  // namespace oar::host
