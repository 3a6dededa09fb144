// matmul for the GPU plugins: the vendor BLAS when one is built in and can read the operands' strides
// (cuBLAS for cuda), the shared tiled GEMM kernel otherwise.
#ifndef OAR_PLUGINS_GPU_COMMON_BLAS_H_
#define OAR_PLUGINS_GPU_COMMON_BLAS_H_

#include <cstdint>
#include <string>

#include "plugins/gpu_common/kernels.h"
#include "plugins/gpu_common/vendor.h"

namespace oar::gpu {

/// Enqueue out = a @ b on `stream` of `device` (already the current device). `where` names the call for
/// error messages.
void Matmul(int32_t device, gpuStream_t stream, const TensorArg& a, const TensorArg& b, const TensorArg& out,
            const std::string& where);

/// The name of the vendor BLAS built in ("cuBLAS"), or "" when matmul always uses the tiled kernel.
const char* BlasLibrary();

/// Release the BLAS handles (plugin shutdown).
void ShutdownBlas();

}  // namespace oar::gpu

#endif  // OAR_PLUGINS_GPU_COMMON_BLAS_H_
