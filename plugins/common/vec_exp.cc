// ExpN (vec_exp.h) with GCC/Clang vector extensions, one instantiation per vector width.
//
// Why not a scalar loop for the compiler to vectorise: under -ftrapping-math (the default) GCC does not
// if-convert the float comparisons of the range clamp, so such a loop keeps a branch per element and is
// never vectorised (not even with #pragma omp simd). Why one width per instruction set: a vector wider
// than the target's registers is lowered piecewise and ran slower than the native width. This file is
// compiled with -ffp-contract=off (CMakeLists.txt): every width then rounds the same operations the same
// way, bit for bit.
#include "plugins/common/vec_exp.h"

#include <bit>
#include <cstring>

namespace oar::host {
namespace {

// One specialisation per width: GCC drops vector_size from an alias whose size depends on a template
// parameter (the static_assert below guards it).
template <int kLanes>
struct Vec;
// D holds half of F's lanes as doubles (F's halves widened).
template <>
struct Vec<4> {
  using F = float __attribute__((vector_size(16)));
  using I = int32_t __attribute__((vector_size(16)));
  using D = double __attribute__((vector_size(16)));
};
template <>
struct Vec<8> {
  using F = float __attribute__((vector_size(32)));
  using I = int32_t __attribute__((vector_size(32)));
  using D = double __attribute__((vector_size(32)));
};
template <>
struct Vec<16> {
  using F = float __attribute__((vector_size(64)));
  using I = int32_t __attribute__((vector_size(64)));
  using D = double __attribute__((vector_size(64)));
};

/// e^x is 0 below -104 and +inf above 89 in float; the clamp keeps n within [-150, 128]: x < -104 ? -104 : x,
/// then x > 89 ? 89 : x. NaN compares false, so it passes through. With GCC on x86-64 the two selects are
/// maxps(-104, x) and minps(89, x), which compute exactly them (the second operand wherever the comparison
/// is false, NaN included: `maxps a, b` is a > b ? a : b), one instruction each where GCC 12 emits a compare
/// and a blend for each select. AVX-512 keeps the selects (not measured here; no AVX-512 host).
template <int kLanes>
[[gnu::always_inline]] inline void ClampExpArgument(typename Vec<kLanes>::F& x) {
  using F = typename Vec<kLanes>::F;
  const F zero = {};
  const F lo = zero - 104.0f, hi = zero + 89.0f;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if constexpr (kLanes == 4) {  // SSE, the x86-64 baseline
    x = __builtin_ia32_minps(hi, __builtin_ia32_maxps(lo, x));
    return;
  } else if constexpr (kLanes == 8) {
    // Only ever inlined into the target("avx2") functions below. GCC declares no AVX builtin in this file
    // (compiled for the baseline ISA), so the two instructions are written out: AT&T's `vmaxps b, a, d` is
    // d = a > b ? a : b.
    asm("vmaxps %[x], %[lo], %[x]\n\tvminps %[x], %[hi], %[x]" : [x] "+x"(x) : [lo] "x"(lo), [hi] "x"(hi));
    return;
  }
#endif
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
}

/// e^x in each lane, in place. x = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite: ln2 in two parts, so
/// n * high part is exact), e^r by its Taylor polynomial of degree 7 (truncation below 6e-9, relative),
/// times 2^n built in the exponent bits, as two factors that are each a normal float so that a result
/// that under- or overflows is rounded once, by the last multiplication. (Vector casts between types of
/// one size reinterpret the bits; std::bit_cast of a 64-byte vector draws a -Wpsabi warning.)
template <int kLanes>
[[gnu::always_inline]] inline void Exp(typename Vec<kLanes>::F& x) {
  using F = typename Vec<kLanes>::F;
  using I = typename Vec<kLanes>::I;
  static_assert(sizeof(F) == 4 * kLanes && sizeof(I) == 4 * kLanes);
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;     // 9 significant bits
  constexpr float kLn2Lo = -2.12194440e-4f;  // ln 2 - kLn2Hi
  constexpr float kRound = 12582912.0f;      // 1.5 * 2^23: adding it rounds to the nearest integer
  const F zero = {};
  ClampExpArgument<kLanes>(x);
  const F t = x * kLog2e + kRound;
  const F n = t - kRound;
  const F r = (x - n * kLn2Hi) - n * kLn2Lo;
  F p = zero + 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const I k = (I)t - std::bit_cast<int32_t>(kRound);  // n as integers
  const I k1 = k >> 1, k2 = k - k1;
  x = p * (F)((k1 + 127) << 23) * (F)((k2 + 127) << 23);
}

/// tanh in each lane, in place, as Cephes' tanhf: on a = |x|, below 0.625 the odd polynomial
/// a + a^3 P(a^2) (P of degree 4, relative error 1.3e-7 on that range), else 1 - 2 / (e^(2a) + 1) with Exp
/// above (no cancellation worth an ulp there: the result is at least 0.55); the sign of x is put back
/// last, so tanh(-0) = -0, tiny and subnormal x give x, +-inf give +-1 and NaN stays NaN.
template <int kLanes>
[[gnu::always_inline]] inline void Tanh(typename Vec<kLanes>::F& x) {
  using F = typename Vec<kLanes>::F;
  using I = typename Vec<kLanes>::I;
  const I sign = (I)x & std::bit_cast<int32_t>(0x80000000u);
  const F a = (F)((I)x & 0x7fffffff);
  const F z = a * a;
  F p = z * -5.70498872745e-3f + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const F small = p * z * a + a;
  F e = a + a;
  Exp<kLanes>(e);
  const F large = 1.0f - 2.0f / (e + 1.0f);
  const F r = a < 0.625f ? small : large;  // NaN compares false: large, which is NaN
  x = (F)((I)r | sign);
}

/// What MapLanes does to each loaded vector before kFn: nothing, subtract a scalar (x - m, one float
/// subtraction, as a scalar loop would round it) or set the sign bit (-|x|: exactly -std::fabs(x), NaN
/// payloads included).
enum class Pre { kNone, kMinus, kNegAbs };

template <int kLanes, Pre kPre>
[[gnu::always_inline]] inline void PreOp(typename Vec<kLanes>::F& v, float m) {
  using I = typename Vec<kLanes>::I;
  if constexpr (kPre == Pre::kMinus) v = v - m;
  if constexpr (kPre == Pre::kNegAbs) v = (typename Vec<kLanes>::F)((I)v | std::bit_cast<int32_t>(0x80000000u));
}

/// y = kFn(pre(x)), two vectors per step (two independent dependency chains: kFn's polynomial is a long
/// chain of dependent operations, and one vector at a time left the core waiting on it).
template <int kLanes, void (*kFn)(typename Vec<kLanes>::F&), Pre kPre = Pre::kNone>
[[gnu::always_inline]] inline void MapLanes(const float* x, float* y, int64_t n, float m = 0) {
  using F = typename Vec<kLanes>::F;
  F v, w;
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    std::memcpy(&v, x + i, sizeof v);
    std::memcpy(&w, x + i + kLanes, sizeof w);
    PreOp<kLanes, kPre>(v, m);
    PreOp<kLanes, kPre>(w, m);
    kFn(v);
    kFn(w);
    std::memcpy(y + i, &v, sizeof v);
    std::memcpy(y + i + kLanes, &w, sizeof w);
  }
  for (; i + kLanes <= n; i += kLanes) {
    std::memcpy(&v, x + i, sizeof v);
    PreOp<kLanes, kPre>(v, m);
    kFn(v);
    std::memcpy(y + i, &v, sizeof v);
  }
  if (i < n) {  // the last partial group, padded with zeros
    const size_t tail = static_cast<size_t>(n - i) * sizeof(float);
    v = F{};
    std::memcpy(&v, x + i, tail);
    PreOp<kLanes, kPre>(v, m);
    kFn(v);
    std::memcpy(y + i, &v, tail);
  }
}

/// Sigmoid in each lane, in place, as SigmoidOp::Apply (elementwise_math.cc) rounds it: e = Exp(-|x|)
/// (the sign bit set, exactly -std::fabs), r = 1 / (1 + e), then r where x >= 0, else e * r (NaN
/// compares false: e * r, which is NaN).
template <int kLanes>
[[gnu::always_inline]] inline void Sigmoid(typename Vec<kLanes>::F& x) {
  using F = typename Vec<kLanes>::F;
  F e = x;
  PreOp<kLanes, Pre::kNegAbs>(e, 0);
  Exp<kLanes>(e);
  const F r = 1.0f / (1.0f + e);
  x = x >= 0.0f ? r : e * r;
}

/// lo += double(v's low half), hi += double(v's high half). (References, not vector values: a vector
/// passed or returned by value across a function compiled for another width draws -Wpsabi.)
template <int kLanes>
[[gnu::always_inline]] inline void AddWidenedHalves(typename Vec<kLanes>::D& lo, typename Vec<kLanes>::D& hi,
                                                    const typename Vec<kLanes>::F& v) {
  using D = typename Vec<kLanes>::D;
  // Element by element: GCC 12 makes each half one vcvtps2pd of the target's width (its
  // __builtin_convertvector of a half-width vector was two 128-bit conversions and an insert).
  D a, b;
#pragma GCC unroll 8
  for (int k = 0; k < kLanes / 2; ++k) {
    a[k] = v[k];
    b[k] = v[k + kLanes / 2];
  }
  lo += a;
  hi += b;
}

/// ExpOfDifferenceSumLeaf: the exponentials of one 16-element chunk (16 / kLanes vectors, independent
/// chains) are widened into the 16 double lanes of PairwiseSum's leaf (chunk element j into lane j, in
/// vectors of kLanes / 2 doubles) while still in registers; the tail's exponentials (a zero-padded
/// vector step, as MapLanes) are added to lanes 0 .. n % 16 - 1 in order, then the lanes are combined as
/// that leaf's tree.
template <int kLanes>
[[gnu::always_inline]] inline double ExpOfDifferenceSumLeafBody(const float* x, float m, int64_t n) {
  using F = typename Vec<kLanes>::F;
  using D = typename Vec<kLanes>::D;
  constexpr int kChunk = 16, kVecs = kChunk / kLanes;
  D acc[2 * kVecs] = {};
  int64_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    F v[kVecs];
#pragma GCC unroll 4
    for (int k = 0; k < kVecs; ++k) {
      std::memcpy(&v[k], x + i + k * kLanes, sizeof v[k]);
      PreOp<kLanes, Pre::kMinus>(v[k], m);
      Exp<kLanes>(v[k]);
      AddWidenedHalves<kLanes>(acc[2 * k], acc[2 * k + 1], v[k]);
    }
  }
  double lanes[kChunk];
  std::memcpy(lanes, acc, sizeof lanes);
  if (i < n) {
    float e[kChunk] = {};
    std::memcpy(e, x + i, static_cast<size_t>(n - i) * sizeof(float));
#pragma GCC unroll 4
    for (int k = 0; k < kVecs; ++k) {
      F v;
      std::memcpy(&v, e + k * kLanes, sizeof v);
      PreOp<kLanes, Pre::kMinus>(v, m);
      Exp<kLanes>(v);
      std::memcpy(e + k * kLanes, &v, sizeof v);
    }
    for (int64_t j = 0; j < n - i; ++j) lanes[j] += static_cast<double>(e[j]);
  }
  for (int width = kChunk / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

void ExpBaseline(const float* x, float* y, int64_t n) { MapLanes<4, Exp<4>>(x, y, n); }
void TanhBaseline(const float* x, float* y, int64_t n) { MapLanes<4, Tanh<4>>(x, y, n); }
void ExpOfDifferenceBaseline(const float* x, float m, float* y, int64_t n) {
  MapLanes<4, Exp<4>, Pre::kMinus>(x, y, n, m);
}
void SigmoidBaseline(const float* x, float* y, int64_t n) { MapLanes<4, Sigmoid<4>>(x, y, n); }
double ExpOfDifferenceSumLeafBaseline(const float* x, float m, int64_t n) {
  return ExpOfDifferenceSumLeafBody<4>(x, m, n);
}

using MapFn = void (*)(const float*, float*, int64_t);
using ShiftedMapFn = void (*)(const float*, float, float*, int64_t);
using ShiftedSumFn = double (*)(const float*, float, int64_t);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
[[gnu::target("avx2")]] void ExpAvx2(const float* x, float* y, int64_t n) { MapLanes<8, Exp<8>>(x, y, n); }
[[gnu::target("avx512f")]] void ExpAvx512(const float* x, float* y, int64_t n) { MapLanes<16, Exp<16>>(x, y, n); }
[[gnu::target("avx2")]] void TanhAvx2(const float* x, float* y, int64_t n) { MapLanes<8, Tanh<8>>(x, y, n); }
[[gnu::target("avx512f")]] void TanhAvx512(const float* x, float* y, int64_t n) {
  MapLanes<16, Tanh<16>>(x, y, n);
}

[[gnu::target("avx2")]] void ExpOfDifferenceAvx2(const float* x, float m, float* y, int64_t n) {
  MapLanes<8, Exp<8>, Pre::kMinus>(x, y, n, m);
}
[[gnu::target("avx512f")]] void ExpOfDifferenceAvx512(const float* x, float m, float* y, int64_t n) {
  MapLanes<16, Exp<16>, Pre::kMinus>(x, y, n, m);
}
[[gnu::target("avx2")]] void SigmoidAvx2(const float* x, float* y, int64_t n) { MapLanes<8, Sigmoid<8>>(x, y, n); }
[[gnu::target("avx512f")]] void SigmoidAvx512(const float* x, float* y, int64_t n) {
  MapLanes<16, Sigmoid<16>>(x, y, n);
}
[[gnu::target("avx2")]] double ExpOfDifferenceSumLeafAvx2(const float* x, float m, int64_t n) {
  return ExpOfDifferenceSumLeafBody<8>(x, m, n);
}
[[gnu::target("avx512f")]] double ExpOfDifferenceSumLeafAvx512(const float* x, float m, int64_t n) {
  return ExpOfDifferenceSumLeafBody<16>(x, m, n);
}

template <typename Fn>
Fn Select(Fn avx512, Fn avx2, Fn baseline) {
  if (__builtin_cpu_supports("avx512f")) return avx512;
  if (__builtin_cpu_supports("avx2")) return avx2;
  return baseline;
}
#endif

}  // namespace

void ExpN(const float* x, float* y, int64_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const MapFn exp = Select(ExpAvx512, ExpAvx2, ExpBaseline);
  exp(x, y, n);
#else
  ExpBaseline(x, y, n);
#endif
}

void ExpOfDifferenceN(const float* x, float m, float* y, int64_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const ShiftedMapFn exp = Select(ExpOfDifferenceAvx512, ExpOfDifferenceAvx2, ExpOfDifferenceBaseline);
  exp(x, m, y, n);
#else
  ExpOfDifferenceBaseline(x, m, y, n);
#endif
}

double ExpOfDifferenceSumLeaf(const float* x, float m, int64_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const ShiftedSumFn leaf =
      Select(ExpOfDifferenceSumLeafAvx512, ExpOfDifferenceSumLeafAvx2, ExpOfDifferenceSumLeafBaseline);
  return leaf(x, m, n);
#else
  return ExpOfDifferenceSumLeafBaseline(x, m, n);
#endif
}

void SigmoidN(const float* x, float* y, int64_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const MapFn sigmoid = Select(SigmoidAvx512, SigmoidAvx2, SigmoidBaseline);
  sigmoid(x, y, n);
#else
  SigmoidBaseline(x, y, n);
#endif
}

void TanhN(const float* x, float* y, int64_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const MapFn tanh = Select(TanhAvx512, TanhAvx2, TanhBaseline);
  tanh(x, y, n);
#else
  TanhBaseline(x, y, n);
#endif
}

namespace internal {
void TanhAtWidth(int lanes, const float* x, float* y, int64_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (lanes == 16 && __builtin_cpu_supports("avx512f")) return TanhAvx512(x, y, n);
  if (lanes == 8 && __builtin_cpu_supports("avx2")) return TanhAvx2(x, y, n);
#endif
  (void)lanes;
  TanhBaseline(x, y, n);
}
void ExpAtWidth(int lanes, const float* x, float* y, int64_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (lanes == 16 && __builtin_cpu_supports("avx512f")) return ExpAvx512(x, y, n);
  if (lanes == 8 && __builtin_cpu_supports("avx2")) return ExpAvx2(x, y, n);
#endif
  (void)lanes;
  ExpBaseline(x, y, n);
}
}  // namespace internal

}  // namespace oar::host
