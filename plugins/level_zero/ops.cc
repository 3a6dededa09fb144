// Host side of the level_zero kernels: keys, support rule and launch of each op (see ops.h).
#include "plugins/level_zero/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>

#include "oar/plugin/cpp/dtype.hpp"
#include "oar/plugin/cpp/kernel.hpp"
#include "oar/plugin/cpp/status.hpp"
#include "plugins/level_zero/kernels/layout.h"

namespace oar::level_zero {
namespace {

using sdk::KernelCall;
using sdk::StatusError;
using sdk::TensorRef;

constexpr uint32_t kGroup = 256;  // work-group size of the 1-D kernels

// ---- the op families and their dtypes -----------------------------------------------------------------

constexpr std::string_view kBinary[] = {"add", "sub", "mul", "div", "maximum", "minimum", "pow", "relu_grad"};
constexpr std::string_view kUnary[] = {"neg",   "exp", "relu", "abs",  "sign",    "log", "log1p",     "sqrt",
                                       "rsqrt", "sin", "cos",  "tanh", "sigmoid", "erf", "reciprocal"};
constexpr std::string_view kCompare[] = {"eq", "ne", "lt", "le", "gt", "ge"};
constexpr std::string_view kReduce[] = {"sum", "mean", "max", "min"};
constexpr std::string_view kSoftmax[] = {"softmax", "log_softmax"};
constexpr int32_t kFloatTypes[] = {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT16};
constexpr int32_t kIntTypes[] = {OAR_DTYPE_INT32, OAR_DTYPE_INT64};
constexpr std::string_view kIntBinary[] = {"add", "sub", "mul", "maximum", "minimum"};
constexpr std::string_view kIntUnary[] = {"neg", "abs", "relu", "sign"};
constexpr int32_t kCastTypes[] = {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT16, OAR_DTYPE_INT32, OAR_DTYPE_INT64,
                                  OAR_DTYPE_BOOL};
constexpr int32_t kAllTypes[] = {OAR_DTYPE_FLOAT32,  OAR_DTYPE_FLOAT64, OAR_DTYPE_FLOAT16,
                                 OAR_DTYPE_BFLOAT16, OAR_DTYPE_INT8,    OAR_DTYPE_UINT8,
                                 OAR_DTYPE_INT32,    OAR_DTYPE_INT64,   OAR_DTYPE_BOOL};

template <size_t N>
bool In(const std::string_view (&list)[N], std::string_view op) {
  return std::find(std::begin(list), std::end(list), op) != std::end(list);
}

/// Kernel-name suffix of a computed dtype ("f32", ...).
std::string Suffix(int32_t dtype) {
  switch (dtype) {
    case OAR_DTYPE_FLOAT32:
      return "f32";
    case OAR_DTYPE_FLOAT16:
      return "f16";
    case OAR_DTYPE_INT32:
      return "i32";
    case OAR_DTYPE_INT64:
      return "i64";
    case OAR_DTYPE_BOOL:
      return "b8";
    default:
      return "";
  }
}

/// Kernel-name suffix of the bit-moving kernels: the element width.
std::string Bits(int32_t dtype) { return "x" + std::to_string(8 * sdk::DTypeSize(dtype)); }

// ---- layouts --------------------------------------------------------------------------------------------

void Require(bool ok, const KernelCall& c, const std::string& what) {
  if (!ok) throw StatusError(OAR_STATUS_INVALID_ARGUMENT, c.Where() + ": " + what);
}

void Arity(const KernelCall& c, int inputs, int outputs) {
  Require(c.num_inputs() == inputs && c.num_outputs() == outputs, c,
          "expected " + std::to_string(inputs) + " input(s) and " + std::to_string(outputs) + " output(s), got " +
              std::to_string(c.num_inputs()) + " and " + std::to_string(c.num_outputs()));
}

bool SameShape(const TensorRef& a, const TensorRef& b) {
  return a.rank() == b.rank() && std::equal(a.shape().begin(), a.shape().end(), b.shape().begin());
}

/// The elementwise layout of `operands` (all of `shape`), with extent-1 dims dropped and dims merged
/// wherever every operand is contiguous across them, so dense tensors become one flat dimension.
OarEwLayout MakeEwLayout(std::span<const int64_t> shape, std::span<const std::span<const int64_t>> operands) {
  OarEwLayout L{};
  L.n = 1;
  int rank = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    L.n *= shape[d];
    if (shape[d] == 1) continue;
    bool merge = rank > 0;
    for (size_t k = 0; merge && k < operands.size(); ++k) {
      merge = L.stride[k][rank - 1] == operands[k][d] * shape[d];
    }
    if (merge) {
      L.shape[rank - 1] *= shape[d];
      for (size_t k = 0; k < operands.size(); ++k) L.stride[k][rank - 1] = operands[k][d];
      continue;
    }
    L.shape[rank] = shape[d];
    for (size_t k = 0; k < operands.size(); ++k) L.stride[k][rank] = operands[k][d];
    ++rank;
  }
  if (rank == 0) {  // a scalar or all extents 1: one element at offset 0
    L.shape[0] = 1;
    rank = 1;
  }
  L.rank = rank;
  return L;
}

Grid Grid1D(int64_t items, const LaunchTarget& t) {
  Grid g;
  const int64_t groups = (items + kGroup - 1) / kGroup;
  g.groups[0] = static_cast<uint32_t>(std::clamp<int64_t>(groups, 1, t.MaxGroups(0)));
  g.local[0] = kGroup;
  return g;
}

KernelArg Ptr(const void* p) { return {KernelArg::kPointer, p, sizeof(void*)}; }
template <typename T>
KernelArg Val(const T& v) {
  return {KernelArg::kValue, &v, sizeof(T)};
}

/// Launch an elementwise-shaped kernel over `out`'s shape: inputs then the output, with their strides.
void LaunchElementwise(const KernelCall& c, LaunchTarget& t, const std::string& name) {
  const TensorRef out = c.output(0);
  std::vector<std::span<const int64_t>> strides;
  std::vector<KernelArg> args;
  for (int i = 0; i < c.num_inputs(); ++i) {
    Require(SameShape(c.input(i), out), c,
            "input " + std::to_string(i) + " has shape " + c.input(i).ShapeString() + ", expected the output's " +
                out.ShapeString() + " (inputs arrive broadcast)");
    strides.push_back(c.input(i).strides());
    args.push_back(Ptr(c.input(i).data()));
  }
  strides.push_back(out.strides());
  args.push_back(Ptr(out.data()));
  const OarEwLayout L = MakeEwLayout(out.shape(), strides);
  if (L.n == 0) return;
  args.push_back(Val(L));
  t.Launch(name, args, Grid1D(L.n, t));
}

// ---- fill -------------------------------------------------------------------------------------------------

/// Saturating float -> integer conversion of docs/ops.md (truncate, NaN -> 0).
template <typename I>
I SaturateTo(double v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (v >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

/// The bits of `fill`'s value attribute converted to `dtype` by the cast rules (either attribute type).
uint64_t FillBits(const KernelCall& c, int32_t dtype) {
  const oar_attr_t* a = c.FindAttr("value");
  Require(a != nullptr && (a->type == OAR_ATTR_FLOAT || a->type == OAR_ATTR_INT), c,
          "attribute 'value' must be FLOAT or INT");
  const bool is_float = a->type == OAR_ATTR_FLOAT;
  const double f = is_float ? a->v.f : 0.0;
  const int64_t i = is_float ? 0 : a->v.i;
  uint64_t bits = 0;
  auto put = [&](auto v) { std::memcpy(&bits, &v, sizeof(v)); };
  switch (dtype) {
    case OAR_DTYPE_FLOAT32:
      put(is_float ? static_cast<float>(f) : static_cast<float>(i));
      break;
    case OAR_DTYPE_FLOAT64:
      put(is_float ? f : static_cast<double>(i));
      break;
    case OAR_DTYPE_FLOAT16:
      put(sdk::Half(is_float ? static_cast<float>(f) : static_cast<float>(i)).bits);
      break;
    case OAR_DTYPE_BFLOAT16:
      put(sdk::BFloat16(is_float ? static_cast<float>(f) : static_cast<float>(i)).bits);
      break;
    case OAR_DTYPE_INT8:
      put(is_float ? SaturateTo<int8_t>(f) : static_cast<int8_t>(i));
      break;
    case OAR_DTYPE_UINT8:
      put(is_float ? SaturateTo<uint8_t>(f) : static_cast<uint8_t>(i));
      break;
    case OAR_DTYPE_INT32:
      put(is_float ? SaturateTo<int32_t>(f) : static_cast<int32_t>(i));
      break;
    case OAR_DTYPE_INT64:
      put(is_float ? SaturateTo<int64_t>(f) : i);
      break;
    case OAR_DTYPE_BOOL:
      put(static_cast<uint8_t>(is_float ? f != 0.0 : i != 0));
      break;  // NaN -> true
    default:
      Require(false, c, "fill: unknown dtype");
  }
  return bits;
}

void RunFill(const KernelCall& c, LaunchTarget& t) {
  const TensorRef out = c.output(0);
  Require(out.is_contiguous(), c, "fill writes a contiguous output");
  const int64_t n = out.numel();
  if (n == 0) return;
  const uint64_t bits = FillBits(c, out.dtype());
  std::vector<KernelArg> args = {Ptr(out.data()), Val(n)};
  uint8_t b8;
  uint16_t b16;
  uint32_t b32;
  switch (out.element_size()) {  // the value argument has the element's width (uchar ... ulong)
    case 1:
      b8 = static_cast<uint8_t>(bits);
      args.push_back(Val(b8));
      break;
    case 2:
      b16 = static_cast<uint16_t>(bits);
      args.push_back(Val(b16));
      break;
    case 4:
      b32 = static_cast<uint32_t>(bits);
      args.push_back(Val(b32));
      break;
    default:
      args.push_back(Val(bits));
      break;
  }
  t.Launch("fill_" + Bits(out.dtype()), args, Grid1D(n, t));
}

// ---- reductions and softmax ---------------------------------------------------------------------------

void RunReduce(const KernelCall& c, LaunchTarget& t) {
  const TensorRef x = c.input(0), out = c.output(0);
  Require(out.rank() == x.rank() && out.is_contiguous(), c,
          "the output keeps the input's rank (keepdim form) and is contiguous");
  const std::span<const int64_t> axes = c.GetInts("axes");
  OarReduceLayout L{};
  L.outputs = 1;
  L.count = 1;
  for (int d = 0; d < x.rank(); ++d) {
    const bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    Require(out.dim(d) == (reduced ? 1 : x.dim(d)), c,
            "output shape " + out.ShapeString() + " does not match input " + x.ShapeString() + " reduced");
    if (reduced) {
      L.red_shape[L.red_rank] = x.dim(d);
      L.red_stride[L.red_rank++] = x.stride(d);
      L.count *= x.dim(d);
    } else {
      L.kept_shape[L.kept_rank] = x.dim(d);
      L.kept_stride[L.kept_rank++] = x.stride(d);
      L.outputs *= x.dim(d);
    }
  }
  for (int64_t a : axes) Require(a >= 0 && a < std::max(1, x.rank()), c, "axis out of range");
  if (L.outputs == 0) return;
  Require(L.count > 0 || (c.op() != "max" && c.op() != "min"), c,
          "cannot take the " + std::string(c.op()) + " of an empty set (input " + x.ShapeString() + ")");
  const KernelArg args[] = {Ptr(x.data()), Ptr(out.data()), Val(L)};
  Grid g;
  g.groups[0] = static_cast<uint32_t>(std::min<int64_t>(L.outputs, t.MaxGroups(0)));
  g.local[0] = OAR_L0_REDUCE_GROUP;
  t.Launch(std::string(c.op()) + "_" + Suffix(x.dtype()), args, g);
}

void RunSoftmax(const KernelCall& c, LaunchTarget& t) {
  const TensorRef x = c.input(0), out = c.output(0);
  Require(SameShape(x, out), c, "output shape must equal the input's " + x.ShapeString());
  const int64_t axis = c.GetInt("axis", -1);
  Require(axis >= 0 && axis < std::max(1, x.rank()), c, "attribute 'axis' out of range");
  if (out.numel() == 0) return;
  OarRowLayout L{};
  L.rows = 1;
  L.n = 1;
  for (int d = 0; d < x.rank(); ++d) {
    if (d == axis) {
      L.n = x.dim(d);
      L.x_axis_stride = x.stride(d);
      L.out_axis_stride = out.stride(d);
      continue;
    }
    L.outer_shape[L.outer_rank] = x.dim(d);
    L.x_outer_stride[L.outer_rank] = x.stride(d);
    L.out_outer_stride[L.outer_rank++] = out.stride(d);
    L.rows *= x.dim(d);
  }
  const KernelArg args[] = {Ptr(x.data()), Ptr(out.data()), Val(L)};
  Grid g;
  g.groups[0] = static_cast<uint32_t>(std::min<int64_t>(L.rows, t.MaxGroups(0)));
  g.local[0] = OAR_L0_REDUCE_GROUP;
  t.Launch(std::string(c.op()) + "_" + Suffix(x.dtype()), args, g);
}

// ---- matmul ---------------------------------------------------------------------------------------------

void RunMatmul(const KernelCall& c, LaunchTarget& t) {
  const TensorRef a = c.input(0), b = c.input(1), out = c.output(0);
  const int r = out.rank();
  Require(r >= 2 && a.rank() == r && b.rank() == r, c,
          "operands must have the output's rank >= 2 (got " + a.ShapeString() + " x " + b.ShapeString() + " -> " +
              out.ShapeString() + ")");
  OarGemmLayout L{};
  L.m = a.dim(r - 2);
  L.k = a.dim(r - 1);
  L.n = b.dim(r - 1);
  Require(b.dim(r - 2) == L.k && out.dim(r - 2) == L.m && out.dim(r - 1) == L.n, c,
          "shapes do not multiply: " + a.ShapeString() + " x " + b.ShapeString() + " -> " + out.ShapeString());
  L.a_rs = a.stride(r - 2);
  L.a_cs = a.stride(r - 1);
  L.b_rs = b.stride(r - 2);
  L.b_cs = b.stride(r - 1);
  L.batch = 1;
  for (int d = 0; d < r - 2; ++d) {
    Require(a.dim(d) == out.dim(d) && b.dim(d) == out.dim(d), c,
            "batch dimensions must equal the output's (broadcast ones arrive with stride 0)");
    L.batch_shape[d] = out.dim(d);
    L.a_batch_stride[d] = a.stride(d);
    L.b_batch_stride[d] = b.stride(d);
    L.batch *= out.dim(d);
  }
  L.batch_rank = r - 2;
  Require(out.is_contiguous(), c, "the output must be contiguous");
  if (out.numel() == 0) return;
  const KernelArg args[] = {Ptr(a.data()), Ptr(b.data()), Ptr(out.data()), Val(L)};
  Grid g;
  const int64_t tiles[3] = {(L.n + OAR_L0_GEMM_TILE - 1) / OAR_L0_GEMM_TILE,
                            (L.m + OAR_L0_GEMM_TILE - 1) / OAR_L0_GEMM_TILE, L.batch};
  for (int d = 0; d < 3; ++d) g.groups[d] = static_cast<uint32_t>(std::min<int64_t>(tiles[d], t.MaxGroups(d)));
  g.local[0] = g.local[1] = OAR_L0_GEMM_TILE;
  t.Launch("matmul_" + Suffix(a.dtype()), args, g);
}

// ---- index_select ---------------------------------------------------------------------------------------

/// Every index of the (non-empty) `index` tensor lies in [0, bound); else OUT_OF_RANGE naming the first
/// bad one in row-major order. The device cannot report a bad index, so they are read back and checked
/// here, before any is used (a synchronisation of the stream).
void CheckIndices(const KernelCall& c, const TensorRef& index, int64_t bound, int64_t axis, LaunchTarget& t) {
  int64_t span = 1;
  for (int d = 0; d < index.rank(); ++d) span += (index.dim(d) - 1) * index.stride(d);
  std::vector<int64_t> host(static_cast<size_t>(span));
  t.ReadToHost(host.data(), index.data(), host.size() * sizeof(int64_t));
  const int64_t n = index.numel();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> at(static_cast<size_t>(index.rank()));
    int64_t rest = i, offset = 0;
    for (int d = index.rank() - 1; d >= 0; --d) {
      at[d] = rest % index.dim(d);
      rest /= index.dim(d);
      offset += at[d] * index.stride(d);
    }
    const int64_t v = host[static_cast<size_t>(offset)];
    if (v >= 0 && v < bound) continue;
    std::string position = "[";
    for (size_t d = 0; d < at.size(); ++d) position += (d ? ", " : "") + std::to_string(at[d]);
    throw StatusError(OAR_STATUS_OUT_OF_RANGE, c.Where() + ": index " + std::to_string(v) + " at position " + position +
                                                   "] is out of range for dimension " + std::to_string(axis) +
                                                   " of input 0 (x) (valid: [0, " + std::to_string(bound) + "))");
  }
}

void RunIndexSelect(const KernelCall& c, LaunchTarget& t) {
  const TensorRef x = c.input(0), index = c.input(1), out = c.output(0);
  const int64_t axis = c.GetInt("axis", -1);
  Require(x.rank() >= 1 && axis >= 0 && axis < x.rank(), c, "attribute 'axis' out of range for " + x.ShapeString());
  Require(index.rank() == 1 && out.rank() == x.rank(), c, "index must be rank 1 and out of x's rank");
  for (int d = 0; d < x.rank(); ++d) {
    Require(out.dim(d) == (d == axis ? index.dim(0) : x.dim(d)), c,
            "output shape " + out.ShapeString() + " does not match x " + x.ShapeString() + " and index " +
                index.ShapeString());
  }
  const int64_t len = index.dim(0);
  if (len == 0) return;
  CheckIndices(c, index, x.dim(static_cast<int>(axis)), axis, t);
  if (out.numel() == 0) return;
  OarIndexLayout L{};
  L.n = out.numel();
  L.rank = out.rank();
  L.axis = static_cast<int32_t>(axis);
  L.index_stride = index.stride(0);
  for (int d = 0; d < out.rank(); ++d) {
    L.shape[d] = out.dim(d);
    L.x_stride[d] = x.stride(d);
  }
  const KernelArg args[] = {Ptr(x.data()), Ptr(index.data()), Ptr(out.data()), Val(L)};
  t.Launch("index_select_" + Bits(x.dtype()), args, Grid1D(L.n, t));
}

void RunGather(const KernelCall& c, LaunchTarget& t) {
  const TensorRef x = c.input(0), index = c.input(1), out = c.output(0);
  const int64_t axis = c.GetInt("axis", -1);
  Require(x.rank() >= 1 && axis >= 0 && axis < x.rank(), c, "attribute 'axis' out of range for " + x.ShapeString());
  Require(index.rank() == x.rank() && SameShape(index, out), c,
          "index must have x's rank and the output its shape (x " + x.ShapeString() + ", index " + index.ShapeString() +
              ", out " + out.ShapeString() + ")");
  for (int d = 0; d < x.rank(); ++d) {
    Require(d == axis || index.dim(d) <= x.dim(d), c,
            "index extent " + std::to_string(index.dim(d)) + " exceeds x's " + std::to_string(x.dim(d)) +
                " in dimension " + std::to_string(d));
  }
  if (out.numel() == 0) return;
  CheckIndices(c, index, x.dim(static_cast<int>(axis)), axis, t);
  OarGatherLayout L{};
  L.n = out.numel();
  L.rank = out.rank();
  L.axis = static_cast<int32_t>(axis);
  for (int d = 0; d < out.rank(); ++d) {
    L.shape[d] = out.dim(d);
    L.x_stride[d] = x.stride(d);
    L.index_stride[d] = index.stride(d);
  }
  const KernelArg args[] = {Ptr(x.data()), Ptr(index.data()), Ptr(out.data()), Val(L)};
  t.Launch("gather_" + Bits(x.dtype()), args, Grid1D(L.n, t));
}

}  // namespace

// ---- public entry points --------------------------------------------------------------------------------

const std::vector<KernelKey>& Keys() {
  static const std::vector<KernelKey> keys = [] {
    std::vector<KernelKey> k;
    for (int32_t t : kFloatTypes) {
      for (std::string_view op : kBinary) k.push_back({std::string(op), {t, t, t}});
      for (std::string_view op : kUnary) k.push_back({std::string(op), {t, t}});
      for (std::string_view op : kCompare) k.push_back({std::string(op), {t, t, OAR_DTYPE_BOOL}});
      for (std::string_view op : kReduce) k.push_back({std::string(op), {t, t}});
      for (std::string_view op : kSoftmax) k.push_back({std::string(op), {t, t}});
      k.push_back({"matmul", {t, t, t}});
    }
    for (int32_t t : kIntTypes) {
      for (std::string_view op : kIntBinary) k.push_back({std::string(op), {t, t, t}});
      for (std::string_view op : kIntUnary) k.push_back({std::string(op), {t, t}});
      for (std::string_view op : kCompare) k.push_back({std::string(op), {t, t, OAR_DTYPE_BOOL}});
    }
    for (int32_t s : kCastTypes) {
      for (int32_t d : kCastTypes) k.push_back({"cast", {s, d}});
    }
    for (int32_t t : kAllTypes) {
      k.push_back({"copy", {t, t}});
      k.push_back({"fill", {t}});
      k.push_back({"where", {OAR_DTYPE_BOOL, t, t, t}});
      k.push_back({"index_select", {t, OAR_DTYPE_INT64, t}});
      k.push_back({"gather", {t, OAR_DTYPE_INT64, t}});
    }
    return k;
  }();
  return keys;
}

std::vector<std::string> KernelNames() {
  std::vector<std::string> names;
  for (const KernelKey& k : Keys()) {
    const std::string_view op = k.op;
    if (op == "cast") {
      names.push_back("cast_" + Suffix(k.dtypes[0]) + "_" + Suffix(k.dtypes[1]));
    } else if (op == "copy" || op == "fill") {
      names.push_back(k.op + "_" + Bits(k.dtypes[0]));
    } else if (op == "where") {
      names.push_back("where_" + Bits(k.dtypes[1]));
    } else if (op == "index_select" || op == "gather") {
      names.push_back(k.op + "_" + Bits(k.dtypes[0]));
    } else {
      names.push_back(k.op + "_" + Suffix(k.dtypes[0]));
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::string Unsupported(const oar_kernel_call_t& call) {
  const KernelCall c(&call);
  std::vector<int32_t> dtypes;
  for (int i = 0; i < c.num_inputs(); ++i) dtypes.push_back(c.input(i).dtype());
  for (int i = 0; i < c.num_outputs(); ++i) dtypes.push_back(c.output(i).dtype());
  const bool known = std::any_of(Keys().begin(), Keys().end(),
                                 [&](const KernelKey& k) { return k.op == c.op() && k.dtypes == dtypes; });
  if (!known) return "level_zero has no kernel for op '" + std::string(c.op()) + "' with these dtypes";
  for (int i = 0; i < c.num_inputs(); ++i) {
    if (c.input(i).format() != OAR_FORMAT_PLAIN) return "level_zero kernels take PLAIN tensors only";
  }
  if ((c.op() == "index_select" || c.op() == "gather") && c.input(0).rank() == 0) {
    return "level_zero " + std::string(c.op()) + " needs an input of rank >= 1";
  }
  return {};
}

void Run(const oar_kernel_call_t& call, LaunchTarget& t) {
  const KernelCall c(&call);
  const std::string_view op = c.op();
  if (In(kBinary, op) || In(kCompare, op) || op == "matmul" || op == "index_select" || op == "gather") {
    Arity(c, 2, 1);
  } else if (op == "where") {
    Arity(c, 3, 1);
  } else if (op == "fill") {
    Arity(c, 0, 1);
  } else {
    Arity(c, 1, 1);
  }
  for (int i = 0; i < c.num_inputs(); ++i) Require(c.input(i).rank() <= OAR_L0_MAX_RANK, c, "rank above 8");
  Require(c.output(0).rank() <= OAR_L0_MAX_RANK, c, "rank above 8");
  if (In(kBinary, op) || In(kUnary, op) || In(kCompare, op)) {
    Require(c.output(0).is_contiguous(), c, "the output must be contiguous");
    LaunchElementwise(c, t, std::string(op) + "_" + Suffix(c.input(0).dtype()));
  } else if (op == "cast") {
    LaunchElementwise(c, t, "cast_" + Suffix(c.input(0).dtype()) + "_" + Suffix(c.output(0).dtype()));
  } else if (op == "copy") {  // the output may be any strided view
    LaunchElementwise(c, t, "copy_" + Bits(c.input(0).dtype()));
  } else if (op == "where") {
    LaunchElementwise(c, t, "where_" + Bits(c.input(1).dtype()));
  } else if (op == "fill") {
    RunFill(c, t);
  } else if (In(kReduce, op)) {
    RunReduce(c, t);
  } else if (In(kSoftmax, op)) {
    RunSoftmax(c, t);
  } else if (op == "matmul") {
    RunMatmul(c, t);
  } else if (op == "index_select") {
    RunIndexSelect(c, t);
  } else if (op == "gather") {
    RunGather(c, t);
  } else {
    throw StatusError(OAR_STATUS_UNIMPLEMENTED, c.Where() + ": level_zero has no kernel for this op");
  }
}

}  // namespace oar::level_zero
