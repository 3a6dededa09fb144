// The SPIR-V module compiled at build time from kernels/oar_kernels.cl (generated spirv_blob.cc).
#ifndef OAR_PLUGINS_LEVEL_ZERO_SPIRV_BLOB_H_
#define OAR_PLUGINS_LEVEL_ZERO_SPIRV_BLOB_H_

#include <cstddef>
#include <cstdint>

namespace oar::level_zero {

extern const uint8_t kKernelsSpirv[];   // 4-byte aligned SPIR-V words, host byte order
extern const size_t kKernelsSpirvSize;  // bytes

}  // namespace oar::level_zero

#endif  // OAR_PLUGINS_LEVEL_ZERO_SPIRV_BLOB_H_
