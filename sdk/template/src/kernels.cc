// template_device — kernels and `supports`, from one table keyed by (op, dtypes).
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
//
// Every kernel is one row of kKernels (the end of this file): op, key, prepare function. The prepare
// functions are templates over the element type, so adding a dtype to an op is one more row, e.g.
//   {"add", {F64, F64, F64}, PrepareBinary<double, Add>},
// Registration and `supports` both read the table; nothing else lists the kernels.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
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

/// BOOL elements: one byte holding 0 or 1. A type of its own so the cast rules can tell it from uint8.
struct Bool {
  uint8_t value;
};

/// A tensor of any dtype as the work keeps it: the device pointer plus a copy of shape and strides,
/// padded to kMaxRank with leading extent-1 dimensions so every loop below is a plain 4-deep nest.
/// The element type is chosen where the view is read (`at<float>`), by the kernel's table row.
struct View {
  char* data = nullptr;
  size_t element_size = 0;
  int64_t shape[kMaxRank] = {1, 1, 1, 1};
  int64_t strides[kMaxRank] = {0, 0, 0, 0};

  int64_t numel() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
  template <typename T>
  T& at(int64_t i, int64_t j, int64_t k, int64_t l) const {
    return reinterpret_cast<T*>(data)[i * strides[0] + j * strides[1] + k * strides[2] + l * strides[3]];
  }
  template <typename T>
  T& at(const int64_t (&idx)[kMaxRank]) const {
    return at<T>(idx[0], idx[1], idx[2], idx[3]);
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

/// Check one descriptor and copy it out, whatever its dtype (the table row fixed it: see KernelFor).
/// Rank > kMaxRank is UNIMPLEMENTED (a limit of this device, not a broken call): that is the code
/// `supports` must use to decline.
View Capture(const KernelCall& c, const TensorRef& t, const std::string& what) {
  if (t.format() != OAR_FORMAT_PLAIN) {
    Fail(OAR_STATUS_INVALID_ARGUMENT,
         c.Where() + ": " + what + " is in format " + std::to_string(t.format()) + ", expected PLAIN");
  }
  if (t.rank() < 0 || t.rank() > kMaxRank) {
    Fail(OAR_STATUS_UNIMPLEMENTED, c.Where() + ": " + what + " has rank " + std::to_string(t.rank()) + "; " + kName +
                                       " handles rank <= " + std::to_string(kMaxRank));
  }
  View v;
  v.element_size = t.element_size();
  const int pad = kMaxRank - t.rank();
  for (int d = 0; d < t.rank(); ++d) {
    if (t.dim(d) < 0 || t.stride(d) < 0) {
      Fail(OAR_STATUS_INVALID_ARGUMENT, c.Where() + ": " + what + " has a negative extent or stride");
    }
    v.shape[pad + d] = t.dim(d);
    v.strides[pad + d] = t.stride(d);
  }
  v.data = t.data<char>();  // NULL in support queries: never dereferenced while preparing
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
// Element functions. Floating kernels compute in double and round once to the output type: for
// float32, +, -, *, / and sqrt are then correctly rounded, and the C library's exp/log/tanh in double
// are far inside the tolerances. VENDOR: your device's math goes here (or in the work lambdas below).
// ===================================================================================================

double Add(double a, double b) { return a + b; }
double Sub(double a, double b) { return a - b; }
double Mul(double a, double b) { return a * b; }
double Div(double a, double b) { return a / b; }

double Neg(double x) { return -x; }
double Exp(double x) { return std::exp(x); }
double Log(double x) { return std::log(x); }
double Sqrt(double x) { return std::sqrt(x); }
double Rsqrt(double x) { return 1.0 / std::sqrt(x); }  // rsqrt(+0) = +inf, rsqrt(-0) = -inf (docs/ops.md)
double Tanh(double x) { return std::tanh(x); }
double Sigmoid(double x) {  // docs/ops.md: e = exp(-|x|), so nothing overflows and tiny results keep precision
  const double e = std::exp(-std::abs(x));
  return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

/// One element converted with the cast rules of docs/ops.md ("cast").
template <typename To, typename From>
To Convert(From x) {
  if constexpr (std::is_same_v<From, Bool>) {
    return Convert<To>(static_cast<int32_t>(x.value != 0));  // BOOL -> any: 0 or 1
  } else if constexpr (std::is_same_v<To, Bool>) {
    return Bool{static_cast<uint8_t>(x != From{0})};  // NaN -> true, -0.0 -> false
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    // Truncate toward zero; NaN -> 0; out of range (and +-inf) saturate. -min is 2^(bits-1), exact.
    constexpr double lo = static_cast<double>(std::numeric_limits<To>::min());
    if (std::isnan(x)) return To{0};
    if (x <= lo) return std::numeric_limits<To>::min();
    if (x >= -lo) return std::numeric_limits<To>::max();
    return static_cast<To>(x);
  } else {
    // integer -> floating and float64 <-> float32: round to nearest even (out of range -> +-inf);
    // integer -> integer: two's-complement wrap (C++20 defines it).
    return static_cast<To>(x);
  }
}

// ===================================================================================================
// Prepare functions: validate on the calling thread, return the work. T is the element type of the
// table row; every function works for any strides.
// ===================================================================================================

/// out = F(a, b) elementwise, computed in double.
template <typename T, double (*F)(double, double)>
Work PrepareBinary(const KernelCall& c) {
  CheckArity(c, 2, 1);
  const View a = Capture(c, c.input(0), "input 0"), b = Capture(c, c.input(1), "input 1");
  const View out = Capture(c, c.output(0), "output 0");
  RequireSameShape(c, c.input(0), c.output(0), a, out);
  RequireSameShape(c, c.input(1), c.output(0), b, out);
  if (out.numel() == 0) return {};
  return [=] {
    ForEach(out.shape, [&](auto i, auto j, auto k, auto l) {
      out.at<T>(i, j, k, l) = static_cast<T>(F(a.at<T>(i, j, k, l), b.at<T>(i, j, k, l)));
    });
  };
}

/// out = F(x) elementwise, computed in double.
template <typename T, double (*F)(double)>
Work PrepareUnary(const KernelCall& c) {
  CheckArity(c, 1, 1);
  const View x = Capture(c, c.input(0), "input 0");
  const View out = Capture(c, c.output(0), "output 0");
  RequireSameShape(c, c.input(0), c.output(0), x, out);
  if (out.numel() == 0) return {};
  return [=] {
    ForEach(out.shape,
            [&](auto i, auto j, auto k, auto l) { out.at<T>(i, j, k, l) = static_cast<T>(F(x.at<T>(i, j, k, l))); });
  };
}

/// sum over `axes` into a keep-dim output (extent 1 on every reduced dimension).
template <typename T>
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
    ForEach(x.shape, [&](auto i, auto j, auto k, auto l) { acc[slot(i, j, k, l)] += x.at<T>(i, j, k, l); });
    ForEach(out.shape,
            [&](auto i, auto j, auto k, auto l) { out.at<T>(i, j, k, l) = static_cast<T>(acc[slot(i, j, k, l)]); });
  };
}

/// out[..., i, j] = sum_k a[..., i, k] * b[..., k, j]; batch dims already equal to the output's.
template <typename T>
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
            for (int64_t kk = 0; kk < k_extent; ++kk) {
              acc += static_cast<double>(a.at<T>(p, q, i, kk)) * static_cast<double>(b.at<T>(p, q, kk, j));
            }
            out.at<T>(p, q, i, j) = static_cast<T>(acc);
          }
  };
}

/// softmax / log_softmax along the `axis` attribute: the maximum is subtracted first and the sum of
/// exponentials is taken in double (docs/ops.md). NaN, an all -inf row or a +inf maximum give NaN in
/// the whole row through IEEE arithmetic alone; a rank-0 input gives 1 (log_softmax: 0).
template <typename T, bool kLog>
Work PrepareSoftmax(const KernelCall& c) {
  CheckArity(c, 1, 1);
  const View x = Capture(c, c.input(0), "input 0");
  const View out = Capture(c, c.output(0), "output 0");
  RequireSameShape(c, c.input(0), c.output(0), x, out);
  const int rank = c.input(0).rank();
  int64_t axis = c.GetInt("axis", -1);
  if (rank > 0) {
    if (axis < -rank || axis >= rank) {
      Fail(OAR_STATUS_INVALID_ARGUMENT,
           c.Where() + ": axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
    }
    if (axis < 0) axis += rank;
  }
  const int p = rank == 0 ? kMaxRank - 1 : kMaxRank - rank + static_cast<int>(axis);  // padded position
  if (out.numel() == 0) return {};
  return [=] {
    int64_t rows[kMaxRank] = {x.shape[0], x.shape[1], x.shape[2], x.shape[3]};
    rows[p] = 1;
    const int64_t n = x.shape[p];
    ForEach(rows, [&](int64_t i, int64_t j, int64_t k, int64_t l) {
      int64_t idx[kMaxRank] = {i, j, k, l};
      double max = -std::numeric_limits<double>::infinity();
      for (idx[p] = 0; idx[p] < n; ++idx[p]) max = std::max(max, static_cast<double>(x.at<T>(idx)));
      double total = 0;
      for (idx[p] = 0; idx[p] < n; ++idx[p]) total += std::exp(static_cast<double>(x.at<T>(idx)) - max);
      for (idx[p] = 0; idx[p] < n; ++idx[p]) {
        const double shifted = static_cast<double>(x.at<T>(idx)) - max;
        out.at<T>(idx) = static_cast<T>(kLog ? shifted - std::log(total) : std::exp(shifted) / total);
      }
    });
  };
}

/// cast From -> To with the rules of docs/ops.md; any input strides.
template <typename From, typename To>
Work PrepareCast(const KernelCall& c) {
  CheckArity(c, 1, 1);
  const View x = Capture(c, c.input(0), "input 0");
  const View out = Capture(c, c.output(0), "output 0");
  RequireSameShape(c, c.input(0), c.output(0), x, out);
  if (out.numel() == 0) return {};
  return [=] {
    ForEach(out.shape,
            [&](auto i, auto j, auto k, auto l) { out.at<To>(i, j, k, l) = Convert<To>(x.at<From>(i, j, k, l)); });
  };
}

/// fill: no inputs; the `value` attribute is FLOAT or INT, converted with the cast rules (an INT value
/// reaches an integer output exactly).
template <typename T>
Work PrepareFill(const KernelCall& c) {
  CheckArity(c, 0, 1);
  const View out = Capture(c, c.output(0), "output 0");
  const oar_attr_t* attr = c.FindAttr("value");
  if (attr == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, c.Where() + ": attribute 'value' is missing");
  const T value = attr->type == OAR_ATTR_INT ? Convert<T>(c.GetInt("value", 0))
                                             : Convert<T>(c.GetFloat("value", 0.0));  // copied: the attribute dies
  if (out.numel() == 0) return {};
  return [=] { ForEach(out.shape, [&](auto i, auto j, auto k, auto l) { out.at<T>(i, j, k, l) = value; }); };
}

/// copy: any input strides (including 0) into any output strides; only the output's elements are written.
template <typename T>
Work PrepareCopy(const KernelCall& c) {
  CheckArity(c, 1, 1);
  const View x = Capture(c, c.input(0), "input 0");
  const View out = Capture(c, c.output(0), "output 0");
  RequireSameShape(c, c.input(0), c.output(0), x, out);
  if (out.numel() == 0) return {};
  return
      [=] { ForEach(out.shape, [&](auto i, auto j, auto k, auto l) { out.at<T>(i, j, k, l) = x.at<T>(i, j, k, l); }); };
}

// ===================================================================================================
// The kernel table, the C entry points the host calls, registration and `supports`.
// ===================================================================================================

using PrepareFn = Work (*)(const KernelCall&);

/// One kernel: its key (op; dtypes of the inputs, then of the outputs), its prepare function, and whether
/// it is bitwise reproducible (every kernel here is: plain loops in a fixed order). VENDOR: mark a kernel
/// whose results may differ from call to call (atomics, a split chosen by load) with `false`; it is then
/// listed in the `nondeterministic_kernels` attribute (device.cc) and conformance does not require two
/// runs of it to match bit for bit, while every other kernel must.
struct KernelEntry {
  const char* op;
  std::vector<int32_t> dtypes;
  PrepareFn prepare;
  bool reproducible = true;
};

constexpr int32_t F32 = OAR_DTYPE_FLOAT32, F64 = OAR_DTYPE_FLOAT64, I32 = OAR_DTYPE_INT32, I64 = OAR_DTYPE_INT64,
                  B = OAR_DTYPE_BOOL;

// VENDOR: one row per kernel. What each level of `oar conformance` needs (README, "What each level
// needs"): L1 the core set fill, copy, cast, add, mul, matmul, sum, softmax in float32; L2 the kernels
// of the backward rules of what you claim (tanh: mul, sub; sqrt: rsqrt, mul, div; log: div; ...) and
// sub, div, sqrt for the optimisers.
const std::vector<KernelEntry> kKernels = {
    // elementwise binary: inputs already broadcast (stride 0)
    {"add", {F32, F32, F32}, PrepareBinary<float, Add>},
    {"add", {F64, F64, F64}, PrepareBinary<double, Add>},
    {"sub", {F32, F32, F32}, PrepareBinary<float, Sub>},
    {"sub", {F64, F64, F64}, PrepareBinary<double, Sub>},
    {"mul", {F32, F32, F32}, PrepareBinary<float, Mul>},
    {"mul", {F64, F64, F64}, PrepareBinary<double, Mul>},
    {"div", {F32, F32, F32}, PrepareBinary<float, Div>},
    {"div", {F64, F64, F64}, PrepareBinary<double, Div>},
    // elementwise unary
    {"neg", {F32, F32}, PrepareUnary<float, Neg>},
    {"exp", {F32, F32}, PrepareUnary<float, Exp>},
    {"log", {F32, F32}, PrepareUnary<float, Log>},
    {"sqrt", {F32, F32}, PrepareUnary<float, Sqrt>},
    {"rsqrt", {F32, F32}, PrepareUnary<float, Rsqrt>},
    {"tanh", {F32, F32}, PrepareUnary<float, Tanh>},
    {"sigmoid", {F32, F32}, PrepareUnary<float, Sigmoid>},
    // reductions, linear algebra, normalisation
    {"sum", {F32, F32}, PrepareSum<float>},
    {"sum", {F64, F64}, PrepareSum<double>},
    {"matmul", {F32, F32, F32}, PrepareMatmul<float>},
    {"matmul", {F64, F64, F64}, PrepareMatmul<double>},
    {"softmax", {F32, F32}, PrepareSoftmax<float, false>},
    {"log_softmax", {F32, F32}, PrepareSoftmax<float, true>},
    // creating, moving and converting tensors
    {"fill", {F32}, PrepareFill<float>},
    {"fill", {F64}, PrepareFill<double>},
    {"fill", {I64}, PrepareFill<int64_t>},
    {"copy", {F32, F32}, PrepareCopy<float>},
    {"copy", {F64, F64}, PrepareCopy<double>},
    {"copy", {I64, I64}, PrepareCopy<int64_t>},
    {"cast", {F32, F32}, PrepareCast<float, float>},
    {"cast", {F32, F64}, PrepareCast<float, double>},
    {"cast", {F64, F32}, PrepareCast<double, float>},
    {"cast", {F32, I32}, PrepareCast<float, int32_t>},
    {"cast", {I32, F32}, PrepareCast<int32_t, float>},
    {"cast", {F32, I64}, PrepareCast<float, int64_t>},
    {"cast", {I64, F32}, PrepareCast<int64_t, float>},
    {"cast", {F32, B}, PrepareCast<float, Bool>},
    {"cast", {B, F32}, PrepareCast<Bool, float>},
};

}  // namespace

const std::string& NondeterministicKernels() {
  static const std::string list = [] {
    std::string s;
    for (const KernelEntry& e : kKernels) {
      if (!e.reproducible) s += (s.empty() ? "" : ";") + oar::sdk::KernelKeyString(e.op, e.dtypes);
    }
    return s;
  }();
  return list;
}

namespace {

/// Does the call's key (dtypes of its inputs, then of its outputs) equal the row's?
bool Matches(const KernelCall& c, const KernelEntry& e) {
  if (c.op() != e.op || static_cast<size_t>(c.num_inputs() + c.num_outputs()) != e.dtypes.size()) return false;
  for (int i = 0; i < c.num_inputs(); ++i) {
    if (c.input(i).dtype() != e.dtypes[static_cast<size_t>(i)]) return false;
  }
  for (int i = 0; i < c.num_outputs(); ++i) {
    if (c.output(i).dtype() != e.dtypes[static_cast<size_t>(c.num_inputs() + i)]) return false;
  }
  return true;
}

std::string KeyString(const KernelCall& c) {
  std::string s = "'" + std::string(c.op()) + "' (";
  for (int i = 0; i < c.num_inputs() + c.num_outputs(); ++i) {
    const TensorRef t = i < c.num_inputs() ? c.input(i) : c.output(i - c.num_inputs());
    s += (i ? ", " : "") + std::string(oar::sdk::DTypeName(t.dtype()));
  }
  return s + ")";
}

/// The row the call's key selects; UNIMPLEMENTED (with the key) when the table has none.
const KernelEntry& KernelFor(const KernelCall& c) {
  for (const KernelEntry& e : kKernels) {
    if (Matches(c, e)) return e;
  }
  Fail(OAR_STATUS_UNIMPLEMENTED, std::string("no kernel for op ") + KeyString(c));
}

/// The kernel function registered for every row: prepare on the caller's thread, enqueue the work on
/// the call's stream, return at once. Errors found while preparing are returned now; errors inside the
/// work surface at the next synchronisation of the stream (see Stream in template_device.h).
oar_status_t* RunKernel(const oar_kernel_call_t* call) {
  return Guard([&] {
    KernelCall c(call);
    const auto* entry = static_cast<const KernelEntry*>(c.kernel_data());
    if (entry == nullptr || !Matches(c, *entry)) {
      Fail(OAR_STATUS_INVALID_ARGUMENT, c.Where() + ": called with key " + KeyString(c) + ", not the one registered");
    }
    std::shared_ptr<Stream> stream = GetStream(c.device(), c.stream());
    Work work = entry->prepare(c);
    if (work) stream->Enqueue(std::move(work));
  });
}

oar_status_t* RegisterKernels(oar_kernel_registrar_t* registrar) {
  return Guard([&] {
    // Format defaults to PLAIN. kernel_data points at the row, so RunKernel finds its prepare function.
    for (const KernelEntry& e : kKernels) {
      oar::sdk::RegisterKernel(registrar, e.op, std::span<const int32_t>(e.dtypes), RunKernel,
                               const_cast<KernelEntry*>(&e));
    }
  });
}

/// Called before a kernel with the exact shapes, strides and attributes, but NULL data pointers and a
/// NULL stream. NULL = "yes"; UNIMPLEMENTED + reason = "no, fall back" (the reason is shown to the
/// user under OAR_STRICT_DEVICE=1); any other code = the call itself is wrong.
oar_status_t* Supports(const oar_kernel_call_t* query) {
  return Guard([&] {
    KernelCall c(query);
    KernelFor(c).prepare(c);  // throws UNIMPLEMENTED for what this device cannot do; the work is discarded
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
