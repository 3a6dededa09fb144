// Oar plugin SDK — C++ helpers for dtypes: element sizes, names, and the float16 / bfloat16 storage
// types with round-to-nearest-even conversions. Shared by the core and by plugins (header-only).
#ifndef OAR_PLUGIN_CPP_DTYPE_HPP_
#define OAR_PLUGIN_CPP_DTYPE_HPP_

#include <cstdint>
#include <cstring>
#include <string_view>

#include "oar/plugin/types.h"

namespace oar::sdk {

/// Bytes per element; 0 for an invalid dtype.
constexpr size_t DTypeSize(int32_t dtype) {
  switch (dtype) {
    case OAR_DTYPE_FLOAT64:
    case OAR_DTYPE_INT64: return 8;
    case OAR_DTYPE_FLOAT32:
    case OAR_DTYPE_INT32: return 4;
    case OAR_DTYPE_FLOAT16:
    case OAR_DTYPE_BFLOAT16: return 2;
    case OAR_DTYPE_INT8:
    case OAR_DTYPE_UINT8:
    case OAR_DTYPE_BOOL: return 1;
    default: return 0;
  }
}

/// Lower-case name ("float32"); "invalid" for anything else.
constexpr std::string_view DTypeName(int32_t dtype) {
  switch (dtype) {
    case OAR_DTYPE_FLOAT32: return "float32";
    case OAR_DTYPE_FLOAT64: return "float64";
    case OAR_DTYPE_FLOAT16: return "float16";
    case OAR_DTYPE_BFLOAT16: return "bfloat16";
    case OAR_DTYPE_INT8: return "int8";
    case OAR_DTYPE_UINT8: return "uint8";
    case OAR_DTYPE_INT32: return "int32";
    case OAR_DTYPE_INT64: return "int64";
    case OAR_DTYPE_BOOL: return "bool";
    default: return "invalid";
  }
}

constexpr bool IsFloating(int32_t dtype) {
  return dtype == OAR_DTYPE_FLOAT32 || dtype == OAR_DTYPE_FLOAT64 || dtype == OAR_DTYPE_FLOAT16 ||
         dtype == OAR_DTYPE_BFLOAT16;
}

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// IEEE binary16 storage type. Arithmetic happens in float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(FromFloat(f)) {}  // NOLINT: implicit like a built-in float type
  operator float() const { return ToFloat(bits); }  // NOLINT

  static uint16_t FromFloat(float f) {
    const uint32_t x = FloatBits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) {  // inf or nan
      return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    }
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
    if (abs < 0x38800000u) {  // subnormal half or zero: let the FPU round (adding 0.5 aligns bits)
      const float magic = BitsFloat(abs) + 0.5f;
      return static_cast<uint16_t>(sign | (FloatBits(magic) - 0x3f000000u));
    }
    const uint32_t odd = (abs >> 13) & 1u;  // round to nearest even
    return static_cast<uint16_t>(sign | ((abs - 0x38000000u + 0xfffu + odd) >> 13));
  }
  static float ToFloat(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {  // zero or subnormal: mant * 2^-24
      const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
      return sign ? -v : v;
    }
    return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
  }
};

/// bfloat16 storage type (upper half of a binary32). Arithmetic happens in float.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(FromFloat(f)) {}  // NOLINT
  operator float() const { return BitsFloat(static_cast<uint32_t>(bits) << 16); }  // NOLINT

  static uint16_t FromFloat(float f) {
    const uint32_t x = FloatBits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
    return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);  // round to nearest even
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

/// Call `fn(T{})` with the C++ storage type of `dtype` (bool as bool). Returns false for an invalid
/// dtype without calling.
template <typename Fn>
bool VisitDType(int32_t dtype, Fn&& fn) {
  switch (dtype) {
    case OAR_DTYPE_FLOAT32: fn(float{}); return true;
    case OAR_DTYPE_FLOAT64: fn(double{}); return true;
    case OAR_DTYPE_FLOAT16: fn(Half{}); return true;
    case OAR_DTYPE_BFLOAT16: fn(BFloat16{}); return true;
    case OAR_DTYPE_INT8: fn(int8_t{}); return true;
    case OAR_DTYPE_UINT8: fn(uint8_t{}); return true;
    case OAR_DTYPE_INT32: fn(int32_t{}); return true;
    case OAR_DTYPE_INT64: fn(int64_t{}); return true;
    case OAR_DTYPE_BOOL: fn(bool{}); return true;
    default: return false;
  }
}

}  // namespace oar::sdk

#endif  // OAR_PLUGIN_CPP_DTYPE_HPP_
