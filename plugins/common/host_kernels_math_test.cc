// The op library's elementwise, comparison, selection and reduction kernels against plain loops written
// here (in long double, rounded to the dtype): every registered dtype, contiguous, permuted, broadcast
// (stride 0), empty and rank-0 operands, sizes above the threading threshold, and special values.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "plugins/common/host_kernels_testing.h"
#include "plugins/common/vec_exp.h"

namespace {

using namespace oar::host::testing;  // NOLINT: the test vocabulary

const long double kInf = std::numeric_limits<long double>::infinity();
const long double kNaN = std::numeric_limits<long double>::quiet_NaN();

/// Operands of one shape in every layout the kernels special-case: dense, permuted, broadcast, padded
/// with an offset, empty, rank 0 and above the threading threshold.
std::vector<Tensor> Layouts(int32_t dt) {
  std::vector<Tensor> v;
  v.push_back(Contiguous(dt, {4, 9}));
  v.push_back(Permuted(dt, {5, 6, 7}, {2, 0, 1}));
  v.push_back(Broadcast(dt, {3, 4}, {false, true}));
  v.push_back(Strided(dt, {3, 5}, {11, 2}, 3));
  v.push_back(Contiguous(dt, {0, 5}));
  v.push_back(Contiguous(dt, {}));
  v.push_back(Strided(dt, {40000}, {2}, 1));
  return v;
}

// ===================================================================================================
// Unary math
// ===================================================================================================

long double RefMath(const std::string& op, long double x) {
  if (op == "log") return std::log(x);
  if (op == "log1p") return std::log1p(x);
  if (op == "expm1") return std::expm1(x);
  if (op == "sqrt") return std::sqrt(x);
  if (op == "rsqrt") return 1 / std::sqrt(x);
  if (op == "sin") return std::sin(x);
  if (op == "cos") return std::cos(x);
  if (op == "tanh") return std::tanh(x);
  if (op == "sigmoid") return 1 / (1 + std::exp(-x));
  if (op == "erf") return std::erf(x);
  if (op == "reciprocal") return 1 / x;
  if (op == "abs") return std::fabs(x);
  if (op == "sign") return x > 0 ? 1 : x < 0 ? -1 : x;
  ADD_FAILURE() << "no reference for " << op;
  return 0;
}

/// Integer abs and sign, wrapping as the kernels do: abs(min) is min.
long double RefIntMath(const std::string& op, int32_t dt, long double x) {
  if (op == "sign") return x > 0 ? 1 : x < 0 ? -1 : 0;
  const long double min = dt == I8 ? -128.0L : dt == I32 ? -2147483648.0L : -9223372036854775808.0L;
  return x == min ? min : std::fabs(x);
}

/// A few values outside [-4, 4] and the IEEE specials, as the dtype stores them.
std::vector<long double> Specials(int32_t dt) {
  std::vector<long double> v = {0.0L, -0.0L, 1,    -1,   0.5L,  1e-3L, -1e-3L, 30,
                                -30,  100,   -100, 1e4L, -1e4L, kInf,  -kInf,  kNaN};
  if (dt == F32 || dt == F64 || dt == BF16) v.insert(v.end(), {1e30L, -1e30L, 1e-30L, 1e-40L});
  for (long double& x : v) x = RoundTo(dt, x);
  return v;
}

void CheckMath(const std::string& op, Tensor& x) {
  Tensor out = Contiguous(x.dtype, x.shape);
  EXPECT_OK(RunKernel(op, {&x}, {&out}));
  const bool integral = !oar::sdk::IsFloating(x.dtype);
  // float16 results smaller than its least normal keep fewer bits: allow one subnormal step there.
  const long double atol = x.dtype == F16 ? 6e-8L : x.dtype == F32 ? 3e-45L : 0;
  ExpectClose(
      out,
      [&](const Shape& i) {
        const long double v = Get(x, i);
        return integral ? RefIntMath(op, x.dtype, v) : RoundTo(x.dtype, RefMath(op, v));
      },
      RelTol(x.dtype), atol, op);
}

TEST(Math, UnaryMatchesReferenceOnEveryLayoutAndSpecialValue) {
  const std::map<std::string, std::vector<int32_t>> ops = {
      {"abs", kSigned},  {"sign", kSigned},    {"log", kFloats}, {"log1p", kFloats}, {"expm1", kFloats},
      {"sqrt", kFloats}, {"rsqrt", kFloats},   {"sin", kFloats}, {"cos", kFloats},
      {"tanh", kFloats}, {"sigmoid", kFloats}, {"erf", kFloats}, {"reciprocal", kFloats}};
  for (const auto& [op, types] : ops) {
    for (int32_t dt : types) {
      SCOPED_TRACE(op + " " + std::string(DTypeName(dt)));
      std::mt19937 rng(17);
      const bool positive = op == "log" || op == "sqrt" || op == "rsqrt";
      const double lo = positive ? 0.01 : op == "log1p" ? -0.99 : -4;
      for (Tensor& x : Layouts(dt)) {
        if (oar::sdk::IsFloating(dt)) {
          FillRandom(x, rng, lo, 4);
        } else {
          FillWhole(x, rng, -100, 100);
        }
        CheckMath(op, x);
      }
      if (oar::sdk::IsFloating(dt)) {
        const std::vector<long double> specials = Specials(dt);
        Tensor s = Contiguous(dt, {static_cast<int64_t>(specials.size())});
        for (size_t i = 0; i < specials.size(); ++i) Set(s, {static_cast<int64_t>(i)}, specials[i]);
        CheckMath(op, s);
      }
    }
  }
}

TEST(Math, IeeeEdgeCasesAndNoSigmoidOverflow) {
  for (int32_t dt : kFloats) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor x = Contiguous(dt, {6}), out = Contiguous(dt, {6});
    const long double in[] = {0.0L, -0.0L, -1, 1e4L, -1e4L, kNaN};
    for (int i = 0; i < 6; ++i) Set(x, {i}, in[i]);
    auto run = [&](const char* op) {
      EXPECT_OK(RunKernel(op, {&x}, {&out}));
      std::vector<long double> r(6);
      for (int i = 0; i < 6; ++i) r[i] = Get(out, {i});
      return r;
    };
    std::vector<long double> r = run("log");
    EXPECT_EQ(r[0], -kInf);
    EXPECT_TRUE(std::isnan(r[2]));
    r = run("sqrt");
    EXPECT_TRUE(std::isnan(r[2]));
    EXPECT_TRUE(std::signbit(r[1]));  // sqrt(-0) = -0
    r = run("rsqrt");
    EXPECT_EQ(r[0], kInf);
    EXPECT_EQ(r[1], -kInf);
    r = run("reciprocal");
    EXPECT_EQ(r[0], kInf);
    EXPECT_EQ(r[1], -kInf);
    r = run("sigmoid");  // 1e4 and -1e4: no overflow to NaN
    EXPECT_EQ(r[3], 1);
    EXPECT_EQ(r[4], 0);
    EXPECT_TRUE(std::isnan(r[5]));
    r = run("sign");
    EXPECT_TRUE(std::isnan(r[5]));
    EXPECT_EQ(r[2], -1);
    EXPECT_TRUE(std::signbit(r[1]) && r[1] == 0);  // sign keeps the zero's sign
  }
  // sigmoid(-100) in float32 is 3.7e-44: a subnormal, not 0 and not NaN (e^-x would overflow).
  Tensor x = Contiguous(F32, {2}), out = Contiguous(F32, {2});
  Set(x, {0}, -100), Set(x, {1}, -88);
  EXPECT_OK(RunKernel("sigmoid", {&x}, {&out}));
  EXPECT_GT(Get(out, {0}), 0);
  EXPECT_NEAR(static_cast<double>(Get(out, {1}) / std::exp(-88.0L)), 1.0, 1e-6);
}

// float32 exp and sigmoid of a dense run take their exponentials four at a time from our own ExpN
// (vec_exp.h): within 2 ulp of the correctly rounded value over the whole range, subnormal results
// included, with std::exp's special values. An odd length exercises the partial last group.
TEST(Math, Float32ExpWithin2UlpOverItsWholeRange) {
  constexpr int64_t kSteps = 40001;
  constexpr float kFloatInf = std::numeric_limits<float>::infinity();
  const float specials[] = {-kFloatInf, kFloatInf, std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f, 88.72f, 89.0f, -103.0f,
                            -104.0f, -150.0f, 1e-30f};
  const int64_t n = kSteps + static_cast<int64_t>(std::size(specials));
  Tensor x = Contiguous(F32, {n}), out = Contiguous(F32, {n});
  for (int64_t i = 0; i < kSteps; ++i) Set(x, {i}, -110.0 + 205.0 * static_cast<double>(i) / (kSteps - 1));
  for (size_t i = 0; i < std::size(specials); ++i) Set(x, {kSteps + static_cast<int64_t>(i)}, specials[i]);
  EXPECT_OK(RunKernel("exp", {&x}, {&out}));
  for (int64_t i = 0; i < n; ++i) {
    const float in = static_cast<float>(Get(x, {i})), got = static_cast<float>(Get(out, {i}));
    const float want = static_cast<float>(std::exp(static_cast<double>(in)));
    if (std::isnan(in)) {
      EXPECT_TRUE(std::isnan(got));
    } else if (std::isinf(want) || want == 0) {
      EXPECT_EQ(got, want) << "exp(" << in << ")";
    } else {
      const double ulp = want < std::numeric_limits<float>::min() ? std::numeric_limits<float>::denorm_min()
                                                                  : std::nextafter(want, kFloatInf) - want;
      EXPECT_LE(std::fabs(got - std::exp(static_cast<double>(in))) / ulp, 2.0) << "exp(" << in << ")";
    }
  }
}

// TanhN (the dense float32 tanh kernel) against tanh in double on every 1021st float32 bit pattern (both
// signs, subnormals, infinities and NaNs included): within 4 ulp, exact at the specials, and the same bits
// at every vector width the CPU has. Through the kernel too, so that the dense path is the one tested.
TEST(Math, Float32TanhWithin4UlpOverItsWholeRangeAndTheSameAtEveryWidth) {
  constexpr float kFloatInf = std::numeric_limits<float>::infinity();
  std::vector<float> x;
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 1021) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  for (float v : {0.0f, -0.0f, kFloatInf, -kFloatInf, 0.625f, -0.625f, std::nextafter(0.625f, 0.0f), 9.0f, 1e-40f,
                  -1e-40f, std::numeric_limits<float>::denorm_min()}) {
    x.push_back(v);
  }
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y(x.size()), wide(x.size());
  oar::host::internal::TanhAtWidth(4, x.data(), y.data(), n);
  double worst = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float in = x[i], got = y[i];
    if (std::isnan(in)) {
      if (!std::isnan(got)) ++bad;
      continue;
    }
    const double ref = std::tanh(static_cast<double>(in));
    const float want = static_cast<float>(ref);
    if (want == 0 || std::isinf(in)) {  // exact there, tanh(+-0) keeping the sign
      if (got != want || std::signbit(got) != std::signbit(want)) ++bad;
      continue;
    }
    const float aw = std::fabs(want);
    const double ulp = aw < std::numeric_limits<float>::min() ? std::numeric_limits<float>::denorm_min()
                                                                : std::nextafter(aw, kFloatInf) - aw;
    const double err = std::fabs(got - ref) / ulp;
    worst = std::max(worst, err);
    if (err > 4.0) ++bad;
  }
  EXPECT_EQ(bad, 0) << "worst error " << worst << " ulp";
  EXPECT_LE(worst, 4.0);
  for (int lanes : {8, 16}) {
    oar::host::internal::TanhAtWidth(lanes, x.data(), wide.data(), n);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isnan(y[i]) && std::bit_cast<uint32_t>(wide[i]) != std::bit_cast<uint32_t>(y[i])) ++differ;
    }
    EXPECT_EQ(differ, 0) << lanes << " lanes";
  }
  // The kernel's dense path is TanhN.
  Tensor t = Contiguous(F32, {4096}), out = Contiguous(F32, {4096});
  for (int64_t i = 0; i < 4096; ++i) Set(t, {i}, -12.0 + 24.0 * static_cast<double>(i) / 4095);
  EXPECT_OK(RunKernel("tanh", {&t}, {&out}));
  std::vector<float> in(4096), expect(4096);
  for (int64_t i = 0; i < 4096; ++i) in[i] = static_cast<float>(Get(t, {i}));
  oar::host::TanhN(in.data(), expect.data(), 4096);
  for (int64_t i = 0; i < 4096; ++i) EXPECT_EQ(static_cast<float>(Get(out, {i})), expect[i]) << i;
}

// ExpN's documented arithmetic (vec_exp.cc's Exp) written out in scalar float, one rounded operation per
// line; this file is compiled with -ffp-contract=off (CMakeLists.txt), so no multiply-add is fused here either.
float ExpOfTheDocumentedArithmetic(float x) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;
  x = x < -104.0f ? -104.0f : x;  // NaN compares false and passes through, payload kept
  x = x > 89.0f ? 89.0f : x;
  const float t = x * kLog2e + kRound;
  const float n = t - kRound;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040;
  for (float c : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}) p = p * r + c;
  const int32_t k = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const int32_t k1 = k >> 1, k2 = k - k1;
  return p * std::bit_cast<float>((k1 + 127) << 23) * std::bit_cast<float>((k2 + 127) << 23);
}

// ExpN at every vector width the CPU has is that arithmetic bit for bit (NaN payloads included): every 1021st
// float32 bit pattern, and the clamp's edges (-104 and 89, their neighbours, +-inf, NaNs of both signs and
// several payloads) at every position of a vector step and of the padded tail.
TEST(Math, ExpNIsItsDocumentedArithmeticBitForBitAtEveryWidth) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> x;
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 1021) {
    x.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  }
  const float edges[] = {-104.0f,
                         std::nextafter(-104.0f, -kInf),
                         std::nextafter(-104.0f, 0.0f),
                         89.0f,
                         std::nextafter(89.0f, kInf),
                         std::nextafter(89.0f, 0.0f),
                         kInf,
                         -kInf,
                         0.0f,
                         -0.0f,
                         std::bit_cast<float>(0x7fc00003u),
                         std::bit_cast<float>(0xffc00005u),
                         std::bit_cast<float>(0x7fa00001u),
                         -150.0f,
                         128.0f};
  for (int rep = 0; rep < 37; ++rep) {
    for (float e : edges) x.push_back(e);
  }
  const int64_t n = static_cast<int64_t>(x.size());
  for (int lanes : {4, 8, 16}) {
    std::vector<float> y(x.size());
    oar::host::internal::ExpAtWidth(lanes, x.data(), y.data(), n);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float want = ExpOfTheDocumentedArithmetic(x[i]);
      if (std::bit_cast<uint32_t>(y[i]) != std::bit_cast<uint32_t>(want) && differ++ < 5) {
        ADD_FAILURE() << lanes << " lanes: exp(" << x[i] << ") [bits " << std::hex << std::bit_cast<uint32_t>(x[i])
                      << "] gave bits " << std::bit_cast<uint32_t>(y[i]) << ", want " << std::bit_cast<uint32_t>(want);
      }
    }
    EXPECT_EQ(differ, 0) << lanes << " lanes";
  }
}

// ExpOfDifferenceN (softmax's shifted exponentials) is ExpN of the float difference, bit for bit (NaN
// payloads included): on every length 0..100 (the paired vector steps, a single step, the padded tail), on
// ordinary values and on specials.
TEST(Math, ShiftedExponentialsAreExpNOfTheRoundedArgumentBitForBit) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float specials[] = {-kInf,
                            kInf,
                            std::bit_cast<float>(0x7fc00003u),
                            std::bit_cast<float>(0xffc00005u),
                            0.0f,
                            -0.0f,
                            88.72f,
                            -104.0f,
                            1e-40f,
                            -3e38f,
                            3e38f};
  std::vector<float> base;
  for (int i = 0; i < 101; ++i) base.push_back(i % 7 == 3 ? specials[(i / 7) % std::size(specials)] : 0.37f * (i - 50));
  for (float m : {0.0f, 13.25f, -7.5f, kInf}) {
    for (int64_t n = 0; n <= 100; ++n) {
      std::vector<float> want(base.begin(), base.begin() + n), got(want.size(), 7.0f);
      for (float& v : want) v = v - m;
      oar::host::ExpN(want.data(), want.data(), n);
      oar::host::ExpOfDifferenceN(base.data(), m, got.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << "n " << n << " i " << i;
      }
    }
  }
}

// The one-pass loops of softmax and sigmoid against the two-pass forms they replace, bit for bit: the
// exponentials of ExpOfDifferenceN summed in double as PairwiseSum's leaf (16 lanes, element i into lane
// i % 16, then the halving tree), with and without storing them and in place; sigmoid as SigmoidOp::Apply
// rounds it with ExpN's exponential of -|x|. Every length 0..256 (every chunk and tail), specials mixed in.
TEST(Math, FusedExpSumLeafAndSigmoidAreTheTwoPassLoopsBitForBit) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float specials[] = {-kInf,  kInf, std::bit_cast<float>(0x7fc00003u), 0.0f, -0.0f, 88.72f, -104.0f, 1e-40f,
                            -3e38f, 3e38f};
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> base;
  // Every third value is spread wider: exponentials from e^-60 to e^60, whose double sums round (a value
  // in another lane, or lanes combined in another order, changes the bits).
  for (int i = 0; i < 260; ++i) {
    base.push_back(i % 11 == 4 ? specials[(i / 11) % std::size(specials)] : normal(gen) * (i % 3 == 0 ? 12.0f : 1.0f));
  }
  const auto same = [](auto got, auto want) {
    return std::bit_cast<std::conditional_t<sizeof(got) == 4, uint32_t, uint64_t>>(got) ==
               std::bit_cast<std::conditional_t<sizeof(want) == 4, uint32_t, uint64_t>>(want) ||
           (std::isnan(got) && std::isnan(want));
  };
  for (bool with_specials : {false, true}) {
    std::vector<float> x = base;
    if (!with_specials) {
      for (float& v : x) v = std::isfinite(v) && std::fabs(v) < 100 ? v : 0.5f;
    }
    for (float m : {0.0f, 9.5f, -3.25f, kInf}) {
      for (int64_t n = 0; n <= 256; ++n) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " m " << m << " specials " << with_specials);
        std::vector<float> e(n);
        oar::host::ExpOfDifferenceN(x.data(), m, e.data(), n);
        double lanes[16] = {};
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
          for (int l = 0; l < 16; ++l) lanes[l] += static_cast<double>(e[i + l]);
        }
        for (; i < n; ++i) lanes[i % 16] += static_cast<double>(e[i]);
        for (int width = 8; width > 0; width /= 2) {
          for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
        }
        EXPECT_TRUE(same(oar::host::ExpOfDifferenceSumLeaf(x.data(), m, n), lanes[0]));
      }
    }
    for (int64_t n = 0; n <= 100; ++n) {
      std::vector<float> neg(n), got(n + 1, 7.0f);
      for (int64_t k = 0; k < n; ++k) neg[k] = -std::fabs(x[k]);
      oar::host::ExpN(neg.data(), neg.data(), n);
      oar::host::SigmoidN(x.data(), got.data(), n);
      std::vector<float> in_place(x.begin(), x.begin() + n);
      oar::host::SigmoidN(in_place.data(), in_place.data(), n);
      for (int64_t k = 0; k < n; ++k) {
        const float r = 1.0f / (1.0f + neg[k]);
        const float want = x[k] >= 0.0f ? r : neg[k] * r;
        EXPECT_TRUE(same(got[k], want)) << "n " << n << " k " << k << " x " << x[k];
        EXPECT_TRUE(same(in_place[k], want)) << "n " << n << " k " << k;
      }
      EXPECT_EQ(got[n], 7.0f);
    }
  }
}

// SigmoidN's final select at the values where x's sign bit and x >= 0 disagree (-0, NaNs with a clear sign bit)
// and around them, bit for bit with NaN payloads (the test above accepts any NaN): against SigmoidOp::Apply's
// order of operations with ExpN's exponential of -|x|, every value at every position of a vector step and of
// the padded tail.
TEST(Math, SigmoidNSelectsBitForBitAtSignedZerosAndNaNs) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float values[] = {-0.0f,
                          0.0f,
                          std::bit_cast<float>(0x7fc00003u),
                          std::bit_cast<float>(0xffc00005u),
                          std::bit_cast<float>(0x7fa00001u),
                          std::bit_cast<float>(0xff800007u),
                          kInf,
                          -kInf,
                          1e-40f,
                          -1e-40f,
                          -3.5f,
                          2.25f,
                          -120.0f,
                          100.0f};
  std::vector<float> x;
  for (int rep = 0; rep < 5; ++rep) {
    for (float v : values) x.push_back(v);
  }
  for (int64_t n = 1; n <= static_cast<int64_t>(x.size()); ++n) {
    std::vector<float> e(n), got(n);
    for (int64_t k = 0; k < n; ++k) e[k] = -std::fabs(x[k]);
    oar::host::ExpN(e.data(), e.data(), n);
    oar::host::SigmoidN(x.data(), got.data(), n);
    for (int64_t k = 0; k < n; ++k) {
      const float r = 1.0f / (1.0f + e[k]);
      const float want = x[k] >= 0.0f ? r : e[k] * r;
      EXPECT_EQ(std::bit_cast<uint32_t>(got[k]), std::bit_cast<uint32_t>(want))
          << "n " << n << " sigmoid of bits " << std::hex << std::bit_cast<uint32_t>(x[k]);
    }
  }
}

TEST(Math, IntegerAbsOfMinimumWraps) {
  Tensor a = Contiguous(I8, {3}), o = Contiguous(I8, {3});
  Set(a, {0}, -128), Set(a, {1}, -127), Set(a, {2}, 0);
  EXPECT_OK(RunKernel("abs", {&a}, {&o}));
  EXPECT_EQ(Get(o, {0}), -128);
  EXPECT_EQ(Get(o, {1}), 127);
  Tensor b = Contiguous(I64, {1}), p = Contiguous(I64, {1});
  b.At<int64_t>({0}) = std::numeric_limits<int64_t>::min();
  EXPECT_OK(RunKernel("abs", {&b}, {&p}));
  EXPECT_EQ(p.At<int64_t>({0}), std::numeric_limits<int64_t>::min());
}

TEST(Math, PredicatesAndLogicalNot) {
  for (int32_t dt : kFloats) {
    SCOPED_TRACE(DTypeName(dt));
    std::mt19937 rng(5);
    for (Tensor& x : Layouts(dt)) {
      FillRandom(x, rng);
      // Sprinkle specials over a third of the elements.
      int k = 0;
      ForEachIndex(x.shape, [&](const Shape& i) {
        if (k++ % 3 == 0) Set(x, i, (k % 4 == 0) ? kNaN : (k % 4 == 1) ? kInf : -kInf);
      });
      for (const char* op : {"isnan", "isinf"}) {
        Tensor out = Contiguous(BOOL, x.shape);
        EXPECT_OK(RunKernel(op, {&x}, {&out}));
        ExpectClose(
            out,
            [&](const Shape& i) -> long double {
              const long double v = Get(x, i);
              return std::string(op) == "isnan" ? std::isnan(v) : std::isinf(v);
            },
            0, 0, op);
      }
    }
  }
  std::mt19937 rng(6);
  for (Tensor& x : Layouts(BOOL)) {
    FillRandom(x, rng);
    Tensor out = Contiguous(BOOL, x.shape);
    EXPECT_OK(RunKernel("logical_not", {&x}, {&out}));
    ExpectClose(
        out, [&](const Shape& i) -> long double { return Get(x, i) == 0; }, 0, 0, "logical_not");
  }
}

// ===================================================================================================
// Binary: pow, comparisons, logical
// ===================================================================================================

long double RefBinaryOp(const std::string& op, long double a, long double b) {
  if (op == "pow") return std::pow(a, b);
  if (op == "eq") return a == b;
  if (op == "ne") return a != b;
  if (op == "lt") return a < b;
  if (op == "le") return a <= b;
  if (op == "gt") return a > b;
  if (op == "ge") return a >= b;
  if (op == "logical_and") return a != 0 && b != 0;
  if (op == "logical_or") return a != 0 || b != 0;
  ADD_FAILURE() << "no reference for " << op;
  return 0;
}

/// Pairs (a, b) of one shape in the layouts the binary loop special-cases.
std::vector<std::pair<Tensor, Tensor>> BinaryLayouts(int32_t dt) {
  std::vector<std::pair<Tensor, Tensor>> v;
  v.emplace_back(Contiguous(dt, {3, 5}), Contiguous(dt, {3, 5}));
  v.emplace_back(Broadcast(dt, {4, 5, 6}, {false, true, false}), Broadcast(dt, {4, 5, 6}, {true, true, true}));
  v.emplace_back(Broadcast(dt, {4, 5, 6}, {true, true, true}), Broadcast(dt, {4, 5, 6}, {false, true, false}));
  v.emplace_back(Permuted(dt, {6, 7}, {1, 0}), Strided(dt, {6, 7}, {9, 1}, 2));
  v.emplace_back(Contiguous(dt, {3, 0, 2}), Contiguous(dt, {3, 0, 2}));
  v.emplace_back(Contiguous(dt, {}), Contiguous(dt, {}));
  v.emplace_back(Broadcast(dt, {3, 33001}, {true, false}), Contiguous(dt, {3, 33001}));
  return v;
}

void CheckBinaryOp(const std::string& op, Tensor& a, Tensor& b) {
  const bool predicate = op != "pow";
  Tensor out = Contiguous(predicate ? BOOL : a.dtype, a.shape);
  EXPECT_OK(RunKernel(op, {&a, &b}, {&out}));
  ExpectClose(
      out,
      [&](const Shape& i) {
        const long double r = RefBinaryOp(op, Get(a, i), Get(b, i));
        return predicate ? r : RoundTo(a.dtype, r);
      },
      predicate ? 0 : RelTol(a.dtype), a.dtype == F16 ? 6e-8L : 0, op);
}

TEST(Math, BinaryMatchesReferenceOnEveryLayout) {
  const std::map<std::string, std::vector<int32_t>> ops = {
      {"pow", kFloats},      {"eq", kAll},   {"ne", kAll},   {"lt", kArith},
      {"le", kArith},        {"gt", kArith}, {"ge", kArith}, {"logical_and", {BOOL}},
      {"logical_or", {BOOL}}};
  for (const auto& [op, types] : ops) {
    for (int32_t dt : types) {
      SCOPED_TRACE(op + " " + std::string(DTypeName(dt)));
      std::mt19937 rng(23);
      for (auto& [a, b] : BinaryLayouts(dt)) {
        if (op == "pow") {
          FillRandom(a, rng, 0.05, 4), FillRandom(b, rng, -3, 3);
        } else {
          FillWhole(a, rng, -2, 2), FillWhole(b, rng, -2, 2);  // many equal pairs
        }
        CheckBinaryOp(op, a, b);
      }
    }
  }
}

TEST(Math, ComparisonsAndPowWithSpecialValues) {
  const std::vector<long double> values = {0.0L, -0.0L, 1, -1, 2, 0.5L, kInf, -kInf, kNaN};
  const int64_t n = static_cast<int64_t>(values.size());
  for (int32_t dt : kFloats) {
    SCOPED_TRACE(DTypeName(dt));
    // Every ordered pair of specials: a varies along dim 0, b along dim 1.
    Tensor a = Contiguous(dt, {n, n}), b = Contiguous(dt, {n, n});
    ForEachIndex(a.shape, [&](const Shape& i) { Set(a, i, values[i[0]]), Set(b, i, values[i[1]]); });
    for (const char* op : {"eq", "ne", "lt", "le", "gt", "ge", "pow"}) CheckBinaryOp(op, a, b);
    Tensor out = Contiguous(BOOL, {n, n});
    EXPECT_OK(RunKernel("ne", {&a, &a}, {&out}));
    EXPECT_EQ(Get(out, {n - 1, n - 1}), 1);  // NaN != NaN
    EXPECT_EQ(Get(out, {1, 0}), 0);          // -0 == 0
  }
}

// ===================================================================================================
// where
// ===================================================================================================

TEST(Where, EveryDTypeAndLayout) {
  for (int32_t dt : kAll) {
    SCOPED_TRACE(DTypeName(dt));
    std::mt19937 rng(31);
    struct Case {
      Tensor cond, a, b;
    };
    std::vector<Case> cases;
    cases.push_back({Contiguous(BOOL, {4, 5}), Contiguous(dt, {4, 5}), Contiguous(dt, {4, 5})});
    cases.push_back({Contiguous(BOOL, {4, 5}), Contiguous(dt, {4, 5}), Broadcast(dt, {4, 5}, {true, true})});
    cases.push_back({Contiguous(BOOL, {4, 5}), Broadcast(dt, {4, 5}, {true, true}), Contiguous(dt, {4, 5})});
    cases.push_back(
        {Broadcast(BOOL, {4, 5}, {true, false}), Permuted(dt, {4, 5}, {1, 0}), Strided(dt, {4, 5}, {7, 1}, 2)});
    cases.push_back({Permuted(BOOL, {3, 4, 5}, {2, 1, 0}), Contiguous(dt, {3, 4, 5}),
                     Broadcast(dt, {3, 4, 5}, {false, true, false})});
    cases.push_back({Contiguous(BOOL, {0, 3}), Contiguous(dt, {0, 3}), Contiguous(dt, {0, 3})});
    cases.push_back({Contiguous(BOOL, {}), Contiguous(dt, {}), Contiguous(dt, {})});
    cases.push_back({Contiguous(BOOL, {70001}), Contiguous(dt, {70001}), Broadcast(dt, {70001}, {true})});
    for (Case& c : cases) {
      FillRandom(c.cond, rng), FillRandom(c.a, rng, -50, 50), FillRandom(c.b, rng, -50, 50);
      Tensor out = Contiguous(dt, c.a.shape);
      EXPECT_OK(RunKernel("where", {&c.cond, &c.a, &c.b}, {&out}));
      ExpectClose(
          out, [&](const Shape& i) { return Get(c.cond, i) != 0 ? Get(c.a, i) : Get(c.b, i); }, 0, 0, "where");
    }
  }
  Tensor c = Contiguous(BOOL, {2}), a = Contiguous(F32, {2}), b = Contiguous(F32, {3}), o = Contiguous(F32, {2});
  ExpectError(RunKernel("where", {&c, &a, &b}, {&o}), OAR_STATUS_INVALID_ARGUMENT, {"op 'where'", "[3]"});
}

// ===================================================================================================
// max, min, prod
// ===================================================================================================

/// Keepdim reduction reference: fold every input element into its output cell.
void CheckFold(const std::string& op, Tensor& x, const Shape& axes) {
  Shape out_shape = x.shape;
  for (int64_t a : axes) out_shape[a] = 1;
  Tensor out = Contiguous(x.dtype, out_shape);
  EXPECT_OK(RunKernel(op, {&x}, {&out}, {oar::sdk::IntsAttr("axes", axes)}));
  const Shape out_strides = RowMajor(out_shape);
  auto cell = [&](const Shape& i) {
    int64_t k = 0;
    for (size_t d = 0; d < i.size(); ++d) k += (out_shape[d] == 1 ? 0 : i[d]) * out_strides[d];
    return k;
  };
  const int64_t cells = Numel(out_shape);
  std::vector<long double> acc(cells, op == "prod" ? 1 : op == "max" ? -kInf : kInf);
  std::vector<uint64_t> wrapped(cells, 1);  // integer products modulo 2^64
  ForEachIndex(x.shape, [&](const Shape& i) {
    const int64_t k = cell(i);
    const long double v = Get(x, i);
    long double& r = acc[k];
    if (op == "prod") {
      r *= v;
      wrapped[k] *= static_cast<uint64_t>(static_cast<int64_t>(v));
    } else if (std::isnan(v) || std::isnan(r)) {
      r = kNaN;
    } else {
      r = op == "max" ? std::max(r, v) : std::min(r, v);
    }
  });
  const bool integral = !oar::sdk::IsFloating(x.dtype);
  const int64_t count = cells == 0 ? 0 : x.numel() / cells;
  ExpectClose(
      out,
      [&](const Shape& i) {
        const int64_t k = cell(i);
        if (integral && op == "prod") {  // the product modulo 2^bits
          return x.dtype == I32 ? static_cast<long double>(static_cast<int32_t>(wrapped[k]))
                                : static_cast<long double>(static_cast<int64_t>(wrapped[k]));
        }
        return op == "prod" ? RoundTo(x.dtype, acc[k]) : acc[k];
      },
      op == "prod" ? RelTol(x.dtype) * (1 + count) : 0, 0, op);
}

std::vector<Shape> AxisSets(int rank) {
  std::vector<Shape> sets;
  for (int mask = 0; mask < (1 << rank); ++mask) {
    Shape axes;
    for (int d = 0; d < rank; ++d) {
      if (mask & (1 << d)) axes.push_back(d);
    }
    sets.push_back(axes);
  }
  return sets;
}

TEST(Reduce, MaxMinProdOnEveryAxisSetAndLayout) {
  const std::map<std::string, std::vector<int32_t>> ops = {
      {"max", kArith}, {"min", kArith}, {"prod", {F32, F64, F16, BF16, I32, I64}}};
  for (const auto& [op, types] : ops) {
    for (int32_t dt : types) {
      SCOPED_TRACE(op + " " + std::string(DTypeName(dt)));
      std::mt19937 rng(41);
      std::vector<Tensor> xs;
      xs.push_back(Contiguous(dt, {3, 4, 5}));
      xs.push_back(Permuted(dt, {3, 4, 5}, {2, 0, 1}));
      xs.push_back(Broadcast(dt, {3, 4, 5}, {false, true, false}));
      xs.push_back(Strided(dt, {3, 1, 5}, {11, 7, 2}, 3));
      xs.push_back(Contiguous(dt, {2, 40, 6}));  // 16 lanes and tails along dim 1
      for (Tensor& x : xs) {
        if (op == "prod" && oar::sdk::IsFloating(dt)) {
          FillRandom(x, rng, 0.6, 1.6);
        } else {
          FillWhole(x, rng, -60, 60);
        }
        for (const Shape& axes : AxisSets(3)) CheckFold(op, x, axes);
      }
      Tensor s = Contiguous(dt, {});
      FillWhole(s, rng, -3, 3);
      CheckFold(op, s, {});
    }
  }
}

TEST(Reduce, MaxMinProdLargeRowsColumnsAndSplits) {
  std::mt19937 rng(43);
  for (int32_t dt : {F32, F64, BF16, I32, I64, U8}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor rows = Contiguous(dt, {2, 50000});  // few outputs: split over the reduced axis
    Tensor cols = Contiguous(dt, {50000, 6});  // column layout, split
    Tensor mid = Contiguous(dt, {400, 300});
    Tensor trans = Permuted(dt, {64, 2048}, {1, 0});
    for (Tensor* t : {&rows, &cols, &mid, &trans}) {
      FillWhole(*t, rng, -100, 100);
      for (const char* op : {"max", "min"}) {
        CheckFold(op, *t, {0});
        CheckFold(op, *t, {1});
        CheckFold(op, *t, {0, 1});
      }
    }
    if (dt == U8) continue;
    // Products of values near 1 (floats) or of +-1 and 2 (integers, which wrap past 2^32 in I32).
    Tensor p = Contiguous(dt, {3000, 20});
    ForEachIndex(p.shape, [&](const Shape& i) {
      const int r = static_cast<int>(rng() % 8);
      Set(p, i,
          oar::sdk::IsFloating(dt) ? 1 + (static_cast<int>(rng() % 1000) - 500) * 1e-5L
                                   : (r == 0  ? 2
                                      : r < 4 ? -1
                                              : 1));
    });
    CheckFold("prod", p, {0});
    CheckFold("prod", p, {1});
  }
}

TEST(Reduce, MaxMinPropagateNaNAndProdOfNothingIsOne) {
  for (int32_t dt : kFloats) {
    SCOPED_TRACE(DTypeName(dt));
    std::mt19937 rng(47);
    for (Shape shape : {Shape{5, 40}, Shape{40, 5}, Shape{2, 40000}, Shape{40000, 4}}) {
      Tensor x = Contiguous(dt, shape);
      FillRandom(x, rng);
      Set(x, {1, 3}, kNaN);
      Set(x, {shape[0] - 1, shape[1] - 1}, kNaN);
      for (const char* op : {"max", "min"}) {
        CheckFold(op, x, {0});
        CheckFold(op, x, {1});
        CheckFold(op, x, {0, 1});
      }
    }
    Tensor e = Contiguous(dt, {3, 0}), one = Contiguous(dt, {3, 1});
    EXPECT_OK(RunKernel("prod", {&e}, {&one}, {oar::sdk::IntsAttr("axes", Shape{1})}));
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(Get(one, {i, 0}), 1);
    ExpectError(RunKernel("max", {&e}, {&one}, {oar::sdk::IntsAttr("axes", Shape{1})}), OAR_STATUS_INVALID_ARGUMENT,
                {"op 'max'", "empty"});
  }
  Tensor x = Contiguous(I32, {2, 3}), wrong = Contiguous(I32, {2, 3});
  ExpectError(RunKernel("min", {&x}, {&wrong}, {oar::sdk::IntsAttr("axes", Shape{1})}), OAR_STATUS_INVALID_ARGUMENT,
              {"output dimension 1"});
}

// ===================================================================================================
// argmax, argmin
// ===================================================================================================

void CheckArg(const std::string& op, Tensor& x, int axis) {
  Shape out_shape = x.shape;
  if (!out_shape.empty()) out_shape[axis] = 1;
  Tensor out = Contiguous(I64, out_shape);
  EXPECT_OK(RunKernel(op, {&x}, {&out}, {oar::sdk::IntAttr("axis", axis)}));
  const bool max = op == "argmax";
  ExpectClose(
      out,
      [&](const Shape& o) -> long double {
        if (x.shape.empty()) return 0;
        Shape i = o;
        long double best = 0;
        int64_t at = -1;
        for (i[axis] = 0; i[axis] < x.shape[axis]; ++i[axis]) {
          const long double v = Get(x, i);
          if (std::isnan(v)) return i[axis];  // the first NaN is the extreme
          if (at < 0 || (max ? v > best : v < best)) best = v, at = i[axis];
        }
        return at;
      },
      0, 0, op);
}

TEST(Reduce, ArgmaxArgminFirstIndexOnTiesAndNaN) {
  for (int32_t dt : kArith) {
    SCOPED_TRACE(DTypeName(dt));
    std::mt19937 rng(53);
    std::vector<Tensor> xs;
    xs.push_back(Contiguous(dt, {3, 4, 5}));
    xs.push_back(Permuted(dt, {3, 4, 5}, {2, 0, 1}));
    xs.push_back(Broadcast(dt, {3, 4, 5}, {false, true, false}));  // all ties along dim 1
    xs.push_back(Contiguous(dt, {1, 100000}));                     // one long scan: split and merged
    xs.push_back(Contiguous(dt, {20000, 8}));                      // columns
    xs.push_back(Contiguous(dt, {3, 2, 0}));                       // no outputs
    for (Tensor& x : xs) {
      FillWhole(x, rng, -3, 3);  // many ties
      if (oar::sdk::IsFloating(dt) && x.numel() > 30) {
        ForEachIndex(x.shape, [&](const Shape& i) {
          if (rng() % 17 == 0) Set(x, i, kNaN);
        });
      }
      for (int axis = 0; axis < static_cast<int>(x.shape.size()); ++axis) {
        if (x.shape[axis] == 0) continue;  // an empty axis is refused (below)
        CheckArg("argmax", x, axis);
        CheckArg("argmin", x, axis);
      }
    }
    Tensor s = Contiguous(dt, {});
    FillWhole(s, rng, 1, 3);
    CheckArg("argmax", s, 0);
  }
  Tensor x = Contiguous(F32, {2, 0}), out = Contiguous(I64, {2, 1});
  ExpectError(RunKernel("argmax", {&x}, {&out}, {oar::sdk::IntAttr("axis", 1)}), OAR_STATUS_INVALID_ARGUMENT,
              {"empty axis"});
  Tensor y = Contiguous(F32, {2, 3}), o = Contiguous(I64, {2, 1});
  ExpectError(RunKernel("argmin", {&y}, {&o}, {oar::sdk::IntAttr("axis", 2)}), OAR_STATUS_INVALID_ARGUMENT, {"'axis'"});
  ExpectError(RunKernel("argmin", {&y}, {&o}), OAR_STATUS_INVALID_ARGUMENT, {"missing attribute 'axis'"});
}

}  // namespace
