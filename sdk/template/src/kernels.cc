// template_device — kernels: add, mul, sum, matmul, fill and copy for float32, plus `supports`.
//
// What the host guarantees (docs/ops.md has the per-op contract):
//  - a kernel is called only for a key it registered: (op, dtypes of inputs then outputs, format);
//  - elementwise inputs arrive already broadcast to the output shape (stride 0 on broadcast dims);
//  - outputs are freshly allocated and contiguous, except `copy`, which writes into any strided view;
//  - strides are in elements and never negative; a tensor may be empty (a 0 extent) or rank 0.
//
// Each kernel is split in two:
//  1. Prepare (on the calling thread): check the call, copy out everything the work needs, and
//     return the work. The oar_kernel_call_t and everything it points to (descriptors, shapes,
//     strides, attributes) belong to the host and are gone when the kernel returns, so the work must
//     not keep pointers into them — only the device data pointers, which stay valid.
//  2. The work runs later on the stream's worker thread, in stream order.
// `supports` runs the same Prepare without enqueuing, so it can never disagree with the kernel.
#include <vector>

#include "oar/plugin/cpp/kernel.hpp"
#include "template_device.h"

namespace template_device {
namespace {

using oar::sdk::Guard;
using oar::sdk::KernelCall;
using oar::sdk::TensorRef;
using Work = std::function<void()>;  // empty when there is nothing to do (empty output)

// VENDOR: the largest rank your kernels handle. Larger ranks are declined in `supports`, so the host
// falls back to cpu (or, under OAR_STRICT_DEVICE=1 and in conformance, reports the reason).
constexpr int kMaxRank = 4;

/// A float32 tensor as the work keeps it: the device pointer plus a copy of shape and strides, padded
/// to kMaxRank with leading extent-1 dimensions so every loop below is a plain 4-deep nest.
struct View {
  float* data = nullptr;
  int64_t shape[kMaxRank] = {1, 1, 1, 1};
  int64_t strides[kMaxRank] = {0, 0, 0, 0};

  int64_t numel() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
  float& at(int64_t i, int64_t j, int64_t k, int64_t l) const {
    return data[i * strides[0] + j * strides[1] + k * strides[2] + l * strides[3]];
  }
};

/// Call fn(i, j, k, l) for every index of `shape`, in row-major order.
template <typename Fn>
void ForEach(const int64_t (&shape)[kMaxRank], Fn fn) {
  for (int64_t i = 0; i < shape[0]; ++i)
    for (int64_t j = 0; j < shape[1]; ++j)
      for (int64_t k = 0; k < shape[2]; ++k)
        for (int64_t l = 0; l < shape[3]; ++l) fn(i, j, k, l);
}

void CheckArity(const KernelCall& c, int inputs, int outputs) {
  if (c.num_inputs() != inputs || c.num_outputs() != outputs) {
    Fail(OAR_STATUS_INVALID_ARGUMENT, c.Where() + ": expected " + std::to_string(inputs) + " input(s) and " +
                                          std::to_string(outputs) + " output(s), got " +
                                          std::to_string(c.num_inputs()) + " and " + std::to_string(c.num_outputs()));
  }
}

/// Check one descriptor and copy it out. Rank > kMaxRank is UNIMPLEMENTED (a limit of this device,
/// not a broken call): that is the code `supports` must use to decline.
View Capture(const KernelCall& c, const TensorRef& t, const std::string& what) {
  if (t.dtype() != OAR_DTYPE_FLOAT32 || t.format() != OAR_FORMAT_PLAIN) {
    Fail(OAR_STATUS_INVALID_ARGUMENT, c.Where() + ": " + what + " is " + std::string(oar::sdk::DTypeName(t.dtype())) +
                                          " in format " + std::to_string(t.format()) + ", expected PLAIN float32");
  }
  if (t.rank() < 0 || t.rank() > kMaxRank) {
    Fail(OAR_STATUS_UNIMPLEMENTED, c.Where() + ": " + what + " has rank " + std::to_string(t.rank()) + "; " + kName +
                                       " handles rank <= " + std::to_string(kMaxRank));
  }
  View v;
  const int pad = kMaxRank - t.rank();
  for (int d = 0; d < t.rank(); ++d) {
    if (t.dim(d) < 0 || t.stride(d) < 0) {
      Fail(OAR_STATUS_INVALID_ARGUMENT, c.Where() + ": " + what + " has a negative extent or stride");
    }
    v.shape[pad + d] = t.dim(d);
    v.strides[pad + d] = t.stride(d);
  }
  v.data = t.data<float>();  // NULL in support queries: never dereferenced while preparing
  return v;
}

bool SameShape(const View& a, const View& b) {
  for (int d = 0; d < kMaxRank; ++d) {
    if (a.shape[d] != b.shape[d]) return false;
  }
  return true;
}

void RequireSameShape(const KernelCall& c, const TensorRef& a, const TensorRef& b, const View& va, const View& vb) {
  if (a.rank() != b.rank() || !SameShape(va, vb)) {
    Fail(OAR_STATUS_INVALID_ARGUMENT, c.Where() + ": shapes " + a.ShapeString() + " and " + b.ShapeString() +
                                          " differ (the host broadcasts before calling)");
  }
}

// ===================================================================================================
// Prepare functions: validate on the calling thread, return the work.
// ===================================================================================================

template <typename Op>
Work PrepareBinary(const KernelCall& c, Op op) {
  CheckArity(c, 2, 1);
  const View a = Capture(c, c.input(0), "input 0"), b = Capture(c, c.input(1), "input 1");
  const View out = Capture(c, c.output(0), "output 0");
  RequireSameShape(c, c.input(0), c.output(0), a, out);
  RequireSameShape(c, c.input(1), c.output(0), b, out);
  if (out.numel() == 0) return {};
  return [=] {
    ForEach(out.shape,
            [&](auto i, auto j, auto k, auto l) { out.at(i, j, k, l) = op(a.at(i, j, k, l), b.at(i, j, k, l)); });
  };
}

Work PrepareAdd(const KernelCall& c) {
  return PrepareBinary(c, [](float x, float y) { return x + y; });
}
Work PrepareMul(const KernelCall& c) {
  return PrepareBinary(c, [](float x, float y) { return x * y; });
}

/// sum over `axes` into a keep-dim output (extent 1 on every reduced dimension).
Work PrepareSum(const KernelCall& c) {
  CheckArity(c, 1, 1);
  const View x = Capture(c, c.input(0), "input 0");
  const View out = Capture(c, c.output(0), "output 0");
  const int rank = c.input(0).rank();
  bool reduced[kMaxRank] = {false, false, false, false};
  int64_t previous = -1;
  for (int64_t axis : c.GetInts("axes")) {
    if (axis <= previous || axis >= rank) {
      Fail(OAR_STATUS_INVALID_ARGUMENT, c.Where() + ": axes must be sorted, unique and in [0, " + std::to_string(rank) +
                                            "), got " + std::to_string(axis));
    }
    reduced[kMaxRank - rank + axis] = true;
    previous = axis;
  }
  for (int d = 0; d < kMaxRank; ++d) {
    if (c.output(0).rank() != rank || out.shape[d] != (reduced[d] ? 1 : x.shape[d])) {
      Fail(OAR_STATUS_INVALID_ARGUMENT, c.Where() + ": output shape " + c.output(0).ShapeString() +
                                            " is not the keep-dim reduction of " + c.input(0).ShapeString());
    }
  }
  if (out.numel() == 0) return {};
  return [=] {
    // Accumulate in double: a running float32 total loses digits on long reductions. An empty input
    // leaves the zeros, which is the identity result the contract asks for.
    std::vector<double> acc(static_cast<size_t>(out.numel()), 0.0);
    auto slot = [&](int64_t i, int64_t j, int64_t k, int64_t l) {
      const int64_t idx[kMaxRank] = {reduced[0] ? 0 : i, reduced[1] ? 0 : j, reduced[2] ? 0 : k, reduced[3] ? 0 : l};
      return ((idx[0] * out.shape[1] + idx[1]) * out.shape[2] + idx[2]) * out.shape[3] + idx[3];
    };
    ForEach(x.shape, [&](auto i, auto j, auto k, auto l) { acc[slot(i, j, k, l)] += x.at(i, j, k, l); });
    ForEach(out.shape,
            [&](auto i, auto j, auto k, auto l) { out.at(i, j, k, l) = static_cast<float>(acc[slot(i, j, k, l)]); });
  };
}

/// out[..., i, j] = sum_k a[..., i, k] * b[..., k, j]; batch dims already equal to the output's.
Work PrepareMatmul(const KernelCall& c) {
  CheckArity(c, 2, 1);
  for (const TensorRef& t : {c.input(0), c.input(1), c.output(0)}) {
    if (t.rank() < 2 || t.rank() != c.output(0).rank()) {
      Fail(OAR_STATUS_INVALID_ARGUMENT, c.Where() + ": operands must have the output's rank (>= 2); got " +
                                            c.input(0).ShapeString() + " x " + c.input(1).ShapeString() + " -> " +
                                            c.output(0).ShapeString());
    }
  }
  const View a = Capture(c, c.input(0), "input 0"), b = Capture(c, c.input(1), "input 1");
  const View out = Capture(c, c.output(0), "output 0");
  const int64_t m = out.shape[2], n = out.shape[3], k_extent = a.shape[3];
  if (a.shape[0] != out.shape[0] || a.shape[1] != out.shape[1] || b.shape[0] != out.shape[0] ||
      b.shape[1] != out.shape[1] || a.shape[2] != m || b.shape[2] != k_extent || b.shape[3] != n) {
    Fail(OAR_STATUS_INVALID_ARGUMENT, c.Where() + ": shapes " + c.input(0).ShapeString() + " x " +
                                          c.input(1).ShapeString() + " -> " + c.output(0).ShapeString() +
                                          " do not form a matmul");
  }
  if (out.numel() == 0) return {};
  return [=] {
    // VENDOR: this is where your GEMM library goes. Naive, but right for any strides (a transposed
    // operand arrives as swapped strides, a broadcast batch as stride 0).
    for (int64_t p = 0; p < out.shape[0]; ++p)
      for (int64_t q = 0; q < out.shape[1]; ++q)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double acc = 0;  // K = 0 gives 0, as the contract asks
            for (int64_t kk = 0; kk < k_extent; ++kk) acc += double{a.at(p, q, i, kk)} * b.at(p, q, kk, j);
            out.at(p, q, i, j) = static_cast<float>(acc);
          }
  };
}

/// fill: no inputs; the `value` attribute is FLOAT or INT (GetFloat converts INT).
Work PrepareFill(const KernelCall& c) {
  CheckArity(c, 0, 1);
  const View out = Capture(c, c.output(0), "output 0");
  if (c.FindAttr("value") == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, c.Where() + ": attribute 'value' is missing");
  const float value = static_cast<float>(c.GetFloat("value", 0.0));  // copied: the attribute dies with the call
  if (out.numel() == 0) return {};
  return [=] { ForEach(out.shape, [&](auto i, auto j, auto k, auto l) { out.at(i, j, k, l) = value; }); };
}

/// copy: any input strides (including 0) into any output strides; only the output's elements are written.
Work PrepareCopy(const KernelCall& c) {
  CheckArity(c, 1, 1);
  const View x = Capture(c, c.input(0), "input 0");
  const View out = Capture(c, c.output(0), "output 0");
  RequireSameShape(c, c.input(0), c.output(0), x, out);
  if (out.numel() == 0) return {};
  return [=] { ForEach(out.shape, [&](auto i, auto j, auto k, auto l) { out.at(i, j, k, l) = x.at(i, j, k, l); }); };
}

// ===================================================================================================
// The C entry points the host calls, registration and `supports`.
// ===================================================================================================

using PrepareFn = Work (*)(const KernelCall&);

/// The kernel function registered for every op: prepare on the caller's thread, enqueue the work on
/// the call's stream, return at once. Errors found while preparing are returned now; errors inside the
/// work surface at the next synchronisation of the stream (see Stream in template_device.h).
template <PrepareFn Prepare>
oar_status_t* Kernel(const oar_kernel_call_t* call) {
  return Guard([&] {
    KernelCall c(call);
    std::shared_ptr<Stream> stream = GetStream(c.device(), c.stream());
    Work work = Prepare(c);
    if (work) stream->Enqueue(std::move(work));
  });
}

struct OpEntry {
  const char* op;
  PrepareFn prepare;
};
constexpr OpEntry kOps[] = {{"add", PrepareAdd},       {"mul", PrepareMul},   {"sum", PrepareSum},
                            {"matmul", PrepareMatmul}, {"fill", PrepareFill}, {"copy", PrepareCopy}};

oar_status_t* RegisterKernels(oar_kernel_registrar_t* registrar) {
  return Guard([&] {
    constexpr int32_t F32 = OAR_DTYPE_FLOAT32;
    // Key = dtypes of every input, then of every output (docs/ops.md). Format defaults to PLAIN.
    oar::sdk::RegisterKernel(registrar, "add", {F32, F32, F32}, Kernel<PrepareAdd>);
    oar::sdk::RegisterKernel(registrar, "mul", {F32, F32, F32}, Kernel<PrepareMul>);
    oar::sdk::RegisterKernel(registrar, "sum", {F32, F32}, Kernel<PrepareSum>);
    oar::sdk::RegisterKernel(registrar, "matmul", {F32, F32, F32}, Kernel<PrepareMatmul>);
    oar::sdk::RegisterKernel(registrar, "fill", {F32}, Kernel<PrepareFill>);
    oar::sdk::RegisterKernel(registrar, "copy", {F32, F32}, Kernel<PrepareCopy>);
  });
}

/// Called before a kernel with the exact shapes, strides and attributes, but NULL data pointers and a
/// NULL stream. NULL = "yes"; UNIMPLEMENTED + reason = "no, fall back" (the reason is shown to the
/// user under OAR_STRICT_DEVICE=1); any other code = the call itself is wrong.
oar_status_t* Supports(const oar_kernel_call_t* query) {
  return Guard([&] {
    KernelCall c(query);
    for (const OpEntry& e : kOps) {
      if (c.op() == e.op) {
        e.prepare(c);  // throws UNIMPLEMENTED for what this device cannot do; the work is discarded
        return;
      }
    }
    Fail(OAR_STATUS_UNIMPLEMENTED, "no kernel for op '" + std::string(c.op()) + "'");
  });
}

const oar_kernel_api_t kKernelApi = [] {
  oar_kernel_api_t k{};
  k.struct_size = OAR_KERNEL_API_STRUCT_SIZE;
  k.register_kernels = RegisterKernels;
  k.supports = Supports;
  return k;
}();

}  // namespace

const oar_kernel_api_t* KernelApi() { return &kKernelApi; }

}  // namespace template_device
