// Rounding, bit patterns and casts, against known IEEE encodings and the hardware's own float32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>

#include "conformance/reference/test_util.h"

namespace oar::reference {
namespace {

using testing::Same;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double P2(int e) { return std::ldexp(1.0, e); }

TEST(RefFloat16, KnownBitPatterns) {
  EXPECT_EQ(Float16Bits(1.0), 0x3C00);
  EXPECT_EQ(Float16Bits(-2.0), 0xC000);
  EXPECT_EQ(Float16Bits(65504.0), 0x7BFF);   // largest finite
  EXPECT_EQ(Float16Bits(65519.99), 0x7BFF);  // just below max + half ulp
  EXPECT_EQ(Float16Bits(65520.0), 0x7C00);   // max + half ulp: tie, rounds to even = inf
  EXPECT_EQ(Float16Bits(-65520.0), 0xFC00);
  EXPECT_EQ(Float16Bits(1e10), 0x7C00);
  EXPECT_EQ(Float16Bits(1.0 + P2(-11)), 0x3C00);            // tie: down to the even significand
  EXPECT_EQ(Float16Bits(1.0 + 3 * P2(-11)), 0x3C02);        // tie: up to the even significand
  EXPECT_EQ(Float16Bits(1.0 + P2(-11) + P2(-30)), 0x3C01);  // just above the tie
  EXPECT_EQ(Float16Bits(0.1), 0x2E66);
  EXPECT_EQ(Float16Bits(1.0 / 3.0), 0x3555);
  EXPECT_EQ(Float16Bits(std::numbers::pi), 0x4248);
  EXPECT_EQ(Float16Bits(P2(-14)), 0x0400);            // smallest normal
  EXPECT_EQ(Float16Bits(P2(-14) - P2(-24)), 0x03FF);  // largest subnormal
  EXPECT_EQ(Float16Bits(P2(-24)), 0x0001);            // smallest subnormal
  EXPECT_EQ(Float16Bits(P2(-25)), 0x0000);            // tie between 0 and 2^-24: even = 0
  EXPECT_EQ(Float16Bits(P2(-25) + P2(-40)), 0x0001);
  EXPECT_EQ(Float16Bits(3 * P2(-25)), 0x0002);  // tie between 1 and 2 units: even = 2
  EXPECT_EQ(Float16Bits(-P2(-26)), 0x8000);     // underflows to -0
  EXPECT_EQ(Float16Bits(-0.0), 0x8000);
  EXPECT_EQ(Float16Bits(kInf), 0x7C00);
  EXPECT_EQ(Float16Bits(kNaN), 0x7E00);
}

TEST(RefFloat16, DecodesKnownPatterns) {
  EXPECT_EQ(Float16FromBits(0x7BFF), 65504.0);
  EXPECT_EQ(Float16FromBits(0x0001), P2(-24));
  EXPECT_EQ(Float16FromBits(0x3555), 0.333251953125);
  EXPECT_EQ(Float16FromBits(0xC000), -2.0);
  EXPECT_EQ(Float16FromBits(0xFC00), -kInf);
  EXPECT_TRUE(std::isnan(Float16FromBits(0x7E00)));
  EXPECT_TRUE(std::signbit(Float16FromBits(0x8000)));
}

// Every finite pattern round-trips, and the midpoint between neighbours rounds to the even one.
TEST(RefFloat16, ExhaustiveRoundTripAndMidpoints) {
  for (uint32_t bits = 0; bits < 0x7C00; ++bits) {
    const double v = Float16FromBits(static_cast<uint16_t>(bits));
    ASSERT_EQ(Float16Bits(v), bits) << v;
    ASSERT_EQ(Float16Bits(-v), bits | 0x8000) << v;
    ASSERT_EQ(RoundToFloat16(v), v);
    const double next = Float16FromBits(static_cast<uint16_t>(bits + 1));  // 0x7C00 is inf: skip its midpoint
    if (bits + 1 < 0x7C00) {
      const double mid = (v + next) / 2;  // exact in double
      ASSERT_EQ(Float16Bits(mid), (bits % 2 == 0) ? bits : bits + 1) << v;
    }
  }
}

TEST(RefBFloat16, KnownBitPatterns) {
  EXPECT_EQ(BFloat16Bits(1.0), 0x3F80);
  EXPECT_EQ(BFloat16Bits(3.140625), 0x4049);
  EXPECT_EQ(BFloat16Bits(std::numbers::pi), 0x4049);
  EXPECT_EQ(BFloat16Bits(0.1), 0x3DCD);
  EXPECT_EQ(BFloat16Bits(1.0 + P2(-8)), 0x3F80);      // tie to even
  EXPECT_EQ(BFloat16Bits(1.0 + 3 * P2(-8)), 0x3F82);  // tie to even
  EXPECT_EQ(BFloat16Bits((2.0 - P2(-7)) * P2(127)), 0x7F7F);
  EXPECT_EQ(BFloat16Bits((2.0 - P2(-8)) * P2(127)), 0x7F80);  // max + half ulp -> inf
  EXPECT_EQ(BFloat16Bits(P2(-133)), 0x0001);                  // smallest subnormal
  EXPECT_EQ(BFloat16Bits(kNaN), 0x7FC0);
  EXPECT_EQ(BFloat16FromBits(0x4049), 3.140625);
  EXPECT_EQ(BFloat16FromBits(0x7F7F), 3.3895313892515355e38);
}

TEST(RefBFloat16, ExhaustiveRoundTripAndMidpoints) {
  for (uint32_t bits = 0; bits < 0x7F80; ++bits) {
    const double v = BFloat16FromBits(static_cast<uint16_t>(bits));
    ASSERT_EQ(BFloat16Bits(v), bits) << v;
    if (bits + 1 < 0x7F80) {
      const double mid = (v + BFloat16FromBits(static_cast<uint16_t>(bits + 1))) / 2;
      ASSERT_EQ(BFloat16Bits(mid), (bits % 2 == 0) ? bits : bits + 1) << v;
    }
  }
}

TEST(RefFloat32, KnownBitPatterns) {
  EXPECT_EQ(Float32Bits(1.0), 0x3F800000u);
  EXPECT_EQ(Float32Bits(0.1), 0x3DCCCCCDu);
  EXPECT_EQ(Float32Bits(1.0 + P2(-24)), 0x3F800000u);              // tie to even
  EXPECT_EQ(Float32Bits(1.0 + P2(-23) + P2(-24)), 0x3F800002u);    // tie to even
  EXPECT_EQ(Float32Bits((2.0 - P2(-23)) * P2(127)), 0x7F7FFFFFu);  // FLT_MAX
  EXPECT_EQ(Float32Bits((2.0 - P2(-24)) * P2(127)), 0x7F800000u);  // max + half ulp -> inf
  EXPECT_EQ(Float32Bits(P2(-149)), 0x00000001u);
  EXPECT_EQ(Float32Bits(P2(-150)), 0x00000000u);
  EXPECT_EQ(Float32Bits(1.5 * P2(-149)), 0x00000002u);
  EXPECT_EQ(Float32FromBits(0x00000001u), P2(-149));
  EXPECT_EQ(Float32FromBits(0xFF800000u), -kInf);
}

// The hardware's double -> float conversion (round to nearest even) is an independent oracle.
TEST(RefFloat32, MatchesHardwareConversion) {
  std::mt19937_64 gen(1234);
  SCOPED_TRACE("seed 1234");
  for (int i = 0; i < 200000; ++i) {
    uint64_t bits = gen();
    // Bias exponents towards float32's range, subnormals and overflow included.
    const uint64_t exponent = 1023 - 160 + (gen() % 300);
    bits = (bits & 0x800FFFFFFFFFFFFFull) | (exponent << 52);
    double d = 0;
    std::memcpy(&d, &bits, sizeof d);
    const float f = static_cast<float>(d);
    ASSERT_EQ(RoundToFloat32(d), static_cast<double>(f)) << d;
    uint32_t fbits = 0;
    std::memcpy(&fbits, &f, sizeof f);
    ASSERT_EQ(Float32Bits(d), fbits) << d;
  }
}

#if defined(__FLT16_MAX__)
// Where the compiler has _Float16, its (single-rounding) conversion is another independent oracle.
TEST(RefFloat16, MatchesCompilerFloat16) {
  std::mt19937_64 gen(99);
  SCOPED_TRACE("seed 99");
  for (int i = 0; i < 200000; ++i) {
    const double d = std::ldexp(std::uniform_real_distribution<double>(-1, 1)(gen), static_cast<int>(gen() % 48) - 30);
    ASSERT_EQ(RoundToFloat16(d), static_cast<double>(static_cast<_Float16>(d))) << d;
  }
}
#endif

TEST(RefRoundTo, FloatsAndIntegerWrap) {
  EXPECT_TRUE(Same(RoundTo(Array::Make({3}, {0.1, 65520, 1 + P2(-11)}), RefDType::F16),
                   Array::Make({3}, {Float16FromBits(0x2E66), kInf, 1.0})));
  EXPECT_TRUE(Same(RoundTo(Array::Make({2}, {0.1, 1e39}), RefDType::F32),
                   Array::Make({2}, {Float32FromBits(0x3DCCCCCDu), kInf})));
  EXPECT_TRUE(Same(RoundTo(Array::Make({3}, {200, -129, 127}), RefDType::I8), Array::Make({3}, {-56, 127, 127})));
  EXPECT_TRUE(Same(RoundTo(Array::Make({3}, {256, -1, 300}), RefDType::U8), Array::Make({3}, {0, 255, 44})));
  EXPECT_TRUE(
      Same(RoundTo(Array::Make({2}, {P2(31), -P2(31) - 1}), RefDType::I32), Array::Make({2}, {-P2(31), P2(31) - 1})));
  EXPECT_TRUE(Same(RoundTo(Array::Make({4}, {kNaN, 0.0, -0.0, 3}), RefDType::BOOL), Array::Make({4}, {1, 0, 0, 1})));
  EXPECT_OAR_ERROR(RoundTo(Array::Make({1}, {2.5}), RefDType::I32), kInvalidArgument);
}

TEST(RefCast, DocumentedRules) {
  // integer -> integer wraps; float -> integer truncates and saturates.
  EXPECT_TRUE(Same(cast(Array::Make({2}, {300, -1}), RefDType::I64, RefDType::U8), Array::Make({2}, {44, 255})));
  EXPECT_TRUE(Same(cast(Array::Make({2}, {300, -1}), RefDType::F32, RefDType::U8), Array::Make({2}, {255, 0})));
  EXPECT_TRUE(Same(cast(Array::Make({4}, {-3.75, 3.75, kNaN, -0.5}), RefDType::F32, RefDType::I8),
                   Array::Make({4}, {-3, 3, 0, 0})));
  EXPECT_TRUE(Same(cast(Array::Make({2}, {kInf, -kInf}), RefDType::F32, RefDType::I32),
                   Array::Make({2}, {P2(31) - 1, -P2(31)})));
  const Array saturated = cast(Array::Make({2}, {1e20, -1e20}), RefDType::F64, RefDType::I64);
  EXPECT_TRUE(Same(saturated, Array::Make({2}, {P2(63), -P2(63)})));  // INT64_MAX reads as 2^63
  EXPECT_TRUE(Same(cast(saturated, RefDType::I64, RefDType::F32), saturated));
  // -> bool is x != 0.
  EXPECT_TRUE(Same(cast(Array::Make({4}, {kNaN, -0.0, 0.5, 0}), RefDType::F32, RefDType::BOOL),
                   Array::Make({4}, {1, 0, 1, 0})));
  EXPECT_TRUE(Same(cast(Array::Make({2}, {1, 0}), RefDType::BOOL, RefDType::F16), Array::Make({2}, {1, 0})));
  // integer -> float rounds to nearest even.
  EXPECT_TRUE(Same(cast(Array::Make({1}, {16777217}), RefDType::I32, RefDType::F32), Array::Make({1}, {16777216})));
  // F64 -> F16 goes through float32: 1 + 2^-11 + 2^-40 rounds to 1 + 2^-11 first, then ties to 1.
  const double x = 1.0 + P2(-11) + P2(-40);
  EXPECT_TRUE(Same(cast(Array::Make({1}, {x}), RefDType::F64, RefDType::F16), Array::Make({1}, {1.0})));
  EXPECT_TRUE(Same(RoundTo(Array::Make({1}, {x}), RefDType::F16), Array::Make({1}, {1.0 + P2(-10)})));
  // F16 -> anything is exact through float32.
  EXPECT_TRUE(Same(cast(Array::Make({1}, {65504}), RefDType::F16, RefDType::I32), Array::Make({1}, {65504})));
  EXPECT_TRUE(Same(cast(Array::Make({1}, {65504}), RefDType::F16, RefDType::I8), Array::Make({1}, {127})));
}

TEST(RefCast, RejectsValuesOutsideTheSourceDtype) {
  EXPECT_OAR_ERROR(cast(Array::Make({1}, {2.5}), RefDType::I32, RefDType::F32), kInvalidArgument);
  EXPECT_OAR_ERROR(cast(Array::Make({1}, {2}), RefDType::BOOL, RefDType::F32), kInvalidArgument);
  EXPECT_OAR_ERROR(cast(Array::Make({1}, {0.1}), RefDType::F32, RefDType::F64), kInvalidArgument);
  EXPECT_OAR_ERROR(cast(Array::Make({1}, {128}), RefDType::I8, RefDType::I32), kInvalidArgument);
  EXPECT_TRUE(IsRepresentable(Array::Make({3}, {kNaN, kInf, 65504}), RefDType::F16));
  EXPECT_FALSE(IsRepresentable(Array::Make({1}, {65505}), RefDType::F16));
  EXPECT_TRUE(IsRepresentable(Array::Make({2}, {-128, 127}), RefDType::I8));
}

TEST(RefDTypeNames, RoundTrip) {
  for (RefDType d : {RefDType::F32, RefDType::F64, RefDType::F16, RefDType::BF16, RefDType::I8, RefDType::U8,
                     RefDType::I32, RefDType::I64, RefDType::BOOL}) {
    EXPECT_EQ(DTypeFromName(DTypeName(d)), d);
  }
  EXPECT_OAR_ERROR(DTypeFromName("float8"), kInvalidArgument);
}

}  // namespace
}  // namespace oar::reference
