// Dtypes, rounding and casts of the reference, implemented from the IEEE 754 definitions.
//
// These are the independent check of the fast path's conversions: nothing here uses the compiler's
// float conversions, the SDK's Half/BFloat16, or any hardware rounding mode. Rounding works on the
// exact double value: scale by a power of two, round the significand to nearest (ties to even), scale
// back — so float32, float16 and bfloat16 share one obviously-correct routine.
#ifndef OAR_CONFORMANCE_REFERENCE_DTYPE_H_
#define OAR_CONFORMANCE_REFERENCE_DTYPE_H_

#include <cstdint>
#include <string_view>

#include "conformance/reference/array.h"

namespace oar::reference {

/// Oar's nine dtypes, defined here again so that the reference depends on nothing in core/.
enum class RefDType { F32, F64, F16, BF16, I8, U8, I32, I64, BOOL };

/// "float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64", "bool" — the names
/// used by tolerances.json.
std::string_view DTypeName(RefDType dtype);
/// Inverse of DTypeName; throws INVALID_ARGUMENT for an unknown name.
RefDType DTypeFromName(std::string_view name);
/// F32, F64, F16, BF16.
bool IsFloating(RefDType dtype);

// ---------------------------------------------------------------------------------------------------
// Scalar rounding
// ---------------------------------------------------------------------------------------------------

/// The float32 nearest to `v` (ties to even), with gradual underflow to subnormals and ±0, overflow to
/// ±inf (a value at or beyond max + half an ulp), NaN kept. The result is exactly representable in float32.
double RoundToFloat32(double v);
/// Same for IEEE binary16 (max 65504, smallest subnormal 2^-24).
double RoundToFloat16(double v);
/// Same for bfloat16 (8 significand bits, float32's exponent range).
double RoundToBFloat16(double v);

/// Bit pattern of RoundToFloat16(v) (NaN -> 0x7E00 with v's sign bit).
uint16_t Float16Bits(double v);
/// The exact value of a binary16 bit pattern (subnormals, ±inf, NaN included).
double Float16FromBits(uint16_t bits);
/// Bit pattern of RoundToBFloat16(v) (NaN -> 0x7FC0 with v's sign bit).
uint16_t BFloat16Bits(double v);
/// The exact value of a bfloat16 bit pattern.
double BFloat16FromBits(uint16_t bits);
/// Bit pattern of RoundToFloat32(v) (NaN -> 0x7FC00000 with v's sign bit).
uint32_t Float32Bits(double v);
/// The exact value of a float32 bit pattern.
double Float32FromBits(uint32_t bits);

// ---------------------------------------------------------------------------------------------------
// Arrays
// ---------------------------------------------------------------------------------------------------

/// Each element as `dtype`'s arithmetic would hold it — what a kernel computing in that dtype can at
/// best return. Floating: round to nearest even (F64: unchanged). Integers: the value must be integral
/// (throws otherwise; no rounding is guessed), then wraps modulo 2^bits, two's complement — so
/// RoundTo(add(a, b), I8) models int8 `add`. BOOL: x != 0 (NaN -> 1).
/// This is *not* `cast`: a float -> int cast saturates, RoundTo wraps.
Array RoundTo(const Array& x, RefDType dtype);

/// Oar's `cast` from dtype `from` to `to` (docs/ops.md): any -> BOOL is x != 0 (NaN -> true);
/// floating -> integer truncates toward zero, NaN -> 0, saturates (±inf too); integer -> integer wraps;
/// -> F32 rounds to nearest even; -> F16/BF16 rounds through float32 (two roundings, as documented for
/// F64 and I64 sources, and exact for the others). The source dtype is an argument because the result
/// depends on it (300 from I64 wraps to U8 44, 300.0 from F32 saturates to 255).
/// Throws INVALID_ARGUMENT when an element is not a value of `from` (2.5 as I32, 0.1 as F32, 2 as BOOL).
Array cast(const Array& x, RefDType from, RefDType to);

/// True when every element of `x` is a value of `dtype` (integral and in range for integers, 0/1 for
/// BOOL, exactly representable for the floats; NaN and ±inf are values of every floating dtype).
/// int64 is carried exactly only below 2^53 in magnitude; INT64_MAX reads as the double 2^63, which is
/// therefore accepted as an int64 value.
bool IsRepresentable(const Array& x, RefDType dtype);

}  // namespace oar::reference

#endif  // OAR_CONFORMANCE_REFERENCE_DTYPE_H_
