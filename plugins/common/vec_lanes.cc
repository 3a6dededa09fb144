// The loops of vec_lanes.h: one body per loop over 16-lane vector types, compiled three times (SSE2,
// AVX2, AVX-512; GCC lowers a 16-lane vector to the registers each target has) and chosen once at run
// time. This file is compiled with -ffp-contract=off (CMakeLists.txt): every variant rounds the same
// operations the same way. Tails (n % 16 elements) are folded in scalar code in the scalar loops' order.
#include "plugins/common/vec_lanes.h"

#include <cstring>
#include <limits>

namespace oar::host {
namespace {

// Native vector types of kBytes bytes (16: SSE2, 32: AVX2, 64: AVX-512): a vector wider than the
// target's registers is lowered element by element by GCC, so the 16 lanes are held in 16 / FW float
// vectors (or 16 / DW double vectors) of the target's width. One specialisation per width: GCC drops
// vector_size from an alias whose size depends on a template parameter.
template <int kBytes>
struct Vec;
template <>
struct Vec<16> {
  using F = float __attribute__((vector_size(16)));
  using D = double __attribute__((vector_size(16)));
  using H = float __attribute__((vector_size(8)));
  using I = int32_t __attribute__((vector_size(16)));  // a float comparison's mask  // the floats of one D
};
template <>
struct Vec<32> {
  using F = float __attribute__((vector_size(32)));
  using D = double __attribute__((vector_size(32)));
  using H = float __attribute__((vector_size(16)));
  using I = int32_t __attribute__((vector_size(32)));  // a float comparison's mask
};
template <>
struct Vec<64> {
  using F = float __attribute__((vector_size(64)));
  using D = double __attribute__((vector_size(64)));
  using H = float __attribute__((vector_size(32)));
  using I = int32_t __attribute__((vector_size(64)));  // a float comparison's mask
};

constexpr int kLanes = 16;

#define OAR_VEC_INLINE [[gnu::always_inline]] inline
#define OAR_VEC_LAMBDA __attribute__((always_inline))

/// The 16 float lanes as 16 / FW vectors: lane l is element l % FW of vector l / FW.
template <int kBytes>
struct FloatLanes {
  using F = typename Vec<kBytes>::F;
  static constexpr int kWidth = kBytes / 4, kCount = kLanes / kWidth;
  F v[kCount];
  OAR_VEC_INLINE void Fill(float x) {
#pragma GCC unroll 16
    for (F& f : v) f = F{} + x;
  }
  OAR_VEC_INLINE static void Load(F& f, const float* p) { std::memcpy(&f, p, sizeof f); }
  OAR_VEC_INLINE void Store(float (&lanes)[kLanes]) const { std::memcpy(lanes, v, sizeof lanes); }
};

/// The 16 double lanes as 16 / DW vectors.
template <int kBytes>
struct DoubleLanes {
  using D = typename Vec<kBytes>::D;
  using H = typename Vec<kBytes>::H;
  static constexpr int kWidth = kBytes / 8, kCount = kLanes / kWidth;
  D v[kCount] = {};
  /// double(p[0 .. DW)). Element by element, which GCC 12 turns into one vcvtps2pd of the target's width:
  /// its __builtin_convertvector of the half-width float vector was two 128-bit conversions and an insert
  /// per vector at AVX2 and AVX-512 (the same values, one conversion instruction instead of three).
  OAR_VEC_INLINE static D Widen(const float* p) {
    H h;
    std::memcpy(&h, p, sizeof h);
    D d;
#pragma GCC unroll 8
    for (int k = 0; k < kWidth; ++k) d[k] = h[k];
    return d;
  }
  /// p[0 .. DW) of data already widened (the same values).
  OAR_VEC_INLINE static D Widen(const double* p) {
    D d;
    std::memcpy(&d, p, sizeof d);
    return d;
  }
  OAR_VEC_INLINE void Store(double (&lanes)[kLanes]) const { std::memcpy(lanes, v, sizeof lanes); }
};

/// lanes [0, 8) += [8, 16), then [0, 4) += [4, 8), ... : the scalar loops' final combination.
template <typename S>
OAR_VEC_INLINE S Tree(S (&lanes)[kLanes]) {
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

/// Tree's pattern over the 16 float lanes held in vectors, with `op` for +: lanes [0, 8) op [8, 16),
/// [0, 4) op [4, 8), [0, 2) op [2, 4), [0] op [1]; in registers instead of a loop over memory. With +
/// these are Tree's additions exactly.
template <int kBytes, typename Op>
OAR_VEC_INLINE float LaneFold(const typename FloatLanes<kBytes>::F (&v)[FloatLanes<kBytes>::kCount], Op op) {
  using V8 = float __attribute__((vector_size(32)));
  using V4 = float __attribute__((vector_size(16)));
  using V2 = float __attribute__((vector_size(8)));
  V4 s4;
  if constexpr (kBytes == 64) {  // one vector of 16
    const V8 s8 = op(__builtin_shufflevector(v[0], v[0], 0, 1, 2, 3, 4, 5, 6, 7),
                     __builtin_shufflevector(v[0], v[0], 8, 9, 10, 11, 12, 13, 14, 15));
    s4 = op(__builtin_shufflevector(s8, s8, 0, 1, 2, 3), __builtin_shufflevector(s8, s8, 4, 5, 6, 7));
  } else if constexpr (kBytes == 32) {  // two of 8: [0, 8) and [8, 16)
    const V8 s8 = op(v[0], v[1]);
    s4 = op(__builtin_shufflevector(s8, s8, 0, 1, 2, 3), __builtin_shufflevector(s8, s8, 4, 5, 6, 7));
  } else {  // four of 4: [0, 4) op [8, 12) and [4, 8) op [12, 16), then those two
    s4 = op(op(v[0], v[2]), op(v[1], v[3]));
  }
  const V2 s2 = op(__builtin_shufflevector(s4, s4, 0, 1), __builtin_shufflevector(s4, s4, 2, 3));
  return op(s2[0], s2[1]);
}

/// SumLeaf: the lanes in registers; the tail (n % 16 elements, added to lanes 0 .. n % 16 - 1) as one
/// more vector step padded with -0.0f, which leaves every other lane's bits as they are (x + -0 is x for
/// every x, zeros and NaN included); then Tree's additions in registers (LaneFold).
template <int kBytes>
OAR_VEC_INLINE float SumLeafBody(const float* p, int64_t n) {
  using L = FloatLanes<kBytes>;
  L acc;
  acc.Fill(0);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 16
    for (int k = 0; k < L::kCount; ++k) {
      typename L::F x;
      L::Load(x, p + i + k * L::kWidth);
      acc.v[k] += x;
    }
  }
  if (i < n) {
    float tail[kLanes];
#pragma GCC unroll 16
    for (float& t : tail) t = -0.0f;
    std::memcpy(tail, p + i, static_cast<size_t>(n - i) * sizeof(float));
#pragma GCC unroll 16
    for (int k = 0; k < L::kCount; ++k) {
      typename L::F x;
      L::Load(x, tail + k * L::kWidth);
      acc.v[k] += x;
    }
  }
  return LaneFold<kBytes>(acc.v, [](auto a, auto b) OAR_VEC_LAMBDA { return a + b; });
}

template <int kBytes, typename In>
OAR_VEC_INLINE double SumLeafAsDoubleBody(const In* p, int64_t n) {
  using L = DoubleLanes<kBytes>;
  L acc;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 16
    for (int k = 0; k < L::kCount; ++k) acc.v[k] += L::Widen(p + i + k * L::kWidth);
  }
  double lanes[kLanes];
  acc.Store(lanes);
  for (; i < n; ++i) lanes[i % kLanes] += static_cast<double>(p[i]);
  return Tree(lanes);
}

template <int kBytes, typename In>
OAR_VEC_INLINE double SquaredDeviationLeafBody(const In* p, int64_t n, double mean) {
  using L = DoubleLanes<kBytes>;
  L acc;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 16
    for (int k = 0; k < L::kCount; ++k) {
      const typename L::D d = L::Widen(p + i + k * L::kWidth) - mean;
      acc.v[k] += d * d;
    }
  }
  double lanes[kLanes];
  acc.Store(lanes);
  for (; i < n; ++i) {
    const double d = static_cast<double>(p[i]) - mean;
    lanes[i % kLanes] += d * d;
  }
  return Tree(lanes);
}

template <int kBytes>
OAR_VEC_INLINE float RowMaxBody(const float* p, int64_t n) {
  using L = FloatLanes<kBytes>;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  L m;
  m.Fill(kNegInf);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 16
    for (int k = 0; k < L::kCount; ++k) {
      typename L::F x;
      L::Load(x, p + i + k * L::kWidth);
      m.v[k] = x > m.v[k] ? x : m.v[k];
    }
  }
  float lanes[kLanes];
  m.Store(lanes);
  float best = kNegInf;
  for (; i < n; ++i) best = p[i] > best ? p[i] : best;
  for (float l : lanes) best = l > best ? l : best;
  // The value is that of the sequential loop; only the sign of a zero maximum depends on the order:
  // the sequential loop keeps the first zero it meets.
  if (best == 0) {
    for (int64_t k = 0; k < n; ++k) {
      if (p[k] == 0) return p[k];
    }
  }
  return best;
}

template <bool kMax>
OAR_VEC_INLINE float Better(float v, float acc) {
  return ((kMax ? v > acc : v < acc) || v != v) ? v : acc;
}

/// Better for vectors: v where v is NaN (a bitwise blend by the comparison's mask), else the select
/// (v > acc) ? v : acc (or <). GCC 12 lowers a select whose mask combines two comparisons,
/// `((v > acc) | (v != v)) ? v : acc`, to scalar code when the helper is not itself compiled for
/// AVX-512 (inlined into the AVX-512 functions it stayed scalar: amax over the last axis ran 40x
/// slower than libtorch); one comparison per select keeps vector code at every width.
template <bool kMax, typename F>
OAR_VEC_INLINE F BetterVec(F v, F acc) {
  using M = decltype(v != v);
  F best;
  if constexpr (kMax) {
    best = v > acc ? v : acc;
  } else {
    best = v < acc ? v : acc;
  }
  const M nan = v != v;
  return reinterpret_cast<F>((reinterpret_cast<M>(best) & ~nan) | (reinterpret_cast<M>(v) & nan));
}

// FoldRun's lanes, each fold written as two single-comparison selects: m = (v > m) ? v : m over the
// values (a NaN is never taken, so m is never NaN) and z = (v != v) ? v : z (the lane's last NaN; z
// starts at 0). A lane's fold from the initial value is z if z is NaN, else m: the last NaN if the lane
// saw one, else its first greatest value (the strict > keeps the first of equal ones, e.g. of +0 and
// -0), as the one-select fold gives; the chain through m is one max instruction.
// The end, acc folded with the tail and then with lanes 0, 1, ..., 15 in order: when no lane saw a
// NaN and the lanes' extreme M is not zero, that is Better(M, acc after the tail), M found by a tree
// in registers (the extreme of nonzero values has one bit pattern, whatever the order; only a NaN's
// payload or a zero's sign depends on the order). Otherwise the scalar loop in order.
template <int kBytes, bool kMax>
OAR_VEC_INLINE float FoldRunBody(const float* p, int64_t n, float acc) {
  using L = FloatLanes<kBytes>;
  using F = typename L::F;
  constexpr float kInit = kMax ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  L m, z;
  m.Fill(kInit);
  z.Fill(0);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 16
    for (int c = 0; c < L::kCount; ++c) {
      F x;
      L::Load(x, p + i + c * L::kWidth);
      if constexpr (kMax) {
        m.v[c] = x > m.v[c] ? x : m.v[c];
      } else {
        m.v[c] = x < m.v[c] ? x : m.v[c];
      }
      z.v[c] = x != x ? x : z.v[c];
    }
  }
  for (int64_t j = i; j < n; ++j) acc = Better<kMax>(p[j], acc);
  // z's lanes are 0 or NaN: their sum is NaN exactly when one is.
  const float nan_probe = LaneFold<kBytes>(z.v, [](auto a, auto b) OAR_VEC_LAMBDA { return a + b; });
  const float extreme = LaneFold<kBytes>(m.v, [](auto a, auto b) OAR_VEC_LAMBDA {
    if constexpr (kMax) {
      return a > b ? a : b;
    } else {
      return a < b ? a : b;
    }
  });
  if (nan_probe == nan_probe && extreme != 0) return Better<kMax>(extreme, acc);
  float mf[kLanes], zf[kLanes];
  m.Store(mf);
  z.Store(zf);
  for (int l = 0; l < kLanes; ++l) acc = Better<kMax>(zf[l] != zf[l] ? zf[l] : mf[l], acc);
  return acc;
}

template <int kBytes, bool kMax>
OAR_VEC_INLINE void FoldColumnBody(float* a, const float* s, int64_t w) {
  using F = typename Vec<kBytes>::F;
  constexpr int kW = kBytes / 4;
  int64_t j = 0;
  F va, vs;
  for (; j + kW <= w; j += kW) {
    std::memcpy(&va, a + j, sizeof va);
    std::memcpy(&vs, s + j, sizeof vs);
    va = BetterVec<kMax>(vs, va);
    std::memcpy(a + j, &va, sizeof va);
  }
  for (; j < w; ++j) a[j] = Better<kMax>(s[j], a[j]);
}

template <int kBytes, typename In>
OAR_VEC_INLINE void LayerNormRowBody(const In* v, const In* w, const In* b, float* o, int64_t n, double mean,
                                     double rstd) {
  using L = DoubleLanes<kBytes>;
  using H = typename L::H;
  constexpr int kW = L::kWidth;
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    const H out = __builtin_convertvector((L::Widen(v + i) - mean) * rstd * L::Widen(w + i) + L::Widen(b + i), H);
    std::memcpy(o + i, &out, sizeof out);
  }
  for (; i < n; ++i) {
    o[i] = static_cast<float>((static_cast<double>(v[i]) - mean) * rstd * static_cast<double>(w[i]) +
                              static_cast<double>(b[i]));
  }
}

template <VecBinary kOp, typename V>
OAR_VEC_INLINE V Binary(V a, V b) {
  if constexpr (kOp == VecBinary::kAdd) return a + b;
  if constexpr (kOp == VecBinary::kSub) return a - b;
  if constexpr (kOp == VecBinary::kMul) return a * b;
  if constexpr (kOp == VecBinary::kDiv) return a / b;
  if constexpr (kOp == VecBinary::kReluGrad) return a * (b > V{} ? V{} + 1.0f : V{});  // grad * (x > 0 ? 1 : 0)
}

// x (kXs: a scalar) op y (kYs: a scalar), two vectors per step.
template <int kBytes, VecBinary kOp, bool kXs, bool kYs>
OAR_VEC_INLINE void BinaryRunBody(const float* x, const float* y, float* o, int64_t n) {
  using F = typename Vec<kBytes>::F;
  constexpr int kW = kBytes / 4;
  if (n <= 0) return;
  const F xv = F{} + x[0], yv = F{} + y[0];
  int64_t i = 0;
  for (; i + 2 * kW <= n; i += 2 * kW) {
    F a0 = xv, a1 = xv, b0 = yv, b1 = yv;
    if constexpr (!kXs) {
      std::memcpy(&a0, x + i, sizeof a0);
      std::memcpy(&a1, x + i + kW, sizeof a1);
    }
    if constexpr (!kYs) {
      std::memcpy(&b0, y + i, sizeof b0);
      std::memcpy(&b1, y + i + kW, sizeof b1);
    }
    const F r0 = Binary<kOp>(a0, b0), r1 = Binary<kOp>(a1, b1);
    std::memcpy(o + i, &r0, sizeof r0);
    std::memcpy(o + i + kW, &r1, sizeof r1);
  }
  for (; i < n; ++i) o[i] = Binary<kOp>(kXs ? x[0] : x[i], kYs ? y[0] : y[i]);
}

template <int kBytes, VecBinary kOp>
OAR_VEC_INLINE void BinaryRunSteps(const float* x, int64_t xs, const float* y, int64_t ys, float* o, int64_t n) {
  if (xs == 0) {
    BinaryRunBody<kBytes, kOp, true, false>(x, y, o, n);
  } else if (ys == 0) {
    BinaryRunBody<kBytes, kOp, false, true>(x, y, o, n);
  } else {
    BinaryRunBody<kBytes, kOp, false, false>(x, y, o, n);
  }
}

template <int kBytes>
OAR_VEC_INLINE void BinaryRunAny(VecBinary op, const float* x, int64_t xs, const float* y, int64_t ys, float* o,
                                 int64_t n) {
  switch (op) {
    case VecBinary::kAdd: return BinaryRunSteps<kBytes, VecBinary::kAdd>(x, xs, y, ys, o, n);
    case VecBinary::kSub: return BinaryRunSteps<kBytes, VecBinary::kSub>(x, xs, y, ys, o, n);
    case VecBinary::kMul: return BinaryRunSteps<kBytes, VecBinary::kMul>(x, xs, y, ys, o, n);
    case VecBinary::kDiv: return BinaryRunSteps<kBytes, VecBinary::kDiv>(x, xs, y, ys, o, n);
    case VecBinary::kReluGrad: return BinaryRunSteps<kBytes, VecBinary::kReluGrad>(x, xs, y, ys, o, n);
  }
}

template <int kBytes>
OAR_VEC_INLINE void SubTwiceRunBody(const float* x, float a, float b, float* o, int64_t n) {
  using F = typename Vec<kBytes>::F;
  constexpr int kW = kBytes / 4;
  const F av = F{} + a, bv = F{} + b;
  int64_t i = 0;
  F v0, v1;
  for (; i + 2 * kW <= n; i += 2 * kW) {
    std::memcpy(&v0, x + i, sizeof v0);
    std::memcpy(&v1, x + i + kW, sizeof v1);
    const F r0 = (v0 - av) - bv, r1 = (v1 - av) - bv;
    std::memcpy(o + i, &r0, sizeof r0);
    std::memcpy(o + i + kW, &r1, sizeof r1);
  }
  for (; i < n; ++i) o[i] = (x[i] - a) - b;
}

template <int kBytes, VecBatchNorm kOp>
OAR_VEC_INLINE void BatchNormRunBody(const float* x, const float* g, float m, float a, float b, float* o, float* gd,
                                     int64_t n) {
  using F = typename Vec<kBytes>::F;
  constexpr int kW = kBytes / 4;
  constexpr bool kG = kOp == VecBatchNorm::kProduct || kOp == VecBatchNorm::kGradD;
  const F mv = F{} + m, av = F{} + a, bv = F{} + b;
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    F xv, gv = F{}, dv = F{};
    std::memcpy(&xv, x + i, sizeof xv);
    if constexpr (kG) std::memcpy(&gv, g + i, sizeof gv);
    const F r = BatchNormStep<kOp>(xv, gv, mv, av, bv, &dv);
    std::memcpy(o + i, &r, sizeof r);
    if (kOp == VecBatchNorm::kGradD && gd != nullptr) std::memcpy(gd + i, &dv, sizeof dv);
  }
  for (; i < n; ++i) {
    float dv = 0;
    o[i] = BatchNormStep<kOp>(x[i], kG ? g[i] : 0.0f, m, a, b, &dv);
    if (kOp == VecBatchNorm::kGradD && gd != nullptr) gd[i] = dv;
  }
}

template <int kBytes>
OAR_VEC_INLINE void BatchNormRunAny(VecBatchNorm op, const float* x, const float* g, float m, float a, float b,
                                    float* o, float* gd, int64_t n) {
  switch (op) {
    case VecBatchNorm::kSquare: return BatchNormRunBody<kBytes, VecBatchNorm::kSquare>(x, g, m, a, b, o, gd, n);
    case VecBatchNorm::kProduct: return BatchNormRunBody<kBytes, VecBatchNorm::kProduct>(x, g, m, a, b, o, gd, n);
    case VecBatchNorm::kAffine: return BatchNormRunBody<kBytes, VecBatchNorm::kAffine>(x, g, m, a, b, o, gd, n);
    case VecBatchNorm::kGradD: return BatchNormRunBody<kBytes, VecBatchNorm::kGradD>(x, g, m, a, b, o, gd, n);
  }
}

template <int kBytes>
OAR_VEC_INLINE void ReluRunBody(const float* x, float* y, int64_t n) {
  using F = typename Vec<kBytes>::F;
  constexpr int kW = kBytes / 4;
  int64_t i = 0;
  F v0, v1;
  for (; i + 2 * kW <= n; i += 2 * kW) {
    std::memcpy(&v0, x + i, sizeof v0);
    std::memcpy(&v1, x + i + kW, sizeof v1);
    const F r0 = v0 < 0.0f ? F{} : v0, r1 = v1 < 0.0f ? F{} : v1;
    std::memcpy(y + i, &r0, sizeof r0);
    std::memcpy(y + i + kW, &r1, sizeof r1);
  }
  for (; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

/// The scalar window of MaxPool2x2Row (MaxPoolPlaneNoPad's loop for 2x2 taps): the reference the vector
/// blocks equal, and what a block holding a NaN and the tail run.
OAR_VEC_INLINE void MaxPool2x2Window(const float* r0, const float* r1, float* y, int64_t* idx, int64_t ow, int64_t base,
                                     int64_t row_step) {
  const float v[4] = {r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1]};
  const int64_t pos[4] = {base + 2 * ow, base + 2 * ow + 1, base + row_step + 2 * ow, base + row_step + 2 * ow + 1};
  float best = -std::numeric_limits<float>::infinity();
  int64_t at = pos[0], nan_at = -1;
  for (int k = 0; k < 4; ++k) {
    at = v[k] > best ? pos[k] : at;
    best = v[k] > best ? v[k] : best;
    nan_at = (v[k] != v[k]) & (nan_at < 0) ? pos[k] : nan_at;
  }
  if (nan_at >= 0) {
    at = nan_at;
    best = v[nan_at == pos[0] ? 0 : nan_at == pos[1] ? 1 : nan_at == pos[2] ? 2 : 3];
  }
  y[ow] = best;
  idx[ow] = at;
}

/// Even and odd elements of the 2 W floats at p.
template <int kBytes>
OAR_VEC_INLINE void Deinterleave(const float* p, typename Vec<kBytes>::F& even, typename Vec<kBytes>::F& odd) {
  using F = typename Vec<kBytes>::F;
  F a, b;
  std::memcpy(&a, p, sizeof a);
  std::memcpy(&b, p + kBytes / 4, sizeof b);
  if constexpr (kBytes == 16) {
    even = __builtin_shufflevector(a, b, 0, 2, 4, 6);
    odd = __builtin_shufflevector(a, b, 1, 3, 5, 7);
  } else if constexpr (kBytes == 32) {
    even = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14);
    odd = __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15);
  } else {
    even = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    odd = __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  }
}

/// MaxPool2x2Row: W windows per step, the four taps as four vectors and the same selects (the tap number,
/// 0..3, is kept instead of the position); a block with a NaN anywhere in its taps is done by the scalar
/// window, as is the tail.
template <int kBytes>
OAR_VEC_INLINE void MaxPool2x2RowBody(const float* r0, const float* r1, float* y, int64_t* idx, int64_t n, int64_t base,
                                      int64_t row_step) {
  using F = typename Vec<kBytes>::F;
  using I = typename Vec<kBytes>::I;
  constexpr int kW = kBytes / 4;
  int64_t ow = 0;
  for (; ow + kW <= n; ow += kW) {
    F v[4];
    Deinterleave<kBytes>(r0 + 2 * ow, v[0], v[1]);
    Deinterleave<kBytes>(r1 + 2 * ow, v[2], v[3]);
    const I nan = (v[0] != v[0]) | (v[1] != v[1]) | (v[2] != v[2]) | (v[3] != v[3]);
    bool any_nan = false;
    for (int l = 0; l < kW; ++l) any_nan |= nan[l] != 0;
    if (any_nan) {
      for (int l = 0; l < kW; ++l) MaxPool2x2Window(r0, r1, y, idx, ow + l, base, row_step);
      continue;
    }
    F best = F{} - std::numeric_limits<float>::infinity();
    I tap = I{};
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const I gt = v[k] > best;
      tap = gt ? I{} + k : tap;
      best = gt ? v[k] : best;
    }
    std::memcpy(y + ow, &best, sizeof best);
    for (int l = 0; l < kW; ++l) {
      idx[ow + l] = base + 2 * (ow + l) + (tap[l] & 1) + (tap[l] >> 1) * row_step;
    }
  }
  for (; ow < n; ++ow) MaxPool2x2Window(r0, r1, y, idx, ow, base, row_step);
}

template <int kBytes>
OAR_VEC_INLINE double WidenSumLeafBody(const float* p, double* d, int64_t n) {
  using L = DoubleLanes<kBytes>;
  L acc;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 16
    for (int k = 0; k < L::kCount; ++k) {
      const typename L::D v = L::Widen(p + i + k * L::kWidth);
      std::memcpy(d + i + k * L::kWidth, &v, sizeof v);
      acc.v[k] += v;
    }
  }
  double lanes[kLanes];
  acc.Store(lanes);
  for (; i < n; ++i) {
    d[i] = static_cast<double>(p[i]);
    lanes[i % kLanes] += d[i];
  }
  return Tree(lanes);
}

/// The entry points of one instruction set.
struct Table {
  float (*sum_leaf)(const float*, int64_t);
  double (*sum_leaf_as_double)(const float*, int64_t);
  double (*squared_deviation_leaf)(const float*, int64_t, double);
  float (*row_max)(const float*, int64_t);
  float (*max_fold_run)(const float*, int64_t, float);
  float (*min_fold_run)(const float*, int64_t, float);
  void (*max_fold_column)(float*, const float*, int64_t);
  void (*min_fold_column)(float*, const float*, int64_t);
  void (*layer_norm_row)(const float*, const float*, const float*, float*, int64_t, double, double);
  void (*binary_run)(VecBinary, const float*, int64_t, const float*, int64_t, float*, int64_t);
  void (*relu_run)(const float*, float*, int64_t);
  void (*sub_twice_run)(const float*, float, float, float*, int64_t);
  void (*add_rows)(float*, const float*, int64_t, int64_t);
  void (*max_pool_2x2_row)(const float*, const float*, float*, int64_t*, int64_t, int64_t, int64_t);
  double (*sum_leaf_of_doubles)(const double*, int64_t);
  double (*squared_deviation_leaf_of_doubles)(const double*, int64_t, double);
  void (*layer_norm_row_of_doubles)(const double*, const double*, const double*, float*, int64_t, double, double);
  double (*widen_sum_leaf)(const float*, double*, int64_t);
  void (*batch_norm_run)(VecBatchNorm, const float*, const float*, float, float, float, float*, float*, int64_t);
};

// One set of functions per target; TARGET is an attribute (or nothing, for the baseline).
#define OAR_VEC_TABLE(NAME, TARGET, W)                                                                                 \
  namespace NAME {                                                                                                     \
  TARGET float SumLeaf(const float* p, int64_t n) { return SumLeafBody<W>(p, n); }                                     \
  TARGET double SumLeafAsDouble(const float* p, int64_t n) { return SumLeafAsDoubleBody<W>(p, n); }                    \
  TARGET double SquaredDeviationLeaf(const float* p, int64_t n, double mean) {                                         \
    return SquaredDeviationLeafBody<W>(p, n, mean);                                                                    \
  }                                                                                                                    \
  TARGET float RowMax(const float* p, int64_t n) { return RowMaxBody<W>(p, n); }                                       \
  TARGET float MaxFoldRun(const float* p, int64_t n, float acc) { return FoldRunBody<W, true>(p, n, acc); }            \
  TARGET float MinFoldRun(const float* p, int64_t n, float acc) { return FoldRunBody<W, false>(p, n, acc); }           \
  TARGET void MaxFoldColumn(float* a, const float* s, int64_t w) { FoldColumnBody<W, true>(a, s, w); }                 \
  TARGET void MinFoldColumn(float* a, const float* s, int64_t w) { FoldColumnBody<W, false>(a, s, w); }                \
  TARGET void LayerNormRow(const float* v, const float* w, const float* b, float* o, int64_t n, double mean,           \
                           double rstd) {                                                                              \
    LayerNormRowBody<W>(v, w, b, o, n, mean, rstd);                                                                    \
  }                                                                                                                    \
  TARGET void BinaryRun(VecBinary op, const float* x, int64_t xs, const float* y, int64_t ys, float* o, int64_t n) {   \
    BinaryRunAny<W>(op, x, xs, y, ys, o, n);                                                                           \
  }                                                                                                                    \
  TARGET void ReluRun(const float* x, float* y, int64_t n) { ReluRunBody<W>(x, y, n); }                                \
  TARGET void SubTwiceRun(const float* x, float a, float b, float* o, int64_t n) {                                     \
    SubTwiceRunBody<W>(x, a, b, o, n);                                                                                 \
  }                                                                                                                    \
  TARGET void AddRows(float* o, const float* b, int64_t rows, int64_t n) {                                             \
    for (int64_t i = 0; i < rows; ++i) BinaryRunBody<W, VecBinary::kAdd, false, false>(o + i * n, b, o + i * n, n);    \
  }                                                                                                                    \
  TARGET void MaxPool2x2Row(const float* r0, const float* r1, float* y, int64_t* idx, int64_t n, int64_t base,         \
                            int64_t row_step) {                                                                        \
    MaxPool2x2RowBody<W>(r0, r1, y, idx, n, base, row_step);                                                           \
  }                                                                                                                    \
  TARGET double SumLeafOfDoubles(const double* p, int64_t n) { return SumLeafAsDoubleBody<W>(p, n); }                  \
  TARGET double SquaredDeviationLeafOfDoubles(const double* p, int64_t n, double mean) {                               \
    return SquaredDeviationLeafBody<W>(p, n, mean);                                                                    \
  }                                                                                                                    \
  TARGET void LayerNormRowOfDoubles(const double* v, const double* w, const double* b, float* o, int64_t n,            \
                                    double mean, double rstd) {                                                        \
    LayerNormRowBody<W>(v, w, b, o, n, mean, rstd);                                                                    \
  }                                                                                                                    \
  TARGET double WidenSumLeaf(const float* p, double* d, int64_t n) { return WidenSumLeafBody<W>(p, d, n); }            \
  TARGET void BatchNormRun(VecBatchNorm op, const float* x, const float* g, float m, float a, float b, float* o,        \
                           float* gd, int64_t n) {                                                                     \
    BatchNormRunAny<W>(op, x, g, m, a, b, o, gd, n);                                                                   \
  }                                                                                                                    \
  constexpr Table kTable = {SumLeaf,                                                                                   \
                            SumLeafAsDouble,                                                                           \
                            SquaredDeviationLeaf,                                                                      \
                            RowMax,                                                                                    \
                            MaxFoldRun,                                                                                \
                            MinFoldRun,                                                                                \
                            MaxFoldColumn,                                                                             \
                            MinFoldColumn,                                                                             \
                            LayerNormRow,                                                                              \
                            BinaryRun,                                                                                 \
                            ReluRun,                                                                                   \
                            SubTwiceRun,                                                                               \
                            AddRows,                                                                                   \
                            MaxPool2x2Row,                                                                             \
                            SumLeafOfDoubles,                                                                          \
                            SquaredDeviationLeafOfDoubles,                                                             \
                            LayerNormRowOfDoubles,                                                                     \
                            WidenSumLeaf,                                                                              \
                            BatchNormRun};                                                                             \
  }

OAR_VEC_TABLE(baseline, , 16)
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
OAR_VEC_TABLE(avx2, [[gnu::target("avx2")]], 32)
OAR_VEC_TABLE(avx512, [[gnu::target("avx512f")]], 64)
#endif

const Table& Select() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("avx512f")) return avx512::kTable;
  if (__builtin_cpu_supports("avx2")) return avx2::kTable;
#endif
  return baseline::kTable;
}

const Table& Isa() {
  static const Table& table = Select();
  return table;
}

}  // namespace

float SumLeaf(const float* p, int64_t n) { return Isa().sum_leaf(p, n); }
double SumLeafAsDouble(const float* p, int64_t n) { return Isa().sum_leaf_as_double(p, n); }
double SquaredDeviationLeaf(const float* p, int64_t n, double mean) { return Isa().squared_deviation_leaf(p, n, mean); }
float RowMax(const float* p, int64_t n) { return Isa().row_max(p, n); }
float MaxFoldRun(const float* p, int64_t n, float acc) { return Isa().max_fold_run(p, n, acc); }
float MinFoldRun(const float* p, int64_t n, float acc) { return Isa().min_fold_run(p, n, acc); }
void MaxFoldColumn(float* a, const float* s, int64_t w) { Isa().max_fold_column(a, s, w); }
void MinFoldColumn(float* a, const float* s, int64_t w) { Isa().min_fold_column(a, s, w); }
void ReluRun(const float* x, float* y, int64_t n) { Isa().relu_run(x, y, n); }
void SubTwiceRun(const float* x, float a, float b, float* o, int64_t n) { Isa().sub_twice_run(x, a, b, o, n); }
void AddRows(float* o, const float* b, int64_t rows, int64_t n) { Isa().add_rows(o, b, rows, n); }
void BinaryRun(VecBinary op, const float* x, int64_t x_step, const float* y, int64_t y_step, float* o, int64_t n) {
  Isa().binary_run(op, x, x_step, y, y_step, o, n);
}
void LayerNormRow(const float* v, const float* w, const float* b, float* o, int64_t n, double mean, double rstd) {
  Isa().layer_norm_row(v, w, b, o, n, mean, rstd);
}
double SumLeafAsDouble(const double* p, int64_t n) { return Isa().sum_leaf_of_doubles(p, n); }
double SquaredDeviationLeaf(const double* p, int64_t n, double mean) {
  return Isa().squared_deviation_leaf_of_doubles(p, n, mean);
}
void LayerNormRow(const double* v, const double* w, const double* b, float* o, int64_t n, double mean, double rstd) {
  Isa().layer_norm_row_of_doubles(v, w, b, o, n, mean, rstd);
}
double WidenSumLeaf(const float* p, double* d, int64_t n) { return Isa().widen_sum_leaf(p, d, n); }
void BatchNormRun(VecBatchNorm op, const float* x, const float* g, float m, float a, float b, float* o, float* gd,
                  int64_t n) {
  Isa().batch_norm_run(op, x, g, m, a, b, o, gd, n);
}
void MaxPool2x2Row(const float* r0, const float* r1, float* y, int64_t* idx, int64_t n, int64_t base,
                   int64_t row_step) {
  Isa().max_pool_2x2_row(r0, r1, y, idx, n, base, row_step);
}

}  // namespace oar::host
