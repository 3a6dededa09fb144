// ExpN: e^x over an array of floats, four lanes at a time. glibc's expf is an opaque scalar call (its
// vector variants need -ffast-math, which we do not use: NaN and infinities must keep their meaning),
// and softmax, log_softmax and sigmoid spent most of their time in it.
//
// Written with GCC/Clang vector extensions rather than a plain loop for the compiler to vectorise: under
// -ftrapping-math (the default) GCC will not if-convert the float comparisons of the range clamp, so a
// scalar formulation keeps a branch per element and is never vectorised.
#ifndef OAR_PLUGINS_COMMON_VEC_EXP_H_
#define OAR_PLUGINS_COMMON_VEC_EXP_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace oar::host {

using Float4 = float __attribute__((vector_size(16)));
using Int4 = int32_t __attribute__((vector_size(16)));

/// e^x in each lane, within 2 ulp of the correctly rounded value. As std::exp: exp(-inf) = 0,
/// exp(+inf) = +inf, NaN stays NaN, results below FLT_MIN are subnormal, results beyond FLT_MAX +inf.
///
/// Method: x = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite: ln2 in two parts, so n * high part is exact),
/// e^r by its Taylor polynomial of degree 7 (truncation below 6e-9, relative), times 2^n built in the
/// exponent bits. 2^n is applied as two factors, each a normal float, so that a result that under- or
/// overflows is rounded once, by the last multiplication.
inline Float4 Exp4(Float4 x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;     // 9 significant bits
  constexpr float kLn2Lo = -2.12194440e-4f;  // ln 2 - kLn2Hi
  constexpr float kRound = 12582912.0f;      // 1.5 * 2^23: adding it rounds to the nearest integer
  const Float4 zero = {};
  // e^x is 0 below -104 and +inf above 89 in float; the clamp keeps n within [-150, 128]. NaN compares
  // false, so it passes through.
  x = x < -104.0f ? zero - 104.0f : x;
  x = x > 89.0f ? zero + 89.0f : x;
  const Float4 t = x * kLog2e + kRound;
  const Float4 n = t - kRound;
  const Float4 r = (x - n * kLn2Hi) - n * kLn2Lo;
  Float4 p = zero + 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const Int4 k = std::bit_cast<Int4>(t) - std::bit_cast<int32_t>(kRound);  // n as integers
  const Int4 k1 = k >> 1, k2 = k - k1;
  return p * std::bit_cast<Float4>((k1 + 127) << 23) * std::bit_cast<Float4>((k2 + 127) << 23);
}

/// y[i] = e^x[i] for i in [0, n); y may be x.
inline void ExpN(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  Float4 v;
  for (; i + 4 <= n; i += 4) {
    std::memcpy(&v, x + i, sizeof v);
    v = Exp4(v);
    std::memcpy(y + i, &v, sizeof v);
  }
  if (i < n) {
    const size_t tail = static_cast<size_t>(n - i) * sizeof(float);
    v = Float4{};
    std::memcpy(&v, x + i, tail);
    v = Exp4(v);
    std::memcpy(y + i, &v, tail);
  }
}

/// The float64 version: std::exp per element (e^x is not the bottleneck where float64 is used).
inline void ExpN(const double* x, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

}  // namespace oar::host

#endif  // OAR_PLUGINS_COMMON_VEC_EXP_H_
