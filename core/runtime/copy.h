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

class Stream;

/// Copy `n` bytes asynchronously on `stream` where the devices allow it: host to device when `stream` is the
/// destination's, device to host and peer to peer when it is the source's, within one device on it; any
/// other pair (or a device without the async slot) copies synchronously, as CopyBytes. Returns what was
/// enqueued ("h2d", "d2h", "p2p", "d2d"), or "" for a synchronous copy. An asynchronous copy reads and writes
/// the buffers when the stream reaches it: both must stay valid and unchanged until then.
const char* CopyBytesOn(const Stream& stream, DeviceContext& dst_ctx, void* dst, DeviceContext& src_ctx,
                        const void* src, size_t n);

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
