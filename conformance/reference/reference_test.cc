// Self-tests of the reference: Array, elementwise ops, reductions, linear algebra, Compare and the
// tolerance file. Expected values are written by hand or follow from identities.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numbers>
#include <string>

#include "conformance/reference/test_util.h"

namespace oar::reference {
namespace {

using testing::Near;
using testing::Random;
using testing::Same;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------------------------------
// Array
// ---------------------------------------------------------------------------------------------------

TEST(RefArrayTest, MakeFullAndAt) {
  Array a = Array::Make({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(a.numel(), 6);
  EXPECT_EQ(a.rank(), 2);
  EXPECT_EQ(a.At({1, 2}), 6);
  a.At({0, 1}) = 9;
  EXPECT_EQ(a.data[1], 9);
  EXPECT_EQ(Array::Scalar(4).numel(), 1);
  EXPECT_EQ(Array::Full({2, 0}, 1).numel(), 0);
  EXPECT_OAR_ERROR(Array::Make({2, 2}, {1, 2, 3}), kInvalidArgument);
  EXPECT_OAR_ERROR(Array::Full({-1}, 0), kInvalidArgument);
  EXPECT_OAR_ERROR(a.At({2, 0}), kOutOfRange);
  EXPECT_OAR_ERROR(a.At({0}), kInvalidArgument);
  EXPECT_EQ(ShapeString({2, 3}), "[2, 3]");
}

TEST(RefArrayTest, OpsRejectMalformedArrays) {
  const Array bad{{2, 2}, {1, 2, 3}};
  EXPECT_OAR_ERROR(neg(bad), kInvalidArgument);
  EXPECT_OAR_ERROR(add(bad, bad), kInvalidArgument);
  EXPECT_OAR_ERROR(sum(bad), kInvalidArgument);
  EXPECT_OAR_ERROR(matmul(bad, bad), kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------------
// Elementwise
// ---------------------------------------------------------------------------------------------------

TEST(RefElementwise, BinaryBroadcastsPerNumpy) {
  const Array a = Array::Make({2, 1}, {1, 2});
  const Array b = Array::Make({3}, {10, 20, 30});
  EXPECT_TRUE(Same(add(a, b), Array::Make({2, 3}, {11, 21, 31, 12, 22, 32})));
  EXPECT_TRUE(Same(sub(a, b), Array::Make({2, 3}, {-9, -19, -29, -8, -18, -28})));
  EXPECT_TRUE(Same(mul(a, Array::Scalar(3)), Array::Make({2, 1}, {3, 6})));
  EXPECT_TRUE(Same(div(b, Array::Scalar(4)), Array::Make({3}, {2.5, 5, 7.5})));
  EXPECT_TRUE(Same(add(Array::Full({0, 3}, 1), b), Array::Full({0, 3}, 0)));
  EXPECT_OAR_ERROR(add(Array::Full({2, 3}, 0), Array::Full({4}, 0)), kInvalidArgument);
}

TEST(RefElementwise, IeeeEdgeCases) {
  EXPECT_TRUE(Same(div(Array::Make({3}, {1, -1, 0}), Array::Scalar(0)), Array::Make({3}, {kInf, -kInf, kNaN})));
  EXPECT_TRUE(Same(log(Array::Make({3}, {0, -1, 1})), Array::Make({3}, {-kInf, kNaN, 0})));
  EXPECT_TRUE(Same(sqrt(Array::Make({2}, {-1, 9})), Array::Make({2}, {kNaN, 3})));
  EXPECT_TRUE(Same(rsqrt(Array::Make({2}, {0, 4})), Array::Make({2}, {kInf, 0.5})));
  EXPECT_TRUE(Same(reciprocal(Array::Make({3}, {0, -0.0, 4})), Array::Make({3}, {kInf, -kInf, 0.25})));
  EXPECT_TRUE(Same(pow(Array::Make({4}, {2, -8, 0, kNaN}), Array::Make({4}, {10, 1.0 / 3, 0, 0})),
                   Array::Make({4}, {1024, kNaN, 1, 1})));
  EXPECT_TRUE(Same(log1p(Array::Scalar(1e-20)), Array::Scalar(1e-20)));
  EXPECT_TRUE(Same(exp(Array::Make({2}, {0, -kInf})), Array::Make({2}, {1, 0})));
}

TEST(RefElementwise, MaximumMinimumPropagateNaN) {
  const Array a = Array::Make({3}, {1, kNaN, 3});
  const Array b = Array::Make({3}, {2, 0, kNaN});
  EXPECT_TRUE(Same(maximum(a, b), Array::Make({3}, {2, kNaN, kNaN})));
  EXPECT_TRUE(Same(minimum(a, b), Array::Make({3}, {1, kNaN, kNaN})));
}

TEST(RefElementwise, SignReluAbsNeg) {
  EXPECT_TRUE(Same(sign(Array::Make({5}, {-2, 0, -0.0, 3, kNaN})), Array::Make({5}, {-1, 0, 0, 1, kNaN})));
  const Array r = relu(Array::Make({4}, {-1, -0.0, 2, kNaN}));
  EXPECT_TRUE(Same(r, Array::Make({4}, {0, 0, 2, kNaN})));
  EXPECT_TRUE(std::signbit(r.data[1]));  // relu(-0) = -0
  EXPECT_TRUE(Same(leaky_relu(Array::Make({2}, {-2, 3}), 0.25), Array::Make({2}, {-0.5, 3})));
  EXPECT_TRUE(Same(abs(Array::Make({2}, {-2, 3})), Array::Make({2}, {2, 3})));
  EXPECT_TRUE(Same(neg(Array::Make({2}, {-2, 3})), Array::Make({2}, {2, -3})));
  EXPECT_TRUE(Same(square(Array::Make({2}, {-3, 0.5})), Array::Make({2}, {9, 0.25})));
}

TEST(RefElementwise, ActivationsKnownValues) {
  EXPECT_TRUE(Near(sigmoid(Array::Make({3}, {0, -1000, 1000})), Array::Make({3}, {0.5, 0, 1})));
  EXPECT_TRUE(Near(silu(Array::Scalar(1)), Array::Scalar(0.7310585786300049), 1e-15));
  // gelu(x) = x Phi(x); Phi(1) = 0.8413447460685429.
  EXPECT_TRUE(
      Near(gelu(Array::Make({2}, {1, -1})), Array::Make({2}, {0.8413447460685429, -0.15865525393145707}), 1e-15));
  EXPECT_TRUE(Near(gelu(Array::Scalar(1), true), Array::Scalar(0.8411919906082768), 1e-15));
  EXPECT_TRUE(Near(erf(Array::Make({3}, {0, 1, kInf})), Array::Make({3}, {0, 0.8427007929497149, 1}), 1e-15));
  EXPECT_TRUE(Near(tanh(Array::Make({2}, {0, 1})), Array::Make({2}, {0, 0.7615941559557649}), 1e-15));
}

TEST(RefElementwise, Identities) {
  const Array x = Random({50}, 7, -4, 4);
  SCOPED_TRACE("seed 7");
  const Array one = Array::Full({50}, 1.0);
  EXPECT_TRUE(Near(add(sigmoid(x), sigmoid(neg(x))), one, 1e-15));
  EXPECT_TRUE(Near(add(square(sin(x)), square(cos(x))), one, 1e-15));
  EXPECT_TRUE(Near(sub(gelu(x), gelu(neg(x))), x, 1e-14));              // Phi(x) + Phi(-x) = 1
  EXPECT_TRUE(Near(sub(gelu(x, true), gelu(neg(x), true)), x, 1e-14));  // tanh is odd
  EXPECT_TRUE(Near(exp(log(abs(x))), abs(x), 0, 1e-15));
  EXPECT_TRUE(Near(mul(rsqrt(abs(x)), sqrt(abs(x))), one, 1e-15));
  const Array e2x = exp(mul(Array::Scalar(2), x));
  EXPECT_TRUE(Near(tanh(x), div(sub(e2x, one), add(e2x, one)), 1e-14));
}

TEST(RefElementwise, Clip) {
  const Array x = Array::Make({4}, {-5, 0.5, 5, kNaN});
  EXPECT_TRUE(Same(clip(x, -1, 1), Array::Make({4}, {-1, 0.5, 1, kNaN})));
  EXPECT_TRUE(Same(clip(x, 2, 1), Array::Make({4}, {1, 1, 1, kNaN})));  // lo > hi: hi
  EXPECT_TRUE(Same(clip(x, -kInf, 0), Array::Make({4}, {-5, 0, 0, kNaN})));
  EXPECT_OAR_ERROR(clip(x, kNaN, 1), kInvalidArgument);
}

TEST(RefElementwise, ComparisonsAndLogic) {
  const Array a = Array::Make({4}, {1, 2, kNaN, 3});
  const Array b = Array::Make({4}, {1, 3, kNaN, 2});
  EXPECT_TRUE(Same(eq(a, b), Array::Make({4}, {1, 0, 0, 0})));
  EXPECT_TRUE(Same(ne(a, b), Array::Make({4}, {0, 1, 1, 1})));
  EXPECT_TRUE(Same(lt(a, b), Array::Make({4}, {0, 1, 0, 0})));
  EXPECT_TRUE(Same(le(a, b), Array::Make({4}, {1, 1, 0, 0})));
  EXPECT_TRUE(Same(gt(a, b), Array::Make({4}, {0, 0, 0, 1})));
  EXPECT_TRUE(Same(ge(a, b), Array::Make({4}, {1, 0, 0, 1})));
  const Array p = Array::Make({4}, {1, 1, 0, 0});
  const Array q = Array::Make({4}, {1, 0, 1, 0});
  EXPECT_TRUE(Same(logical_and(p, q), Array::Make({4}, {1, 0, 0, 0})));
  EXPECT_TRUE(Same(logical_or(p, q), Array::Make({4}, {1, 1, 1, 0})));
  EXPECT_TRUE(Same(logical_not(p), Array::Make({4}, {0, 0, 1, 1})));
  EXPECT_TRUE(Same(isnan(Array::Make({3}, {kNaN, kInf, 1})), Array::Make({3}, {1, 0, 0})));
  EXPECT_TRUE(Same(isinf(Array::Make({3}, {kNaN, -kInf, 1})), Array::Make({3}, {0, 1, 0})));
}

TEST(RefElementwise, WhereBroadcastsThreeWays) {
  const Array cond = Array::Make({3}, {1, 0, 1});
  const Array a = Array::Make({2, 1}, {10, 20});
  EXPECT_TRUE(Same(where(cond, a, Array::Scalar(-1)), Array::Make({2, 3}, {10, -1, 10, 20, -1, 20})));
  EXPECT_OAR_ERROR(where(Array::Full({2}, 1), a, Array::Full({3}, 0)), kInvalidArgument);
}

TEST(RefElementwise, IntegerArithmeticWrapsThroughRoundTo) {
  const Array a = Array::Make({2}, {100, -128});
  EXPECT_TRUE(Same(RoundTo(add(a, Array::Scalar(100)), RefDType::I8), Array::Make({2}, {-56, -28})));
  EXPECT_TRUE(Same(RoundTo(neg(a), RefDType::I8), Array::Make({2}, {-100, -128})));  // neg(-128) wraps
}

// ---------------------------------------------------------------------------------------------------
// Reductions
// ---------------------------------------------------------------------------------------------------

TEST(RefReduce, AxesKeepdimAndNegativeAxes) {
  const Array x = Array::Make({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(Same(sum(x), Array::Scalar(21)));
  EXPECT_TRUE(Same(sum(x, {0}), Array::Make({3}, {5, 7, 9})));
  EXPECT_TRUE(Same(sum(x, {-1}, true), Array::Make({2, 1}, {6, 15})));
  EXPECT_TRUE(Same(sum(x, {}, true), Array::Make({1, 1}, {21})));
  EXPECT_TRUE(Same(mean(x, {1}), Array::Make({2}, {2, 5})));
  EXPECT_TRUE(Same(prod(x), Array::Scalar(720)));
  EXPECT_TRUE(Same(prod(x, {0}), Array::Make({3}, {4, 10, 18})));
  EXPECT_TRUE(Same(max(x, {0}), Array::Make({3}, {4, 5, 6})));
  EXPECT_TRUE(Same(min(x, {1}, true), Array::Make({2, 1}, {1, 4})));
  EXPECT_TRUE(Same(argmax(x, 1), Array::Make({2}, {2, 2})));
  EXPECT_TRUE(Same(argmin(x, -2, true), Array::Make({1, 3}, {0, 0, 0})));
  EXPECT_TRUE(Same(sum(Array::Scalar(5)), Array::Scalar(5)));
  EXPECT_OAR_ERROR(sum(x, {1, -1}), kInvalidArgument);  // duplicate
  EXPECT_OAR_ERROR(sum(x, {2}), kInvalidArgument);
  EXPECT_OAR_ERROR(argmax(x, 2), kInvalidArgument);
  EXPECT_OAR_ERROR(sum(Array::Scalar(5), {0}), kInvalidArgument);
}

TEST(RefReduce, EmptyReductions) {
  const Array e = Array::Full({2, 0}, 0);
  EXPECT_TRUE(Same(sum(e, {1}), Array::Make({2}, {0, 0})));
  EXPECT_TRUE(Same(mean(e, {1}), Array::Make({2}, {kNaN, kNaN})));
  EXPECT_TRUE(Same(prod(e, {1}), Array::Make({2}, {1, 1})));
  EXPECT_TRUE(Same(logsumexp(e, {1}), Array::Make({2}, {-kInf, -kInf})));
  EXPECT_TRUE(Same(sum(e, {0}), Array::Full({0}, 0)));  // no output elements
  EXPECT_OAR_ERROR(max(e, {1}), kInvalidArgument);
  EXPECT_OAR_ERROR(argmin(e, 1), kInvalidArgument);
}

TEST(RefReduce, NaNAndTies) {
  EXPECT_TRUE(Same(max(Array::Make({3}, {1, kNaN, 3})), Array::Scalar(kNaN)));
  EXPECT_TRUE(Same(min(Array::Make({3}, {kNaN, 1, 3})), Array::Scalar(kNaN)));
  EXPECT_TRUE(Same(argmax(Array::Make({4}, {1, kNaN, 3, kNaN}), 0), Array::Scalar(1)));
  EXPECT_TRUE(Same(argmin(Array::Make({4}, {1, kNaN, 0, kNaN}), 0), Array::Scalar(1)));
  EXPECT_TRUE(Same(argmax(Array::Make({3}, {3, 1, 3}), 0), Array::Scalar(0)));
  EXPECT_TRUE(Same(argmin(Array::Make({3}, {1, 3, 1}), 0), Array::Scalar(0)));
}

TEST(RefReduce, VarianceAndStd) {
  const Array x = Array::Make({4}, {1, 2, 3, 4});  // sum of squared deviations = 5
  EXPECT_TRUE(Near(var(x), Array::Scalar(5.0 / 3), 1e-15));
  EXPECT_TRUE(Near(var(x, {}, 0), Array::Scalar(1.25), 1e-15));
  EXPECT_TRUE(Near(stddev(x), Array::Scalar(std::sqrt(5.0 / 3)), 1e-15));
  EXPECT_TRUE(Same(var(Array::Make({1}, {3})), Array::Scalar(kNaN)));            // 0 / 0
  EXPECT_TRUE(Same(var(Array::Make({2}, {1, 3}), {}, 3), Array::Scalar(kInf)));  // 2 / max(0, -1)
  EXPECT_OAR_ERROR(var(x, {}, -1), kInvalidArgument);
  const Array m = Array::Make({2, 2}, {1, 3, 2, 6});
  EXPECT_TRUE(Near(var(m, {1}, 1, true), Array::Make({2, 1}, {2, 8}), 1e-15));
}

TEST(RefReduce, LogSumExp) {
  EXPECT_TRUE(Near(logsumexp(Array::Make({2}, {1000, 1000})), Array::Scalar(1000 + std::log(2.0)), 1e-12));
  EXPECT_TRUE(Same(logsumexp(Array::Make({2}, {-kInf, -kInf})), Array::Scalar(-kInf)));
  EXPECT_TRUE(Same(logsumexp(Array::Make({2}, {kInf, 1})), Array::Scalar(kInf)));
  EXPECT_TRUE(Same(logsumexp(Array::Make({2}, {kNaN, 1})), Array::Scalar(kNaN)));
  const Array x = Random({3, 5}, 11, -3, 3);
  EXPECT_TRUE(Near(logsumexp(x, {1}), log(sum(exp(x), {1})), 1e-14));
}

TEST(RefReduce, SumsAreCompensated) {
  // A running double sum returns 0 here and drifts by ~1e-6 on the second.
  EXPECT_TRUE(Same(sum(Array::Make({3}, {1e16, 1, -1e16})), Array::Scalar(1)));
  EXPECT_TRUE(Near(sum(Array::Full({1000000}, 0.1)), Array::Scalar(100000), 0, 1e-15));
  EXPECT_TRUE(Same(sum(Array::Make({3}, {kInf, 1, 2})), Array::Scalar(kInf)));
  EXPECT_TRUE(Same(sum(Array::Make({2}, {kInf, -kInf})), Array::Scalar(kNaN)));
}

// ---------------------------------------------------------------------------------------------------
// Linear algebra
// ---------------------------------------------------------------------------------------------------

TEST(RefLinalg, MatmulHandComputed) {
  const Array a = Array::Make({2, 3}, {1, 2, 3, 4, 5, 6});
  const Array b = Array::Make({3, 2}, {7, 8, 9, 10, 11, 12});
  EXPECT_TRUE(Same(matmul(a, b), Array::Make({2, 2}, {58, 64, 139, 154})));
}

TEST(RefLinalg, MatmulOneDimensionalPromotion) {
  EXPECT_TRUE(Same(matmul(Array::Make({3}, {1, 2, 3}), Array::Make({3}, {4, 5, 6})), Array::Scalar(32)));
  EXPECT_TRUE(
      Same(matmul(Array::Make({2}, {1, 2}), Array::Make({2, 3}, {1, 2, 3, 4, 5, 6})), Array::Make({3}, {9, 12, 15})));
  EXPECT_TRUE(Same(matmul(Array::Make({2, 2}, {1, 2, 3, 4}), Array::Make({2}, {1, 1})), Array::Make({2}, {3, 7})));
  // [2, 2, 2] @ [2] -> [2, 2].
  EXPECT_TRUE(Same(matmul(Array::Make({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}), Array::Make({2}, {1, -1})),
                   Array::Make({2, 2}, {-1, -1, -1, -1})));
}

TEST(RefLinalg, MatmulBroadcastsBatchDims) {
  // b[k] = (k + 1) * I, so out[i, k] = (k + 1) * a[i, 0].
  const Array a = Random({2, 1, 2, 2}, 3);
  Array b = Array::Full({3, 2, 2}, 0);
  for (int64_t k = 0; k < 3; ++k) b.At({k, 0, 0}) = b.At({k, 1, 1}) = static_cast<double>(k + 1);
  const Array out = matmul(a, b);
  ASSERT_EQ(out.shape, (std::vector<int64_t>{2, 3, 2, 2}));
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t k = 0; k < 3; ++k) {
      for (int64_t r = 0; r < 2; ++r) {
        for (int64_t c = 0; c < 2; ++c) EXPECT_EQ(out.At({i, k, r, c}), (k + 1) * a.At({i, 0, r, c}));
      }
    }
  }
}

TEST(RefLinalg, MatmulIdentityEmptyAndErrors) {
  const Array a = Random({3, 4}, 5);
  Array eye = Array::Full({4, 4}, 0);
  for (int64_t i = 0; i < 4; ++i) eye.At({i, i}) = 1;
  EXPECT_TRUE(Same(matmul(a, eye), a));
  EXPECT_TRUE(Same(matmul(Array::Full({2, 0}, 0), Array::Full({0, 3}, 0)), Array::Full({2, 3}, 0)));
  EXPECT_OAR_ERROR(matmul(Array::Scalar(1), a), kInvalidArgument);
  EXPECT_OAR_ERROR(matmul(a, a), kInvalidArgument);
  EXPECT_OAR_ERROR(matmul(Array::Full({2, 3, 4}, 0), Array::Full({3, 4, 5}, 0)), kInvalidArgument);
}

TEST(RefLinalg, Linear) {
  const Array x = Array::Make({2, 3}, {1, 2, 3, 4, 5, 6});
  const Array w = Array::Make({2, 3}, {1, 0, -1, 0.5, 0.5, 0.5});
  EXPECT_TRUE(Same(linear(x, w), Array::Make({2, 2}, {-2, 3, -2, 7.5})));
  EXPECT_TRUE(Same(linear(x, w, Array::Make({2}, {10, 20})), Array::Make({2, 2}, {8, 23, 8, 27.5})));
  EXPECT_TRUE(Same(linear(Array::Make({3}, {1, 2, 3}), w), Array::Make({2}, {-2, 3})));
  EXPECT_OAR_ERROR(linear(x, Array::Full({2, 4}, 0)), kInvalidArgument);
  EXPECT_OAR_ERROR(linear(x, w, Array::Full({3}, 0)), kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------------
// Compare and tolerances
// ---------------------------------------------------------------------------------------------------

TEST(RefCompareTest, BoundAndStatistics) {
  const Array ref = Array::Make({2, 2}, {1, 2, 4, 0});
  EXPECT_TRUE(Compare(ref, ref, 0, 0).ok);
  const Array got = Array::Make({2, 2}, {1.5, 2, 4, 0});
  EXPECT_TRUE(Compare(got, ref, 0.25, 0.25).ok);  // 0.5 <= 0.25 + 0.25 * 1
  const CompareResult r = Compare(got, ref, 0.25, 0.2);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.first_failure, 0);
  EXPECT_EQ(r.numeric_failures, 1);
  EXPECT_EQ(r.max_abs_error, 0.5);
  EXPECT_EQ(r.max_rel_error, 0.5);
  EXPECT_NE(r.message.find("index [0, 0]"), std::string::npos) << r.message;
}

TEST(RefCompareTest, NonFiniteMustMatch) {
  const Array ref = Array::Make({4}, {kNaN, kInf, -kInf, 1});
  EXPECT_TRUE(Compare(ref, ref, 0, 0).ok);
  EXPECT_EQ(Compare(Array::Make({4}, {1, kInf, -kInf, 1}), ref, 1e9, 1e9).nonfinite_mismatches, 1);
  EXPECT_EQ(Compare(Array::Make({4}, {kNaN, -kInf, -kInf, 1}), ref, 1e9, 1e9).nonfinite_mismatches, 1);
  const CompareResult r = Compare(Array::Make({4}, {kNaN, kInf, -kInf, kNaN}), ref, 1e9, 1e9);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.first_failure, 3);
  EXPECT_EQ(r.nonfinite_mismatches, 1);
}

TEST(RefCompareTest, ShapeMismatchAndMisuse) {
  const CompareResult r = Compare(Array::Full({2}, 0), Array::Full({1, 2}, 0), 1, 1);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.shape_mismatch);
  EXPECT_OAR_ERROR(Compare(Array::Full({2}, 0), Array::Full({2}, 0), -1, 0), kInvalidArgument);
  EXPECT_OAR_ERROR(Compare(Array{{2}, {1}}, Array::Full({2}, 0), 0, 0), kInvalidArgument);
}

TEST(RefToleranceFile, EveryClassHasEveryDtype) {
  for (const char* cls : {"elementwise_exact", "elementwise_transcendental", "reduction", "matmul", "conv",
                          "normalization", "indexing"}) {
    for (RefDType d : {RefDType::F32, RefDType::F64, RefDType::F16, RefDType::BF16, RefDType::I8, RefDType::U8,
                       RefDType::I32, RefDType::I64, RefDType::BOOL}) {
      const Tolerance t = LoadTolerance(OAR_TOLERANCES_JSON, cls, d);
      if (!IsFloating(d)) {
        EXPECT_EQ(t.atol, 0) << cls << " " << DTypeName(d);
        EXPECT_EQ(t.rtol, 0) << cls << " " << DTypeName(d);
        EXPECT_FALSE(t.scales_with_k);
      }
    }
  }
}

TEST(RefToleranceFile, ValuesAndScaling) {
  const Tolerance exact = LoadTolerance(OAR_TOLERANCES_JSON, "elementwise_exact", RefDType::F32);
  EXPECT_EQ(exact.rtol, 2.5e-7);
  EXPECT_FALSE(exact.scales_with_k);
  const Tolerance mm = LoadTolerance(OAR_TOLERANCES_JSON, "matmul", "float32");
  EXPECT_TRUE(mm.scales_with_k);
  EXPECT_DOUBLE_EQ(mm.ForLength(100).rtol, 10 * mm.rtol);
  EXPECT_EQ(mm.ForLength(0).rtol, mm.rtol);
  EXPECT_FALSE(LoadTolerance(OAR_TOLERANCES_JSON, "matmul", "float16").scales_with_k);
  EXPECT_EQ(LoadTolerance(OAR_TOLERANCES_JSON, "indexing", "bfloat16").rtol, 0);
  // One rounding of float32 passes the exact class; two ulps of error do not.
  const Array ref = Array::Make({2}, {0.1, 1.0 / 3});
  EXPECT_TRUE(Compare(RoundTo(ref, RefDType::F32), ref, exact).ok);
  EXPECT_FALSE(Compare(mul(ref, Array::Scalar(1 + 5e-7)), ref, exact).ok);
  const Tolerance bf = LoadTolerance(OAR_TOLERANCES_JSON, "elementwise_exact", RefDType::BF16);
  EXPECT_TRUE(Compare(RoundTo(Random({100}, 17, -100, 100), RefDType::BF16), Random({100}, 17, -100, 100), bf).ok);
}

TEST(RefToleranceFile, ClassOfAnOp) {
  EXPECT_EQ(ToleranceClassOf(OAR_TOLERANCES_JSON, "add"), "elementwise_exact");
  EXPECT_EQ(ToleranceClassOf(OAR_TOLERANCES_JSON, "exp"), "elementwise_transcendental");
  EXPECT_EQ(ToleranceClassOf(OAR_TOLERANCES_JSON, "sum"), "reduction");
  EXPECT_EQ(ToleranceClassOf(OAR_TOLERANCES_JSON, "matmul"), "matmul");
  EXPECT_EQ(ToleranceClassOf(OAR_TOLERANCES_JSON, "topk"), "indexing");
  EXPECT_OAR_ERROR(ToleranceClassOf(OAR_TOLERANCES_JSON, "no_such_op"), kNotFound);
}

TEST(RefToleranceFile, Errors) {
  EXPECT_OAR_ERROR(LoadTolerance(OAR_TOLERANCES_JSON, "nope", "float32"), kNotFound);
  EXPECT_OAR_ERROR(LoadTolerance(OAR_TOLERANCES_JSON, "matmul", "float8"), kNotFound);
  EXPECT_OAR_ERROR(LoadTolerance("/nonexistent/tolerances.json", "matmul", "float32"), kNotFound);
  const std::string path = (std::filesystem::temp_directory_path() / ("oar_reference_bad_tolerances.json." + std::to_string(::getpid()))).string();
  { std::ofstream(path) << "{ not json"; }
  EXPECT_OAR_ERROR(LoadTolerance(path, "matmul", "float32"), kDataLoss);
  { std::ofstream(path) << R"({"version": 2, "classes": {}})"; }
  EXPECT_OAR_ERROR(LoadTolerance(path, "matmul", "float32"), kDataLoss);
  { std::ofstream(path) << R"({"version": 1, "classes": {"c": {"float32": {"atol": "x", "rtol": 0}}}})"; }
  EXPECT_OAR_ERROR(LoadTolerance(path, "c", "float32"), kDataLoss);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace oar::reference
