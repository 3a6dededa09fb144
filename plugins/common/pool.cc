// 2-D pooling host kernels over NCHW: max_pool2d (with indices), avg_pool2d and its gradient,
// adaptive_avg_pool2d and its gradient (docs/ops.md).
//
// Direct loops, parallel over (n, c) planes: each plane of the output (or of the input gradient) is
// written by one thread, so gradients accumulate without races and in a fixed order. Inputs are read
// through their strides. 16-bit floats are computed in float and rounded once per result (gradients
// accumulate a float plane first).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "plugins/common/elementwise.h"
#include "plugins/common/kernel_util.h"
#include "plugins/common/strided.h"
#include "plugins/common/vec_lanes.h"

namespace oar::host {
namespace {

/// Window geometry along one dimension: output o covers input positions o * stride - pad + t * dil for
/// taps t in [0, k).
struct Axis {
  int64_t in = 0, out = 0, k = 1, stride = 1, pad = 0, dil = 1;

  int64_t Start(int64_t o) const { return o * stride - pad; }
  /// The taps of output o that land inside the input: [lo, hi).
  std::pair<int64_t, int64_t> Taps(int64_t o) const {
    const int64_t first = pad - o * stride;          // t * dil >= first
    const int64_t last = in - 1 + pad - o * stride;  // t * dil <= last
    const int64_t lo = first <= 0 ? 0 : (first + dil - 1) / dil;
    const int64_t hi = last < 0 ? 0 : std::min(k, last / dil + 1);
    return {lo, std::max(lo, hi)};
  }
  /// (in + 2 pad - dil (k - 1) - 1) / stride + 1, or 0 when not even one window fits.
  int64_t Expected() const {
    const int64_t span = in + 2 * pad - dil * (k - 1) - 1;
    return span < 0 ? 0 : span / stride + 1;
  }
};

/// The geometry of a windowed pooling: x [N, C, H, W] and y [N, C, Ho, Wo].
struct Pool {
  int64_t n = 0, c = 0;
  Axis h, w;
};

void CheckNchw(const KernelCall& call, const TensorRef& t, const char* what) {
  if (t.rank() != 4) Invalid(call, std::string(what) + " must have rank 4 (NCHW)");
}

/// Read kernel / stride / padding (/ dilation) and check x and y against them.
Pool ParsePool(const KernelCall& call, const TensorRef& x, const TensorRef& y, bool dilation) {
  CheckNchw(call, x, "the input (or input gradient)");
  CheckNchw(call, y, "the output (or output gradient)");
  const std::span<const int64_t> kernel = RequireInts(call, "kernel", 2);
  const std::span<const int64_t> stride = RequireInts(call, "stride", 2);
  const std::span<const int64_t> padding = RequireInts(call, "padding", 2);
  int64_t dil[2] = {1, 1};
  if (dilation) {
    const std::span<const int64_t> d = RequireInts(call, "dilation", 2);
    dil[0] = d[0], dil[1] = d[1];
  }
  Pool p;
  p.n = x.dim(0), p.c = x.dim(1);
  p.h = {x.dim(2), y.dim(2), kernel[0], stride[0], padding[0], dil[0]};
  p.w = {x.dim(3), y.dim(3), kernel[1], stride[1], padding[1], dil[1]};
  for (const Axis* a : {&p.h, &p.w}) {
    if (a->k < 1 || a->stride < 1 || a->dil < 1 || a->pad < 0) {
      Invalid(call, "kernel, stride and dilation must be >= 1 and padding >= 0");
    }
  }
  if (y.dim(0) != p.n || y.dim(1) != p.c || p.h.out != p.h.Expected() || p.w.out != p.w.Expected()) {
    Invalid(call, "expected the output (or output gradient) [" + std::to_string(p.n) + ", " + std::to_string(p.c) +
                      ", " + std::to_string(p.h.Expected()) + ", " + std::to_string(p.w.Expected()) + "]");
  }
  return p;
}

/// A window of only padding has nothing to pool: refuse it rather than invent a value.
void CheckNoEmptyWindow(const KernelCall& call, const Pool& p) {
  for (const auto& [a, name] : {std::pair{&p.h, "row"}, std::pair{&p.w, "column"}}) {
    for (int64_t o = 0; o < a->out; ++o) {
      const auto [lo, hi] = a->Taps(o);
      if (lo == hi) {
        Invalid(call, std::string("the window of output ") + name + " " + std::to_string(o) +
                          " covers only padding (reduce the padding or the dilation)");
      }
    }
  }
}

/// Pointer to element [n, c, 0, 0] of `t` for plane index n * C + c.
template <typename T>
T* Plane(const TensorRef& t, int64_t plane) {
  const int64_t c = t.dim(1);
  return t.data<T>() + (plane / c) * t.stride(0) + (plane % c) * t.stride(1);
}

// ---- max_pool2d ---------------------------------------------------------------------------------

/// One plane of max_pool2d without padding and dilation (every window lies inside the input, tap (i, j)
/// of output (oh, ow) is input (oh * stride + i, ow * stride + j)), with the window extent a constant when
/// KH, KW > 0 (2x2, the common case) and p's otherwise. The same visiting order and selects as the general
/// loop in MaxPool, so the same values and indices; without the per-output Taps() divisions and the
/// dilation arithmetic it runs about 3x faster.
template <typename T, int64_t KH, int64_t KW>
void MaxPoolPlaneNoPad(const T* src, T* yo, int64_t* io, const Pool& p, int64_t sh, int64_t sw) {
  using C = ComputeT<T>;
  const int64_t kh = KH > 0 ? KH : p.h.k, kw = KW > 0 ? KW : p.w.k;
  const int64_t win = p.w.in, wout = p.w.out;
  if constexpr (std::is_same_v<T, float> && KH == 2 && KW == 2) {
    if (sw == 1 && p.w.stride == 2) {  // unit-stride rows, windows side by side: vector rows (vec_lanes.h)
      for (int64_t oh = 0; oh < p.h.out; ++oh) {
        const int64_t h0 = oh * p.h.stride;
        MaxPool2x2Row(src + h0 * sh, src + (h0 + 1) * sh, yo + oh * wout, io + oh * wout, wout, h0 * win, win);
      }
      return;
    }
  }
  for (int64_t oh = 0; oh < p.h.out; ++oh) {
    const int64_t h0 = oh * p.h.stride;
    for (int64_t ow = 0; ow < wout; ++ow) {
      const int64_t w0 = ow * p.w.stride;
      C best = -std::numeric_limits<C>::infinity();
      int64_t at = h0 * win + w0;
      int64_t nan_at = -1;
      for (int64_t i = 0; i < kh; ++i) {
        const int64_t hi = h0 + i;
        for (int64_t j = 0; j < kw; ++j) {
          const int64_t wi = w0 + j;
          const C v = C(src[hi * sh + wi * sw]);
          const int64_t pos = hi * win + wi;
          at = v > best ? pos : at;
          best = v > best ? v : best;
          nan_at = IsNan(v) & (nan_at < 0) ? pos : nan_at;
        }
      }
      if (nan_at >= 0) {
        at = nan_at;
        best = C(src[nan_at / win * sh + nan_at % win * sw]);
      }
      yo[oh * wout + ow] = T(best);
      io[oh * wout + ow] = at;
    }
  }
}

template <typename T>
void MaxPool(const KernelCall& call) {
  using C = ComputeT<T>;
  CheckArity(call, 1, 2);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>, OAR_DTYPE_INT64});
  const TensorRef x = call.input(0);
  const TensorRef y = call.output(0);
  const TensorRef idx = call.output(1);
  const Pool p = ParsePool(call, x, y, /*dilation=*/true);
  CheckSameShape(call, idx, y, "output 1 (indices)");
  if (y.numel() == 0) return;
  CheckContiguous(call, y, "output 0");
  CheckContiguous(call, idx, "output 1 (indices)");
  CheckNoEmptyWindow(call, p);
  const int64_t sh = x.stride(2), sw = x.stride(3);
  const int64_t plane_out = p.h.out * p.w.out;
  const bool no_pad = p.h.pad == 0 && p.w.pad == 0 && p.h.dil == 1 && p.w.dil == 1;
  const bool two_by_two = no_pad && p.h.k == 2 && p.w.k == 2;
  ParallelFor(
      p.n * p.c,
      [&](int64_t begin, int64_t end) {
        for (int64_t pl = begin; pl < end; ++pl) {
          const T* src = Plane<T>(x, pl);
          T* yo = y.data<T>() + pl * plane_out;
          int64_t* io = idx.data<int64_t>() + pl * plane_out;
          if (two_by_two) {
            MaxPoolPlaneNoPad<T, 2, 2>(src, yo, io, p, sh, sw);
            continue;
          }
          if (no_pad) {
            MaxPoolPlaneNoPad<T, 0, 0>(src, yo, io, p, sh, sw);
            continue;
          }
          for (int64_t oh = 0; oh < p.h.out; ++oh) {
            const auto [ilo, ihi] = p.h.Taps(oh);
            for (int64_t ow = 0; ow < p.w.out; ++ow) {
              const auto [jlo, jhi] = p.w.Taps(ow);
              // Row-major over the taps visits flat indices in increasing order: strict > keeps the first
              // of equal values, and the first NaN wins. The loop body is branch-free (selects only): with
              // the NaN test inside the comparison it branched on the data and ran about 3x slower.
              C best = -std::numeric_limits<C>::infinity();
              int64_t at = (p.h.Start(oh) + ilo * p.h.dil) * p.w.in + p.w.Start(ow) + jlo * p.w.dil;
              int64_t nan_at = -1;
              for (int64_t i = ilo; i < ihi; ++i) {
                const int64_t hi = p.h.Start(oh) + i * p.h.dil;
                for (int64_t j = jlo; j < jhi; ++j) {
                  const int64_t wi = p.w.Start(ow) + j * p.w.dil;
                  const C v = C(src[hi * sh + wi * sw]);
                  const int64_t pos = hi * p.w.in + wi;
                  at = v > best ? pos : at;
                  best = v > best ? v : best;
                  nan_at = IsNan(v) & (nan_at < 0) ? pos : nan_at;
                }
              }
              if (nan_at >= 0) {
                at = nan_at;
                best = C(src[nan_at / p.w.in * sh + nan_at % p.w.in * sw]);
              }
              yo[oh * p.w.out + ow] = T(best);
              io[oh * p.w.out + ow] = at;
            }
          }
        }
      },
      y.numel() * p.h.k * p.w.k);
}

// ---- avg_pool2d ---------------------------------------------------------------------------------

/// The divisor of window (oh, ow): every position of the window inside the padded input when padding
/// counts (as torch computes it), else only the positions inside the input.
int64_t AvgDivisor(const Pool& p, int64_t oh, int64_t ow, bool count_include_pad) {
  if (!count_include_pad) {
    const auto [ilo, ihi] = p.h.Taps(oh);
    const auto [jlo, jhi] = p.w.Taps(ow);
    return (ihi - ilo) * (jhi - jlo);
  }
  const int64_t h0 = p.h.Start(oh), w0 = p.w.Start(ow);
  const int64_t h1 = std::min(h0 + p.h.k, p.h.in + p.h.pad), w1 = std::min(w0 + p.w.k, p.w.in + p.w.pad);
  return (h1 - h0) * (w1 - w0);
}

template <typename T>
void AvgPool(const KernelCall& call) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  CheckArity(call, 1, 1);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef x = call.input(0);
  const TensorRef y = call.output(0);
  const Pool p = ParsePool(call, x, y, /*dilation=*/false);
  const bool include_pad = RequireBool(call, "count_include_pad");
  if (y.numel() == 0) return;
  CheckContiguous(call, y, "the output");
  CheckNoEmptyWindow(call, p);
  const int64_t sh = x.stride(2), sw = x.stride(3);
  const int64_t plane_out = p.h.out * p.w.out;
  ParallelFor(
      p.n * p.c,
      [&](int64_t begin, int64_t end) {
        for (int64_t pl = begin; pl < end; ++pl) {
          const T* src = Plane<T>(x, pl);
          T* yo = y.data<T>() + pl * plane_out;
          for (int64_t oh = 0; oh < p.h.out; ++oh) {
            const auto [ilo, ihi] = p.h.Taps(oh);
            for (int64_t ow = 0; ow < p.w.out; ++ow) {
              const auto [jlo, jhi] = p.w.Taps(ow);
              Acc sum = 0;
              for (int64_t i = ilo; i < ihi; ++i) {
                const int64_t row = (p.h.Start(oh) + i) * sh + p.w.Start(ow) * sw;
                for (int64_t j = jlo; j < jhi; ++j) sum += Acc(ComputeT<T>(src[row + j * sw]));
              }
              yo[oh * p.w.out + ow] = T(static_cast<ComputeT<T>>(sum / Acc(AvgDivisor(p, oh, ow, include_pad))));
            }
          }
        }
      },
      y.numel() * p.h.k * p.w.k);
}

template <typename T>
void AvgPoolGrad(const KernelCall& call) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  CheckArity(call, 1, 1);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef gy = call.input(0);
  const TensorRef gx = call.output(0);
  const Pool p = ParsePool(call, gx, gy, /*dilation=*/false);
  const bool include_pad = RequireBool(call, "count_include_pad");
  if (gx.numel() == 0) return;
  CheckContiguous(call, gx, "the output");
  const int64_t sh = gy.stride(2), sw = gy.stride(3);
  const int64_t plane_in = p.h.in * p.w.in;
  ParallelFor(
      p.n * p.c,
      [&](int64_t begin, int64_t end) {
        std::vector<Acc> scratch;
        for (int64_t pl = begin; pl < end; ++pl) {
          T* out = gx.data<T>() + pl * plane_in;
          Acc* acc;
          if constexpr (std::is_same_v<T, Acc>) {
            acc = out;
          } else {
            scratch.resize(plane_in);
            acc = scratch.data();
          }
          std::fill(acc, acc + plane_in, Acc(0));
          const T* src = gy.numel() == 0 ? nullptr : Plane<T>(gy, pl);
          for (int64_t oh = 0; oh < p.h.out; ++oh) {
            const auto [ilo, ihi] = p.h.Taps(oh);
            for (int64_t ow = 0; ow < p.w.out; ++ow) {
              const auto [jlo, jhi] = p.w.Taps(ow);
              if (ilo == ihi || jlo == jhi) continue;  // a window of only padding passes nothing back
              const Acc g = Acc(ComputeT<T>(src[oh * sh + ow * sw])) / Acc(AvgDivisor(p, oh, ow, include_pad));
              for (int64_t i = ilo; i < ihi; ++i) {
                const int64_t row = (p.h.Start(oh) + i) * p.w.in + p.w.Start(ow);
                for (int64_t j = jlo; j < jhi; ++j) acc[row + j] += g;
              }
            }
          }
          if constexpr (!std::is_same_v<T, Acc>) {
            for (int64_t i = 0; i < plane_in; ++i) out[i] = T(acc[i]);
          }
        }
      },
      gy.numel() * p.h.k * p.w.k + gx.numel());
}

// ---- adaptive_avg_pool2d ------------------------------------------------------------------------

/// Window of output i out of `out` over `in` positions: [floor(i in / out), ceil((i + 1) in / out)).
std::pair<int64_t, int64_t> AdaptiveWindow(int64_t i, int64_t in, int64_t out) {
  return {i * in / out, ((i + 1) * in + out - 1) / out};
}

template <typename T>
void AdaptiveAvgPool(const KernelCall& call) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  CheckArity(call, 1, 1);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef x = call.input(0);
  const TensorRef y = call.output(0);
  CheckNchw(call, x, "the input");
  CheckNchw(call, y, "the output");
  const std::span<const int64_t> size = RequireInts(call, "output_size", 2);
  if (y.dim(0) != x.dim(0) || y.dim(1) != x.dim(1) || y.dim(2) != size[0] || y.dim(3) != size[1]) {
    Invalid(call, "the output must be [N, C, output_size[0], output_size[1]]");
  }
  if (y.numel() == 0) return;
  CheckContiguous(call, y, "the output");
  const int64_t h = x.dim(2), w = x.dim(3), ho = y.dim(2), wo = y.dim(3);
  const int64_t sh = x.stride(2), sw = x.stride(3);
  ParallelFor(
      x.dim(0) * x.dim(1),
      [&](int64_t begin, int64_t end) {
        for (int64_t pl = begin; pl < end; ++pl) {
          const T* src = x.numel() == 0 ? nullptr : Plane<T>(x, pl);
          T* yo = y.data<T>() + pl * ho * wo;
          for (int64_t oh = 0; oh < ho; ++oh) {
            const auto [h0, h1] = AdaptiveWindow(oh, h, ho);
            for (int64_t ow = 0; ow < wo; ++ow) {
              const auto [w0, w1] = AdaptiveWindow(ow, w, wo);
              Acc sum = 0;
              for (int64_t i = h0; i < h1; ++i) {
                for (int64_t j = w0; j < w1; ++j) sum += Acc(ComputeT<T>(src[i * sh + j * sw]));
              }
              // An empty input gives empty windows: 0 / 0, as `mean` of nothing.
              yo[oh * wo + ow] = T(static_cast<ComputeT<T>>(sum / Acc((h1 - h0) * (w1 - w0))));
            }
          }
        }
      },
      x.numel() + y.numel());
}

template <typename T>
void AdaptiveAvgPoolGrad(const KernelCall& call) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  CheckArity(call, 1, 1);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef gy = call.input(0);
  const TensorRef gx = call.output(0);
  CheckNchw(call, gy, "the output gradient");
  CheckNchw(call, gx, "the input gradient");
  if (gy.dim(0) != gx.dim(0) || gy.dim(1) != gx.dim(1)) {
    Invalid(call, "the gradients must agree on N and C");
  }
  if (gx.numel() == 0) return;
  CheckContiguous(call, gx, "the output");
  const int64_t h = gx.dim(2), w = gx.dim(3), ho = gy.dim(2), wo = gy.dim(3);
  const int64_t sh = gy.stride(2), sw = gy.stride(3);
  ParallelFor(
      gx.dim(0) * gx.dim(1),
      [&](int64_t begin, int64_t end) {
        std::vector<Acc> scratch;
        for (int64_t pl = begin; pl < end; ++pl) {
          T* out = gx.data<T>() + pl * h * w;
          Acc* acc;
          if constexpr (std::is_same_v<T, Acc>) {
            acc = out;
          } else {
            scratch.resize(h * w);
            acc = scratch.data();
          }
          std::fill(acc, acc + h * w, Acc(0));
          const T* src = gy.numel() == 0 ? nullptr : Plane<T>(gy, pl);
          for (int64_t oh = 0; oh < ho; ++oh) {
            const auto [h0, h1] = AdaptiveWindow(oh, h, ho);
            for (int64_t ow = 0; ow < wo; ++ow) {
              const auto [w0, w1] = AdaptiveWindow(ow, w, wo);
              const Acc g = Acc(ComputeT<T>(src[oh * sh + ow * sw])) / Acc((h1 - h0) * (w1 - w0));
              for (int64_t i = h0; i < h1; ++i) {
                for (int64_t j = w0; j < w1; ++j) acc[i * w + j] += g;
              }
            }
          }
          if constexpr (!std::is_same_v<T, Acc>) {
            for (int64_t i = 0; i < h * w; ++i) out[i] = T(acc[i]);
          }
        }
      },
      gx.numel() + gy.numel());
}

template <typename... Ts>
void AddAll(std::vector<HostKernel>* kernels, TypeList<Ts...>) {
  (AddKernel(kernels, "max_pool2d", {kDTypeOf<Ts>, kDTypeOf<Ts>, OAR_DTYPE_INT64}, &GuardedKernel<&MaxPool<Ts>>), ...);
  (AddKernel(kernels, "avg_pool2d", {kDTypeOf<Ts>, kDTypeOf<Ts>}, &GuardedKernel<&AvgPool<Ts>>), ...);
  (AddKernel(kernels, "avg_pool2d_grad", {kDTypeOf<Ts>, kDTypeOf<Ts>}, &GuardedKernel<&AvgPoolGrad<Ts>>), ...);
  (AddKernel(kernels, "adaptive_avg_pool2d", {kDTypeOf<Ts>, kDTypeOf<Ts>}, &GuardedKernel<&AdaptiveAvgPool<Ts>>), ...);
  (AddKernel(kernels, "adaptive_avg_pool2d_grad", {kDTypeOf<Ts>, kDTypeOf<Ts>},
             &GuardedKernel<&AdaptiveAvgPoolGrad<Ts>>),
   ...);
}

}  // namespace

void AppendPoolKernels(std::vector<HostKernel>* kernels) { AddAll(kernels, FloatTypes{}); }

}  // namespace oar::host
