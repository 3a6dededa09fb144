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

/// y[i] = e^(x[i] - m), the float difference rounded first: bitwise ExpN of that difference (softmax's
/// shifted exponentials without a pass to store the differences). y may be x.
void ExpOfDifferenceN(const float* x, float m, float* y, int64_t n);

/// The sum of the exponentials ExpOfDifferenceN computes of x[0..n), n <= 256, without storing them,
/// as softmax_norm.cc's PairwiseSum leaf adds them: in double, in 16 lanes (element i into lane i % 16),
/// then lanes [0, 8) += [8, 16), [0, 4) += [4, 8), ... Bitwise ExpOfDifferenceN followed by
/// SumLeafAsDouble (vec_lanes.h) of its results, in one pass (the exponentials summed while in registers).
double ExpOfDifferenceSumLeaf(const float* x, float m, int64_t n);

/// y[i] = sigmoid(x[i]) as elementwise_math.cc's SigmoidOp::Apply rounds it in float: e = ExpN(-|x|),
/// r = 1 / (1 + e), x >= 0 ? r : e * r; bit for bit, in one pass. y may be x.
void SigmoidN(const float* x, float* y, int64_t n);

/// The float64 version: std::exp per element (e^x is not the bottleneck where float64 is used).
inline void ExpN(const double* x, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

/// y[i] = tanh(x[i]) for i in [0, n); y may be x. Within 4 ulp of the correctly rounded value (checked over
/// the whole float range by a test); tanh(-0) = -0, tiny and subnormal x give x, tanh(+-inf) = +-1, NaN
/// stays NaN. Vector widths as ExpN, bitwise the same results at every width.
void TanhN(const float* x, float* y, int64_t n);

/// The float64 version: std::tanh per element.
inline void TanhN(const double* x, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

namespace internal {
/// TanhN at a given width (4, 8 or 16 lanes; a width the CPU lacks runs at 4), for the test that all
/// widths agree bit for bit.
void TanhAtWidth(int lanes, const float* x, float* y, int64_t n);
/// ExpN at a given width, likewise (the test of ExpN's documented arithmetic at every width).
void ExpAtWidth(int lanes, const float* x, float* y, int64_t n);
}  // namespace internal

}  // namespace oar::host

#endif  // OAR_PLUGINS_COMMON_VEC_EXP_H_
