// Moving bytes between devices and the host. Sync copies are ordered after all work queued on the
// devices involved (ABI contract), so the results are what stream order says they are.
#ifndef OAR_CORE_RUNTIME_COPY_H_
#define OAR_CORE_RUNTIME_COPY_H_

#include <cstddef>

#include "core/runtime/runtime.h"
#include "core/tensor/tensor.h"

namespace oar::runtime {

/// Copy `n` bytes from (src device, src) to (dst device, dst), choosing d2d, p2p, h2d/d2h between a
/// host-accessible device and another, or staging through host memory.
void CopyBytes(DeviceContext& dst_ctx, void* dst, DeviceContext& src_ctx, const void* src, size_t n);

/// Copy a contiguous tensor's bytes to host memory (`dst` holds t.nbytes()).
void CopyToHost(const Tensor& t, void* dst);
/// Copy host bytes into a contiguous tensor.
void CopyFromHost(const Tensor& t, const void* src);

/// The elements of `t` on `device` with the same strides: the storage range the view spans is copied
/// (no kernel needed on either device). Returns `t` itself when it is already there.
Tensor CopySpanTo(const Tensor& t, Device device);

/// A fresh, uninitialised contiguous tensor.
Tensor Empty(const Dims& shape, DType dtype, Device device);

}  // namespace oar::runtime

#endif  // OAR_CORE_RUNTIME_COPY_H_
