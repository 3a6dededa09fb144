#include "conformance/reference/conv.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include "conformance/reference/internal.h"
#include "core/base/error.h"

namespace oar::reference {
namespace {

using internal::CheckArray;
using internal::CheckRank;

// Output extent of one windowed spatial dimension; throws unless it is >= 1.
int64_t OutExtent(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, std::string_view op,
                  std::string_view dim) {
  OAR_CHECK_ARG(kernel >= 1 && stride >= 1 && dilation >= 1 && pad >= 0,
                "{}: {} needs kernel >= 1, stride >= 1, dilation >= 1, padding >= 0; got {}, {}, {}, {}", op, dim,
                kernel, stride, dilation, pad);
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  OAR_CHECK_ARG(span >= 0, "{}: {} input extent {} (padding {}) is smaller than the dilated kernel {}", op, dim, in,
                pad, dilation * (kernel - 1) + 1);
  return span / stride + 1;
}

// ---------------------------------------------------------------------------------------------------
// conv2d
// ---------------------------------------------------------------------------------------------------

struct ConvGeometry {
  int64_t n, c, h, w;     // input
  int64_t o, cg, kh, kw;  // weight: out channels, channels per group, kernel
  int64_t ho, wo;         // output
  int64_t groups, o_per_group;
  Pair2 stride, padding, dilation;
};

ConvGeometry PlanConv(const Array& x, const Array& weight, Pair2 stride, Pair2 padding, Pair2 dilation, int64_t groups,
                      std::string_view op) {
  CheckRank(x, 4, op, "x");
  CheckRank(weight, 4, op, "weight");
  ConvGeometry g{};
  g.n = x.shape[0], g.c = x.shape[1], g.h = x.shape[2], g.w = x.shape[3];
  g.o = weight.shape[0], g.cg = weight.shape[1], g.kh = weight.shape[2], g.kw = weight.shape[3];
  OAR_CHECK_ARG(groups >= 1 && g.c % groups == 0 && g.o % groups == 0,
                "{}: groups = {} must divide input channels {} and output channels {}", op, groups, g.c, g.o);
  OAR_CHECK_ARG(g.cg == g.c / groups, "{}: weight {} must have C/groups = {} input channels (x {})", op,
                ShapeString(weight.shape), g.c / groups, ShapeString(x.shape));
  g.groups = groups;
  g.o_per_group = g.o / groups;
  g.stride = stride, g.padding = padding, g.dilation = dilation;
  g.ho = OutExtent(g.h, g.kh, stride[0], padding[0], dilation[0], op, "height");
  g.wo = OutExtent(g.w, g.kw, stride[1], padding[1], dilation[1], op, "width");
  return g;
}

// Calls f(x_flat, w_flat, y_flat) for every in-bounds tap of the convolution. Forward and both
// gradients are this one loop with a different accumulation, which makes them adjoint by construction.
template <typename F>
void ForEachConvTap(const ConvGeometry& g, F f) {
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t o = 0; o < g.o; ++o) {
      const int64_t group = o / g.o_per_group;
      for (int64_t i = 0; i < g.ho; ++i) {
        for (int64_t j = 0; j < g.wo; ++j) {
          const int64_t y_flat = ((n * g.o + o) * g.ho + i) * g.wo + j;
          for (int64_t c = 0; c < g.cg; ++c) {
            const int64_t ci = group * g.cg + c;
            for (int64_t p = 0; p < g.kh; ++p) {
              const int64_t hh = i * g.stride[0] - g.padding[0] + p * g.dilation[0];
              if (hh < 0 || hh >= g.h) continue;
              for (int64_t q = 0; q < g.kw; ++q) {
                const int64_t ww = j * g.stride[1] - g.padding[1] + q * g.dilation[1];
                if (ww < 0 || ww >= g.w) continue;
                f(((n * g.c + ci) * g.h + hh) * g.w + ww, ((o * g.cg + c) * g.kh + p) * g.kw + q, y_flat);
              }
            }
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Pooling
// ---------------------------------------------------------------------------------------------------

struct PoolGeometry {
  int64_t n, c, h, w, ho, wo;
  Pair2 kernel, stride, padding, dilation;
};

PoolGeometry PlanPool(const Array& x, Pair2 kernel, std::optional<Pair2> stride, Pair2 padding, Pair2 dilation,
                      std::string_view op) {
  CheckRank(x, 4, op, "x");
  PoolGeometry g{};
  g.n = x.shape[0], g.c = x.shape[1], g.h = x.shape[2], g.w = x.shape[3];
  g.kernel = kernel;
  g.stride = stride.value_or(kernel);
  g.padding = padding;
  g.dilation = dilation;
  for (int d = 0; d < 2; ++d) {
    const int64_t effective = (kernel[d] - 1) * dilation[d] + 1;
    OAR_CHECK_ARG(padding[d] <= effective / 2, "{}: padding {} must be at most half the (dilated) kernel {}", op,
                  padding[d], effective);
  }
  g.ho = OutExtent(g.h, kernel[0], g.stride[0], padding[0], dilation[0], op, "height");
  g.wo = OutExtent(g.w, kernel[1], g.stride[1], padding[1], dilation[1], op, "width");
  return g;
}

// Calls f(plane, out_flat, in_plane_offsets) for every output element, with the flat in-plane offsets
// (h * W + w) of its window's in-bounds elements in row-major window order.
template <typename F>
void ForEachPoolWindow(const PoolGeometry& g, F f) {
  std::vector<int64_t> taps;
  for (int64_t plane = 0; plane < g.n * g.c; ++plane) {
    for (int64_t i = 0; i < g.ho; ++i) {
      for (int64_t j = 0; j < g.wo; ++j) {
        taps.clear();
        for (int64_t p = 0; p < g.kernel[0]; ++p) {
          const int64_t hh = i * g.stride[0] - g.padding[0] + p * g.dilation[0];
          if (hh < 0 || hh >= g.h) continue;
          for (int64_t q = 0; q < g.kernel[1]; ++q) {
            const int64_t ww = j * g.stride[1] - g.padding[1] + q * g.dilation[1];
            if (ww >= 0 && ww < g.w) taps.push_back(hh * g.w + ww);
          }
        }
        f(plane, (plane * g.ho + i) * g.wo + j, taps);
      }
    }
  }
}

// The in-plane offset max_pool2d picks among `taps`: the first maximum, or the first NaN. A dilated
// window can straddle a small input without touching it (H = 1, kernel 2, dilation 3, padding 2): there
// is no defined result then, so it is refused rather than guessed.
int64_t MaxTap(const Array& x, int64_t plane_base, const std::vector<int64_t>& taps, std::string_view op) {
  OAR_CHECK_ARG(!taps.empty(), "{}: a pooling window lies entirely in the padding (input {})", op,
                ShapeString(x.shape));
  int64_t best = taps.front();
  for (int64_t t : taps) {
    const double v = x.data[plane_base + t];
    const double b = x.data[plane_base + best];
    if (std::isnan(b)) break;
    if (std::isnan(v) || v > b) best = t;
  }
  return best;
}

double AvgDivisor(const PoolGeometry& g, const std::vector<int64_t>& taps, bool count_include_pad) {
  return count_include_pad ? static_cast<double>(g.kernel[0] * g.kernel[1]) : static_cast<double>(taps.size());
}

// Adaptive window [floor(i·in/out), ceil((i+1)·in/out)).
std::pair<int64_t, int64_t> AdaptiveRange(int64_t i, int64_t in, int64_t out) {
  return {(i * in) / out, ((i + 1) * in + out - 1) / out};
}

void CheckAdaptive(const Array& x, Pair2 output_size, std::string_view op) {
  CheckRank(x, 4, op, "x");
  OAR_CHECK_ARG(output_size[0] >= 1 && output_size[1] >= 1 && x.shape[2] >= 1 && x.shape[3] >= 1,
                "{}: output size ({}, {}) and input spatial extents {} must be >= 1", op, output_size[0],
                output_size[1], ShapeString(x.shape));
}

}  // namespace

Array conv2d(const Array& x, const Array& weight, const std::optional<Array>& bias, Pair2 stride, Pair2 padding,
             Pair2 dilation, int64_t groups) {
  const ConvGeometry g = PlanConv(x, weight, stride, padding, dilation, groups, "conv2d");
  if (bias) {
    CheckRank(*bias, 1, "conv2d", "bias");
    OAR_CHECK_ARG(bias->shape[0] == g.o, "conv2d: bias {} must have {} elements (output channels)",
                  ShapeString(bias->shape), g.o);
  }
  Array y = Array::Full({g.n, g.o, g.ho, g.wo}, 0.0);
  std::vector<internal::Accumulator> acc(y.data.size());
  ForEachConvTap(g, [&](int64_t xf, int64_t wf, int64_t yf) { acc[yf].Add(x.data[xf] * weight.data[wf]); });
  for (size_t i = 0; i < acc.size(); ++i) y.data[i] = acc[i].Value();
  if (bias) {
    for (int64_t i = 0; i < y.numel(); ++i) y.data[i] += bias->data[(i / (g.ho * g.wo)) % g.o];
  }
  return y;
}

Conv2dGrads conv2d_grad(const Array& x, const Array& weight, const Array& grad_y, Pair2 stride, Pair2 padding,
                        Pair2 dilation, int64_t groups) {
  const ConvGeometry g = PlanConv(x, weight, stride, padding, dilation, groups, "conv2d_grad");
  CheckArray(grad_y, "conv2d_grad", "grad_y");
  OAR_CHECK_ARG(grad_y.shape == (std::vector<int64_t>{g.n, g.o, g.ho, g.wo}),
                "conv2d_grad: grad_y {} must have the output shape [{}, {}, {}, {}]", ShapeString(grad_y.shape), g.n,
                g.o, g.ho, g.wo);
  std::vector<internal::Accumulator> dx(x.data.size()), dw(weight.data.size()), db(static_cast<size_t>(g.o));
  ForEachConvTap(g, [&](int64_t xf, int64_t wf, int64_t yf) {
    dx[xf].Add(grad_y.data[yf] * weight.data[wf]);
    dw[wf].Add(grad_y.data[yf] * x.data[xf]);
  });
  for (int64_t i = 0; i < grad_y.numel(); ++i) db[(i / (g.ho * g.wo)) % g.o].Add(grad_y.data[i]);
  Conv2dGrads grads{Array::Full(x.shape, 0.0), Array::Full(weight.shape, 0.0), Array::Full({g.o}, 0.0)};
  for (size_t i = 0; i < dx.size(); ++i) grads.dx.data[i] = dx[i].Value();
  for (size_t i = 0; i < dw.size(); ++i) grads.dweight.data[i] = dw[i].Value();
  for (size_t i = 0; i < db.size(); ++i) grads.dbias.data[i] = db[i].Value();
  return grads;
}

MaxPoolResult max_pool2d(const Array& x, Pair2 kernel, std::optional<Pair2> stride, Pair2 padding, Pair2 dilation) {
  const PoolGeometry g = PlanPool(x, kernel, stride, padding, dilation, "max_pool2d");
  MaxPoolResult r{Array::Full({g.n, g.c, g.ho, g.wo}, 0.0), Array::Full({g.n, g.c, g.ho, g.wo}, 0.0)};
  ForEachPoolWindow(g, [&](int64_t plane, int64_t out, const std::vector<int64_t>& taps) {
    const int64_t best = MaxTap(x, plane * g.h * g.w, taps, "max_pool2d");
    r.values.data[out] = x.data[plane * g.h * g.w + best];
    r.indices.data[out] = static_cast<double>(best);
  });
  return r;
}

Array max_pool2d_grad(const Array& x, const Array& grad_y, Pair2 kernel, std::optional<Pair2> stride, Pair2 padding,
                      Pair2 dilation) {
  const PoolGeometry g = PlanPool(x, kernel, stride, padding, dilation, "max_pool2d_grad");
  CheckArray(grad_y, "max_pool2d_grad", "grad_y");
  OAR_CHECK_ARG(grad_y.shape == (std::vector<int64_t>{g.n, g.c, g.ho, g.wo}),
                "max_pool2d_grad: grad_y {} must have the output shape [{}, {}, {}, {}]", ShapeString(grad_y.shape),
                g.n, g.c, g.ho, g.wo);
  Array dx = Array::Full(x.shape, 0.0);
  ForEachPoolWindow(g, [&](int64_t plane, int64_t out, const std::vector<int64_t>& taps) {
    dx.data[plane * g.h * g.w + MaxTap(x, plane * g.h * g.w, taps, "max_pool2d_grad")] += grad_y.data[out];
  });
  return dx;
}

Array avg_pool2d(const Array& x, Pair2 kernel, std::optional<Pair2> stride, Pair2 padding, bool count_include_pad) {
  const PoolGeometry g = PlanPool(x, kernel, stride, padding, {1, 1}, "avg_pool2d");
  Array y = Array::Full({g.n, g.c, g.ho, g.wo}, 0.0);
  ForEachPoolWindow(g, [&](int64_t plane, int64_t out, const std::vector<int64_t>& taps) {
    internal::Accumulator s;
    for (int64_t t : taps) s.Add(x.data[plane * g.h * g.w + t]);
    y.data[out] = s.Value() / AvgDivisor(g, taps, count_include_pad);
  });
  return y;
}

Array avg_pool2d_grad(const Array& x, const Array& grad_y, Pair2 kernel, std::optional<Pair2> stride, Pair2 padding,
                      bool count_include_pad) {
  const PoolGeometry g = PlanPool(x, kernel, stride, padding, {1, 1}, "avg_pool2d_grad");
  CheckArray(grad_y, "avg_pool2d_grad", "grad_y");
  OAR_CHECK_ARG(grad_y.shape == (std::vector<int64_t>{g.n, g.c, g.ho, g.wo}),
                "avg_pool2d_grad: grad_y {} must have the output shape [{}, {}, {}, {}]", ShapeString(grad_y.shape),
                g.n, g.c, g.ho, g.wo);
  Array dx = Array::Full(x.shape, 0.0);
  ForEachPoolWindow(g, [&](int64_t plane, int64_t out, const std::vector<int64_t>& taps) {
    const double share = grad_y.data[out] / AvgDivisor(g, taps, count_include_pad);
    for (int64_t t : taps) dx.data[plane * g.h * g.w + t] += share;
  });
  return dx;
}

Array adaptive_avg_pool2d(const Array& x, Pair2 output_size) {
  CheckAdaptive(x, output_size, "adaptive_avg_pool2d");
  const int64_t h = x.shape[2], w = x.shape[3], ho = output_size[0], wo = output_size[1];
  Array y = Array::Full({x.shape[0], x.shape[1], ho, wo}, 0.0);
  for (int64_t plane = 0; plane < x.shape[0] * x.shape[1]; ++plane) {
    for (int64_t i = 0; i < ho; ++i) {
      const auto [h0, h1] = AdaptiveRange(i, h, ho);
      for (int64_t j = 0; j < wo; ++j) {
        const auto [w0, w1] = AdaptiveRange(j, w, wo);
        internal::Accumulator s;
        for (int64_t p = h0; p < h1; ++p) {
          for (int64_t q = w0; q < w1; ++q) s.Add(x.data[(plane * h + p) * w + q]);
        }
        y.data[(plane * ho + i) * wo + j] = s.Value() / static_cast<double>((h1 - h0) * (w1 - w0));
      }
    }
  }
  return y;
}

Array adaptive_avg_pool2d_grad(const Array& x, const Array& grad_y) {
  CheckRank(grad_y, 4, "adaptive_avg_pool2d_grad", "grad_y");
  CheckAdaptive(x, {grad_y.shape[2], grad_y.shape[3]}, "adaptive_avg_pool2d_grad");
  OAR_CHECK_ARG(grad_y.shape[0] == x.shape[0] && grad_y.shape[1] == x.shape[1],
                "adaptive_avg_pool2d_grad: grad_y {} and x {} differ in N or C", ShapeString(grad_y.shape),
                ShapeString(x.shape));
  const int64_t h = x.shape[2], w = x.shape[3], ho = grad_y.shape[2], wo = grad_y.shape[3];
  Array dx = Array::Full(x.shape, 0.0);
  for (int64_t plane = 0; plane < x.shape[0] * x.shape[1]; ++plane) {
    for (int64_t i = 0; i < ho; ++i) {
      const auto [h0, h1] = AdaptiveRange(i, h, ho);
      for (int64_t j = 0; j < wo; ++j) {
        const auto [w0, w1] = AdaptiveRange(j, w, wo);
        const double share = grad_y.data[(plane * ho + i) * wo + j] / static_cast<double>((h1 - h0) * (w1 - w0));
        for (int64_t p = h0; p < h1; ++p) {
          for (int64_t q = w0; q < w1; ++q) dx.data[(plane * h + p) * w + q] += share;
        }
      }
    }
  }
  return dx;
}

}  // namespace oar::reference
