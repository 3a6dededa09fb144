// The host-and-device helpers the GPU kernels run (kernels/*.cuh), compiled for the host and checked
// against the SDK's reference conversions and plain loops. No GPU toolchain or device needed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "oar/plugin/cpp/dtype.hpp"
#include "plugins/gpu_common/kernels/dispatch.cuh"
#include "plugins/gpu_common/kernels/indexing.cuh"
#include "plugins/gpu_common/kernels/numeric.cuh"

namespace oar::gpu {
namespace {

float Nan() { return std::numeric_limits<float>::quiet_NaN(); }
float Inf() { return std::numeric_limits<float>::infinity(); }

// ---- 16-bit floats: bit-exact with the SDK (which the host kernels use) ------------------------------

TEST(GpuNumeric, Float16ToFloatMatchesTheSdkForEveryBitPattern) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float ours = F16ToFloat(F16{static_cast<uint16_t>(bits)});
    const float sdk = sdk::Half::ToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(sdk)) {
      EXPECT_TRUE(std::isnan(ours)) << bits;
    } else {
      EXPECT_EQ(sdk::FloatBits(ours), sdk::FloatBits(sdk)) << bits;
    }
    EXPECT_EQ(sdk::FloatBits(BF16ToFloat(BF16{static_cast<uint16_t>(bits)})), bits << 16);
  }
}

TEST(GpuNumeric, FloatTo16BitRoundsLikeTheSdk) {
  std::mt19937 rng(20261129);  // seed printed by the failure message below
  std::uniform_int_distribution<uint32_t> any_bits;
  std::vector<float> values = {0.0f,   -0.0f, 1.0f,   65504.0f, 65520.0f, 65519.99f, 5.96e-8f,      2.98e-8f,
                               1e-10f, Inf(), -Inf(), Nan(),    3.14159f, -2.5f,     1.0009765625f, 1.00048828125f};
  for (int i = 0; i < 200000; ++i) values.push_back(sdk::BitsFloat(any_bits(rng)));
  for (float f : values) {
    EXPECT_EQ(FloatToF16(f).bits, sdk::Half::FromFloat(f)) << f << " (seed 20261129)";
    EXPECT_EQ(FloatToBF16(f).bits, sdk::BFloat16::FromFloat(f)) << f << " (seed 20261129)";
  }
}

// ---- cast rules (docs/ops.md) ---------------------------------------------------------------------

TEST(GpuNumeric, CastsFollowTheContract) {
  EXPECT_EQ(CastValue<int8_t>(300.7f), 127);
  EXPECT_EQ(CastValue<int8_t>(-300.7), -128);
  EXPECT_EQ(CastValue<int32_t>(-2.9f), -2);
  EXPECT_EQ(CastValue<int32_t>(Nan()), 0);
  EXPECT_EQ(CastValue<int64_t>(Inf()), INT64_MAX);
  EXPECT_EQ(CastValue<int64_t>(-Inf()), INT64_MIN);
  EXPECT_EQ(CastValue<int64_t>(9.3e18), INT64_MAX);
  EXPECT_EQ(CastValue<uint8_t>(-5.0f), 0);
  EXPECT_EQ(CastValue<uint8_t>(int64_t{300}), 44);
  EXPECT_EQ(CastValue<uint8_t>(int64_t{-1}), 255);
  EXPECT_EQ(CastValue<int8_t>(int32_t{200}), -56);
  EXPECT_TRUE(CastValue<bool>(Nan()));
  EXPECT_FALSE(CastValue<bool>(-0.0f));
  EXPECT_TRUE(CastValue<bool>(int8_t{-3}));
  EXPECT_EQ(CastValue<float>(true), 1.0f);
  EXPECT_EQ(CastValue<F16>(70000.0).bits, 0x7c00);                               // overflow -> inf
  EXPECT_EQ(CastValue<F16>(int64_t{2049}).bits, sdk::Half::FromFloat(2048.0f));  // RNE through float32
  EXPECT_EQ(CastValue<int32_t>(F16{0xc500}), -5);                                // -5.0 in binary16
  EXPECT_EQ(CastValue<float>(BF16{0x3f80}), 1.0f);
  EXPECT_TRUE(std::isinf(CastValue<float>(1e300)));
  EXPECT_EQ(CastValue<float>(int64_t{16777217}), 16777216.0f);  // ties to even
}

// ---- scalar ops -----------------------------------------------------------------------------------

TEST(GpuNumeric, ScalarOpsMatchTheContractEdgeCases) {
  EXPECT_TRUE(std::isnan(ApplyBinary(BinaryOp::kMaximum, Nan(), 1.0f)));
  EXPECT_TRUE(std::isnan(ApplyBinary(BinaryOp::kMinimum, 1.0f, Nan())));
  EXPECT_EQ(ApplyBinary<int8_t>(BinaryOp::kAdd, 127, 1), -128);
  EXPECT_EQ(ApplyBinary<uint8_t>(BinaryOp::kMul, 200, 2), 144);
  EXPECT_EQ(ApplyBinary<int64_t>(BinaryOp::kSub, INT64_MIN, 1), INT64_MAX);
  EXPECT_EQ(ApplyBinary(BinaryOp::kPow, Nan(), 0.0f), 1.0f);
  EXPECT_EQ(ApplyUnary<int8_t>(UnaryOp::kNeg, -128), -128);
  EXPECT_EQ(ApplyUnary<int8_t>(UnaryOp::kAbs, -128), -128);
  EXPECT_EQ(ApplyUnary(UnaryOp::kSigmoid, 1e4f), 1.0f);
  EXPECT_EQ(ApplyUnary(UnaryOp::kSigmoid, -1e4f), 0.0f);
  EXPECT_NEAR(ApplyUnary(UnaryOp::kSigmoid, -30.0f), 9.357623e-14f, 1e-19f);  // keeps relative precision
  EXPECT_TRUE(std::signbit(ApplyUnary(UnaryOp::kSign, -0.0f)));
  EXPECT_TRUE(std::signbit(ApplyUnary(UnaryOp::kRelu, -0.0f)));
  EXPECT_TRUE(std::isnan(ApplyUnary(UnaryOp::kRelu, Nan())));
  EXPECT_EQ(ApplyUnary(UnaryOp::kRsqrt, -0.0f), -Inf());
  EXPECT_FALSE(ApplyComparison(BinaryOp::kEq, Nan(), Nan()));
  EXPECT_TRUE(ApplyComparison(BinaryOp::kNe, Nan(), Nan()));
  EXPECT_TRUE(ApplyComparison(BinaryOp::kEq, -0.0f, 0.0f));
  EXPECT_TRUE(ApplyPredicate(UnaryOp::kIsInf, -Inf()));
  EXPECT_TRUE(ApplyPredicate(UnaryOp::kLogicalNot, false));
}

// ---- strided indexing -----------------------------------------------------------------------------

/// Row-major offsets computed the obvious way.
int64_t NaiveOffset(int64_t linear, int rank, const int64_t* shape, const int64_t* strides) {
  int64_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    off += (linear % shape[d]) * strides[d];
    linear /= shape[d];
  }
  return off;
}

TEST(GpuIndexing, OffsetsFollowStridesIncludingBroadcastAndPermutation) {
  Indexer<3> ix;
  ix.rank = 3;
  const int64_t shape[3] = {2, 3, 4};
  const int64_t out[3] = {12, 4, 1}, permuted[3] = {1, 8, 2}, broadcast[3] = {0, 1, 0};
  for (int d = 0; d < 3; ++d) {
    ix.shape[d] = shape[d];
    ix.strides[0][d] = out[d];
    ix.strides[1][d] = permuted[d];
    ix.strides[2][d] = broadcast[d];
  }
  const Indexer<3> coalesced = Coalesce(ix);
  for (int64_t i = 0; i < ix.numel(); ++i) {
    int64_t a[3], b[3];
    ix.Offsets(i, a);
    coalesced.Offsets(i, b);
    EXPECT_EQ(a[0], NaiveOffset(i, 3, shape, out));
    EXPECT_EQ(a[1], NaiveOffset(i, 3, shape, permuted));
    EXPECT_EQ(a[2], NaiveOffset(i, 3, shape, broadcast));
    for (int k = 0; k < 3; ++k) EXPECT_EQ(a[k], b[k]) << "element " << i << " operand " << k;
  }
}

TEST(GpuIndexing, CoalesceMergesDenseDimensionsAndDropsOnes) {
  Indexer<2> ix;
  ix.rank = 4;
  const int64_t shape[4] = {2, 1, 3, 5};
  const int64_t a[4] = {15, 7, 5, 1}, b[4] = {15, 99, 5, 1};
  for (int d = 0; d < 4; ++d) {
    ix.shape[d] = shape[d];
    ix.strides[0][d] = a[d];
    ix.strides[1][d] = b[d];
  }
  const Indexer<2> c = Coalesce(ix);
  ASSERT_EQ(c.rank, 1);
  EXPECT_EQ(c.shape[0], 30);
  EXPECT_EQ(c.strides[0][0], 1);
  // A transposed operand keeps the dimensions apart.
  ix.strides[1][2] = 1;
  ix.strides[1][3] = 3;
  ix.strides[1][0] = 15;
  EXPECT_EQ(Coalesce(ix).rank, 3);
  // Empty tensors become one empty dimension; rank 0 stays a single element.
  ix.shape[2] = 0;
  EXPECT_EQ(Coalesce(ix).numel(), 0);
  EXPECT_EQ(Coalesce(Indexer<2>{}).numel(), 1);
}

TEST(GpuIndexing, LaunchConfigurations) {
  EXPECT_EQ(ElementwiseConfig(0).blocks, 0u);
  EXPECT_EQ(ElementwiseConfig(1).blocks, 1u);
  EXPECT_EQ(ElementwiseConfig(257).blocks, 2u);
  EXPECT_EQ(ElementwiseConfig(int64_t{1} << 40).blocks, kMaxBlocks);  // the grid-stride loop covers the rest
  EXPECT_EQ(ReductionThreads(0), 32u);
  EXPECT_EQ(ReductionThreads(33), 64u);
  EXPECT_EQ(ReductionThreads(1 << 20), kThreads);
}

TEST(GpuIndexing, BlasLayoutAcceptsRowAndColumnMajorOnly) {
  MatrixLayout m = BlasLayout(4, 3, 3, 1);  // dense row-major
  EXPECT_TRUE(m.ok && !m.column_major && m.ld == 3);
  m = BlasLayout(4, 3, 1, 4);  // transposed view
  EXPECT_TRUE(m.ok && m.column_major && m.ld == 4);
  m = BlasLayout(4, 3, 8, 1);  // padded rows
  EXPECT_TRUE(m.ok && !m.column_major && m.ld == 8);
  EXPECT_FALSE(BlasLayout(4, 3, 0, 1).ok);  // broadcast rows
  EXPECT_FALSE(BlasLayout(4, 3, 6, 2).ok);  // every other column
  m = BlasLayout(1, 3, 0, 1);               // one row: any row stride
  EXPECT_TRUE(m.ok && m.ld == 3);
  m = BlasLayout(4, 1, 1, 0);  // one column
  EXPECT_TRUE(m.ok);
}

TEST(GpuDispatch, EveryDtypeHasAStorageTypeOfItsSize) {
  for (int32_t d = OAR_DTYPE_FLOAT32; d < OAR_DTYPE_COUNT_; ++d) {
    size_t size = 0, bits = 0;
    EXPECT_TRUE(VisitDType(d, [&](auto t) { size = sizeof(t); }));
    EXPECT_TRUE(VisitBits(d, [&](auto t) { bits = sizeof(t); }));
    EXPECT_EQ(size, sdk::DTypeSize(d));
    EXPECT_EQ(bits, sdk::DTypeSize(d));
  }
  EXPECT_FALSE(VisitDType(OAR_DTYPE_INVALID, [](auto) {}));
}

}  // namespace
}  // namespace oar::gpu
