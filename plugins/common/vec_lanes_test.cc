// vec_lanes.h against the scalar loops it replaced (copied here as they were): bit for bit, on random
// data mixed with NaN, infinities, signed zeros, subnormals and huge values, for every length from 0 to
// 300 (every tail length, one and two pairwise leaves' worth) and at every start alignment.
#include "plugins/common/vec_lanes.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

namespace oar::host {
namespace {

constexpr int kLanes = 16;

template <typename S>
S RefTree(S (&lanes)[kLanes]) {
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

// The leaf of SumRun (reduce.cc) and of PairwiseSum (softmax_norm.cc) before vec_lanes.h.
template <typename Acc, typename F>
Acc RefLeaf(int64_t n, F f) {
  Acc lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += f(i + l);
  }
  for (; i < n; ++i) lanes[i % kLanes] += f(i);
  return RefTree(lanes);
}

float RefRowMax(const float* v, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

template <bool kMax>
float RefCombine(float acc, float v) {
  return ((kMax ? v > acc : v < acc) || v != v) ? v : acc;
}

// FoldRun (reduce_extrema.cc) for unit stride and n >= 32.
template <bool kMax>
float RefFoldRun(const float* p, int64_t n, float acc) {
  float lanes[kLanes];
  for (float& l : lanes) l = kMax ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] = RefCombine<kMax>(lanes[l], p[i + l]);
  }
  for (; i < n; ++i) acc = RefCombine<kMax>(acc, p[i]);
  for (int l = 0; l < kLanes; ++l) acc = RefCombine<kMax>(acc, lanes[l]);
  return acc;
}

/// Same bits, or both NaN.
template <typename T>
::testing::AssertionResult Same(T got, T want) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  if (std::bit_cast<U>(got) == std::bit_cast<U>(want) || (std::isnan(got) && std::isnan(want))) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "got " << got << " (bits " << std::hex << std::bit_cast<U>(got)
                                       << "), want " << want << " (bits " << std::bit_cast<U>(want) << ")";
}

/// Values of mixed magnitude and sign; with `specials`, one in eight is NaN, ±inf, ±0, subnormal or huge.
std::vector<float> Data(int64_t n, uint32_t seed, bool specials) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> pick(0, 63);
  const float table[] = {std::numeric_limits<float>::quiet_NaN(),
                         std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(),
                         0.0f,
                         -0.0f,
                         std::numeric_limits<float>::denorm_min(),
                         -3e38f,
                         1e30f};
  std::vector<float> v(n + kLanes);  // room to shift the start
  for (float& x : v) {
    const int k = pick(gen);
    x = specials && k < 8 ? table[k] : normal(gen) * (k % 3 == 0 ? 1e4f : 1.0f);
  }
  return v;
}

/// Finite values whose magnitudes span 2^-40 .. 2^40: their double sums round, so a value added to another
/// lane, or lanes combined in another order, changes the bits (with Data's values the double sums of a
/// leaf are mostly exact, or NaN / inf).
std::vector<float> SpreadData(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-40, 40);
  std::vector<float> v(n + kLanes);
  for (float& x : v) x = std::ldexp(normal(gen), exponent(gen));
  return v;
}

TEST(VecLanes, LeavesMatchTheScalarLoopsBitForBit) {
  for (int mode : {0, 1, 2}) {  // ordinary values, with specials, magnitudes spread
    const bool specials = mode == 1;
    for (int64_t n = 0; n <= 300; ++n) {
      const std::vector<float> data = mode == 2 ? SpreadData(n, static_cast<uint32_t>(n + 7))
                                                : Data(n, static_cast<uint32_t>(n * 2 + specials), specials);
      for (int64_t shift : {0, 1, 3}) {
        const float* p = data.data() + shift;
        SCOPED_TRACE(::testing::Message() << "n " << n << " shift " << shift << " mode " << mode);
        if (n <= 256) {
          std::vector<double> wide(static_cast<size_t>(n) + 1, 7.0);  // layer_norm's widen-and-sum pass
          EXPECT_TRUE(
              Same(WidenSumLeaf(p, wide.data(), n), RefLeaf<double>(n, [&](int64_t i) { return double(p[i]); })));
          for (int64_t i = 0; i < n; ++i) EXPECT_TRUE(Same(wide[i], double(p[i])));
          EXPECT_EQ(wide[n], 7.0);  // nothing written past the end
          EXPECT_TRUE(Same(SumLeaf(p, n), RefLeaf<float>(n, [&](int64_t i) { return p[i]; })));
          EXPECT_TRUE(Same(SumLeafAsDouble(p, n), RefLeaf<double>(n, [&](int64_t i) { return double(p[i]); })));
          EXPECT_TRUE(
              Same(SumLeafAsDouble(wide.data(), n), RefLeaf<double>(n, [&](int64_t i) { return double(p[i]); })));
          for (double mean : {0.0, 1.25, -3e3}) {
            const double want = RefLeaf<double>(n, [&](int64_t i) {
              const double d = static_cast<double>(p[i]) - mean;
              return d * d;
            });
            EXPECT_TRUE(Same(SquaredDeviationLeaf(p, n, mean), want));
            EXPECT_TRUE(Same(SquaredDeviationLeaf(wide.data(), n, mean), want));
          }
        }
        EXPECT_TRUE(Same(RowMax(p, n), RefRowMax(p, n)));
        if (n >= 32) {
          for (float acc : {-std::numeric_limits<float>::infinity(), 0.0f, -0.0f, 5.0f}) {
            EXPECT_TRUE(Same(MaxFoldRun(p, n, acc), RefFoldRun<true>(p, n, acc)));
            EXPECT_TRUE(Same(MinFoldRun(p, n, -acc), RefFoldRun<false>(p, n, -acc)));
          }
        }
      }
    }
  }
}

TEST(VecLanes, RowMaxKeepsTheFirstZeroOfAZeroMaximum) {
  for (int64_t n : {1, 17, 40, 100}) {
    for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
      std::vector<float> v(n, -1.0f);
      v[at] = -0.0f;
      for (int64_t k = at + 1; k < n; k += 5) v[k] = 0.0f;
      EXPECT_TRUE(Same(RowMax(v.data(), n), RefRowMax(v.data(), n))) << "n " << n << " at " << at;
      EXPECT_TRUE(std::signbit(RowMax(v.data(), n))) << "n " << n << " at " << at;
    }
  }
}

/// Same bits, NaN payloads included.
::testing::AssertionResult SameBits(float got, float want) {
  if (std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got bits " << std::hex << std::bit_cast<uint32_t>(got) << ", want "
                                       << std::bit_cast<uint32_t>(want);
}

// MaxFoldRun / MinFoldRun keep each lane's last NaN, else its first extreme, and take a shortcut when
// no lane saw a NaN and the extreme is not zero: long rows with a zero extreme and ties of +0 and -0
// (the first one in the sequential order must win), NaNs of different payloads (the last one must win,
// lanes' and tail's), and rows of ordinary values (the shortcut).
TEST(VecLanes, FoldRunsKeepTheScalarFoldsZeroSignsAndNanPayloadsBitForBit) {
  const float nan_a = std::bit_cast<float>(0x7fc00001u), nan_b = std::bit_cast<float>(0xffc00002u);
  for (int64_t n : {32, 127, 128, 129, 255, 256, 500, 511, 512, 513, 1000, 1024, 1031, 4100}) {
    for (int pattern = 0; pattern < 6; ++pattern) {
      std::vector<float> v = Data(n, static_cast<uint32_t>(n + pattern), pattern == 5);
      std::mt19937 gen(static_cast<uint32_t>(n * 7 + pattern));
      std::uniform_int_distribution<int64_t> at(0, n - 1);
      if (pattern < 4) {  // a zero maximum (or minimum): everything else negative (positive)
        for (float& x : v) x = -std::fabs(x) - 1.0f;
        for (int k = 0; k < 24; ++k) v[at(gen)] = k % 2 == pattern % 2 ? 0.0f : -0.0f;
      }
      if (pattern >= 2) {  // NaNs of two payloads in some lanes
        for (int k = 0; k < 6; ++k) v[at(gen)] = k % 2 ? nan_a : nan_b;
      }
      std::vector<float> neg(v);
      for (float& x : neg) x = -x;
      for (int64_t shift : {0, 1}) {
        if (shift + n > static_cast<int64_t>(v.size())) continue;
        SCOPED_TRACE(::testing::Message() << "n " << n << " pattern " << pattern << " shift " << shift);
        for (float acc : {-std::numeric_limits<float>::infinity(), 0.0f, -0.0f, -2.0f}) {
          EXPECT_TRUE(SameBits(MaxFoldRun(v.data() + shift, n, acc), RefFoldRun<true>(v.data() + shift, n, acc)));
          EXPECT_TRUE(
              SameBits(MinFoldRun(neg.data() + shift, n, -acc), RefFoldRun<false>(neg.data() + shift, n, -acc)));
        }
      }
    }
  }
}

// The column folds (amax / amin over a non-last axis) with NaNs of two payloads and signed zeros in
// both the accumulators and the new row.
TEST(VecLanes, FoldColumnsKeepTheScalarFoldsNanPayloadsAndZeroSigns) {
  const float nan_a = std::bit_cast<float>(0x7fc00001u), nan_b = std::bit_cast<float>(0xffc00002u);
  const float values[] = {nan_a, nan_b, 0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::infinity()};
  for (int64_t w : {1, 15, 16, 17, 49, 64, 100}) {
    for (int64_t shift : {0, 1}) {
      std::vector<float> a(w + shift), s(w + shift);
      for (int64_t j = 0; j < w + shift; ++j) {
        a[j] = values[j % 7];
        s[j] = values[(j / 7 + j) % 7];
      }
      std::vector<float> amax(a), amin(a);
      MaxFoldColumn(amax.data() + shift, s.data() + shift, w);
      MinFoldColumn(amin.data() + shift, s.data() + shift, w);
      for (int64_t j = shift; j < w + shift; ++j) {
        SCOPED_TRACE(::testing::Message() << "w " << w << " shift " << shift << " j " << j);
        EXPECT_TRUE(SameBits(amax[j], RefCombine<true>(a[j], s[j])));
        EXPECT_TRUE(SameBits(amin[j], RefCombine<false>(a[j], s[j])));
      }
    }
  }
}

TEST(VecLanes, ElementwiseLoopsMatchTheScalarLoopsBitForBit) {
  for (int64_t n : {0, 1, 7, 16, 33, 255, 1000}) {
    const std::vector<float> x = Data(n, 11, true), w = Data(n, 13, true), b = Data(n, 14, false);
    std::vector<float> a = Data(n, 15, true), a_ref = a, amin = a, amin_ref = a;
    MaxFoldColumn(a.data(), x.data(), n);
    MinFoldColumn(amin.data(), x.data(), n);
    std::vector<float> o(n), o_ref(n);
    LayerNormRow(x.data(), w.data(), b.data(), o.data(), n, 0.37, 1.9);
    const std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), bd(b.begin(), b.end());
    std::vector<float> od(n);
    LayerNormRow(xd.data(), wd.data(), bd.data(), od.data(), n, 0.37, 1.9);
    for (int64_t i = 0; i < n; ++i) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " i " << i);
      a_ref[i] = RefCombine<true>(a_ref[i], x[i]);
      amin_ref[i] = RefCombine<false>(amin_ref[i], x[i]);
      o_ref[i] = static_cast<float>((static_cast<double>(x[i]) - 0.37) * 1.9 * w[i] + b[i]);
      EXPECT_TRUE(Same(a[i], a_ref[i]));
      EXPECT_TRUE(Same(amin[i], amin_ref[i]));
      EXPECT_TRUE(Same(o[i], o_ref[i]));
      EXPECT_TRUE(Same(od[i], o_ref[i]));
    }
  }
}

TEST(VecLanes, ReluRunMatchesTheScalarSelectBitForBit) {
  for (int64_t n : {0, 1, 7, 31, 32, 33, 64, 65, 255, 1000}) {
    const std::vector<float> x = Data(n, 31, true);
    for (int64_t shift : {0, 1, 3}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " shift " << shift);
      const float* px = x.data() + shift;
      std::vector<float> y(n + 3, 7.0f);
      ReluRun(px, y.data() + shift, n);
      for (int64_t i = 0; i < n; ++i) EXPECT_TRUE(Same(y[shift + i], px[i] < 0.0f ? 0.0f : px[i]));
      for (int64_t i = n + shift; i < n + 3; ++i) EXPECT_EQ(y[i], 7.0f);
      std::vector<float> in_place(x);  // y == x
      ReluRun(in_place.data() + shift, in_place.data() + shift, n);
      for (int64_t i = 0; i < n; ++i) EXPECT_TRUE(Same(in_place[shift + i], px[i] < 0.0f ? 0.0f : px[i]));
    }
  }
}

// log_softmax's (x - max) - lse: the two rounded subtractions, on every tail length, unaligned and in place.
TEST(VecLanes, SubTwiceRunIsTheTwoRoundedSubtractionsBitForBit) {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {0, 1, 7, 15, 16, 17, 31, 32, 33, 64, 65, 255, 1000}) {
    const std::vector<float> x = Data(n, 41, true);
    for (const auto& [a, b] : {std::pair{0.0f, 0.0f}, std::pair{1.5f, 0.1f}, std::pair{1e4f, 3.3f},
                               std::pair{-7.25f, -1e-3f}, std::pair{inf, 0.5f}, std::pair{2.0f, -inf}}) {
      for (int64_t shift : {0, 1, 3}) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " a " << a << " b " << b << " shift " << shift);
        const float* px = x.data() + shift;
        std::vector<float> o(n + 3, 7.0f);
        SubTwiceRun(px, a, b, o.data(), n);
        for (int64_t i = 0; i < n; ++i) EXPECT_TRUE(Same(o[i], (px[i] - a) - b));
        for (int64_t i = n; i < n + 3; ++i) EXPECT_EQ(o[i], 7.0f);  // nothing written past the end
        std::vector<float> in_place(x);
        SubTwiceRun(in_place.data() + shift, a, b, in_place.data() + shift, n);
        for (int64_t i = 0; i < n; ++i) EXPECT_TRUE(Same(in_place[shift + i], (px[i] - a) - b));
      }
    }
  }
}

TEST(VecLanes, BatchNormRunIsTheComposedOpsRoundedStepsBitForBit) {
  // The composed ops' float operations, each rounded, written out (not through BatchNormStep).
  const auto ref = [](VecBatchNorm op, float x, float g, float m, float a, float b, float* gd) {
    const float d = x - m;
    switch (op) {
      case VecBatchNorm::kSquare: return d * d;
      case VecBatchNorm::kProduct: return g * d;
      case VecBatchNorm::kAffine: return (d * a) + b;
      case VecBatchNorm::kGradD: {
        const float q = b * d;
        const float s = g * a;
        const float t = s + q;
        *gd = t + q;
        return -*gd;
      }
    }
    return 0.0f;
  };
  const float inf = std::numeric_limits<float>::infinity();
  for (VecBatchNorm op : {VecBatchNorm::kSquare, VecBatchNorm::kProduct, VecBatchNorm::kAffine, VecBatchNorm::kGradD}) {
    for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 33, 64, 255, 1000}) {
      const std::vector<float> x = Data(n + 3, 43, true), g = SpreadData(n + 3, 44);
      for (const auto& [m, a, b] : {std::tuple{0.0f, 1.0f, 0.0f}, std::tuple{0.37f, 2.5f, -0.125f},
                                    std::tuple{-1e3f, 1e-3f, 7.0f}, std::tuple{inf, 0.5f, 1.0f}}) {
        for (int64_t shift : {0, 3}) {
          SCOPED_TRACE(::testing::Message() << "op " << static_cast<int>(op) << " n " << n << " m " << m << " shift "
                                            << shift);
          const float* px = x.data() + shift;
          const float* pg = g.data() + shift;
          std::vector<float> o(n + 3, 7.0f), gd(n + 3, 7.0f);
          BatchNormRun(op, px, pg, m, a, b, o.data(), gd.data(), n);
          for (int64_t i = 0; i < n; ++i) {
            float want_gd = 7.0f;
            EXPECT_TRUE(Same(o[i], ref(op, px[i], pg[i], m, a, b, &want_gd))) << i;
            EXPECT_TRUE(Same(gd[i], want_gd)) << i;  // written by kGradD only
          }
          for (int64_t i = n; i < n + 3; ++i) EXPECT_EQ(o[i], 7.0f);  // nothing written past the end
          for (int64_t i = n; i < n + 3; ++i) EXPECT_EQ(gd[i], 7.0f);
          if (op == VecBatchNorm::kGradD) {  // without d's gradient stored, and in place over x
            std::vector<float> in_place(x);
            BatchNormRun(op, in_place.data() + shift, pg, m, a, b, in_place.data() + shift, nullptr, n);
            for (int64_t i = 0; i < n; ++i) EXPECT_TRUE(Same(in_place[shift + i], o[i])) << i;
          }
        }
      }
    }
  }
}

TEST(VecLanes, BinaryRunMatchesTheScalarOpsBitForBit) {
  const auto ref = [](VecBinary op, float a, float b) {
    switch (op) {
      case VecBinary::kAdd: return a + b;
      case VecBinary::kSub: return a - b;
      case VecBinary::kMul: return a * b;
      case VecBinary::kDiv: return a / b;
      case VecBinary::kReluGrad:  // mul(g, cast(gt(x, 0)))
        return a * static_cast<float>(b > 0.0f);
    }
    return 0.0f;
  };
  for (VecBinary op : {VecBinary::kAdd, VecBinary::kSub, VecBinary::kMul, VecBinary::kDiv, VecBinary::kReluGrad}) {
    for (int64_t n : {0, 1, 7, 16, 31, 32, 33, 63, 64, 65, 255, 1000}) {
      const std::vector<float> x = Data(n, 21, true), y = Data(n, 22, true);
      for (int64_t shift : {0, 1, 3}) {
        for (auto [xs, ys] : {std::pair<int64_t, int64_t>{1, 1}, {0, 1}, {1, 0}}) {
          SCOPED_TRACE(::testing::Message() << "op " << static_cast<int>(op) << " n " << n << " shift " << shift
                                            << " steps " << xs << ", " << ys);
          const float* px = x.data() + shift;
          const float* py = y.data() + shift;
          std::vector<float> o(n + 3, 7.0f);
          BinaryRun(op, px, xs, py, ys, o.data() + shift, n);
          for (int64_t i = 0; i < n; ++i) EXPECT_TRUE(Same(o[shift + i], ref(op, px[i * xs], py[i * ys])));
          for (int64_t i = n + shift; i < n + 3; ++i) EXPECT_EQ(o[i], 7.0f);  // nothing written past the end
          // In place: the output is one of the operands.
          std::vector<float> in_place(x);
          BinaryRun(op, in_place.data() + shift, 1, py, ys, in_place.data() + shift, n);
          for (int64_t i = 0; i < n; ++i) EXPECT_TRUE(Same(in_place[shift + i], ref(op, px[i], py[i * ys])));
        }
      }
    }
  }
}

// MaxPoolPlaneNoPad<float, 2, 2>'s window loop (pool.cc) as it was, for one output row of a plane of
// width `win` whose rows start at r0 and r1: first greatest value by `v > best`, the first NaN wins.
void RefMaxPool2x2Row(const float* r0, const float* r1, float* y, int64_t* idx, int64_t n, int64_t h0, int64_t win) {
  for (int64_t ow = 0; ow < n; ++ow) {
    const int64_t w0 = ow * 2;
    float best = -std::numeric_limits<float>::infinity();
    int64_t at = h0 * win + w0;
    int64_t nan_at = -1;
    for (int64_t i = 0; i < 2; ++i) {
      const float* row = i == 0 ? r0 : r1;
      for (int64_t j = 0; j < 2; ++j) {
        const float v = row[w0 + j];
        const int64_t pos = (h0 + i) * win + w0 + j;
        at = v > best ? pos : at;
        best = v > best ? v : best;
        nan_at = std::isnan(v) & (nan_at < 0) ? pos : nan_at;
      }
    }
    if (nan_at >= 0) {
      at = nan_at;
      best = (nan_at / win == h0 ? r0 : r1)[nan_at % win];
    }
    y[ow] = best;
    idx[ow] = at;
  }
}

// Windows drawn from few values (ties of equal values and of +0 / -0 in every order, -inf, NaNs of
// different payloads, one in a window or several) and from ordinary values; every row length 0..80
// (vector blocks and every tail), unaligned starts.
TEST(VecLanes, MaxPool2x2RowMatchesTheScalarWindowsBitForBit) {
  const float nan1 = std::bit_cast<float>(0x7fc00001u), nan2 = std::bit_cast<float>(0xffc00002u);
  const float inf = std::numeric_limits<float>::infinity();
  const float few[] = {1.0f, 1.0f, 0.0f, -0.0f, -1.0f, 2.0f, -inf, inf, nan1, nan2};
  std::mt19937 gen(18);
  for (int rare_nan = 0; rare_nan < 3; ++rare_nan) {
    for (int64_t n = 0; n <= 80; ++n) {
      const int64_t win = 2 * n + (n % 2), shift = n % 3, h0 = 5;
      std::vector<float> r0(static_cast<size_t>(win + shift)), r1(r0.size());
      std::uniform_int_distribution<int> pick(0, rare_nan == 2 ? 7 : 9);
      std::normal_distribution<float> normal(0.0f, 3.0f);
      for (std::vector<float>* r : {&r0, &r1}) {
        for (float& x : *r) x = rare_nan == 1 ? normal(gen) : few[pick(gen)];
      }
      if (rare_nan == 1 && n > 20) r1[static_cast<size_t>(shift + 2 * n - 1)] = nan1;  // one NaN, last window
      std::vector<float> y(static_cast<size_t>(n) + 1, 7.0f), y_ref(y);
      std::vector<int64_t> idx(y.size(), -7), idx_ref(y.size(), -7);
      MaxPool2x2Row(r0.data() + shift, r1.data() + shift, y.data(), idx.data(), n, h0 * win, win);
      RefMaxPool2x2Row(r0.data() + shift, r1.data() + shift, y_ref.data(), idx_ref.data(), n, h0, win);
      for (int64_t i = 0; i <= n; ++i) {  // element n: nothing written past the end
        EXPECT_TRUE(SameBits(y[i], y_ref[i])) << "n " << n << " ow " << i;
        EXPECT_EQ(idx[i], idx_ref[i]) << "n " << n << " ow " << i;
      }
    }
  }
}

}  // namespace
}  // namespace oar::host
