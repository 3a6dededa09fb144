// Private storage formats of the simulated Ascend NPU, declared through oar_format_api_t:
//  - NC1HWC0 for 4-D NCHW activations: physical [N, C1, H, W, C0] with C0 = 16 and C1 = ceil(C / 16);
//    logical (n, c, h, w) lives at ((((n * C1 + c / 16) * H + h) * W + w) * 16 + c % 16).
//  - FRACTAL_NZ for matmul operands [..., M, N] (rank >= 2): the matrix is cut into 16 x 16 fractals,
//    fractals are stored column-major over the fractal grid, elements row-major inside a fractal:
//    physical [..., N1, M1, 16, 16] with M1 = ceil(M / 16), N1 = ceil(N / 16); logical (m, n) lives at
//    ((n / 16 * M1 + m / 16) * 16 + m % 16) * 16 + n % 16 within its batch.
// Padding elements are written as zero by format_cast and ignored by every reader.
//
// Kernels (all keyed by their INPUTS' format):
//  - format_cast PLAIN -> private: key format PLAIN, dtypes {T, T}, INT attribute `dst_format`; the
//    input is PLAIN with any strides, the output descriptor is in `dst_format`;
//  - format_cast NC1HWC0 -> PLAIN and FRACTAL_NZ -> PLAIN: key format NC1HWC0 / FRACTAL_NZ, dtypes
//    {T, T}; the output is PLAIN and contiguous (a `dst_format` attribute, if given, must be PLAIN);
//  - elementwise add, sub, mul, div, maximum, minimum, neg, exp, relu on float32/float16/bfloat16 in
//    NC1HWC0 and FRACTAL_NZ: every operand in the key's format with the same logical shape;
//  - matmul float16/bfloat16 with FRACTAL_NZ inputs (the cube unit's native layout) and a PLAIN output.
// For T every dtype but float64. Descriptors in a private format carry the LOGICAL shape; their
// strides are ignored.
#ifndef OAR_PLUGINS_ASCEND_SIM_FORMATS_H_
#define OAR_PLUGINS_ASCEND_SIM_FORMATS_H_

#include <cstddef>
#include <cstdint>

#include "oar/plugin/plugin.h"
#include "plugins/common/sim/kernels.h"

namespace oar::ascend {

inline constexpr int64_t kC0 = 16;       ///< channels per NC1HWC0 block
inline constexpr int64_t kFractal = 16;  ///< fractal edge of FRACTAL_NZ

/// Elements of physical storage for `shape` in `format`; throws StatusError (INVALID_ARGUMENT for a
/// rank the format cannot hold, UNIMPLEMENTED for an unknown format).
int64_t PhysicalElements(int32_t format, int32_t rank, const int64_t* shape);
/// Bytes of physical storage (the simulator's StorageBytesFn).
size_t StorageBytes(int32_t format, int32_t dtype, int32_t rank, const int64_t* shape);
/// Physical element index of the logical element `idx` (rank entries) in `format`.
int64_t PhysicalIndex(int32_t format, int32_t rank, const int64_t* shape, const int64_t* idx);

/// Add the format_cast kernels and the private-format elementwise and matmul kernels.
void AddFormatKernels(sim::KernelSet* set);

/// The preferred format of `op`'s input (see formats.cc for the policy).
int32_t PreferredFormat(const char* op, int32_t input_index, int32_t dtype, int32_t rank, const int64_t* shape);

/// The oar_format_api_t table, valid for the process.
const oar_format_api_t* FormatApi();

}  // namespace oar::ascend

#endif  // OAR_PLUGINS_ASCEND_SIM_FORMATS_H_
