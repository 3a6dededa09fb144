// Shared helpers of the Oar Level Zero kernels: storage/compute types per dtype suffix and the strided
// index arithmetic. 16-bit floats are stored as `half` and computed in float through vload_half /
// vstore_half_rte (core OpenCL C: no cl_khr_fp16 needed), which rounds once to nearest even.
#include "layout.h"

// Helpers are force-inlined: the SPIR-V is produced at -O0 (see CMakeLists.txt) and the driver
// optimises it when it builds the module.
#define OAR_INLINE static inline __attribute__((always_inline))

#define T_f32 float
#define T_f16 half
#define LD_f32(p, i) ((p)[i])
#define LD_f16(p, i) vload_half((i), (p))
#define ST_f32(p, i, v) ((p)[i] = (v))
#define ST_f16(p, i, v) vstore_half_rte((v), (i), (p))

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
