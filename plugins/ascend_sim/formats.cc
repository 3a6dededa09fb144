#include "plugins/ascend_sim/formats.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "oar/plugin/cpp/dtype.hpp"
#include "oar/plugin/cpp/status.hpp"
#include "plugins/common/host_kernels.h"
#include "plugins/common/sim/simulator.h"

namespace oar::ascend {
namespace {

using sim::Throw;

int64_t CeilDiv(int64_t n, int64_t d) { return (n + d - 1) / d; }

bool IsPrivate(int32_t format) { return format == OAR_FORMAT_NC1HWC0 || format == OAR_FORMAT_FRACTAL_NZ; }

const char* FormatName(int32_t format) {
  switch (format) {
    case OAR_FORMAT_PLAIN:
      return "PLAIN";
    case OAR_FORMAT_NC1HWC0:
      return "NC1HWC0";
    case OAR_FORMAT_FRACTAL_NZ:
      return "FRACTAL_NZ";
    default:
      return "unknown";
  }
}

/// Why `format` cannot hold a tensor of `rank`; "" when it can.
std::string RankProblem(int32_t format, int32_t rank) {
  if (format == OAR_FORMAT_NC1HWC0 && rank != 4) {
    return "NC1HWC0 holds 4-D NCHW tensors, not rank " + std::to_string(rank);
  }
  if (format == OAR_FORMAT_FRACTAL_NZ && rank < 2) {
    return "FRACTAL_NZ holds matrices (rank >= 2), not rank " + std::to_string(rank);
  }
  return {};
}

/// fn(idx, linear) for every logical element in row-major order.
template <typename Fn>
void ForEachIndex(int rank, const int64_t* shape, Fn&& fn) {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  int64_t idx[OAR_MAX_RANK] = {};
  for (int64_t linear = 0; linear < n; ++linear) {
    fn(static_cast<const int64_t*>(idx), linear);
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

bool SameShape(const oar_tensor_desc_t& a, const oar_tensor_desc_t& b) {
  return a.rank == b.rank && std::equal(a.shape, a.shape + a.rank, b.shape);
}

bool Contiguous(const oar_tensor_desc_t& d) {
  int64_t expected = 1;
  for (int i = d.rank - 1; i >= 0; --i) {
    if (d.shape[i] != 1 && d.strides[i] != expected) return false;
    expected *= d.shape[i];
  }
  return true;
}

const oar_attr_t* FindAttr(const oar_kernel_call_t& call, std::string_view name) {
  for (int i = 0; i < call.num_attrs; ++i) {
    if (call.attrs[i].name != nullptr && name == call.attrs[i].name) return &call.attrs[i];
  }
  return nullptr;
}

// ---- format_cast -------------------------------------------------------------------------------------

std::string FormatCastSupports(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  const oar_tensor_desc_t& in = call.inputs[0];
  const oar_tensor_desc_t& out = call.outputs[0];
  if (!SameShape(in, out)) return "input and output must have the same logical shape";
  const oar_attr_t* dst = FindAttr(call, "dst_format");
  if (dst != nullptr && dst->type != OAR_ATTR_INT) return "attribute 'dst_format' must be an INT";
  if (in.format != kernel.format) {
    return std::string("the input is in ") + FormatName(in.format) + ", this kernel converts from " +
           FormatName(kernel.format);
  }
  if (kernel.format == OAR_FORMAT_PLAIN) {
    if (dst == nullptr) return "format_cast from PLAIN needs the INT attribute 'dst_format'";
    const auto target = static_cast<int32_t>(dst->v.i);
    if (!IsPrivate(target)) return "dst_format " + std::to_string(dst->v.i) + " is not NC1HWC0 or FRACTAL_NZ";
    if (out.format != target) return std::string("the output descriptor is not in ") + FormatName(target);
    return RankProblem(target, out.rank);
  }
  if (dst != nullptr && dst->v.i != OAR_FORMAT_PLAIN) {
    return std::string("format_cast from ") + FormatName(kernel.format) + " converts to PLAIN only";
  }
  if (out.format != OAR_FORMAT_PLAIN || !Contiguous(out)) return "the output must be PLAIN and contiguous";
  return RankProblem(kernel.format, in.rank);
}

void RunFormatCast(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  const oar_tensor_desc_t& in = call.inputs[0];
  const oar_tensor_desc_t& out = call.outputs[0];
  const size_t es = sdk::DTypeSize(in.dtype);
  if (sim::NumElements(in) == 0) return;
  if (kernel.format == OAR_FORMAT_PLAIN) {  // PLAIN (strided) -> private, padding zeroed
    const auto* src = static_cast<const char*>(in.data);
    auto* dst = static_cast<char*>(out.data);
    std::memset(dst, 0, StorageBytes(out.format, out.dtype, out.rank, out.shape));
    ForEachIndex(in.rank, in.shape, [&](const int64_t* idx, int64_t) {
      int64_t offset = 0;
      for (int d = 0; d < in.rank; ++d) offset += idx[d] * in.strides[d];
      std::memcpy(dst + PhysicalIndex(out.format, out.rank, out.shape, idx) * static_cast<int64_t>(es),
                  src + offset * static_cast<int64_t>(es), es);
    });
    return;
  }
  const auto* src = static_cast<const char*>(in.data);  // private -> PLAIN contiguous
  auto* dst = static_cast<char*>(out.data);
  ForEachIndex(in.rank, in.shape, [&](const int64_t* idx, int64_t linear) {
    std::memcpy(dst + linear * static_cast<int64_t>(es),
                src + PhysicalIndex(in.format, in.rank, in.shape, idx) * static_cast<int64_t>(es), es);
  });
}

// ---- elementwise on private formats ------------------------------------------------------------------

std::string PrivateElementwiseSupports(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  const oar_tensor_desc_t& out = call.outputs[0];
  for (int i = 0; i < call.num_inputs; ++i) {
    if (!SameShape(call.inputs[i], out)) {
      return "every operand must have the output's logical shape (no broadcasting in " +
             std::string(FormatName(kernel.format)) + ")";
    }
  }
  return RankProblem(kernel.format, out.rank);
}

/// Padding included, the physical storage of every operand lines up element for element.
void RunPrivateElementwise(const sim::SimKernel& kernel, const oar_kernel_call_t& call) {
  const oar_tensor_desc_t& out = call.outputs[0];
  if (sim::NumElements(out) == 0) return;
  const int64_t shape[1] = {PhysicalElements(out.format, out.rank, out.shape)};
  const int64_t strides[1] = {1};
  oar_tensor_desc_t descs[3];
  const int operands = call.num_inputs + call.num_outputs;
  for (int j = 0; j < operands; ++j) {
    descs[j] = j < call.num_inputs ? call.inputs[j] : call.outputs[j - call.num_inputs];
    descs[j].format = OAR_FORMAT_PLAIN;
    descs[j].rank = 1;
    descs[j].shape = shape;
    descs[j].strides = strides;
  }
  oar_kernel_call_t flat = call;
  flat.inputs = descs;
  flat.outputs = descs + call.num_inputs;
  sim::RunHostKernel(kernel.host_fn, flat);
}

// ---- matmul on FRACTAL_NZ operands -------------------------------------------------------------------

std::string NzMatmulSupports(const sim::SimKernel&, const oar_kernel_call_t& call) {
  const oar_tensor_desc_t& a = call.inputs[0];
  const oar_tensor_desc_t& b = call.inputs[1];
  const oar_tensor_desc_t& out = call.outputs[0];
  const int r = out.rank;
  if (r < 2 || a.rank != r || b.rank != r) return "FRACTAL_NZ matmul needs operands and output of the same rank >= 2";
  if (!std::equal(a.shape, a.shape + r - 2, out.shape) || !std::equal(b.shape, b.shape + r - 2, out.shape)) {
    return "FRACTAL_NZ matmul needs equal batch dimensions (strides are ignored, so nothing broadcasts)";
  }
  if (a.shape[r - 1] != b.shape[r - 2] || a.shape[r - 2] != out.shape[r - 2] || b.shape[r - 1] != out.shape[r - 1]) {
    return "shapes do not form [..., M, K] x [..., K, N] -> [..., M, N]";
  }
  if (!Contiguous(out)) return "the output must be contiguous";
  return {};
}

template <typename T>
void UnpackToFloat(const oar_tensor_desc_t& d, std::vector<float>* dense) {
  dense->resize(static_cast<size_t>(sim::NumElements(d)));
  const T* src = static_cast<const T*>(d.data);
  ForEachIndex(d.rank, d.shape, [&](const int64_t* idx, int64_t linear) {
    (*dense)[static_cast<size_t>(linear)] = static_cast<float>(src[PhysicalIndex(d.format, d.rank, d.shape, idx)]);
  });
}

template <typename T>
void RunNzMatmulT(const oar_kernel_call_t& call) {
  const oar_tensor_desc_t& out = call.outputs[0];
  const int64_t n = sim::NumElements(out);
  if (n == 0) return;
  std::vector<float> a, b, c(static_cast<size_t>(n));
  UnpackToFloat<T>(call.inputs[0], &a);
  UnpackToFloat<T>(call.inputs[1], &b);
  // The cube multiplies 16-bit values and accumulates in float32: float32 copies of the (exactly
  // representable) inputs through the float32 host kernel compute exactly that; round once at the end.
  int64_t strides[3][OAR_MAX_RANK];
  oar_tensor_desc_t descs[3];
  void* data[3] = {a.data(), b.data(), c.data()};
  const oar_tensor_desc_t* originals[3] = {&call.inputs[0], &call.inputs[1], &out};
  for (int j = 0; j < 3; ++j) {
    descs[j] = *originals[j];
    descs[j].format = OAR_FORMAT_PLAIN;
    descs[j].dtype = OAR_DTYPE_FLOAT32;
    descs[j].data = sim::NumElements(descs[j]) == 0 ? nullptr : data[j];
    int64_t expected = 1;
    for (int k = descs[j].rank - 1; k >= 0; --k) {
      strides[j][k] = expected;
      expected *= descs[j].shape[k];
    }
    descs[j].strides = strides[j];
  }
  oar_kernel_call_t dense = call;
  dense.inputs = descs;
  dense.outputs = descs + 2;
  const int32_t key[3] = {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32};
  sim::RunHostKernel(host::FindHostKernel("matmul", key)->fn, dense);
  T* dst = static_cast<T*>(out.data);
  for (int64_t i = 0; i < n; ++i) dst[i] = T(c[static_cast<size_t>(i)]);
}

void RunNzMatmul(const sim::SimKernel&, const oar_kernel_call_t& call) {
  if (call.outputs[0].dtype == OAR_DTYPE_FLOAT16) {
    RunNzMatmulT<sdk::Half>(call);
  } else {
    RunNzMatmulT<sdk::BFloat16>(call);
  }
}

bool PrivateElementwiseOp(std::string_view op) {
  return op == "add" || op == "sub" || op == "mul" || op == "div" || op == "maximum" || op == "minimum" ||
         op == "neg" || op == "exp" || op == "relu" || op == "relu_grad";
}

// ---- the format table --------------------------------------------------------------------------------

oar_status_t* StorageBytesSlot(int32_t device, int32_t format, int32_t dtype, int32_t rank, const int64_t* shape,
                               size_t* bytes) {
  return sdk::Guard([&] {
    sim::Simulator::Get().device(device);
    if (bytes == nullptr) Throw(OAR_STATUS_INVALID_ARGUMENT, "storage_bytes: bytes must not be NULL");
    if (rank < 0 || rank > OAR_MAX_RANK || (rank > 0 && shape == nullptr)) {
      Throw(OAR_STATUS_INVALID_ARGUMENT, "storage_bytes: rank " + std::to_string(rank) + " with shape " +
                                             (shape ? "given" : "NULL") + " is invalid");
    }
    for (int d = 0; d < rank; ++d) {
      if (shape[d] < 0) Throw(OAR_STATUS_INVALID_ARGUMENT, "storage_bytes: negative extent");
    }
    if (sdk::DTypeSize(dtype) == 0)
      Throw(OAR_STATUS_INVALID_ARGUMENT, "storage_bytes: invalid dtype " + std::to_string(dtype));
    *bytes = StorageBytes(format, dtype, rank, shape);
  });
}

oar_status_t* PreferredFormatSlot(int32_t device, const char* op, int32_t input_index, int32_t dtype, int32_t rank,
                                  const int64_t* shape, int32_t* format) {
  return sdk::Guard([&] {
    sim::Simulator::Get().device(device);
    if (op == nullptr || format == nullptr) Throw(OAR_STATUS_INVALID_ARGUMENT, "preferred_format: NULL op or format");
    *format = PreferredFormat(op, input_index, dtype, rank, shape);
  });
}

const oar_format_api_t kFormatApi = [] {
  oar_format_api_t f{};
  f.struct_size = OAR_FORMAT_API_STRUCT_SIZE;
  f.storage_bytes = StorageBytesSlot;
  f.preferred_format = PreferredFormatSlot;
  return f;
}();

}  // namespace

int64_t PhysicalElements(int32_t format, int32_t rank, const int64_t* shape) {
  if (format != OAR_FORMAT_PLAIN && !IsPrivate(format)) {
    Throw(OAR_STATUS_UNIMPLEMENTED, "ascend_sim has no storage format " + std::to_string(format));
  }
  if (const std::string problem = RankProblem(format, rank); !problem.empty())
    Throw(OAR_STATUS_INVALID_ARGUMENT, problem);
  int64_t n = 1;
  if (format == OAR_FORMAT_PLAIN) {
    for (int d = 0; d < rank; ++d) n *= shape[d];
  } else if (format == OAR_FORMAT_NC1HWC0) {
    n = shape[0] * CeilDiv(shape[1], kC0) * shape[2] * shape[3] * kC0;
  } else {
    for (int d = 0; d < rank - 2; ++d) n *= shape[d];
    n *= CeilDiv(shape[rank - 2], kFractal) * CeilDiv(shape[rank - 1], kFractal) * kFractal * kFractal;
  }
  return n;
}

size_t StorageBytes(int32_t format, int32_t dtype, int32_t rank, const int64_t* shape) {
  return static_cast<size_t>(PhysicalElements(format, rank, shape)) * sdk::DTypeSize(dtype);
}

int64_t PhysicalIndex(int32_t format, int32_t rank, const int64_t* shape, const int64_t* idx) {
  if (format == OAR_FORMAT_NC1HWC0) {
    const int64_t c1 = CeilDiv(shape[1], kC0);
    return (((idx[0] * c1 + idx[1] / kC0) * shape[2] + idx[2]) * shape[3] + idx[3]) * kC0 + idx[1] % kC0;
  }
  if (format == OAR_FORMAT_FRACTAL_NZ) {
    int64_t batch = 0;
    for (int d = 0; d < rank - 2; ++d) batch = batch * shape[d] + idx[d];
    const int64_t m1 = CeilDiv(shape[rank - 2], kFractal);
    const int64_t n1 = CeilDiv(shape[rank - 1], kFractal);
    const int64_t m = idx[rank - 2], n = idx[rank - 1];
    return batch * n1 * m1 * kFractal * kFractal +
           ((n / kFractal * m1 + m / kFractal) * kFractal + m % kFractal) * kFractal + n % kFractal;
  }
  int64_t linear = 0;
  for (int d = 0; d < rank; ++d) linear = linear * shape[d] + idx[d];
  return linear;
}

int32_t PreferredFormat(const char* op, int32_t input_index, int32_t dtype, int32_t rank, const int64_t*) {
  const bool half = dtype == OAR_DTYPE_FLOAT16 || dtype == OAR_DTYPE_BFLOAT16;
  const bool floating = half || dtype == OAR_DTYPE_FLOAT32;
  const std::string_view name(op);
  // The cube unit reads its operands as fractals.
  if (name == "matmul" && (input_index == 0 || input_index == 1) && half && rank >= 2) return OAR_FORMAT_FRACTAL_NZ;
  // 4-D activations live in NC1HWC0 between the ops that have kernels for it.
  if (PrivateElementwiseOp(name) && floating && rank == 4) return OAR_FORMAT_NC1HWC0;
  return OAR_FORMAT_PLAIN;
}

void AddFormatKernels(sim::KernelSet* set) {
  for (int32_t t = OAR_DTYPE_FLOAT32; t < OAR_DTYPE_COUNT_; ++t) {
    if (t == OAR_DTYPE_FLOAT64) continue;
    for (int32_t from : {OAR_FORMAT_PLAIN, OAR_FORMAT_NC1HWC0, OAR_FORMAT_FRACTAL_NZ}) {
      sim::SimKernel k;
      k.op = "format_cast";
      k.dtypes = {t, t};
      k.format = from;
      k.run = RunFormatCast;
      k.supports = FormatCastSupports;
      k.checks_formats = true;
      set->Add(std::move(k));
    }
  }
  for (const host::HostKernel& h : host::HostKernels()) {
    const int32_t t = h.dtypes[0];
    if (!PrivateElementwiseOp(h.op) || !(t == OAR_DTYPE_FLOAT32 || t == OAR_DTYPE_FLOAT16 || t == OAR_DTYPE_BFLOAT16)) {
      continue;
    }
    for (int32_t format : {OAR_FORMAT_NC1HWC0, OAR_FORMAT_FRACTAL_NZ}) {
      sim::SimKernel k;
      k.op = h.op;
      k.dtypes.assign(h.key_dtypes().begin(), h.key_dtypes().end());
      k.format = format;
      k.host_fn = h.fn;
      k.run = RunPrivateElementwise;
      k.supports = PrivateElementwiseSupports;
      set->Add(std::move(k));
    }
  }
  for (int32_t t : {OAR_DTYPE_FLOAT16, OAR_DTYPE_BFLOAT16}) {
    sim::SimKernel k;
    k.op = "matmul";
    k.dtypes = {t, t, t};
    k.format = OAR_FORMAT_FRACTAL_NZ;
    k.run = RunNzMatmul;
    k.supports = NzMatmulSupports;
    k.outputs_plain = true;
    set->Add(std::move(k));
  }
}

const oar_format_api_t* FormatApi() { return &kFormatApi; }

}  // namespace oar::ascend
