// Host-and-device numerics shared by every GPU kernel: the float16/bfloat16 storage types (bit-exact
// with the SDK's oar::sdk::Half / BFloat16, round to nearest even), the compute type of each dtype, the
// cast rules of docs/ops.md and the scalar functions of the elementwise ops. 16-bit floats are plain
// bit containers rather than the vendors' __half types so that one source serves nvcc, hipcc and the
// host compiler (the unit tests) alike.
#ifndef OAR_PLUGINS_GPU_COMMON_KERNELS_NUMERIC_CUH_
#define OAR_PLUGINS_GPU_COMMON_KERNELS_NUMERIC_CUH_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "plugins/gpu_common/kernels/indexing.cuh"
#if defined(__CUDACC__) || defined(__HIPCC__)
#include "plugins/gpu_common/vendor.h"  // device intrinsics (__float_as_uint, ...)
#endif

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define OAR_DEVICE_PASS 1
#else
#define OAR_DEVICE_PASS 0
#endif

namespace oar::gpu {

OAR_HD uint32_t FloatBits(float f) {
#if OAR_DEVICE_PASS
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
OAR_HD float BitsFloat(uint32_t u) {
#if OAR_DEVICE_PASS
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

/// IEEE binary16 storage.
struct F16 {
  uint16_t bits;
};
/// bfloat16 storage (upper half of a binary32).
struct BF16 {
  uint16_t bits;
};

OAR_HD F16 FloatToF16(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return F16{static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u))};
  if (abs >= 0x477ff000u) return F16{static_cast<uint16_t>(sign | 0x7c00u)};
  if (abs < 0x38800000u) {  // subnormal or zero: adding 0.5 lets the FPU round the low bits
    const float magic = BitsFloat(abs) + 0.5f;
    return F16{static_cast<uint16_t>(sign | (FloatBits(magic) - 0x3f000000u))};
  }
  const uint32_t odd = (abs >> 13) & 1u;
  return F16{static_cast<uint16_t>(sign | ((abs - 0x38000000u + 0xfffu + odd) >> 13))};
}
OAR_HD float F16ToFloat(F16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exp = (h.bits >> 10) & 0x1fu;
  const uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}
OAR_HD BF16 FloatToBF16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return BF16{static_cast<uint16_t>((x >> 16) | 0x40u)};
  return BF16{static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16)};
}
OAR_HD float BF16ToFloat(BF16 b) { return BitsFloat(static_cast<uint32_t>(b.bits) << 16); }

/// Compute type of a storage type: float for the 16-bit floats, the type itself otherwise.
template <typename T>
struct ComputeOf {
  using type = T;
};
template <>
struct ComputeOf<F16> {
  using type = float;
};
template <>
struct ComputeOf<BF16> {
  using type = float;
};
template <typename T>
using Compute = typename ComputeOf<T>::type;

template <typename T>
OAR_HD Compute<T> Load(T v) {
  return v;
}
OAR_HD float Load(F16 v) { return F16ToFloat(v); }
OAR_HD float Load(BF16 v) { return BF16ToFloat(v); }

template <typename T>
OAR_HD T Store(Compute<T> v) {
  return static_cast<T>(v);
}
template <>
OAR_HD F16 Store<F16>(float v) {
  return FloatToF16(v);
}
template <>
OAR_HD BF16 Store<BF16>(float v) {
  return FloatToBF16(v);
}

template <typename T>
inline constexpr bool kIsFloat = std::is_floating_point_v<T> || std::is_same_v<T, F16> || std::is_same_v<T, BF16>;

template <typename T>
OAR_HD bool IsNan(T v) {
  if constexpr (kIsFloat<T>) {
    const auto c = Load(v);
    return c != c;
  } else {
    return false;
  }
}

// ---------------------------------------------------------------------------------------------------
// Casts (docs/ops.md, `cast`): a source is read as a double (floating) or an int64 (integer, bool),
// then converted to the destination by these two functions.
// ---------------------------------------------------------------------------------------------------

/// Floating source -> To: truncation with saturation (NaN -> 0) for integers, x != 0 for bool, round to
/// nearest even for floats (16-bit floats through float32, as the contract says).
template <typename To>
OAR_HD To CastFromFloating(double d) {
  if constexpr (std::is_same_v<To, bool>) {
    return d != 0.0;  // NaN != 0 is true
  } else if constexpr (std::is_same_v<To, F16>) {
    return FloatToF16(static_cast<float>(d));
  } else if constexpr (std::is_same_v<To, BF16>) {
    return FloatToBF16(static_cast<float>(d));
  } else if constexpr (std::is_floating_point_v<To>) {
    return static_cast<To>(d);
  } else if constexpr (std::is_same_v<To, int64_t>) {
    if (d != d) return 0;
    if (d >= 9223372036854775808.0) return INT64_MAX;
    if (d <= -9223372036854775808.0) return INT64_MIN;
    return static_cast<int64_t>(d);
  } else {
    // int8, uint8, int32: every bound is exact in double.
    constexpr double lo = std::is_same_v<To, uint8_t> ? 0.0 : (std::is_same_v<To, int8_t> ? -128.0 : -2147483648.0);
    constexpr double hi = std::is_same_v<To, uint8_t> ? 255.0 : (std::is_same_v<To, int8_t> ? 127.0 : 2147483647.0);
    if (d != d) return 0;
    if (d <= lo) return static_cast<To>(lo);
    if (d >= hi) return static_cast<To>(hi);
    return static_cast<To>(d);
  }
}

/// Integer or bool source -> To: two's-complement wrap between integers, round to nearest even for
/// floats (16-bit floats through float32).
template <typename To>
OAR_HD To CastFromInteger(int64_t i) {
  if constexpr (std::is_same_v<To, bool>) {
    return i != 0;
  } else if constexpr (std::is_same_v<To, F16>) {
    return FloatToF16(static_cast<float>(i));
  } else if constexpr (std::is_same_v<To, BF16>) {
    return FloatToBF16(static_cast<float>(i));
  } else if constexpr (std::is_floating_point_v<To>) {
    return static_cast<To>(i);
  } else {
    return static_cast<To>(static_cast<uint64_t>(i));  // modular narrowing
  }
}

template <typename To, typename From>
OAR_HD To CastValue(From v) {
  if constexpr (kIsFloat<From>) {
    return CastFromFloating<To>(static_cast<double>(Load(v)));
  } else {
    return CastFromInteger<To>(static_cast<int64_t>(v));
  }
}

// ---------------------------------------------------------------------------------------------------
// Scalar ops in the compute type C (float for F32/F16/BF16, double for F64, the integer itself).
// ---------------------------------------------------------------------------------------------------

enum class UnaryOp : int32_t {
  kNeg,
  kExp,
  kRelu,
  kAbs,
  kSign,
  kLog,
  kLog1p,
  kSqrt,
  kRsqrt,
  kSin,
  kCos,
  kTanh,
  kSigmoid,
  kErf,
  kReciprocal,
  kIsNan,
  kIsInf,
  kLogicalNot
};
enum class BinaryOp : int32_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMaximum,
  kMinimum,
  kPow,
  kReluGrad,  // a * (b > 0 ? 1 : 0): relu_grad(grad, x)
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kLogicalAnd,
  kLogicalOr
};

/// Integer arithmetic wraps: do it in the unsigned type of the same width.
template <typename C>
OAR_HD C WrapAdd(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <typename C>
OAR_HD C WrapSub(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
  } else {
    return a - b;
  }
}
template <typename C>
OAR_HD C WrapMul(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    // uint8 * uint8 promotes to int and may overflow it: multiply in 64 bits.
    return static_cast<C>(
        static_cast<U>(static_cast<uint64_t>(static_cast<U>(a)) * static_cast<uint64_t>(static_cast<U>(b))));
  } else {
    return a * b;
  }
}

template <typename C>
OAR_HD C ApplyUnary(UnaryOp op, C x) {
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case UnaryOp::kNeg:
        return -x;
      case UnaryOp::kExp:
        return std::exp(x);
      case UnaryOp::kRelu:
        return x < C(0) ? C(0) : x;
      case UnaryOp::kAbs:
        return std::fabs(x);
      case UnaryOp::kSign:
        return x > C(0) ? C(1) : (x < C(0) ? C(-1) : x);  // keeps -0.0 and NaN
      case UnaryOp::kLog:
        return std::log(x);
      case UnaryOp::kLog1p:
        return std::log1p(x);
      case UnaryOp::kSqrt:
        return std::sqrt(x);
      case UnaryOp::kRsqrt:
        return C(1) / std::sqrt(x);
      case UnaryOp::kSin:
        return std::sin(x);
      case UnaryOp::kCos:
        return std::cos(x);
      case UnaryOp::kTanh:
        return std::tanh(x);
      case UnaryOp::kSigmoid: {
        const C e = std::exp(-std::fabs(x));
        return x >= C(0) ? C(1) / (C(1) + e) : e / (C(1) + e);
      }
      case UnaryOp::kErf:
        return std::erf(x);
      case UnaryOp::kReciprocal:
        return C(1) / x;
      default:
        return x;  // predicates are handled by ApplyPredicate
    }
  } else if constexpr (std::is_same_v<C, bool>) {
    return x;  // bool has only the predicate logical_not
  } else if constexpr (std::is_unsigned_v<C>) {
    switch (op) {
      case UnaryOp::kNeg:
        return WrapSub(C(0), x);
      case UnaryOp::kSign:
        return static_cast<C>(x > C(0) ? 1 : 0);
      default:
        return x;  // relu and abs are the identity
    }
  } else {
    switch (op) {
      case UnaryOp::kNeg:
        return WrapSub(C(0), x);
      case UnaryOp::kRelu:
        return x < C(0) ? C(0) : x;
      case UnaryOp::kAbs:
        return x < C(0) ? WrapSub(C(0), x) : x;
      case UnaryOp::kSign:
        return static_cast<C>(x > C(0) ? 1 : (x < C(0) ? -1 : 0));
      default:
        return x;
    }
  }
}

template <typename C>
OAR_HD bool ApplyPredicate(UnaryOp op, C x) {
  switch (op) {
    case UnaryOp::kIsNan:
      return x != x;
    case UnaryOp::kIsInf:
      if constexpr (std::is_floating_point_v<C>) return std::isinf(x);
      return false;
    case UnaryOp::kLogicalNot:
      return !(x != C(0));
    default:
      return false;
  }
}

OAR_HD bool IsPredicate(UnaryOp op) {
  return op == UnaryOp::kIsNan || op == UnaryOp::kIsInf || op == UnaryOp::kLogicalNot;
}
OAR_HD bool IsComparison(BinaryOp op) { return static_cast<int32_t>(op) >= static_cast<int32_t>(BinaryOp::kEq); }

template <typename C>
OAR_HD C ApplyBinary(BinaryOp op, C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    return a;  // bool has only comparisons and logical ops
  } else {
    switch (op) {
      case BinaryOp::kAdd:
        return WrapAdd(a, b);
      case BinaryOp::kSub:
        return WrapSub(a, b);
      case BinaryOp::kMul:
        return WrapMul(a, b);
      case BinaryOp::kDiv:
        return a / b;  // registered for floating types only
      case BinaryOp::kMaximum:
        if (a != a) return a;
        if (b != b) return b;
        return a > b ? a : b;
      case BinaryOp::kMinimum:
        if (a != a) return a;
        if (b != b) return b;
        return a < b ? a : b;
      case BinaryOp::kPow:
        if constexpr (std::is_floating_point_v<C>) return std::pow(a, b);
        return a;
      case BinaryOp::kReluGrad:
        return WrapMul(a, b > C(0) ? C(1) : C(0));
      default:
        return a;  // comparisons are handled by ApplyComparison
    }
  }
}

template <typename C>
OAR_HD bool ApplyComparison(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::kEq:
      return a == b;
    case BinaryOp::kNe:
      return a != b;
    case BinaryOp::kLt:
      return a < b;
    case BinaryOp::kLe:
      return a <= b;
    case BinaryOp::kGt:
      return a > b;
    case BinaryOp::kGe:
      return a >= b;
    case BinaryOp::kLogicalAnd:
      return (a != C(0)) && (b != C(0));
    case BinaryOp::kLogicalOr:
      return (a != C(0)) || (b != C(0));
    default:
      return false;
  }
}

}  // namespace oar::gpu

#endif  // OAR_PLUGINS_GPU_COMMON_KERNELS_NUMERIC_CUH_
