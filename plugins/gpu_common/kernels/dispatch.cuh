// dtype -> C++ type dispatch for the GPU kernels and their host code (the storage types of numeric.cuh).
#ifndef OAR_PLUGINS_GPU_COMMON_KERNELS_DISPATCH_CUH_
#define OAR_PLUGINS_GPU_COMMON_KERNELS_DISPATCH_CUH_

#include <cstdint>

#include "oar/plugin/types.h"
#include "plugins/gpu_common/kernels/numeric.cuh"

namespace oar::gpu {

/// Call fn(T{}) with the storage type of `dtype`; false (fn not called) for anything but the 9 dtypes.
template <typename Fn>
bool VisitDType(int32_t dtype, Fn&& fn) {
  switch (dtype) {
    case OAR_DTYPE_FLOAT32:
      fn(float{});
      return true;
    case OAR_DTYPE_FLOAT64:
      fn(double{});
      return true;
    case OAR_DTYPE_FLOAT16:
      fn(F16{});
      return true;
    case OAR_DTYPE_BFLOAT16:
      fn(BF16{});
      return true;
    case OAR_DTYPE_INT8:
      fn(int8_t{});
      return true;
    case OAR_DTYPE_UINT8:
      fn(uint8_t{});
      return true;
    case OAR_DTYPE_INT32:
      fn(int32_t{});
      return true;
    case OAR_DTYPE_INT64:
      fn(int64_t{});
      return true;
    case OAR_DTYPE_BOOL:
      fn(bool{});
      return true;
    default:
      return false;
  }
}

/// Call fn(U{}) with an unsigned integer as wide as one element of `dtype` (kernels that move bits).
template <typename Fn>
bool VisitBits(int32_t dtype, Fn&& fn) {
  switch (dtype) {
    case OAR_DTYPE_FLOAT64:
    case OAR_DTYPE_INT64:
      fn(uint64_t{});
      return true;
    case OAR_DTYPE_FLOAT32:
    case OAR_DTYPE_INT32:
      fn(uint32_t{});
      return true;
    case OAR_DTYPE_FLOAT16:
    case OAR_DTYPE_BFLOAT16:
      fn(uint16_t{});
      return true;
    case OAR_DTYPE_INT8:
    case OAR_DTYPE_UINT8:
    case OAR_DTYPE_BOOL:
      fn(uint8_t{});
      return true;
    default:
      return false;
  }
}

}  // namespace oar::gpu

#endif  // OAR_PLUGINS_GPU_COMMON_KERNELS_DISPATCH_CUH_
