// Shared helpers of the Oar Level Zero kernels: storage/compute types per dtype suffix and the strided
// index arithmetic. 16-bit floats are stored as raw `ushort` bits and computed in float; the conversions
// are written out below (round to nearest even, as oar::sdk::Half) rather than taken from vload_half /
// vstore_half_rte, which some OpenCL implementations (pocl on CPUs without cl_khr_fp16) do not provide.
#include "layout.h"

// Helpers are force-inlined: the SPIR-V is produced at -O0 (see CMakeLists.txt) and the driver
// optimises it when it builds the module.
#define OAR_INLINE static inline __attribute__((always_inline))

OAR_INLINE float HalfToFloat(ushort h) {
  const uint sign = (uint)(h & 0x8000u) << 16;
  const uint exp = (h >> 10) & 0x1fu;
  const uint mant = h & 0x3ffu;
  if (exp == 0x1fu) return as_float(sign | 0x7f800000u | (mant << 13));  // inf, NaN (payload kept)
  if (exp == 0) {                                                         // zero, subnormal: mant * 2^-24
    const float v = (float)mant * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

OAR_INLINE ushort FloatToHalf(float f) {
  const uint x = as_uint(f);
  const uint sign = (x >> 16) & 0x8000u;
  const uint a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return (ushort)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));  // inf, NaN
  if (a >= 0x477ff000u) return (ushort)(sign | 0x7c00u);  // rounds to infinity
  if (a < 0x38800000u) {  // half subnormal or zero: adding 0.5 rounds to a multiple of 2^-24 (even)
    const float magic = as_float(a) + 0.5f;
    return (ushort)(sign | (as_uint(magic) - 0x3f000000u));
  }
  const uint odd = (a >> 13) & 1u;  // round to nearest even
  return (ushort)(sign | ((a - 0x38000000u + 0xfffu + odd) >> 13));
}

#define T_f32 float
#define T_f16 ushort
#define LD_f32(p, i) ((p)[i])
#define LD_f16(p, i) HalfToFloat((p)[i])
#define ST_f32(p, i, v) ((p)[i] = (v))
#define ST_f16(p, i, v) ((p)[i] = FloatToHalf(v))

// Integers compute in their own type; wrapping arithmetic goes through the unsigned type (signed
// overflow is undefined in OpenCL C as in C).
#define T_i32 int
#define T_i64 long
#define U_i32 uint
#define U_i64 ulong

// Raw bit containers for ops that move elements without looking at them (copy, where, index_select).
#define T_x8 uchar
#define T_x16 ushort
#define T_x32 uint
#define T_x64 ulong

// Offsets of element `i` (row-major over L->shape) in `count` operands. Dimension 0 is the slowest.
OAR_INLINE void EwOffsets(const OarEwLayout* L, long i, int count, long* off) {
  for (int k = 0; k < count; ++k) off[k] = 0;
  for (int d = L->rank - 1; d >= 0; --d) {
    const long extent = L->shape[d];
    const long c = i % extent;
    i /= extent;
    for (int k = 0; k < count; ++k) off[k] += c * L->stride[k][d];
  }
}

// Offset of row-major index `i` over (shape, stride) of `rank` dims.
OAR_INLINE long StridedOffset(long i, int rank, const long* shape, const long* stride) {
  long off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    off += (i % shape[d]) * stride[d];
    i /= shape[d];
  }
  return off;
}

#define GRID_LOOP(i, n) for (long i = get_global_id(0); i < (n); i += get_global_size(0))

// NaN-propagating maximum / minimum (fmax/fmin would drop the NaN).
OAR_INLINE float MaxNan(float x, float y) { return isnan(x) ? x : (isnan(y) ? y : fmax(x, y)); }
OAR_INLINE float MinNan(float x, float y) { return isnan(x) ? x : (isnan(y) ? y : fmin(x, y)); }
