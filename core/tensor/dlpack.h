// DLPack (v0.6) exchange: share tensors with other array libraries without copying.
//
// Device mapping: cpu <-> kDLCPU, cuda <-> kDLCUDA, hip <-> kDLROCM; any other Oar device type exports
// as kDLExtDev and cannot be imported back (DLPack has no name for it). bool exports as 8-bit unsigned
// (DLPack 0.6 has no bool code) and therefore imports as uint8.
#ifndef OAR_CORE_TENSOR_DLPACK_H_
#define OAR_CORE_TENSOR_DLPACK_H_

#include <dlpack/dlpack.h>

#include "core/tensor/tensor.h"

namespace oar {

/// A new DLManagedTensor that keeps `tensor`'s storage alive until its deleter runs. The consumer owns it.
DLManagedTensor* ToDLPack(const Tensor& tensor);

/// Take ownership of `managed` and view its memory as a Tensor (zero copy); the producer's deleter runs
/// when the last view goes away. Throws oar::Error (and leaves ownership with the caller) for vector
/// lanes, unsupported dtypes or devices, or a rank above Dims::kMaxRank.
Tensor FromDLPack(DLManagedTensor* managed);

}  // namespace oar

#endif  // OAR_CORE_TENSOR_DLPACK_H_
