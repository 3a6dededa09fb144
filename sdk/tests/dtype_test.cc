#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "oar/plugin/cpp/dtype.hpp"

using oar::sdk::BFloat16;
using oar::sdk::Half;

TEST(Half, ExactValuesRoundTrip) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f /* min normal */,
                  5.9604644775390625e-08f /* min subnormal */, 0.333251953125f}) {
    EXPECT_EQ(static_cast<float>(Half(f)), f) << f;
  }
}

TEST(Half, RoundsToNearestEvenAndSaturatesToInfinity) {
  EXPECT_EQ(Half(1.0f + 1.0f / 2048).bits, Half(1.0f).bits);           // tie -> even (down)
  EXPECT_EQ(Half(1.0f + 3.0f / 2048).bits, Half(1.0f).bits + 2);       // tie -> even (up)
  EXPECT_EQ(Half(1.0f + 1.5f / 2048).bits, Half(1.0f).bits + 1);       // above half -> up
  EXPECT_EQ(Half(65520.0f).bits, 0x7c00);                              // overflow -> +inf
  EXPECT_EQ(Half(-1e10f).bits, 0xfc00);
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(std::numeric_limits<float>::infinity()))));
  EXPECT_EQ(Half(1e-9f).bits, 0);  // underflow -> 0
}

TEST(Half, EveryBitPatternRoundTripsThroughFloat) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    Half h;
    h.bits = static_cast<uint16_t>(b);
    const float f = h;
    if (std::isnan(f)) continue;
    EXPECT_EQ(Half(f).bits, b) << std::hex << b;
  }
}

TEST(BFloat16, RoundsToNearestEvenKeepsNaN) {
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f)), 1.0f);
  EXPECT_EQ(static_cast<float>(BFloat16(3.140625f)), 3.140625f);
  EXPECT_EQ(BFloat16(1.0f + 1.0f / 256).bits, BFloat16(1.0f).bits);      // tie -> even
  EXPECT_EQ(BFloat16(1.0f + 3.0f / 256).bits, BFloat16(1.0f).bits + 2);  // tie -> even (up)
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::nanf("")))));
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(oar::sdk::DTypeSize(OAR_DTYPE_BFLOAT16), 2u);
  EXPECT_EQ(oar::sdk::DTypeSize(OAR_DTYPE_INT64), 8u);
  EXPECT_EQ(oar::sdk::DTypeSize(42), 0u);
  EXPECT_EQ(oar::sdk::DTypeName(OAR_DTYPE_BOOL), "bool");
  EXPECT_EQ(oar::sdk::DTypeName(-1), "invalid");
}
