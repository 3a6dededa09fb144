// ExpN: e^x over an array, vectorised. glibc's expf is an opaque scalar call (its vector variants need
// -ffast-math, which we do not use: NaN and infinities must keep their meaning), and softmax, log_softmax
// and sigmoid spent most of their time in it.
#ifndef OAR_PLUGINS_COMMON_VEC_EXP_H_
#define OAR_PLUGINS_COMMON_VEC_EXP_H_

#include <cmath>
#include <cstdint>

namespace oar::host {

/// y[i] = e^x[i] for i in [0, n); y may be x. Within 2 ulp of the correctly rounded value; as std::exp,
/// exp(-inf) = 0, exp(+inf) = +inf, NaN stays NaN, results below FLT_MIN are subnormal and results beyond
/// FLT_MAX are +inf. The widest vectors the CPU has are chosen at run time (x86-64: AVX-512, AVX2 or
/// SSE2); every width computes the same operations without contraction, so results (NaN payloads aside)
/// are bitwise the same on every machine.
void ExpN(const float* x, float* y, int64_t n);

/// The float64 version: std::exp per element (e^x is not the bottleneck where float64 is used).
inline void ExpN(const double* x, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

}  // namespace oar::host

#endif  // OAR_PLUGINS_COMMON_VEC_EXP_H_
