#include "conformance/reference/dtype.h"

#include <cmath>
#include <limits>

#include "conformance/reference/internal.h"
#include "core/base/error.h"

namespace oar::reference {
namespace {

/// A binary floating-point format: `precision` significand bits (the implicit one included), normal
/// exponents in [min_exp, max_exp], `exp_bits` exponent field bits.
struct Format {
  int precision;
  int min_exp;
  int max_exp;
  int exp_bits;
};
constexpr Format kFloat32{24, -126, 127, 8};
constexpr Format kFloat16{11, -14, 15, 5};
constexpr Format kBFloat16{8, -126, 127, 8};

double MaxFinite(const Format& f) {
  return std::ldexp(std::ldexp(1.0, f.precision) - 1.0, f.max_exp - f.precision + 1);
}

// Round |v| to a multiple of the format's quantum at v's binade (clamped to the subnormal quantum below
// the smallest normal), ties to even. Every step is exact in double: power-of-two scaling, floor, and a
// fractional part below 2^precision.
double RoundToFormat(double v, const Format& f) {
  if (std::isnan(v) || std::isinf(v) || v == 0.0) return v;
  const double a = std::fabs(v);
  int k = 0;
  std::frexp(a, &k);  // a = m * 2^k with m in [0.5, 1), so a lies in [2^(k-1), 2^k).
  const int binade = std::max(k - 1, f.min_exp);
  const int quantum_exp = binade - (f.precision - 1);
  const double scaled = std::ldexp(a, -quantum_exp);
  const double lower = std::floor(scaled);
  const double frac = scaled - lower;
  double rounded = lower;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(lower, 2.0) != 0.0)) rounded = lower + 1.0;
  double result = std::ldexp(rounded, quantum_exp);
  if (result > MaxFinite(f)) result = std::numeric_limits<double>::infinity();
  return std::copysign(result, v);
}

uint64_t EncodeBits(double v, const Format& f) {
  const int mant_bits = f.precision - 1;
  const uint64_t sign = std::signbit(v) ? uint64_t{1} << (mant_bits + f.exp_bits) : 0;
  const uint64_t exp_all_ones = ((uint64_t{1} << f.exp_bits) - 1) << mant_bits;
  if (std::isnan(v)) return sign | exp_all_ones | (uint64_t{1} << (mant_bits - 1));
  const double r = std::fabs(RoundToFormat(v, f));
  if (std::isinf(r)) return sign | exp_all_ones;
  if (r == 0.0) return sign;
  int k = 0;
  std::frexp(r, &k);
  const int e = k - 1;
  if (e < f.min_exp) {  // subnormal: exponent field 0, significand = r / 2^(min_exp - mant_bits)
    return sign | static_cast<uint64_t>(std::ldexp(r, -(f.min_exp - mant_bits)));
  }
  const uint64_t exp_field = static_cast<uint64_t>(e + f.max_exp);  // bias = max_exp
  const uint64_t mant = static_cast<uint64_t>(std::ldexp(r, mant_bits - e)) - (uint64_t{1} << mant_bits);
  return sign | (exp_field << mant_bits) | mant;
}

double DecodeBits(uint64_t bits, const Format& f) {
  const int mant_bits = f.precision - 1;
  const bool negative = (bits >> (mant_bits + f.exp_bits)) & 1;
  const uint64_t exp_field = (bits >> mant_bits) & ((uint64_t{1} << f.exp_bits) - 1);
  const uint64_t mant = bits & ((uint64_t{1} << mant_bits) - 1);
  double magnitude = 0.0;
  if (exp_field == (uint64_t{1} << f.exp_bits) - 1) {
    magnitude = mant == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (exp_field == 0) {
    magnitude = std::ldexp(static_cast<double>(mant), f.min_exp - mant_bits);
  } else {
    const double significand = static_cast<double>((uint64_t{1} << mant_bits) | mant);
    magnitude = std::ldexp(significand, static_cast<int>(exp_field) - f.max_exp - mant_bits);
  }
  return negative ? -magnitude : magnitude;
}

struct IntRange {
  int bits;
  bool is_signed;
};

bool IntRangeOf(RefDType dtype, IntRange* range) {
  switch (dtype) {
    case RefDType::I8:
      *range = {8, true};
      return true;
    case RefDType::U8:
      *range = {8, false};
      return true;
    case RefDType::I32:
      *range = {32, true};
      return true;
    case RefDType::I64:
      *range = {64, true};
      return true;
    default:
      return false;
  }
}

double IntMin(const IntRange& r) { return r.is_signed ? -std::ldexp(1.0, r.bits - 1) : 0.0; }
// For I64 this is 2^63, the double nearest to INT64_MAX: values of an Array are doubles.
double IntMax(const IntRange& r) {
  return r.is_signed ? std::ldexp(1.0, r.bits - 1) - 1.0 : std::ldexp(1.0, r.bits) - 1.0;
}

// Two's-complement wrap of an integral value modulo 2^bits. fmod is exact, and so are the corrections
// (both operands are multiples of the result's ulp).
double Wrap(double v, const IntRange& r) {
  const double m = std::ldexp(1.0, r.bits);
  double w = std::fmod(v, m);
  if (r.is_signed) {
    if (w >= m / 2) w -= m;
    if (w < -m / 2) w += m;
  } else if (w < 0) {
    w += m;
  }
  return w + 0.0;  // -0 -> +0
}

double RoundScalar(double v, RefDType dtype) {
  switch (dtype) {
    case RefDType::F64:
      return v;
    case RefDType::F32:
      return RoundToFloat32(v);
    case RefDType::F16:
      return RoundToFloat16(v);
    case RefDType::BF16:
      return RoundToBFloat16(v);
    case RefDType::BOOL:
      return v != 0.0 ? 1.0 : 0.0;
    default:
      break;
  }
  IntRange r{};
  IntRangeOf(dtype, &r);
  OAR_CHECK_ARG(internal::IsIntegral(v), "RoundTo: {} has no {} value (integer results must be integral)", v,
                DTypeName(dtype));
  return Wrap(v, r);
}

bool RepresentableScalar(double v, RefDType dtype) {
  switch (dtype) {
    case RefDType::F64:
      return true;
    case RefDType::F32:
      return std::isnan(v) || RoundToFloat32(v) == v;
    case RefDType::F16:
      return std::isnan(v) || RoundToFloat16(v) == v;
    case RefDType::BF16:
      return std::isnan(v) || RoundToBFloat16(v) == v;
    case RefDType::BOOL:
      return v == 0.0 || v == 1.0;
    default:
      break;
  }
  IntRange r{};
  IntRangeOf(dtype, &r);
  // For I64, IntMax is 2^63: the double that INT64_MAX (a saturated cast, say) reads as.
  return internal::IsIntegral(v) && v >= IntMin(r) && v <= IntMax(r);
}

double CastScalar(double v, RefDType from, RefDType to) {
  if (to == RefDType::BOOL) return v != 0.0 ? 1.0 : 0.0;
  IntRange to_range{};
  if (IntRangeOf(to, &to_range)) {
    if (IsFloating(from)) {
      if (std::isnan(v)) return 0.0;
      const double t = std::trunc(v);
      if (t <= IntMin(to_range)) return IntMin(to_range);
      if (t >= IntMax(to_range)) return IntMax(to_range);
      return t + 0.0;
    }
    return Wrap(v, to_range);  // integer or bool source
  }
  switch (to) {
    case RefDType::F64:
      return v;
    case RefDType::F32:
      return RoundToFloat32(v);
    case RefDType::F16:
      return RoundToFloat16(RoundToFloat32(v));
    case RefDType::BF16:
      return RoundToBFloat16(RoundToFloat32(v));
    default:
      return v;  // unreachable: every dtype is handled above
  }
}

}  // namespace

std::string_view DTypeName(RefDType dtype) {
  switch (dtype) {
    case RefDType::F32:
      return "float32";
    case RefDType::F64:
      return "float64";
    case RefDType::F16:
      return "float16";
    case RefDType::BF16:
      return "bfloat16";
    case RefDType::I8:
      return "int8";
    case RefDType::U8:
      return "uint8";
    case RefDType::I32:
      return "int32";
    case RefDType::I64:
      return "int64";
    case RefDType::BOOL:
      return "bool";
  }
  return "unknown";
}

RefDType DTypeFromName(std::string_view name) {
  for (RefDType d : {RefDType::F32, RefDType::F64, RefDType::F16, RefDType::BF16, RefDType::I8, RefDType::U8,
                     RefDType::I32, RefDType::I64, RefDType::BOOL}) {
    if (DTypeName(d) == name) return d;
  }
  Throw(ErrorCode::kInvalidArgument,
        "reference: unknown dtype '{}' (expected float32, float64, float16, bfloat16, int8, uint8, int32, int64 or "
        "bool)",
        name);
}

bool IsFloating(RefDType dtype) {
  return dtype == RefDType::F32 || dtype == RefDType::F64 || dtype == RefDType::F16 || dtype == RefDType::BF16;
}

double RoundToFloat32(double v) { return RoundToFormat(v, kFloat32); }
double RoundToFloat16(double v) { return RoundToFormat(v, kFloat16); }
double RoundToBFloat16(double v) { return RoundToFormat(v, kBFloat16); }

uint16_t Float16Bits(double v) { return static_cast<uint16_t>(EncodeBits(v, kFloat16)); }
double Float16FromBits(uint16_t bits) { return DecodeBits(bits, kFloat16); }
uint16_t BFloat16Bits(double v) { return static_cast<uint16_t>(EncodeBits(v, kBFloat16)); }
double BFloat16FromBits(uint16_t bits) { return DecodeBits(bits, kBFloat16); }
uint32_t Float32Bits(double v) { return static_cast<uint32_t>(EncodeBits(v, kFloat32)); }
double Float32FromBits(uint32_t bits) { return DecodeBits(bits, kFloat32); }

Array RoundTo(const Array& x, RefDType dtype) {
  internal::CheckArray(x, "RoundTo", "x");
  return internal::Map(x, [dtype](double v) { return RoundScalar(v, dtype); });
}

bool IsRepresentable(const Array& x, RefDType dtype) {
  internal::CheckArray(x, "IsRepresentable", "x");
  for (double v : x.data) {
    if (!RepresentableScalar(v, dtype)) return false;
  }
  return true;
}

Array cast(const Array& x, RefDType from, RefDType to) {
  internal::CheckArray(x, "cast", "x");
  for (size_t i = 0; i < x.data.size(); ++i) {
    OAR_CHECK_ARG(RepresentableScalar(x.data[i], from), "cast: element {} ({}) is not a {} value", i, x.data[i],
                  DTypeName(from));
  }
  return internal::Map(x, [from, to](double v) { return CastScalar(v, from, to); });
}

}  // namespace oar::reference
