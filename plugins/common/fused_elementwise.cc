// Fused elementwise kernels that compute the very operations of the ops they replace, each rounded to the dtype
// (docs/ops.md), so a program rewritten to use them gives the same bits: fused_adam, fused_rotary,
// fused_rms_scale, fused_tanh_grad and fused_sigmoid_grad.
//
// fused_adam: Adam's (and AdamW's) update of one parameter in one pass over its elements.
//
//   m_out = m * beta1 + g * one_minus_beta1
//   v_out = v * beta2 + (g * g) * one_minus_beta2
//   p_out = value - ((m_out / bias_correction1) / (sqrt(v_out / bias_correction2) + eps)) * lr
//   value = p * decay (with_decay = 1: AdamW) or p (with_decay = 0: Adam; decay is not read)
//
// Every step is one IEEE operation of T rounded to T, in the order core/optim's Adam::ApplyStep applies the
// elementwise kernels (mul, add, div, sqrt, sub compute exactly these operations), so the results are those
// kernels' bit for bit. This file is compiled with -ffp-contract=off (CMakeLists.txt): a fused multiply-add
// would round once where the kernels round twice. The scalars are 0-d tensors (the program's constants and
// step inputs), read once per call. Outputs may be the very bytes of p, m and v (the executor writes a state
// update into the state it replaces): each element is read before any output element at its index is
// written, in blocks of kBlock elements.
//
// fused_rotary: the rotation of rotary position embeddings with the rows given, x [..., 2h] with cos, sin
// broadcasting against [..., h]: out[..., :h] = x1 * cos - x2 * sin, out[..., h:] = x2 * cos + x1 * sin (x1, x2
// the halves of x), as examples/models.cc's RotateWith computes it with mul, sub, add and concat.
// fused_rotary_grad: its backward as rotary_embedding's VJP records it (RotaryGradRun).
//
// fused_tanh_grad and fused_sigmoid_grad: the backward of tanh and sigmoid as core/ops/schema.cc's VJPs record it
// (y = tanh(x), s = sigmoid(x), the forward's results; `one` the 0-d scalar 1.0 - t becomes add(neg(t), 1)):
//
//   fused_tanh_grad(grad, y, one)    = grad * (-(y * y) + one)          mul(grad, add(neg(mul(y, y)), one))
//   fused_sigmoid_grad(grad, s, one) = (grad * s) * (-s + one)          mul(mul(grad, s), add(neg(s), one))
//
// four and three kernels, each a pass over the tensor, become one; every operation is rounded to T in this order.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "oar/plugin/ops.h"
#include "plugins/common/kernel_util.h"
#include "plugins/common/strided.h"

namespace oar::host {
namespace {

constexpr int kTensors = 4;  // p, g, m, v
constexpr int kScalars = 9;  // decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bc1, bc2, eps, lr
constexpr int kBlock = 64;   // elements read into locals before the block's outputs are written

template <typename T>
struct AdamScalars {
  T decay, b1, c1, b2, c2, bc1, bc2, eps, lr;
  bool with_decay;
};

// One element, in ApplyStep's order of operations.
template <typename T>
inline void AdamElement(T p, T g, T m, T v, const AdamScalars<T>& k, T* po, T* mo, T* vo) {
  const T value = k.with_decay ? p * k.decay : p;
  const T mj = m * k.b1 + g * k.c1;
  const T vj = v * k.b2 + (g * g) * k.c2;
  const T update = (mj / k.bc1) / (std::sqrt(vj / k.bc2) + k.eps);
  *mo = mj;
  *vo = vj;
  *po = value - update * k.lr;
}

// Elements [0, n) of one run: byte strides s[0..6] (p, g, m, v, p_out, m_out, v_out).
template <typename T>
void AdamRun(const std::array<char*, 7>& ptr, int64_t n, const std::array<int64_t, 7>& s, const AdamScalars<T>& k) {
  T p[kBlock], g[kBlock], m[kBlock], v[kBlock], po[kBlock], mo[kBlock], vo[kBlock];
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t len = std::min<int64_t>(kBlock, n - i0);
    for (int64_t j = 0; j < len; ++j) {
      p[j] = *reinterpret_cast<const T*>(ptr[0] + (i0 + j) * s[0]);
      g[j] = *reinterpret_cast<const T*>(ptr[1] + (i0 + j) * s[1]);
      m[j] = *reinterpret_cast<const T*>(ptr[2] + (i0 + j) * s[2]);
      v[j] = *reinterpret_cast<const T*>(ptr[3] + (i0 + j) * s[3]);
    }
    for (int64_t j = 0; j < len; ++j) {
      AdamElement(p[j], g[j], m[j], v[j], k, &po[j], &mo[j], &vo[j]);
    }
    for (int64_t j = 0; j < len; ++j) {
      *reinterpret_cast<T*>(ptr[4] + (i0 + j) * s[4]) = po[j];
      *reinterpret_cast<T*>(ptr[5] + (i0 + j) * s[5]) = mo[j];
      *reinterpret_cast<T*>(ptr[6] + (i0 + j) * s[6]) = vo[j];
    }
  }
}

// The same over contiguous runs (unit strides): loads and stores the compiler can vectorise.
template <typename T>
void AdamDense(const std::array<char*, 7>& ptr, int64_t n, const AdamScalars<T>& k) {
  const T* P = reinterpret_cast<const T*>(ptr[0]);
  const T* G = reinterpret_cast<const T*>(ptr[1]);
  const T* M = reinterpret_cast<const T*>(ptr[2]);
  const T* V = reinterpret_cast<const T*>(ptr[3]);
  T* PO = reinterpret_cast<T*>(ptr[4]);
  T* MO = reinterpret_cast<T*>(ptr[5]);
  T* VO = reinterpret_cast<T*>(ptr[6]);
  T p[kBlock] = {}, g[kBlock] = {}, m[kBlock] = {}, v[kBlock] = {}, po[kBlock], mo[kBlock], vo[kBlock];
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t len = std::min<int64_t>(kBlock, n - i0);
    std::copy(P + i0, P + i0 + len, p);
    std::copy(G + i0, G + i0 + len, g);
    std::copy(M + i0, M + i0 + len, m);
    std::copy(V + i0, V + i0 + len, v);
    for (int64_t j = 0; j < kBlock; ++j) {  // a full block (the tail computes on stale locals, not stored)
      AdamElement(p[j], g[j], m[j], v[j], k, &po[j], &mo[j], &vo[j]);
    }
    std::copy(po, po + len, PO + i0);
    std::copy(mo, mo + len, MO + i0);
    std::copy(vo, vo + len, VO + i0);
  }
}

template <typename T>
void FusedAdam(const KernelCall& call) {
  CheckArity(call, kTensors + kScalars, 3);
  constexpr int32_t t = kDTypeOf<T>;
  CheckDTypes(call, {t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t});
  const TensorRef p = call.input(0);
  for (int i = 1; i < kTensors; ++i)
    CheckSameShape(call, call.input(i), p, "grad, m and v must have the param's shape");
  for (int i = 0; i < 3; ++i) CheckSameShape(call, call.output(i), p, "the outputs must have the param's shape");
  for (int i = kTensors; i < kTensors + kScalars; ++i) {
    if (call.input(i).rank() != 0) {
      Invalid(call, "input " + std::to_string(i) +
                        " (a scalar: decay, beta1, 1 - beta1, beta2, 1 - beta2, the bias "
                        "corrections, eps, lr) must be 0-d, got " +
                        call.input(i).ShapeString());
    }
  }
  const int64_t with_decay = RequireInt(call, OAR_OP_FUSED_ADAM_ATTR_WITH_DECAY);
  if (with_decay != 0 && with_decay != 1) Invalid(call, "with_decay " + std::to_string(with_decay) + " is not 0 or 1");
  auto scalar = [&](int i) { return *call.input(kTensors + i).data<const T>(); };
  const AdamScalars<T> k{scalar(0), scalar(1), scalar(2), scalar(3), scalar(4),
                         scalar(5), scalar(6), scalar(7), scalar(8), with_decay == 1};
  std::array<std::span<const int64_t>, 7> strides;
  std::array<char*, 7> base;
  for (int i = 0; i < 7; ++i) {
    const TensorRef r = i < kTensors ? call.input(i) : call.output(i - kTensors);
    strides[static_cast<size_t>(i)] = r.strides();
    base[static_cast<size_t>(i)] = r.data<char>();
  }
  std::array<int64_t, 7> sizes;
  sizes.fill(static_cast<int64_t>(sizeof(T)));
  const StridedLayout<7> l = Collapse<7>(p.shape(), strides, sizes);
  ForEach<7>(l, base, [&](const std::array<char*, 7>& ptr, int64_t n, const std::array<int64_t, 7>& s) {
    bool dense = true;
    for (int64_t x : s) dense = dense && x == static_cast<int64_t>(sizeof(T));
    if (dense) {
      AdamDense<T>(ptr, n, k);
    } else {
      AdamRun<T>(ptr, n, s, k);
    }
  });
}

// out1 = x1 * c - x2 * s, out2 = x2 * c + x1 * s over one run (byte strides: x1, x2, c, s, out1, out2). Every
// input element is read before the outputs at its index are written.
template <typename T>
void RotaryRun(const std::array<char*, 6>& ptr, int64_t n, const std::array<int64_t, 6>& st);

// fused_rotary_grad's run, defined with the NaN-aware helpers below.
template <typename T>
void RotaryGradRun(const std::array<char*, 6>& ptr, int64_t n, const std::array<int64_t, 6>& st);

// fused_rotary (kGrad false) and fused_rotary_grad (kGrad true): x (grad) [..., 2h] and cos, sin broadcasting
// against its halves [..., h]; one run at a time over the halves' shape.
template <typename T, bool kGrad = false>
void FusedRotary(const KernelCall& call) {
  CheckArity(call, 3, 1);
  constexpr int32_t t = kDTypeOf<T>;
  CheckDTypes(call, {t, t, t, t});
  const TensorRef x = call.input(0), out = call.output(0);
  CheckSameShape(call, out, x, "the output must have x's shape");
  const int r = x.rank();
  if (r < 1 || x.dim(r - 1) % 2 != 0) Invalid(call, "x must be [..., 2h] (rank >= 1, an even last extent)");
  const int64_t h = x.dim(r - 1) / 2;
  // The halves' shape [..., h]; cos and sin broadcast against it (right-aligned, extents equal or 1).
  std::array<int64_t, OAR_MAX_RANK> half{};
  std::copy(x.shape().begin(), x.shape().end(), half.begin());
  half[static_cast<size_t>(r - 1)] = h;
  std::array<std::array<int64_t, OAR_MAX_RANK>, 2> bstrides{};
  for (int k = 0; k < 2; ++k) {
    const TensorRef cs = call.input(1 + k);
    if (cs.rank() > r) Invalid(call, "cos and sin must broadcast against x's halves [..., h]");
    for (int d = 0; d < r; ++d) {
      const int dc = d - (r - cs.rank());
      if (dc < 0 || cs.dim(dc) == 1) continue;  // broadcast: stride 0
      if (cs.dim(dc) != half[static_cast<size_t>(d)]) {
        Invalid(call, "cos and sin must broadcast against x's halves [..., h]");
      }
      bstrides[static_cast<size_t>(k)][static_cast<size_t>(d)] = cs.stride(dc);
    }
  }
  if (x.numel() == 0) return;
  const int64_t xs = x.stride(r - 1), os = out.stride(r - 1);
  const std::span<const int64_t> shape(half.data(), static_cast<size_t>(r));
  const std::span<const int64_t> cstr(bstrides[0].data(), static_cast<size_t>(r));
  const std::span<const int64_t> sstr(bstrides[1].data(), static_cast<size_t>(r));
  const std::array<std::span<const int64_t>, 6> strides = {x.strides(), x.strides(),   cstr,
                                                           sstr,        out.strides(), out.strides()};
  std::array<int64_t, 6> sizes;
  sizes.fill(static_cast<int64_t>(sizeof(T)));
  const StridedLayout<6> l = Collapse<6>(shape, strides, sizes);
  const std::array<char*, 6> base = {x.data<char>(),
                                     x.data<char>() + h * xs * static_cast<int64_t>(sizeof(T)),
                                     call.input(1).data<char>(),
                                     call.input(2).data<char>(),
                                     out.data<char>(),
                                     out.data<char>() + h * os * static_cast<int64_t>(sizeof(T))};
  ForEach<6>(l, base, [](const std::array<char*, 6>& ptr, int64_t n, const std::array<int64_t, 6>& st) {
    if constexpr (kGrad) {
      RotaryGradRun<T>(ptr, n, st);
    } else {
      RotaryRun<T>(ptr, n, st);
    }
  });
}

// The element strides of `b` broadcast against `shape` (right-aligned; extent 1 or absent: 0), or false.
bool BroadcastStrides(const TensorRef& b, std::span<const int64_t> shape, std::array<int64_t, OAR_MAX_RANK>* out) {
  const int r = static_cast<int>(shape.size());
  if (b.rank() > r) return false;
  out->fill(0);
  for (int d = 0; d < r; ++d) {
    const int db = d - (r - b.rank());
    if (db < 0 || b.dim(db) == 1) continue;
    if (b.dim(db) != shape[static_cast<size_t>(d)]) return false;
    (*out)[static_cast<size_t>(d)] = b.stride(db);
  }
  return true;
}

template <typename T>
void FusedRmsScale(const KernelCall& call) {
  CheckArity(call, 4, 1);
  constexpr int32_t t = kDTypeOf<T>;
  CheckDTypes(call, {t, t, t, t, t});
  const TensorRef x = call.input(0), out = call.output(0);
  CheckSameShape(call, out, x, "the output must have x's shape");
  std::array<std::array<int64_t, OAR_MAX_RANK>, 3> b{};
  for (int k = 0; k < 3; ++k) {
    if (!BroadcastStrides(call.input(1 + k), x.shape(), &b[static_cast<size_t>(k)])) {
      Invalid(call, "mean_square, eps and weight must broadcast against x");
    }
  }
  if (x.numel() == 0) return;
  const size_t r = static_cast<size_t>(x.rank());
  const std::array<std::span<const int64_t>, 5> strides = {x.strides(), std::span<const int64_t>(b[0].data(), r),
                                                           std::span<const int64_t>(b[1].data(), r),
                                                           std::span<const int64_t>(b[2].data(), r), out.strides()};
  std::array<int64_t, 5> sizes;
  sizes.fill(static_cast<int64_t>(sizeof(T)));
  const StridedLayout<5> l = Collapse<5>(x.shape(), strides, sizes);
  const std::array<char*, 5> base = {x.data<char>(), call.input(1).data<char>(), call.input(2).data<char>(),
                                     call.input(3).data<char>(), out.data<char>()};
  ForEach<5>(l, base, [](const std::array<char*, 5>& p, int64_t n, const std::array<int64_t, 5>& st) {
    for (int64_t j = 0; j < n; ++j) {
      const T xv = *reinterpret_cast<const T*>(p[0] + j * st[0]);
      const T ms = *reinterpret_cast<const T*>(p[1] + j * st[1]);
      const T eps = *reinterpret_cast<const T*>(p[2] + j * st[2]);
      const T w = *reinterpret_cast<const T*>(p[3] + j * st[3]);
      const T a = ms + eps;
      const T rs = T(1) / std::sqrt(a);
      const T y = xv * rs;
      *reinterpret_cast<T*>(p[4] + j * st[4]) = y * w;
    }
  });
}

// ---- fused_tanh_grad, fused_sigmoid_grad ------------------------------------------------------------------
// -x as the neg kernel computes it, by flipping the sign bit: written as `-x`, GCC folds `-x + one` into
// `one - x`, equal for every number but not for NaN (the neg kernel's -NaN keeps its flipped sign through the
// add; one - NaN returns the NaN unflipped).
template <typename T>
inline T FlipSign(T x) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  return std::bit_cast<T>(static_cast<Bits>(std::bit_cast<Bits>(x) ^ (Bits{1} << (8 * sizeof(T) - 1))));
}

// a * b as the mul kernel returns it when both are NaN: x86 gives the first operand's NaN (quieted), but GCC may
// swap the operands of a commutative multiply, so the first operand's NaN is chosen explicitly.
template <typename T>
inline T MulFirstNaN(T a, T b) {
  const T r = a * b;
  return std::isnan(a) ? a + a : r;  // a + a: a's NaN, quieted
}

// a + b as the add kernel returns it when both are NaN (the first operand's), as MulFirstNaN.
template <typename T>
inline T AddFirstNaN(T a, T b) {
  const T r = a + b;
  return std::isnan(a) ? a + a : r;
}

#if defined(__x86_64__)
// The rotary runs whose six operands are all unit-stride float32, eight lanes at a time where the CPU has AVX2:
// the same IEEE operations per lane in the same order, a product or sum of two NaNs the first operand's as the
// mul and add kernels give it (the instructions' own rule), the negation a flip of the sign bit; the tail as the
// scalar loop. Returns the elements done.
[[gnu::target("avx2")]] int64_t RotaryAvx2(const std::array<char*, 6>& ptr, int64_t n) {
  const float *p1 = reinterpret_cast<const float*>(ptr[0]), *p2 = reinterpret_cast<const float*>(ptr[1]);
  const float *pc = reinterpret_cast<const float*>(ptr[2]), *ps = reinterpret_cast<const float*>(ptr[3]);
  float *o1 = reinterpret_cast<float*>(ptr[4]), *o2 = reinterpret_cast<float*>(ptr[5]);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 x1 = _mm256_loadu_ps(p1 + j), x2 = _mm256_loadu_ps(p2 + j);
    const __m256 c = _mm256_loadu_ps(pc + j), s = _mm256_loadu_ps(ps + j);
    const __m256 a = _mm256_mul_ps(x1, c), b = _mm256_mul_ps(x2, s);
    const __m256 d = _mm256_mul_ps(x2, c), e = _mm256_mul_ps(x1, s);
    _mm256_storeu_ps(o1 + j, _mm256_sub_ps(a, b));
    _mm256_storeu_ps(o2 + j, _mm256_add_ps(d, e));
  }
  return j;
}
[[gnu::target("avx2")]] int64_t RotaryGradAvx2(const std::array<char*, 6>& ptr, int64_t n) {
  const float *p1 = reinterpret_cast<const float*>(ptr[0]), *p2 = reinterpret_cast<const float*>(ptr[1]);
  const float *pc = reinterpret_cast<const float*>(ptr[2]), *ps = reinterpret_cast<const float*>(ptr[3]);
  float *o1 = reinterpret_cast<float*>(ptr[4]), *o2 = reinterpret_cast<float*>(ptr[5]);
  const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 g1 = _mm256_loadu_ps(p1 + j), g2 = _mm256_loadu_ps(p2 + j);
    const __m256 c = _mm256_loadu_ps(pc + j), s = _mm256_loadu_ps(ps + j);
    const __m256 d1 = _mm256_add_ps(_mm256_mul_ps(g2, s), _mm256_mul_ps(g1, c));
    const __m256 d2 = _mm256_add_ps(_mm256_mul_ps(g2, c), _mm256_mul_ps(_mm256_xor_ps(g1, sign), s));
    _mm256_storeu_ps(o1 + j, _mm256_add_ps(zero, d1));
    _mm256_storeu_ps(o2 + j, _mm256_add_ps(d2, zero));
  }
  return j;
}
#endif

// The elements a run may hand to RotaryAvx2 / RotaryGradAvx2: all of them for unit-stride float32 on AVX2, else 0.
template <typename T, bool kGrad>
int64_t RotaryVector(const std::array<char*, 6>& ptr, int64_t n, const std::array<int64_t, 6>& st) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    static const bool avx2 = __builtin_cpu_supports("avx2");
    bool unit = avx2;
    for (int64_t x : st) unit = unit && x == static_cast<int64_t>(sizeof(float));
    if (unit) return kGrad ? RotaryGradAvx2(ptr, n) : RotaryAvx2(ptr, n);
  }
#endif
  (void)ptr, (void)n, (void)st;
  return 0;
}

// out1 = x1 * c - x2 * s, out2 = x2 * c + x1 * s over one run (byte strides: x1, x2, c, s, out1, out2), as the
// mul, sub and add kernels compute them (a product or sum of two NaNs the first operand's). Every input element
// is read before the outputs at its index are written.
template <typename T>
void RotaryRun(const std::array<char*, 6>& ptr, int64_t n, const std::array<int64_t, 6>& st) {
  for (int64_t j = RotaryVector<T, false>(ptr, n, st); j < n; ++j) {
    const T x1 = *reinterpret_cast<const T*>(ptr[0] + j * st[0]);
    const T x2 = *reinterpret_cast<const T*>(ptr[1] + j * st[1]);
    const T c = *reinterpret_cast<const T*>(ptr[2] + j * st[2]);
    const T s = *reinterpret_cast<const T*>(ptr[3] + j * st[3]);
    const T a = MulFirstNaN(x1, c);
    const T b = MulFirstNaN(x2, s);
    const T d = MulFirstNaN(x2, c);
    const T e = MulFirstNaN(x1, s);
    *reinterpret_cast<T*>(ptr[4] + j * st[4]) = a - b;
    *reinterpret_cast<T*>(ptr[5] + j * st[5]) = AddFirstNaN(d, e);
  }
}

// fused_rotary_grad over one run (byte strides: g1, g2, c, s, out1, out2), in the order rotary_embedding's VJP
// records the ops: d1 = g2 * s + g1 * c, d2 = g2 * c + (-g1) * s (mul, neg, add), then each half joined as
// slice_scatter into zeros and add give it: 0 + d1, d2 + 0 (one addition of +0: -0 becomes +0, a NaN stays the
// same NaN, quieted). Every input element is read before the outputs at its index are written.
template <typename T>
void RotaryGradRun(const std::array<char*, 6>& ptr, int64_t n, const std::array<int64_t, 6>& st) {
  for (int64_t j = RotaryVector<T, true>(ptr, n, st); j < n; ++j) {
    const T g1 = *reinterpret_cast<const T*>(ptr[0] + j * st[0]);
    const T g2 = *reinterpret_cast<const T*>(ptr[1] + j * st[1]);
    const T c = *reinterpret_cast<const T*>(ptr[2] + j * st[2]);
    const T s = *reinterpret_cast<const T*>(ptr[3] + j * st[3]);
    const T d1 = AddFirstNaN(MulFirstNaN(g2, s), MulFirstNaN(g1, c));
    const T d2 = AddFirstNaN(MulFirstNaN(g2, c), MulFirstNaN(FlipSign(g1), s));
    *reinterpret_cast<T*>(ptr[4] + j * st[4]) = T(0) + d1;
    *reinterpret_cast<T*>(ptr[5] + j * st[5]) = d2 + T(0);
  }
}

// One element of each, in the VJP's order of operations (every step one IEEE operation rounded to T).
struct TanhGradOp {
  template <typename T>
  static T Apply(T g, T y, T one) {
    const T sq = y * y;
    const T neg = FlipSign(sq);
    const T d = neg + one;
    return MulFirstNaN(g, d);
  }
};
struct SigmoidGradOp {
  template <typename T>
  static T Apply(T g, T s, T one) {
    const T gs = MulFirstNaN(g, s);
    const T neg = FlipSign(s);
    const T d = neg + one;
    return MulFirstNaN(gs, d);
  }
};

#if defined(__x86_64__)
// The contiguous float32 runs eight lanes at a time where the CPU has AVX2 (GCC leaves the plain loop scalar): the
// same four IEEE operations per lane, the negation a flip of the sign bit, a product of two NaNs the first one's (as
// the mul kernel gives it: OAR_MUL_FIRST_NAN: MulFirstNaN per lane, written out since a helper taking __m256 by value
// would draw -Wpsabi); the tail as Apply.
#define OAR_MUL_FIRST_NAN(a, b) \
  _mm256_blendv_ps(_mm256_mul_ps(a, b), _mm256_add_ps(a, a), _mm256_cmp_ps(a, a, _CMP_UNORD_Q))
[[gnu::target("avx2")]] void TanhGradAvx2(const float* g, const float* y, float one, float* o, int64_t n) {
  const __m256 ones = _mm256_set1_ps(one), sign = _mm256_set1_ps(-0.0f);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 yv = _mm256_loadu_ps(y + j);
    const __m256 d = _mm256_add_ps(_mm256_xor_ps(_mm256_mul_ps(yv, yv), sign), ones);
    const __m256 gv = _mm256_loadu_ps(g + j);
    _mm256_storeu_ps(o + j, OAR_MUL_FIRST_NAN(gv, d));
  }
  for (; j < n; ++j) o[j] = TanhGradOp::Apply(g[j], y[j], one);
}
[[gnu::target("avx2")]] void SigmoidGradAvx2(const float* g, const float* s, float one, float* o, int64_t n) {
  const __m256 ones = _mm256_set1_ps(one), sign = _mm256_set1_ps(-0.0f);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 sv = _mm256_loadu_ps(s + j);
    const __m256 gv = _mm256_loadu_ps(g + j);
    const __m256 gs = OAR_MUL_FIRST_NAN(gv, sv);
    const __m256 d = _mm256_add_ps(_mm256_xor_ps(sv, sign), ones);
    _mm256_storeu_ps(o + j, OAR_MUL_FIRST_NAN(gs, d));
  }
  for (; j < n; ++j) o[j] = SigmoidGradOp::Apply(g[j], s[j], one);
}
#undef OAR_MUL_FIRST_NAN
#endif

// A contiguous run: AVX2 for float32 where the CPU has it, else the plain loop.
template <typename Op, typename T>
void ActGradDense(const T* g, const T* y, T one, T* o, int64_t n) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    static const bool avx2 = __builtin_cpu_supports("avx2");
    if (avx2) {
      if constexpr (std::is_same_v<Op, TanhGradOp>) return TanhGradAvx2(g, y, one, o, n);
      if constexpr (std::is_same_v<Op, SigmoidGradOp>) return SigmoidGradAvx2(g, y, one, o, n);
    }
  }
#endif
  for (int64_t j = 0; j < n; ++j) o[j] = Op::Apply(g[j], y[j], one);
}

// out = Op(grad, y, one) over grad's shape: grad, y and out of one shape (any strides), one 0-d.
template <typename Op, typename T>
void FusedActGrad(const KernelCall& call) {
  CheckArity(call, 3, 1);
  constexpr int32_t t = kDTypeOf<T>;
  CheckDTypes(call, {t, t, t, t});
  const TensorRef g = call.input(0), y = call.input(1), out = call.output(0);
  CheckSameShape(call, y, g, "the forward's result must have the gradient's shape");
  CheckSameShape(call, out, g, "the output must have the gradient's shape");
  if (call.input(2).rank() != 0) Invalid(call, "input 2 (one) must be 0-d, got " + call.input(2).ShapeString());
  if (g.numel() == 0) return;
  const T one = *call.input(2).data<const T>();
  const std::array<std::span<const int64_t>, 3> strides = {g.strides(), y.strides(), out.strides()};
  std::array<int64_t, 3> sizes;
  sizes.fill(static_cast<int64_t>(sizeof(T)));
  const StridedLayout<3> l = Collapse<3>(g.shape(), strides, sizes);
  const std::array<char*, 3> base = {g.data<char>(), y.data<char>(), out.data<char>()};
  ForEach<3>(l, base, [one](const std::array<char*, 3>& p, int64_t n, const std::array<int64_t, 3>& st) {
    constexpr int64_t e = static_cast<int64_t>(sizeof(T));
    if (st[0] == e && st[1] == e && st[2] == e) {
      return ActGradDense<Op, T>(reinterpret_cast<const T*>(p[0]), reinterpret_cast<const T*>(p[1]), one,
                                 reinterpret_cast<T*>(p[2]), n);
    }
    for (int64_t j = 0; j < n; ++j) {
      const T gv = *reinterpret_cast<const T*>(p[0] + j * st[0]);
      const T yv = *reinterpret_cast<const T*>(p[1] + j * st[1]);
      *reinterpret_cast<T*>(p[2] + j * st[2]) = Op::Apply(gv, yv, one);
    }
  });
}

}  // namespace

void AppendFusedElementwiseKernels(std::vector<HostKernel>* kernels) {
  for (const char* op : {OAR_OP_FUSED_TANH_GRAD, OAR_OP_FUSED_SIGMOID_GRAD}) {
    const bool tanh = std::string_view(op) == OAR_OP_FUSED_TANH_GRAD;
    AddKernel(kernels, op, {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32},
              tanh ? &GuardedKernel<&FusedActGrad<TanhGradOp, float>>
                   : &GuardedKernel<&FusedActGrad<SigmoidGradOp, float>>);
    AddKernel(kernels, op, {OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64},
              tanh ? &GuardedKernel<&FusedActGrad<TanhGradOp, double>>
                   : &GuardedKernel<&FusedActGrad<SigmoidGradOp, double>>);
  }
  AddKernel(kernels, OAR_OP_FUSED_RMS_SCALE,
            {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32},
            &GuardedKernel<&FusedRmsScale<float>>);
  AddKernel(kernels, OAR_OP_FUSED_RMS_SCALE,
            {OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64},
            &GuardedKernel<&FusedRmsScale<double>>);
  AddKernel(kernels, OAR_OP_FUSED_ROTARY, {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32},
            &GuardedKernel<&FusedRotary<float>>);
  AddKernel(kernels, OAR_OP_FUSED_ROTARY, {OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64},
            &GuardedKernel<&FusedRotary<double>>);
  AddKernel(kernels, OAR_OP_FUSED_ROTARY_GRAD,
            {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32},
            &GuardedKernel<&FusedRotary<float, true>>);
  AddKernel(kernels, OAR_OP_FUSED_ROTARY_GRAD,
            {OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT64},
            &GuardedKernel<&FusedRotary<double, true>>);
  for (const int32_t t : {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT64}) {
    HostKernel k{OAR_OP_FUSED_ADAM,
                 {},
                 kTensors + kScalars + 3,
                 t == OAR_DTYPE_FLOAT32 ? &GuardedKernel<&FusedAdam<float>> : &GuardedKernel<&FusedAdam<double>>};
    k.dtypes.fill(t);
    kernels->push_back(k);
  }
}

}  // namespace oar::host
