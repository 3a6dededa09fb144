#include "core/runtime/copy.h"

#include <vector>

#include "core/runtime/status.h"
#include "core/runtime/stream.h"

namespace oar::runtime {
namespace {

// Element range [first, first + count) of the storage that a view touches.
struct Span {
  int64_t first = 0;
  int64_t count = 0;
};
Span ViewSpan(const Tensor& t) {
  if (t.numel() == 0) return {t.offset(), 0};
  int64_t last = 0;
  for (int i = 0; i < t.rank(); ++i) last += (t.shape()[i] - 1) * t.strides()[i];
  return {t.offset(), last + 1};
}

void SyncStream(DeviceContext& ctx) {
  ThrowIfError(ctx.api()->stream_synchronize(ctx.ordinal(), ctx.stream()),
               [&] { return ctx.device().str() + " stream_synchronize"; });
}

}  // namespace

void CopyBytes(DeviceContext& dst_ctx, void* dst, DeviceContext& src_ctx, const void* src, size_t n) {
  if (n == 0) return;
  const oar_device_api_t* sapi = src_ctx.api();
  const oar_device_api_t* dapi = dst_ctx.api();
  if (&dst_ctx == &src_ctx) {
    if (OAR_HAS_SLOT(sapi, memcpy_d2d_async)) {
      ThrowIfError(sapi->memcpy_d2d_async(src_ctx.ordinal(), src_ctx.stream(), dst, src, n),
                   [&] { return src_ctx.device().str() + " memcpy_d2d_async"; });
    } else {
      ThrowIfError(sapi->memcpy_d2d(src_ctx.ordinal(), dst, src, n),
                   [&] { return src_ctx.device().str() + " memcpy_d2d"; });
    }
    return;
  }
  if (&dst_ctx.type() == &src_ctx.type() && OAR_HAS_SLOT(sapi, memcpy_p2p)) {
    ThrowIfError(sapi->memcpy_p2p(dst_ctx.ordinal(), dst, src_ctx.ordinal(), src, n),
                 fmt::format("{} -> {} memcpy_p2p", src_ctx.device().str(), dst_ctx.device().str()));
    return;
  }
  if (src_ctx.host_accessible()) {
    SyncStream(src_ctx);  // the bytes must be final before another device reads them
    ThrowIfError(dapi->memcpy_h2d(dst_ctx.ordinal(), dst, src, n),
                 [&] { return dst_ctx.device().str() + " memcpy_h2d"; });
    return;
  }
  if (dst_ctx.host_accessible()) {
    SyncStream(dst_ctx);  // queued work may still use the destination block
    ThrowIfError(sapi->memcpy_d2h(src_ctx.ordinal(), dst, src, n),
                 [&] { return src_ctx.device().str() + " memcpy_d2h"; });
    return;
  }
  std::vector<std::byte> staging(n);
  ThrowIfError(sapi->memcpy_d2h(src_ctx.ordinal(), staging.data(), src, n),
               [&] { return src_ctx.device().str() + " memcpy_d2h"; });
  ThrowIfError(dapi->memcpy_h2d(dst_ctx.ordinal(), dst, staging.data(), n),
               [&] { return dst_ctx.device().str() + " memcpy_h2d"; });
}

const char* CopyBytesOn(const Stream& stream, DeviceContext& dst_ctx, void* dst, DeviceContext& src_ctx,
                        const void* src, size_t n) {
  if (n == 0) return "";
  DeviceContext& owner = stream.context();
  const oar_device_api_t* sapi = src_ctx.api();
  const oar_device_api_t* dapi = dst_ctx.api();
  const oar_stream_t h = stream.handle();
  if (&src_ctx == &dst_ctx && &owner == &src_ctx && OAR_HAS_SLOT(sapi, memcpy_d2d_async)) {
    ThrowIfError(sapi->memcpy_d2d_async(src_ctx.ordinal(), h, dst, src, n),
                 [&] { return src_ctx.device().str() + " memcpy_d2d_async"; });
    return "d2d";
  }
  if (&owner == &dst_ctx && src_ctx.host_accessible() && !dst_ctx.host_accessible() &&
      OAR_HAS_SLOT(dapi, memcpy_h2d_async)) {
    ThrowIfError(dapi->memcpy_h2d_async(dst_ctx.ordinal(), h, dst, src, n),
                 [&] { return dst_ctx.device().str() + " memcpy_h2d_async"; });
    return "h2d";
  }
  if (&owner == &src_ctx && dst_ctx.host_accessible() && !src_ctx.host_accessible() &&
      OAR_HAS_SLOT(sapi, memcpy_d2h_async)) {
    ThrowIfError(sapi->memcpy_d2h_async(src_ctx.ordinal(), h, dst, src, n),
                 [&] { return src_ctx.device().str() + " memcpy_d2h_async"; });
    return "d2h";
  }
  if (&owner == &src_ctx && &src_ctx != &dst_ctx && &src_ctx.type() == &dst_ctx.type() &&
      OAR_HAS_SLOT(sapi, memcpy_p2p_async)) {
    ThrowIfError(sapi->memcpy_p2p_async(dst_ctx.ordinal(), dst, src_ctx.ordinal(), src, n, h),
                 fmt::format("{} -> {} memcpy_p2p_async", src_ctx.device().str(), dst_ctx.device().str()));
    return "p2p";
  }
  CopyBytes(dst_ctx, dst, src_ctx, src, n);  // synchronous: ordered after the work of both devices
  return "";
}

void CopyToHost(const Tensor& t, void* dst) {
  OAR_CHECK(t.is_contiguous(), kInternal, "CopyToHost needs a contiguous tensor");
  if (t.nbytes() == 0) return;
  DeviceContext& ctx = Runtime::Get().Context(t.device());
  ThrowIfError(ctx.api()->memcpy_d2h(ctx.ordinal(), dst, t.data_ptr(), t.nbytes()),
               [&] { return ctx.device().str() + " memcpy_d2h"; });
}

void CopyFromHost(const Tensor& t, const void* src) {
  OAR_CHECK(t.is_contiguous(), kInternal, "CopyFromHost needs a contiguous tensor");
  if (t.nbytes() == 0) return;
  t.storage()->DropShadows();
  DeviceContext& ctx = Runtime::Get().Context(t.device());
  ThrowIfError(ctx.api()->memcpy_h2d(ctx.ordinal(), t.data_ptr(), src, t.nbytes()),
               [&] { return ctx.device().str() + " memcpy_h2d"; });
}

Tensor Empty(const Dims& shape, DType dtype, Device device) {
  for (int64_t d : shape) OAR_CHECK_ARG(d >= 0, "empty: shape {} has a negative extent", shape.ToString());
  DeviceContext& ctx = Runtime::Get().Context(device);
  const size_t nbytes = static_cast<size_t>(shape.Product()) * DTypeSize(dtype);
  return ctx.allocator().AllocateTensor(device, nbytes, dtype, shape, ContiguousStrides(shape));
}

Tensor CopySpanTo(const Tensor& t, Device device) {
  if (t.device() == device) return t;
  Runtime& rt = Runtime::Get();
  DeviceContext& src = rt.Context(t.device());
  DeviceContext& dst = rt.Context(device);
  const Span span = ViewSpan(t);
  const size_t esize = t.element_size();
  auto storage = dst.allocator().AllocateStorage(device, static_cast<size_t>(span.count) * esize);
  const char* from = static_cast<const char*>(t.storage()->data()) + span.first * static_cast<int64_t>(esize);
  CopyBytes(dst, storage->data(), src, from, static_cast<size_t>(span.count) * esize);
  return Tensor(std::move(storage), t.dtype(), t.shape(), t.strides(), 0);
}

}  // namespace oar::runtime
