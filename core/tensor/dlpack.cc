#include "core/tensor/dlpack.h"

#include <algorithm>

#include "core/base/error.h"

namespace oar {
namespace {

struct ExportContext {
  Tensor tensor;  // keeps the storage alive
  Dims shape;
  Dims strides;
  DLManagedTensor managed;
};

DLDataType ToDLDataType(DType t) {
  const uint8_t bits = static_cast<uint8_t>(DTypeSize(t) * 8);
  switch (t) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16:
      return {kDLFloat, bits, 1};
    case DType::kBFloat16:
      return {kDLBfloat, bits, 1};
    case DType::kInt8:
    case DType::kInt32:
    case DType::kInt64:
      return {kDLInt, bits, 1};
    case DType::kUInt8:
    case DType::kBool:
      return {kDLUInt, 8, 1};
    default:
      Throw(ErrorCode::kInvalidArgument, "ToDLPack: invalid dtype");
  }
}

DType FromDLDataType(DLDataType t) {
  OAR_CHECK_ARG(t.lanes == 1, "FromDLPack: vector dtypes (lanes={}) are not supported", t.lanes);
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 32) return DType::kFloat32;
      if (t.bits == 64) return DType::kFloat64;
      if (t.bits == 16) return DType::kFloat16;
      break;
    case kDLBfloat:
      if (t.bits == 16) return DType::kBFloat16;
      break;
    case kDLInt:
      if (t.bits == 8) return DType::kInt8;
      if (t.bits == 32) return DType::kInt32;
      if (t.bits == 64) return DType::kInt64;
      break;
    case kDLUInt:
      if (t.bits == 8) return DType::kUInt8;
      break;
    default:
      break;
  }
  Throw(ErrorCode::kInvalidArgument, "FromDLPack: unsupported dtype (code {}, {} bits)", t.code, t.bits);
}

}  // namespace

DLManagedTensor* ToDLPack(const Tensor& tensor) {
  // The consumer may write the elements behind the core's back: no private-format copies of them.
  tensor.storage()->ShareOutsideCore();
  auto* ctx = new ExportContext{tensor, tensor.shape(), tensor.strides(), {}};
  DLTensor& dl = ctx->managed.dl_tensor;
  const std::string& type = tensor.device().type();
  if (type == "cpu")
    dl.device = {kDLCPU, tensor.device().index()};
  else if (type == "cuda")
    dl.device = {kDLCUDA, tensor.device().index()};
  else if (type == "hip")
    dl.device = {kDLROCM, tensor.device().index()};
  else
    dl.device = {kDLExtDev, tensor.device().index()};
  dl.data = tensor.storage()->data();
  dl.byte_offset = static_cast<uint64_t>(tensor.offset()) * tensor.element_size();
  dl.ndim = tensor.rank();
  dl.dtype = ToDLDataType(tensor.dtype());
  dl.shape = ctx->shape.data();
  dl.strides = ctx->strides.data();
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = [](DLManagedTensor* self) { delete static_cast<ExportContext*>(self->manager_ctx); };
  return &ctx->managed;
}

Tensor FromDLPack(DLManagedTensor* managed) {
  OAR_CHECK_ARG(managed != nullptr, "FromDLPack: null DLManagedTensor");
  const DLTensor& dl = managed->dl_tensor;
  Device device;
  switch (dl.device.device_type) {
    case kDLCPU:
      device = Device("cpu", 0);
      break;
    case kDLCUDA:
      device = Device("cuda", dl.device.device_id);
      break;
    case kDLROCM:
      device = Device("hip", dl.device.device_id);
      break;
    default:
      Throw(ErrorCode::kInvalidArgument,
            "FromDLPack: device type {} has no Oar device (supported: kDLCPU, kDLCUDA, kDLROCM)",
            static_cast<int>(dl.device.device_type));
  }
  const DType dtype = FromDLDataType(dl.dtype);
  OAR_CHECK_ARG(dl.ndim >= 0 && dl.ndim <= Dims::kMaxRank, "FromDLPack: rank {} is outside 0..{}", dl.ndim,
                Dims::kMaxRank);
  const size_t esize = DTypeSize(dtype);
  OAR_CHECK_ARG(dl.byte_offset % esize == 0, "FromDLPack: byte_offset {} is not a multiple of the {}-byte element",
                dl.byte_offset, esize);
  // Everything below comes from another library: check it before any pointer arithmetic is done with it.
  OAR_CHECK_ARG(dl.byte_offset <= static_cast<uint64_t>(INT64_MAX),
                "FromDLPack: byte_offset {} is larger than any tensor (at most 2^63-1 bytes)", dl.byte_offset);
  OAR_CHECK_ARG(dl.ndim == 0 || dl.shape != nullptr, "FromDLPack: rank {} but the shape pointer is null", dl.ndim);
  Dims shape(std::span<const int64_t>(dl.shape, static_cast<size_t>(dl.ndim)));
  Dims strides = dl.strides != nullptr ? Dims(std::span<const int64_t>(dl.strides, static_cast<size_t>(dl.ndim)))
                                       : Dims::Filled(dl.ndim, 0);
  int64_t numel = 1;
  bool overflow = false;
  for (int i = 0; i < shape.size(); ++i) {
    OAR_CHECK_ARG(shape[i] >= 0, "FromDLPack: negative extent {} in dimension {} of shape {}", shape[i], i,
                  shape.ToString());
    overflow |= __builtin_mul_overflow(numel, shape[i], &numel);
  }
  OAR_CHECK_ARG(!overflow, "FromDLPack: shape {} has more than 2^63-1 elements", shape.ToString());
  if (dl.strides == nullptr) {
    // Row-major strides are suffix products: with a 0 extent in front the element count is 0 but a suffix
    // product can still leave int64 ([0, 2^58, 2^58]; found by fuzz/dlpack_fuzzer.cc).
    int64_t stride = 1;
    for (int i = shape.size() - 1; i >= 0; --i) {
      strides[i] = stride;
      OAR_CHECK_ARG(!__builtin_mul_overflow(stride, std::max<int64_t>(shape[i], 1), &stride) || i == 0,
                    "FromDLPack: shape {} has no row-major strides in 64 bits", shape.ToString());
    }
  }
  for (int i = 0; i < strides.size(); ++i) {
    OAR_CHECK_ARG(strides[i] >= 0, "FromDLPack: negative stride {} in dimension {} is not supported", strides[i], i);
  }
  if (numel > 0) {
    // The last byte addressed, byte_offset + esize * (1 + sum (extent - 1) * stride), must fit in the
    // address space from `data` on.
    int64_t last = 0;
    for (int i = 0; i < shape.size(); ++i) {
      int64_t step = 0;
      overflow |= __builtin_mul_overflow(shape[i] - 1, strides[i], &step);
      overflow |= __builtin_add_overflow(last, step, &last);
    }
    int64_t end_bytes = 0;
    overflow |= __builtin_add_overflow(last, int64_t{1}, &last);
    overflow |= __builtin_mul_overflow(last, static_cast<int64_t>(esize), &end_bytes);
    overflow |= __builtin_add_overflow(end_bytes, static_cast<int64_t>(dl.byte_offset), &end_bytes);
    uintptr_t end_address = 0;
    overflow |= __builtin_add_overflow(reinterpret_cast<uintptr_t>(dl.data), static_cast<uintptr_t>(end_bytes),
                                       &end_address);
    overflow |= end_address > static_cast<uintptr_t>(INTPTR_MAX);  // user-space addresses stay below 2^63
    OAR_CHECK_ARG(!overflow, "FromDLPack: shape {}, strides {} and byte_offset {} address memory beyond 2^63 bytes",
                  shape.ToString(), strides.ToString(), dl.byte_offset);
    OAR_CHECK_ARG(dl.data != nullptr, "FromDLPack: data is null for a tensor of shape {}", shape.ToString());
  }
  auto storage = std::make_shared<Storage>(
      device, dl.data, 0,
      [](void* context, void*, size_t) {
        auto* m = static_cast<DLManagedTensor*>(context);
        if (m->deleter != nullptr) m->deleter(m);
      },
      managed);
  return Tensor(std::move(storage), dtype, shape, strides, static_cast<int64_t>(dl.byte_offset / esize));
}

}  // namespace oar
