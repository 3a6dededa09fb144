// The op library's softmax, layer_norm, convolution and pooling kernels against plain loops written
// here in long double: every registered dtype, contiguous, permuted, broadcast and padded inputs,
// empty and rank-0 cases, special values, and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "plugins/common/host_kernels_testing.h"

namespace {

using namespace oar::host::testing;  // NOLINT: the test vocabulary

const long double kInf = std::numeric_limits<long double>::infinity();
const long double kNaN = std::numeric_limits<long double>::quiet_NaN();

// ===================================================================================================
// softmax, log_softmax
// ===================================================================================================

/// The linear index of `idx` with dimension `axis` (and those from `axis` on when `tail`) set to 0, in
/// the row-major order of `shape`: one slot per row of a per-row statistic.
int64_t RowSlot(const Shape& shape, Shape idx, int axis, bool tail = false) {
  int64_t k = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    const bool dropped = static_cast<int>(d) == axis || (tail && static_cast<int>(d) > axis);
    k = k * (dropped ? 1 : shape[d]) + (dropped ? 0 : idx[d]);
  }
  return k;
}

void CheckSoftmax(const std::string& op, Tensor& x, int axis) {
  Tensor out = Contiguous(x.dtype, x.shape);
  EXPECT_OK(RunKernel(op, {&x}, {&out}, {oar::sdk::IntAttr("axis", axis)}));
  const bool log = op == "log_softmax";
  // Per row: the max (NaN when the row has one), then the sum of exp(x - max).
  const int64_t rows = x.shape.empty() ? 1 : x.numel() / std::max<int64_t>(1, x.shape[axis]);
  std::vector<long double> m(rows, -kInf), sum(rows, 0);
  ForEachIndex(x.shape, [&](const Shape& i) {
    const long double v = Get(x, i);
    long double& r = m[RowSlot(x.shape, i, axis)];
    r = std::isnan(v) || std::isnan(r) ? kNaN : std::max(r, v);
  });
  ForEachIndex(x.shape, [&](const Shape& i) {
    const int64_t k = RowSlot(x.shape, i, axis);
    sum[k] += std::exp(Get(x, i) - m[k]);
  });
  // Outputs are probabilities (or their logs): a tolerance absolute below 1, relative above.
  const long double tol = RelTol(x.dtype) * 2;
  ExpectClose(
      out,
      [&](const Shape& i) {
        const int64_t k = RowSlot(x.shape, i, axis);
        const long double v = Get(x, i);
        return RoundTo(x.dtype, log ? v - m[k] - std::log(sum[k]) : std::exp(v - m[k]) / sum[k]);
      },
      tol, tol, op);
}

TEST(Softmax, EveryAxisAndLayout) {
  for (int32_t dt : kFloats) {
    for (const char* op : {"softmax", "log_softmax"}) {
      SCOPED_TRACE(std::string(op) + " " + std::string(DTypeName(dt)));
      std::mt19937 rng(61);
      std::vector<Tensor> xs;
      xs.push_back(Contiguous(dt, {3, 4, 5}));
      xs.push_back(Permuted(dt, {3, 4, 5}, {2, 0, 1}));              // strided rows and columns
      xs.push_back(Broadcast(dt, {3, 4, 5}, {false, true, false}));  // stride 0
      xs.push_back(Strided(dt, {3, 4, 5}, {41, 10, 2}, 7));          // padded
      xs.push_back(Contiguous(dt, {2, 0, 3}));
      for (Tensor& x : xs) {
        FillRandom(x, rng, -8, 8);
        for (int axis = 0; axis < 3; ++axis) CheckSoftmax(op, x, axis);
      }
      Tensor s = Contiguous(dt, {});
      FillRandom(s, rng);
      CheckSoftmax(op, s, 0);
      Tensor rows = Contiguous(dt, {3, 20000});  // long rows, parallel
      Tensor cols = Contiguous(dt, {300, 700});  // columns in blocks of 256 and a tail
      Tensor many = Contiguous(dt, {4000, 10});  // many short rows
      for (Tensor* t : {&rows, &cols, &many}) FillRandom(*t, rng, -8, 8);
      CheckSoftmax(op, rows, 1);
      CheckSoftmax(op, cols, 0);
      CheckSoftmax(op, many, 1);
      CheckSoftmax(op, many, 0);
    }
  }
}

TEST(Softmax, LargeInputsNeverOverflowAndSpecialsPropagate) {
  for (int32_t dt : kFloats) {
    SCOPED_TRACE(DTypeName(dt));
    // Rows of huge values (exp would overflow without the max subtraction), a row with -inf, a row
    // with NaN; along the last axis (rows) and along the first (columns).
    const long double big = dt == F16 ? 60000 : 1e30L;
    const std::vector<std::vector<long double>> rows = {
        {big, big * 0.5L, -big, 0}, {1000, 1001, 1002, 999}, {-kInf, 0, 1, -kInf}, {kNaN, 1, 2, 3}};
    Tensor x = Contiguous(dt, {4, 4});
    Tensor xt = Permuted(dt, {4, 4}, {1, 0});
    for (int64_t r = 0; r < 4; ++r) {
      for (int64_t c = 0; c < 4; ++c) Set(x, {r, c}, rows[r][c]), Set(xt, {c, r}, rows[r][c]);
    }
    for (const char* op : {"softmax", "log_softmax"}) {
      CheckSoftmax(op, x, 1);
      CheckSoftmax(op, xt, 0);
      Tensor out = Contiguous(dt, {4, 4});
      EXPECT_OK(RunKernel(op, {&x}, {&out}, {oar::sdk::IntAttr("axis", 1)}));
      for (int64_t r = 0; r < 3; ++r) {
        for (int64_t c = 0; c < 4; ++c) EXPECT_FALSE(std::isnan(Get(out, {r, c}))) << op << " " << r << "," << c;
      }
      EXPECT_TRUE(std::isnan(Get(out, {3, 2}))) << op;
    }
  }
  Tensor x = Contiguous(F32, {2, 3}), out = Contiguous(F32, {2, 3});
  ExpectError(RunKernel("softmax", {&x}, {&out}, {oar::sdk::IntAttr("axis", 2)}), OAR_STATUS_INVALID_ARGUMENT,
              {"op 'softmax'", "'axis'"});
  ExpectError(RunKernel("softmax", {&x}, {&out}, {oar::sdk::IntAttr("axis", -1)}), OAR_STATUS_INVALID_ARGUMENT,
              {"'axis'"});
}

// ===================================================================================================
// layer_norm
// ===================================================================================================

void CheckLayerNorm(Tensor& x, Tensor& w, Tensor& b, int axis, double eps) {
  const int rank = static_cast<int>(x.shape.size());
  const int32_t st = x.dtype == F64 ? F64 : F32;
  Shape stat_shape = x.shape;
  for (int d = axis; d < rank; ++d) stat_shape[d] = 1;
  Tensor y = Contiguous(x.dtype, x.shape), mean = Contiguous(st, stat_shape), rstd = Contiguous(st, stat_shape);
  EXPECT_OK(RunKernel("layer_norm", {&x, &w, &b}, {&y, &mean, &rstd},
                      {oar::sdk::IntAttr("axis", axis), oar::sdk::FloatAttr("eps", eps)}));
  // Statistics per row, in long double: the mean, then the mean squared deviation.
  const int64_t rows = Numel(stat_shape);
  std::vector<long double> sum(rows, 0), sq(rows, 0), count(rows, 0);
  ForEachIndex(x.shape, [&](const Shape& i) {
    const int64_t k = RowSlot(x.shape, i, axis, true);
    sum[k] += Get(x, i), count[k] += 1;
  });
  ForEachIndex(x.shape, [&](const Shape& i) {
    const int64_t k = RowSlot(x.shape, i, axis, true);
    const long double d = Get(x, i) - sum[k] / count[k];
    sq[k] += d * d;
  });
  auto stats = [&](const Shape& i) {
    const int64_t k = RowSlot(x.shape, i, axis, true);
    return std::pair{sum[k] / count[k], 1 / std::sqrt(sq[k] / count[k] + static_cast<long double>(eps))};
  };
  const long double tol = x.dtype == F64 ? 1e-12L : 2e-5L;
  ExpectClose(
      mean, [&](const Shape& r) { return stats(r).first; }, tol, tol, "layer_norm mean");
  ExpectClose(
      rstd, [&](const Shape& r) { return stats(r).second; }, tol, tol, "layer_norm rstd");
  const long double ytol = x.dtype == F64 ? 1e-12L : x.dtype == F32 ? 2e-5L : RelTol(x.dtype) * 2;
  ExpectClose(
      y,
      [&](const Shape& i) {
        const auto [m, s] = stats(i);
        const Shape t(i.begin() + axis, i.end());
        return (Get(x, i) - m) * s * Get(w, t) + Get(b, t);
      },
      ytol, ytol, "layer_norm y");
}

/// Pairwise sum in double of f(i), i in [0, n): 16 partial sums in blocks of at most 256, halves split at
/// n / 2 rounded down to a multiple of 32: the summation order layer_norm documents (softmax_norm.cc).
template <typename F>
double DocumentedPairwiseSum(int64_t n, F f, int64_t offset = 0) {
  if (n <= 256) {
    double lanes[16] = {};
    for (int64_t i = 0; i < n; ++i) lanes[i % 16] += f(offset + i);
    for (int width = 8; width > 0; width /= 2) {
      for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
    }
    return lanes[0];
  }
  const int64_t half = n / 2 / 32 * 32;
  return DocumentedPairwiseSum(half, f, offset) + DocumentedPairwiseSum(n - half, f, offset + half);
}

// float32 layer_norm bit for bit against its documented arithmetic written out in scalar double (mean,
// mean squared deviation, rstd, the output row), for rows of every tail length around the vector widths
// and the pairwise splits (the kernel's vectorised leaves and its once-widened rows must change nothing).
TEST(LayerNorm, Float32RowsAreTheDocumentedDoubleArithmeticBitForBit) {
  std::mt19937 rng(18);
  for (int64_t n : {1, 7, 16, 33, 255, 256, 257, 300, 513, 1024, 1000}) {
    SCOPED_TRACE(n);
    Tensor x = Contiguous(F32, {3, n}), w = Contiguous(F32, {n}), b = Contiguous(F32, {n});
    FillRandom(x, rng, -3, 5), FillRandom(w, rng, 0.5, 2), FillRandom(b, rng, -1, 1);
    Set(x, {1, n - 1}, 1e4);  // an offset row
    Tensor y = Contiguous(F32, {3, n}), mean = Contiguous(F32, {3, 1}), rstd = Contiguous(F32, {3, 1});
    EXPECT_OK(RunKernel("layer_norm", {&x, &w, &b}, {&y, &mean, &rstd},
                        {oar::sdk::IntAttr("axis", 1), oar::sdk::FloatAttr("eps", 1e-5)}));
    for (int64_t r = 0; r < 3; ++r) {
      auto v = [&](int64_t i) { return static_cast<double>(static_cast<float>(Get(x, {r, i}))); };
      const double m = DocumentedPairwiseSum(n, v) / static_cast<double>(n);
      const double var =
          DocumentedPairwiseSum(n, [&](int64_t i) { return (v(i) - m) * (v(i) - m); }) / static_cast<double>(n);
      const double s = 1.0 / std::sqrt(var + 1e-5);
      EXPECT_EQ(static_cast<float>(Get(mean, {r, 0})), static_cast<float>(m));
      EXPECT_EQ(static_cast<float>(Get(rstd, {r, 0})), static_cast<float>(s));
      for (int64_t i = 0; i < n; ++i) {
        const float want = static_cast<float>((v(i) - m) * s * static_cast<double>(static_cast<float>(Get(w, {i}))) +
                                              static_cast<double>(static_cast<float>(Get(b, {i}))));
        ASSERT_EQ(std::bit_cast<uint32_t>(static_cast<float>(Get(y, {r, i}))), std::bit_cast<uint32_t>(want))
            << "row " << r << " i " << i;
      }
    }
  }
}

TEST(LayerNorm, EveryAxisLayoutAndDType) {
  for (int32_t dt : kFloats) {
    SCOPED_TRACE(DTypeName(dt));
    std::mt19937 rng(67);
    std::vector<Tensor> xs;
    xs.push_back(Contiguous(dt, {4, 6, 5}));
    xs.push_back(Permuted(dt, {4, 6, 5}, {2, 1, 0}));
    xs.push_back(Strided(dt, {4, 6, 5}, {70, 11, 2}, 1));
    xs.push_back(Broadcast(dt, {4, 6, 5}, {true, false, false}));
    for (Tensor& x : xs) {
      FillRandom(x, rng, -3, 5);
      for (int axis = 0; axis < 3; ++axis) {
        const Shape norm(x.shape.begin() + axis, x.shape.end());
        std::vector<int> reversed(norm.size());  // the bias is stored with its dimensions reversed
        for (size_t d = 0; d < reversed.size(); ++d) reversed[d] = static_cast<int>(reversed.size() - 1 - d);
        Tensor w = Contiguous(dt, norm), b = Permuted(dt, norm, reversed);
        FillRandom(w, rng, 0.5, 2), FillRandom(b, rng, -1, 1);
        CheckLayerNorm(x, w, b, axis, 1e-5);
      }
    }
    // Broadcast weight and bias (ones and zeros as the core passes them), a long row, many rows.
    Tensor x = Contiguous(dt, {3, 20000});
    Tensor w = Broadcast(dt, {20000}, {true}), b = Broadcast(dt, {20000}, {true});
    FillRandom(x, rng, 100, 101);  // a large mean: the two-pass variance must not cancel
    Set(w, {0}, 1), Set(b, {0}, 0);
    CheckLayerNorm(x, w, b, 1, 1e-5);
    Tensor m = Contiguous(dt, {5000, 8}), mw = Contiguous(dt, {8}), mb = Contiguous(dt, {8});
    FillRandom(m, rng), FillRandom(mw, rng), FillRandom(mb, rng);
    CheckLayerNorm(m, mw, mb, 1, 0.1);
  }
}

TEST(LayerNorm, EmptyRowsAndEmptyNormalisedShape) {
  for (int32_t dt : kFloats) {
    SCOPED_TRACE(DTypeName(dt));
    const int32_t st = dt == F64 ? F64 : F32;
    Tensor x = Contiguous(dt, {0, 4}), w = Contiguous(dt, {4}), b = Contiguous(dt, {4});
    Tensor y = Contiguous(dt, {0, 4}), mean = Contiguous(st, {0, 1}), rstd = Contiguous(st, {0, 1});
    const std::vector<oar_attr_t> attrs = {oar::sdk::IntAttr("axis", 1), oar::sdk::FloatAttr("eps", 1e-5)};
    EXPECT_OK(RunKernel("layer_norm", {&x, &w, &b}, {&y, &mean, &rstd}, attrs));
    Tensor x2 = Contiguous(dt, {3, 0}), w2 = Contiguous(dt, {0}), b2 = Contiguous(dt, {0});
    Tensor y2 = Contiguous(dt, {3, 0}), mean2 = Contiguous(st, {3, 1}), rstd2 = Contiguous(st, {3, 1});
    EXPECT_OK(RunKernel("layer_norm", {&x2, &w2, &b2}, {&y2, &mean2, &rstd2}, attrs));
    for (int64_t r = 0; r < 3; ++r) EXPECT_TRUE(std::isnan(Get(mean2, {r, 0})));  // statistics of nothing
  }
  Tensor x = Contiguous(F32, {2, 3}), w = Contiguous(F32, {2}), b = Contiguous(F32, {3});
  Tensor y = Contiguous(F32, {2, 3}), mean = Contiguous(F32, {2, 1}), rstd = Contiguous(F32, {2, 1});
  ExpectError(RunKernel("layer_norm", {&x, &w, &b}, {&y, &mean, &rstd},
                        {oar::sdk::IntAttr("axis", 1), oar::sdk::FloatAttr("eps", 1e-5)}),
              OAR_STATUS_INVALID_ARGUMENT, {"op 'layer_norm'", "weight"});
  ExpectError(RunKernel("layer_norm", {&x, &b, &b}, {&y, &mean, &rstd}, {oar::sdk::IntAttr("axis", 1)}),
              OAR_STATUS_INVALID_ARGUMENT, {"missing attribute 'eps'"});
}

// ===================================================================================================
// conv2d and its gradients
// ===================================================================================================

struct ConvCase {
  int64_t n, c, h, w, o, kh, kw, groups;
  int64_t sh, sw, ph, pw, dh, dw;

  static int64_t Out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
    const int64_t span = in + 2 * p - d * (k - 1) - 1;
    return span < 0 ? 0 : span / s + 1;
  }
  int64_t Ho() const { return Out(h, kh, sh, ph, dh); }
  int64_t Wo() const { return Out(w, kw, sw, pw, dw); }
  std::vector<oar_attr_t> Attrs(Shape* storage) const {
    storage->assign({sh, sw, ph, pw, dh, dw});
    return {oar::sdk::IntsAttr("stride", std::span<const int64_t>(storage->data(), 2)),
            oar::sdk::IntsAttr("padding", std::span<const int64_t>(storage->data() + 2, 2)),
            oar::sdk::IntsAttr("dilation", std::span<const int64_t>(storage->data() + 4, 2)),
            oar::sdk::IntAttr("groups", groups)};
  }
  std::string Name() const {
    return "N" + std::to_string(n) + " C" + std::to_string(c) + " " + std::to_string(h) + "x" + std::to_string(w) +
           " O" + std::to_string(o) + " k" + std::to_string(kh) + "x" + std::to_string(kw) + " g" +
           std::to_string(groups) + " s" + std::to_string(sh) + std::to_string(sw) + " p" + std::to_string(ph) +
           std::to_string(pw) + " d" + std::to_string(dh) + std::to_string(dw);
  }
};

/// Visit every (input position, weight tap, output position) triple of the convolution.
template <typename Fn>
void ForEachTap(const ConvCase& k, Fn&& fn) {
  const int64_t cg = k.c / k.groups, og = k.o / k.groups;
  for (int64_t n = 0; n < k.n; ++n) {
    for (int64_t o = 0; o < k.o; ++o) {
      for (int64_t c = 0; c < cg; ++c) {
        const int64_t ci = (o / og) * cg + c;
        for (int64_t oh = 0; oh < k.Ho(); ++oh) {
          for (int64_t ow = 0; ow < k.Wo(); ++ow) {
            for (int64_t i = 0; i < k.kh; ++i) {
              const int64_t hi = oh * k.sh - k.ph + i * k.dh;
              if (hi < 0 || hi >= k.h) continue;
              for (int64_t j = 0; j < k.kw; ++j) {
                const int64_t wi = ow * k.sw - k.pw + j * k.dw;
                if (wi < 0 || wi >= k.w) continue;
                fn(Shape{n, ci, hi, wi}, Shape{o, c, i, j}, Shape{n, o, oh, ow});
              }
            }
          }
        }
      }
    }
  }
}

/// Run the three conv ops on (x, w, gy) and compare with sums over ForEachTap; the tolerance is
/// relative to the sum of |terms|, as for matmul.
void CheckConv(const ConvCase& k, Tensor& x, Tensor& w, Tensor& gy) {
  SCOPED_TRACE(k.Name());
  const int32_t dt = x.dtype;
  Shape attr_storage;
  const std::vector<oar_attr_t> attrs = k.Attrs(&attr_storage);
  const long double tol = dt == F64 ? 1e-12L : dt == F32 ? 1e-5L : dt == F16 ? 2e-3L : 1e-2L;
  auto check = [&](const std::string& op, Tensor& a, Tensor& b, const Shape& out_shape, int role) {
    Tensor out = Contiguous(dt, out_shape);
    EXPECT_OK(RunKernel(op, {&a, &b}, {&out}, attrs));
    std::vector<long double> sum(out.numel(), 0), mag(out.numel(), 0);
    const Shape st = RowMajor(out_shape);
    ForEachTap(k, [&](const Shape& xi, const Shape& wi, const Shape& yi) {
      const long double t = role == 2   ? Get(x, xi) * Get(w, wi)
                            : role == 0 ? Get(gy, yi) * Get(w, wi)
                                        : Get(gy, yi) * Get(x, xi);
      const Shape& at = role == 2 ? yi : role == 0 ? xi : wi;
      int64_t lin = 0;
      for (int d = 0; d < 4; ++d) lin += at[d] * st[d];
      sum[lin] += t, mag[lin] += std::fabs(t);
    });
    int bad = 0;
    ForEachIndex(out_shape, [&](const Shape& i) {
      int64_t lin = 0;
      for (int d = 0; d < 4; ++d) lin += i[d] * st[d];
      const long double got = Get(out, i);
      if (!(std::fabs(got - sum[lin]) <= tol * mag[lin] + 1e-30L) && bad++ < 5) {
        ADD_FAILURE() << op << " " << DTypeName(dt) << " at linear " << lin << ": got " << static_cast<double>(got)
                      << ", want " << static_cast<double>(sum[lin]);
      }
    });
  };
  check("conv2d", x, w, {k.n, k.o, k.Ho(), k.Wo()}, 2);
  check("conv2d_grad_input", gy, w, {k.n, k.c, k.h, k.w}, 0);
  check("conv2d_grad_weight", gy, x, {k.o, k.c / k.groups, k.kh, k.kw}, 1);
}

const std::vector<ConvCase> kConvCases = {
    // n  c  h  w  o kh kw  g  sh sw ph pw dh dw
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 0, 0, 1, 1},      // plain
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},      // padded ("same")
    {1, 4, 9, 8, 6, 3, 2, 2, 2, 1, 1, 0, 1, 1},      // groups, stride, non-square kernel
    {2, 4, 6, 6, 4, 3, 3, 4, 1, 1, 1, 1, 1, 1},      // depthwise
    {1, 2, 10, 9, 3, 3, 3, 1, 1, 2, 2, 1, 2, 3},     // dilation (different per axis)
    {1, 3, 8, 8, 2, 1, 1, 1, 2, 2, 0, 0, 1, 1},      // 1x1, strided
    {1, 2, 5, 5, 2, 4, 4, 1, 3, 3, 1, 1, 1, 1},      // ragged: stride does not divide the span
    {2, 16, 12, 12, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1},  // oneDNN blocked layouts, threads
};

TEST(Conv, MatchesReferenceForEveryCaseAndDType) {
  for (int32_t dt : kFloats) {
    SCOPED_TRACE(DTypeName(dt));
    std::mt19937 rng(71);
    for (const ConvCase& k : kConvCases) {
      Tensor x = Contiguous(dt, {k.n, k.c, k.h, k.w});
      Tensor w = Contiguous(dt, {k.o, k.c / k.groups, k.kh, k.kw});
      Tensor gy = Contiguous(dt, {k.n, k.o, k.Ho(), k.Wo()});
      FillRandom(x, rng, -2, 2), FillRandom(w, rng, -2, 2), FillRandom(gy, rng, -2, 2);
      CheckConv(k, x, w, gy);
    }
  }
}

TEST(Conv, StridedPermutedAndBroadcastOperands) {
  for (int32_t dt : kFloats) {
    SCOPED_TRACE(DTypeName(dt));
    std::mt19937 rng(73);
    for (const ConvCase& k : {kConvCases[1], kConvCases[2], kConvCases[4]}) {
      // Channels-last x, a transposed-kernel w, a padded gy; then a stride-0 (broadcast) x and w.
      Tensor x = Permuted(dt, {k.n, k.c, k.h, k.w}, {0, 2, 3, 1});
      Tensor w = Permuted(dt, {k.o, k.c / k.groups, k.kh, k.kw}, {0, 1, 3, 2});
      Tensor gy = Strided(dt, {k.n, k.o, k.Ho(), k.Wo()},
                          {k.o * k.Ho() * (k.Wo() + 3), k.Ho() * (k.Wo() + 3), k.Wo() + 3, 1}, 2);
      FillRandom(x, rng, -2, 2), FillRandom(w, rng, -2, 2), FillRandom(gy, rng, -2, 2);
      CheckConv(k, x, w, gy);
      Tensor bx = Broadcast(dt, {k.n, k.c, k.h, k.w}, {true, false, false, false});
      Tensor bw = Broadcast(dt, {k.o, k.c / k.groups, k.kh, k.kw}, {false, true, false, false});
      Tensor bgy = Broadcast(dt, {k.n, k.o, k.Ho(), k.Wo()}, {false, false, true, false});
      FillRandom(bx, rng, -2, 2), FillRandom(bw, rng, -2, 2), FillRandom(bgy, rng, -2, 2);
      CheckConv(k, bx, bw, bgy);
    }
  }
}

TEST(Conv, EmptyOperandsAndRefusals) {
  for (int32_t dt : kFloats) {
    SCOPED_TRACE(DTypeName(dt));
    // No input channels: every output is an empty sum (0), and so are the gradients.
    const ConvCase k{2, 0, 4, 4, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1};
    Tensor x = Contiguous(dt, {2, 0, 4, 4}), w = Contiguous(dt, {3, 0, 3, 3}), gy = Contiguous(dt, {2, 3, 4, 4});
    std::mt19937 rng(75);
    FillRandom(gy, rng, -1, 1);
    Shape storage;
    Tensor y = Contiguous(dt, {2, 3, 4, 4});
    EXPECT_OK(RunKernel("conv2d", {&x, &w}, {&y}, k.Attrs(&storage)));
    ForEachIndex(y.shape, [&](const Shape& i) { EXPECT_EQ(Get(y, i), 0); });
    // No batch: nothing to compute forward, a zero weight gradient.
    const ConvCase e{0, 2, 4, 4, 3, 3, 3, 1, 1, 1, 0, 0, 1, 1};
    Tensor ex = Contiguous(dt, {0, 2, 4, 4}), ew = Contiguous(dt, {3, 2, 3, 3}), egy = Contiguous(dt, {0, 3, 2, 2});
    Tensor ey = Contiguous(dt, {0, 3, 2, 2}), egw = Contiguous(dt, {3, 2, 3, 3});
    EXPECT_OK(RunKernel("conv2d", {&ex, &ew}, {&ey}, e.Attrs(&storage)));
    EXPECT_OK(RunKernel("conv2d_grad_weight", {&egy, &ex}, {&egw}, e.Attrs(&storage)));
    ForEachIndex(egw.shape, [&](const Shape& i) { EXPECT_EQ(Get(egw, i), 0); });
  }
  const ConvCase k{1, 4, 5, 5, 6, 3, 3, 2, 1, 1, 0, 0, 1, 1};
  Shape storage;
  Tensor x = Contiguous(F32, {1, 4, 5, 5}), w = Contiguous(F32, {6, 2, 3, 3});
  Tensor wrong = Contiguous(F32, {1, 6, 4, 3});
  ExpectError(RunKernel("conv2d", {&x, &w}, {&wrong}, k.Attrs(&storage)), OAR_STATUS_INVALID_ARGUMENT,
              {"op 'conv2d'", "3 x 3"});
  ConvCase g = k;
  g.groups = 3;
  Tensor y = Contiguous(F32, {1, 6, 3, 3});
  ExpectError(RunKernel("conv2d", {&x, &w}, {&y}, g.Attrs(&storage)), OAR_STATUS_INVALID_ARGUMENT, {"groups"});
  ExpectError(RunKernel("conv2d", {&x, &w}, {&y}, {oar::sdk::IntAttr("groups", 2)}), OAR_STATUS_INVALID_ARGUMENT,
              {"missing attribute 'stride'"});
}

// ===================================================================================================
// Pooling
// ===================================================================================================

struct PoolCase {
  int64_t n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw;

  static int64_t Out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
    const int64_t span = in + 2 * p - d * (k - 1) - 1;
    return span < 0 ? 0 : span / s + 1;
  }
  int64_t Ho() const { return Out(h, kh, sh, ph, dh); }
  int64_t Wo() const { return Out(w, kw, sw, pw, dw); }
  std::vector<oar_attr_t> Attrs(Shape* storage, bool dilation) const {
    storage->assign({kh, kw, sh, sw, ph, pw, dh, dw});
    std::vector<oar_attr_t> a = {oar::sdk::IntsAttr("kernel", std::span<const int64_t>(storage->data(), 2)),
                                 oar::sdk::IntsAttr("stride", std::span<const int64_t>(storage->data() + 2, 2)),
                                 oar::sdk::IntsAttr("padding", std::span<const int64_t>(storage->data() + 4, 2))};
    if (dilation) a.push_back(oar::sdk::IntsAttr("dilation", std::span<const int64_t>(storage->data() + 6, 2)));
    return a;
  }
};

const std::vector<PoolCase> kPoolCases = {
    // n  c  h  w kh kw sh sw ph pw dh dw
    {2, 3, 6, 7, 2, 2, 2, 2, 0, 0, 1, 1}, {1, 2, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1},
    {2, 2, 9, 8, 3, 2, 1, 2, 1, 1, 2, 1},  // dilation (max only; avg uses dh = dw = 1 below)
    {1, 1, 5, 5, 5, 5, 1, 1, 2, 2, 1, 1}, {2, 8, 40, 40, 3, 3, 1, 1, 1, 1, 1, 1},  // above the threading threshold
    {1, 2, 7, 8, 3, 2, 2, 3, 0, 0, 1, 1},  // no padding or dilation, not 2x2 (max_pool2d's second fast path)
};

void CheckMaxPool(const PoolCase& k, Tensor& x) {
  Shape storage;
  Tensor y = Contiguous(x.dtype, {k.n, k.c, k.Ho(), k.Wo()}), idx = Contiguous(I64, y.shape);
  EXPECT_OK(RunKernel("max_pool2d", {&x}, {&y, &idx}, k.Attrs(&storage, true)));
  auto ref = [&](const Shape& o) {
    long double best = 0;
    int64_t at = -1;
    for (int64_t i = 0; i < k.kh; ++i) {
      for (int64_t j = 0; j < k.kw; ++j) {
        const int64_t hi = o[2] * k.sh - k.ph + i * k.dh, wi = o[3] * k.sw - k.pw + j * k.dw;
        if (hi < 0 || hi >= k.h || wi < 0 || wi >= k.w) continue;
        const long double v = Get(x, {o[0], o[1], hi, wi});
        const bool nan_best = at >= 0 && std::isnan(best);
        if (at < 0 || (!nan_best && (v > best || std::isnan(v)))) best = v, at = hi * k.w + wi;
      }
    }
    return std::pair{best, at};
  };
  ExpectClose(
      y, [&](const Shape& o) { return ref(o).first; }, 0, 0, "max_pool2d");
  ExpectClose(
      idx, [&](const Shape& o) { return static_cast<long double>(ref(o).second); }, 0, 0, "max_pool2d index");
}

void CheckAvgPool(const PoolCase& k, Tensor& x, Tensor& gy, bool include_pad) {
  Shape storage;
  std::vector<oar_attr_t> attrs = k.Attrs(&storage, false);
  attrs.push_back(oar::sdk::BoolAttr("count_include_pad", include_pad));
  Tensor y = Contiguous(x.dtype, {k.n, k.c, k.Ho(), k.Wo()});
  EXPECT_OK(RunKernel("avg_pool2d", {&x}, {&y}, attrs));
  auto divisor = [&](const Shape& o) {
    int64_t count = 0;
    for (int64_t i = 0; i < k.kh; ++i) {
      for (int64_t j = 0; j < k.kw; ++j) {
        const int64_t hi = o[2] * k.sh - k.ph + i, wi = o[3] * k.sw - k.pw + j;
        count += include_pad || (hi >= 0 && hi < k.h && wi >= 0 && wi < k.w);
      }
    }
    return static_cast<long double>(count);
  };
  const long double tol = RelTol(x.dtype) * 2;
  ExpectClose(
      y,
      [&](const Shape& o) {
        long double sum = 0;
        for (int64_t i = 0; i < k.kh; ++i) {
          for (int64_t j = 0; j < k.kw; ++j) {
            const int64_t hi = o[2] * k.sh - k.ph + i, wi = o[3] * k.sw - k.pw + j;
            if (hi >= 0 && hi < k.h && wi >= 0 && wi < k.w) sum += Get(x, {o[0], o[1], hi, wi});
          }
        }
        return sum / divisor(o);
      },
      tol, tol, "avg_pool2d");
  Tensor gx = Contiguous(x.dtype, x.shape);
  EXPECT_OK(RunKernel("avg_pool2d_grad", {&gy}, {&gx}, attrs));
  std::vector<long double> want(gx.numel(), 0);
  ForEachIndex(gy.shape, [&](const Shape& o) {
    for (int64_t i = 0; i < k.kh; ++i) {
      for (int64_t j = 0; j < k.kw; ++j) {
        const int64_t hi = o[2] * k.sh - k.ph + i, wi = o[3] * k.sw - k.pw + j;
        if (hi >= 0 && hi < k.h && wi >= 0 && wi < k.w) {
          want[((o[0] * k.c + o[1]) * k.h + hi) * k.w + wi] += Get(gy, o) / divisor(o);
        }
      }
    }
  });
  ExpectClose(
      gx, [&](const Shape& i) { return want[((i[0] * k.c + i[1]) * k.h + i[2]) * k.w + i[3]]; }, tol, tol,
      "avg_pool2d_grad");
}

TEST(Pool, MaxAndAvgMatchReference) {
  for (int32_t dt : kFloats) {
    SCOPED_TRACE(DTypeName(dt));
    std::mt19937 rng(79);
    for (PoolCase k : kPoolCases) {
      SCOPED_TRACE("case " + std::to_string(k.h) + "x" + std::to_string(k.w) + " k" + std::to_string(k.kh));
      Tensor x = Contiguous(dt, {k.n, k.c, k.h, k.w});
      Tensor xp = Permuted(dt, {k.n, k.c, k.h, k.w}, {0, 2, 3, 1});  // channels last
      FillWhole(x, rng, -5, 5), FillWhole(xp, rng, -5, 5);           // ties: the first index wins
      CheckMaxPool(k, x);
      CheckMaxPool(k, xp);
      k.dh = k.dw = 1;
      Tensor gy =
          Strided(dt, {k.n, k.c, k.Ho(), k.Wo()}, {k.c * k.Ho() * k.Wo() * 2, k.Ho() * k.Wo() * 2, k.Wo() * 2, 2}, 1);
      FillRandom(gy, rng);
      FillRandom(x, rng);
      CheckAvgPool(k, x, gy, true);
      CheckAvgPool(k, xp, gy, false);
    }
  }
}

// The 2x2 window without padding has its own loop: the first of equal maxima, the first NaN, and a window
// of -inf (its first position) come out as in the general loop.
TEST(Pool, MaxPool2x2WithoutPaddingKeepsTheFirstTieAndTheFirstNaN) {
  const long double inf = std::numeric_limits<long double>::infinity();
  for (int32_t dt : kFloats) {
    SCOPED_TRACE(DTypeName(dt));
    const PoolCase k{1, 1, 4, 4, 2, 2, 2, 2, 0, 0, 1, 1};
    Tensor x = Contiguous(dt, {1, 1, 4, 4});
    const long double v[16] = {1, 1, 2, 3, kNaN, kNaN, 3, 1, -inf, -inf, 5, 5, -inf, -inf, 5, 5};
    ForEachIndex(x.shape, [&](const Shape& i) { Set(x, i, v[i[2] * 4 + i[3]]); });
    Shape storage;
    Tensor y = Contiguous(dt, {1, 1, 2, 2}), idx = Contiguous(I64, {1, 1, 2, 2});
    EXPECT_OK(RunKernel("max_pool2d", {&x}, {&y, &idx}, k.Attrs(&storage, true)));
    EXPECT_TRUE(std::isnan(Get(y, {0, 0, 0, 0})));
    EXPECT_EQ(idx.At<int64_t>({0, 0, 0, 0}), 4);
    EXPECT_EQ(Get(y, {0, 0, 0, 1}), 3);
    EXPECT_EQ(idx.At<int64_t>({0, 0, 0, 1}), 3);
    EXPECT_EQ(Get(y, {0, 0, 1, 0}), -inf);
    EXPECT_EQ(idx.At<int64_t>({0, 0, 1, 0}), 8);
    EXPECT_EQ(Get(y, {0, 0, 1, 1}), 5);
    EXPECT_EQ(idx.At<int64_t>({0, 0, 1, 1}), 10);
  }
}

TEST(Pool, MaxPoolNaNWinsAndPaddingNeverWins) {
  for (int32_t dt : kFloats) {
    SCOPED_TRACE(DTypeName(dt));
    const PoolCase k{1, 1, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1};
    Tensor x = Contiguous(dt, {1, 1, 4, 4});
    ForEachIndex(x.shape, [&](const Shape& i) { Set(x, i, -100.0L - static_cast<long double>(i[2] * 4 + i[3])); });
    Set(x, {0, 0, 2, 2}, kNaN);
    CheckMaxPool(k, x);
    Shape storage;
    Tensor y = Contiguous(dt, {1, 1, 4, 4}), idx = Contiguous(I64, {1, 1, 4, 4});
    EXPECT_OK(RunKernel("max_pool2d", {&x}, {&y, &idx}, k.Attrs(&storage, true)));
    EXPECT_EQ(Get(y, {0, 0, 0, 0}), -100);  // all negative: the zero padding does not win
    EXPECT_EQ(idx.At<int64_t>({0, 0, 0, 0}), 0);
    EXPECT_TRUE(std::isnan(Get(y, {0, 0, 3, 3})));
    EXPECT_EQ(idx.At<int64_t>({0, 0, 3, 3}), 10);
    // A window of only padding (dilation 3 over a 2-wide input with padding 1) is refused.
    const PoolCase bad{1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 3, 3};
    Tensor bx = Contiguous(dt, {1, 1, 2, 2}), by = Contiguous(dt, {1, 1, 1, 1}), bi = Contiguous(I64, {1, 1, 1, 1});
    ExpectError(RunKernel("max_pool2d", {&bx}, {&by, &bi}, bad.Attrs(&storage, true)), OAR_STATUS_INVALID_ARGUMENT,
                {"op 'max_pool2d'", "only padding"});
  }
  const PoolCase k{1, 1, 4, 4, 2, 2, 2, 2, 0, 0, 1, 1};
  Shape storage;
  Tensor x = Contiguous(F32, {1, 1, 4, 4}), y = Contiguous(F32, {1, 1, 3, 2}), i = Contiguous(I64, {1, 1, 3, 2});
  ExpectError(RunKernel("max_pool2d", {&x}, {&y, &i}, k.Attrs(&storage, true)), OAR_STATUS_INVALID_ARGUMENT,
              {"[1, 1, 2, 2]"});
  Tensor e = Contiguous(F32, {0, 1, 4, 4}), ey = Contiguous(F32, {0, 1, 2, 2}), ei = Contiguous(I64, {0, 1, 2, 2});
  EXPECT_OK(RunKernel("max_pool2d", {&e}, {&ey, &ei}, k.Attrs(&storage, true)));
}

void CheckAdaptive(Tensor& x, int64_t ho, int64_t wo, Tensor& gy) {
  const int64_t h = x.shape[2], w = x.shape[3];
  const Shape size = {ho, wo};
  Tensor y = Contiguous(x.dtype, {x.shape[0], x.shape[1], ho, wo});
  EXPECT_OK(RunKernel("adaptive_avg_pool2d", {&x}, {&y}, {oar::sdk::IntsAttr("output_size", size)}));
  auto window = [](int64_t i, int64_t in, int64_t out) {
    return std::pair{i * in / out, ((i + 1) * in + out - 1) / out};
  };
  const long double tol = RelTol(x.dtype) * 2;
  ExpectClose(
      y,
      [&](const Shape& o) {
        const auto [h0, h1] = window(o[2], h, ho);
        const auto [w0, w1] = window(o[3], w, wo);
        long double sum = 0;
        for (int64_t i = h0; i < h1; ++i) {
          for (int64_t j = w0; j < w1; ++j) sum += Get(x, {o[0], o[1], i, j});
        }
        return sum / static_cast<long double>((h1 - h0) * (w1 - w0));
      },
      tol, tol, "adaptive_avg_pool2d");
  Tensor gx = Contiguous(x.dtype, x.shape);
  EXPECT_OK(RunKernel("adaptive_avg_pool2d_grad", {&gy}, {&gx}, {oar::sdk::IntsAttr("output_size", size)}));
  ExpectClose(
      gx,
      [&](const Shape& i) {
        long double sum = 0;
        for (int64_t oh = 0; oh < ho; ++oh) {
          for (int64_t ow = 0; ow < wo; ++ow) {
            const auto [h0, h1] = window(oh, h, ho);
            const auto [w0, w1] = window(ow, w, wo);
            if (i[2] >= h0 && i[2] < h1 && i[3] >= w0 && i[3] < w1) {
              sum += Get(gy, {i[0], i[1], oh, ow}) / static_cast<long double>((h1 - h0) * (w1 - w0));
            }
          }
        }
        return sum;
      },
      tol, tol, "adaptive_avg_pool2d_grad");
}

TEST(Pool, AdaptiveAverageAndGradient) {
  for (int32_t dt : kFloats) {
    SCOPED_TRACE(DTypeName(dt));
    std::mt19937 rng(83);
    // Divisible, overlapping (7 -> 3), upsampling (3 -> 5) and global (-> 1x1) windows.
    for (auto [h, w, ho, wo] : {std::array<int64_t, 4>{8, 6, 4, 3}, std::array<int64_t, 4>{7, 7, 3, 3},
                                std::array<int64_t, 4>{3, 4, 5, 6}, std::array<int64_t, 4>{9, 5, 1, 1}}) {
      Tensor x = Permuted(dt, {2, 3, h, w}, {0, 2, 3, 1});
      Tensor gy = Broadcast(dt, {2, 3, ho, wo}, {false, true, false, false});
      FillRandom(x, rng), FillRandom(gy, rng);
      CheckAdaptive(x, ho, wo, gy);
    }
    Tensor big = Contiguous(dt, {2, 16, 33, 35}), gy = Contiguous(dt, {2, 16, 7, 7});
    FillRandom(big, rng), FillRandom(gy, rng);
    CheckAdaptive(big, 7, 7, gy);
  }
  Tensor x = Contiguous(F32, {1, 2, 4, 4}), y = Contiguous(F32, {1, 2, 2, 2});
  ExpectError(RunKernel("adaptive_avg_pool2d", {&x}, {&y}, {oar::sdk::IntsAttr("output_size", Shape{2, 3})}),
              OAR_STATUS_INVALID_ARGUMENT, {"output_size"});
  Tensor e = Contiguous(F32, {1, 2, 0, 4}), ey = Contiguous(F32, {1, 2, 2, 2});
  EXPECT_OK(RunKernel("adaptive_avg_pool2d", {&e}, {&ey}, {oar::sdk::IntsAttr("output_size", Shape{2, 2})}));
  EXPECT_TRUE(std::isnan(Get(ey, {0, 0, 0, 0})));  // the mean of nothing
}

}  // namespace
