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

TEST(VecLanes, LeavesMatchTheScalarLoopsBitForBit) {
  for (bool specials : {false, true}) {
    for (int64_t n = 0; n <= 300; ++n) {
      const std::vector<float> data = Data(n, static_cast<uint32_t>(n * 2 + specials), specials);
      for (int64_t shift : {0, 1, 3}) {
        const float* p = data.data() + shift;
        SCOPED_TRACE(::testing::Message() << "n " << n << " shift " << shift << " specials " << specials);
        if (n <= 256) {
          EXPECT_TRUE(Same(SumLeaf(p, n), RefLeaf<float>(n, [&](int64_t i) { return p[i]; })));
          EXPECT_TRUE(Same(SumLeafAsDouble(p, n), RefLeaf<double>(n, [&](int64_t i) { return double(p[i]); })));
          for (double mean : {0.0, 1.25, -3e3}) {
            EXPECT_TRUE(Same(SquaredDeviationLeaf(p, n, mean), RefLeaf<double>(n, [&](int64_t i) {
                               const double d = static_cast<double>(p[i]) - mean;
                               return d * d;
                             })));
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

TEST(VecLanes, ElementwiseLoopsMatchTheScalarLoopsBitForBit) {
  for (int64_t n : {0, 1, 7, 16, 33, 255, 1000}) {
    const std::vector<float> x = Data(n, 11, true), e = Data(n, 12, false), w = Data(n, 13, true),
                             b = Data(n, 14, false);
    std::vector<float> a = Data(n, 15, true), a_ref = a, amin = a, amin_ref = a;
    MaxFoldColumn(a.data(), x.data(), n);
    MinFoldColumn(amin.data(), x.data(), n);
    std::vector<float> e_abs(e.size()), y(n), y_ref(n), o(n), o_ref(n);
    for (size_t i = 0; i < e.size(); ++i) e_abs[i] = std::exp(-std::fabs(e[i]));
    SigmoidFinish(x.data(), e_abs.data(), y.data(), n);
    LayerNormRow(x.data(), w.data(), b.data(), o.data(), n, 0.37, 1.9);
    for (int64_t i = 0; i < n; ++i) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " i " << i);
      a_ref[i] = RefCombine<true>(a_ref[i], x[i]);
      amin_ref[i] = RefCombine<false>(amin_ref[i], x[i]);
      const float r = 1.0f / (1.0f + e_abs[i]);
      y_ref[i] = x[i] >= 0.0f ? r : e_abs[i] * r;
      o_ref[i] = static_cast<float>((static_cast<double>(x[i]) - 0.37) * 1.9 * w[i] + b[i]);
      EXPECT_TRUE(Same(a[i], a_ref[i]));
      EXPECT_TRUE(Same(amin[i], amin_ref[i]));
      EXPECT_TRUE(Same(y[i], y_ref[i]));
      EXPECT_TRUE(Same(o[i], o_ref[i]));
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

TEST(VecLanes, BinaryRunMatchesTheScalarOpsBitForBit) {
  const auto ref = [](VecBinary op, float a, float b) {
    switch (op) {
      case VecBinary::kAdd: return a + b;
      case VecBinary::kSub: return a - b;
      case VecBinary::kMul: return a * b;
      case VecBinary::kDiv: return a / b;
    }
    return 0.0f;
  };
  for (VecBinary op : {VecBinary::kAdd, VecBinary::kSub, VecBinary::kMul, VecBinary::kDiv}) {
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

}  // namespace
}  // namespace oar::host
