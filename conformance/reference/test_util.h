// Helpers shared by the reference's self-tests.
#ifndef OAR_CONFORMANCE_REFERENCE_TEST_UTIL_H_
#define OAR_CONFORMANCE_REFERENCE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "conformance/reference/reference.h"
#include "core/base/error.h"

namespace oar::reference::testing {

/// Uniform values in [lo, hi) from a fixed seed (printed by the tests that use it via SCOPED_TRACE).
inline Array Random(std::vector<int64_t> shape, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Array a = Array::Full(std::move(shape), 0.0);
  for (double& v : a.data) v = dist(gen);
  return a;
}

/// Values whose magnitude is at least `gap` (keeps inputs away from kinks at 0).
inline Array RandomAwayFromZero(std::vector<int64_t> shape, uint32_t seed, double gap = 0.1) {
  Array a = Random(std::move(shape), seed);
  for (double& v : a.data) v = v < 0 ? v - gap : v + gap;
  return a;
}

/// got ≈ want under |got - want| <= atol + rtol |want| with NaN/inf matching.
inline ::testing::AssertionResult Near(const Array& got, const Array& want, double atol = 1e-12, double rtol = 1e-12) {
  const CompareResult r = Compare(got, want, atol, rtol);
  if (r.ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << r.message;
}

/// Exactly equal shapes and values (NaN matching NaN, -0 matching +0).
inline ::testing::AssertionResult Same(const Array& got, const Array& want) { return Near(got, want, 0.0, 0.0); }

}  // namespace oar::reference::testing

/// Expects `stmt` to throw oar::Error with the given ErrorCode enumerator (kInvalidArgument, ...).
#define EXPECT_OAR_ERROR(stmt, code_name)                                 \
  do {                                                                    \
    try {                                                                 \
      (void)(stmt);                                                       \
      ADD_FAILURE() << "expected oar::Error " #code_name " from: " #stmt; \
    } catch (const ::oar::Error& e) {                                     \
      EXPECT_EQ(e.code(), ::oar::ErrorCode::code_name) << e.what();       \
    }                                                                     \
  } while (0)

#endif  // OAR_CONFORMANCE_REFERENCE_TEST_UTIL_H_
