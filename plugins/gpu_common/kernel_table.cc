// Registration and host side of the GPU kernels: validate the call against docs/ops.md, translate the
// descriptors, enqueue on the call's stream. Every op of the cpu plugin's kernel set has a device
// kernel here for the dtypes of docs/ops.md.
#include "plugins/gpu_common/kernel_table.h"

#include <climits>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "oar/plugin/cpp/dtype.hpp"
#include "oar/plugin/cpp/kernel.hpp"
#include "oar/plugin/cpp/status.hpp"
#include "plugins/gpu_common/blas.h"
#include "plugins/gpu_common/kernels.h"
#include "plugins/gpu_common/kernels/dispatch.cuh"
#include "plugins/gpu_common/runtime.h"

namespace oar::gpu {
namespace {

using sdk::Guard;
using sdk::KernelCall;

enum class Family {
  kUnary,
  kBinary,
  kWhere,
  kCast,
  kCopy,
  kFill,
  kReduce,
  kArgReduce,
  kSoftmax,
  kLayerNorm,
  kMatmul,
  kGather,
  kConcat,
  kPad,
  kScatterAdd,
  kTopk,
  kConv,
  kMaxPool,
  kAvgPool
};

/// What a registered kernel does: passed back as the call's kernel_data.
struct OpSpec {
  const char* name;
  Family family;
  int32_t code;  // UnaryOp, BinaryOp, ReduceOp, or a flag (argmax: 1, log_softmax: 1, index_select: 1)
};

constexpr int32_t F32 = OAR_DTYPE_FLOAT32, F64 = OAR_DTYPE_FLOAT64, F16 = OAR_DTYPE_FLOAT16, BF16 = OAR_DTYPE_BFLOAT16,
                  I8 = OAR_DTYPE_INT8, U8 = OAR_DTYPE_UINT8, I32 = OAR_DTYPE_INT32, I64 = OAR_DTYPE_INT64,
                  BOOL = OAR_DTYPE_BOOL;
const std::vector<int32_t> kFloating = {F32, F64, F16, BF16};
const std::vector<int32_t> kNumeric = {F32, F64, F16, BF16, I8, U8, I32, I64};
const std::vector<int32_t> kSigned = {F32, F64, F16, BF16, I8, I32, I64};
const std::vector<int32_t> kAll = {F32, F64, F16, BF16, I8, U8, I32, I64, BOOL};

template <typename E>
constexpr int32_t Code(E e) {
  return static_cast<int32_t>(e);
}

// The ops with a device kernel. Their order is irrelevant; their addresses are the kernel_data.
const OpSpec kOps[] = {
    {"add", Family::kBinary, Code(BinaryOp::kAdd)},
    {"sub", Family::kBinary, Code(BinaryOp::kSub)},
    {"mul", Family::kBinary, Code(BinaryOp::kMul)},
    {"div", Family::kBinary, Code(BinaryOp::kDiv)},
    {"maximum", Family::kBinary, Code(BinaryOp::kMaximum)},
    {"minimum", Family::kBinary, Code(BinaryOp::kMinimum)},
    {"pow", Family::kBinary, Code(BinaryOp::kPow)},
    {"relu_grad", Family::kBinary, Code(BinaryOp::kReluGrad)},
    {"eq", Family::kBinary, Code(BinaryOp::kEq)},
    {"ne", Family::kBinary, Code(BinaryOp::kNe)},
    {"lt", Family::kBinary, Code(BinaryOp::kLt)},
    {"le", Family::kBinary, Code(BinaryOp::kLe)},
    {"gt", Family::kBinary, Code(BinaryOp::kGt)},
    {"ge", Family::kBinary, Code(BinaryOp::kGe)},
    {"logical_and", Family::kBinary, Code(BinaryOp::kLogicalAnd)},
    {"logical_or", Family::kBinary, Code(BinaryOp::kLogicalOr)},
    {"neg", Family::kUnary, Code(UnaryOp::kNeg)},
    {"exp", Family::kUnary, Code(UnaryOp::kExp)},
    {"relu", Family::kUnary, Code(UnaryOp::kRelu)},
    {"abs", Family::kUnary, Code(UnaryOp::kAbs)},
    {"sign", Family::kUnary, Code(UnaryOp::kSign)},
    {"log", Family::kUnary, Code(UnaryOp::kLog)},
    {"log1p", Family::kUnary, Code(UnaryOp::kLog1p)},
    {"sqrt", Family::kUnary, Code(UnaryOp::kSqrt)},
    {"rsqrt", Family::kUnary, Code(UnaryOp::kRsqrt)},
    {"sin", Family::kUnary, Code(UnaryOp::kSin)},
    {"cos", Family::kUnary, Code(UnaryOp::kCos)},
    {"tanh", Family::kUnary, Code(UnaryOp::kTanh)},
    {"sigmoid", Family::kUnary, Code(UnaryOp::kSigmoid)},
    {"erf", Family::kUnary, Code(UnaryOp::kErf)},
    {"reciprocal", Family::kUnary, Code(UnaryOp::kReciprocal)},
    {"isnan", Family::kUnary, Code(UnaryOp::kIsNan)},
    {"isinf", Family::kUnary, Code(UnaryOp::kIsInf)},
    {"logical_not", Family::kUnary, Code(UnaryOp::kLogicalNot)},
    {"where", Family::kWhere, 0},
    {"cast", Family::kCast, 0},
    {"copy", Family::kCopy, 0},
    {"fill", Family::kFill, 0},
    {"sum", Family::kReduce, Code(ReduceOp::kSum)},
    {"mean", Family::kReduce, Code(ReduceOp::kMean)},
    {"max", Family::kReduce, Code(ReduceOp::kMax)},
    {"min", Family::kReduce, Code(ReduceOp::kMin)},
    {"prod", Family::kReduce, Code(ReduceOp::kProd)},
    {"argmax", Family::kArgReduce, 1},
    {"argmin", Family::kArgReduce, 0},
    {"softmax", Family::kSoftmax, 0},
    {"log_softmax", Family::kSoftmax, 1},
    {"layer_norm", Family::kLayerNorm, 0},
    {"matmul", Family::kMatmul, 0},
    {"gather", Family::kGather, 0},
    {"index_select", Family::kGather, 1},
    {"concat", Family::kConcat, 0},
    {"pad", Family::kPad, 0},
    {"scatter_add", Family::kScatterAdd, 0},
    {"topk", Family::kTopk, 0},
    {"conv2d", Family::kConv, Code(ConvKind::kForward)},
    {"conv2d_grad_input", Family::kConv, Code(ConvKind::kGradInput)},
    {"conv2d_grad_weight", Family::kConv, Code(ConvKind::kGradWeight)},
    {"max_pool2d", Family::kMaxPool, 0},
    {"avg_pool2d", Family::kAvgPool, Code(PoolKind::kAvg)},
    {"avg_pool2d_grad", Family::kAvgPool, Code(PoolKind::kAvgGrad)},
    {"adaptive_avg_pool2d", Family::kAvgPool, Code(PoolKind::kAdaptiveAvg)},
    {"adaptive_avg_pool2d_grad", Family::kAvgPool, Code(PoolKind::kAdaptiveAvgGrad)},
};

const OpSpec* FindOp(std::string_view name) {
  for (const OpSpec& op : kOps) {
    if (name == op.name) return &op;
  }
  return nullptr;
}

// ===================================================================================================
// Checks and descriptor translation
// ===================================================================================================

[[noreturn]] void Invalid(const KernelCall& c, const std::string& what) {
  Fail(OAR_STATUS_INVALID_ARGUMENT, c.Where() + ": " + what);
}

TensorArg Arg(const KernelCall& c, const oar_tensor_desc_t& d) {
  if (d.rank < 0 || d.rank > kMaxRank) Invalid(c, "rank " + std::to_string(d.rank) + " is outside [0, 8]");
  if (d.format != OAR_FORMAT_PLAIN) Invalid(c, "only the PLAIN format is supported");
  TensorArg t;
  t.data = d.data;
  t.dtype = d.dtype;
  t.rank = d.rank;
  for (int i = 0; i < d.rank; ++i) {
    if (d.shape[i] < 0 || d.strides[i] < 0) Invalid(c, "negative extent or stride");
    t.shape[i] = d.shape[i];
    t.strides[i] = d.strides[i];
  }
  return t;
}

bool SameShape(const TensorArg& a, const TensorArg& b) {
  if (a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i) {
    if (a.shape[i] != b.shape[i]) return false;
  }
  return true;
}

void RequireCounts(const KernelCall& c, int inputs, int outputs) {
  if (c.num_inputs() != inputs || c.num_outputs() != outputs) {
    Invalid(c, "expects " + std::to_string(inputs) + " input(s) and " + std::to_string(outputs) + " output(s), got " +
                   std::to_string(c.num_inputs()) + " and " + std::to_string(c.num_outputs()));
  }
}

void RequireSameShape(const KernelCall& c, const TensorArg& a, const TensorArg& b, const char* what) {
  if (!SameShape(a, b)) Invalid(c, std::string(what) + " must have the output's shape");
}

/// A launcher's vendor error code -> status naming the op and the device.
void CheckLaunch(const KernelCall& c, int error) {
  if (error != 0) Check(static_cast<gpuError_t>(error), ("kernel launch for " + c.Where()).c_str(), c.device());
}

int64_t AxisAttr(const KernelCall& c, int rank) {
  if (c.FindAttr("axis") == nullptr) Invalid(c, "attribute 'axis' is missing");
  const int64_t axis = c.GetInt("axis", 0);
  if (axis < 0 || axis >= (rank == 0 ? 1 : rank)) Invalid(c, "axis " + std::to_string(axis) + " is out of range");
  return axis;
}

// ===================================================================================================
// Kernels by family
// ===================================================================================================

void RunElementwise(const KernelCall& c, const OpSpec& op, gpuStream_t s) {
  switch (op.family) {
    case Family::kUnary: {
      RequireCounts(c, 1, 1);
      const TensorArg x = Arg(c, c.raw()->inputs[0]), out = Arg(c, c.raw()->outputs[0]);
      RequireSameShape(c, x, out, "x");
      CheckLaunch(c, LaunchUnary(static_cast<UnaryOp>(op.code), x, out, s));
      return;
    }
    case Family::kBinary: {
      RequireCounts(c, 2, 1);
      const TensorArg a = Arg(c, c.raw()->inputs[0]), b = Arg(c, c.raw()->inputs[1]), out = Arg(c, c.raw()->outputs[0]);
      RequireSameShape(c, a, out, "a (already broadcast)");
      RequireSameShape(c, b, out, "b (already broadcast)");
      CheckLaunch(c, LaunchBinary(static_cast<BinaryOp>(op.code), a, b, out, s));
      return;
    }
    case Family::kWhere: {
      RequireCounts(c, 3, 1);
      const TensorArg cond = Arg(c, c.raw()->inputs[0]), a = Arg(c, c.raw()->inputs[1]), b = Arg(c, c.raw()->inputs[2]),
                      out = Arg(c, c.raw()->outputs[0]);
      RequireSameShape(c, cond, out, "cond (already broadcast)");
      RequireSameShape(c, a, out, "a (already broadcast)");
      RequireSameShape(c, b, out, "b (already broadcast)");
      CheckLaunch(c, LaunchWhere(cond, a, b, out, s));
      return;
    }
    case Family::kCast:
    case Family::kCopy: {
      RequireCounts(c, 1, 1);
      const TensorArg x = Arg(c, c.raw()->inputs[0]), out = Arg(c, c.raw()->outputs[0]);
      RequireSameShape(c, x, out, "x");
      CheckLaunch(c, op.family == Family::kCast ? LaunchCast(x, out, s) : LaunchCopy(x, out, s));
      return;
    }
    default:
      break;
  }
}

/// The fill value converted to the output dtype with the cast rules, as the element's bits.
uint64_t FillBits(const KernelCall& c, int32_t dtype) {
  const oar_attr_t* value = c.FindAttr("value");
  if (value == nullptr) Invalid(c, "attribute 'value' is missing");
  if (value->type != OAR_ATTR_FLOAT && value->type != OAR_ATTR_INT && value->type != OAR_ATTR_BOOL) {
    Invalid(c, "attribute 'value' must be FLOAT or INT");
  }
  uint64_t bits = 0;
  VisitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T v = value->type == OAR_ATTR_FLOAT
                    ? CastFromFloating<T>(value->v.f)
                    : CastFromInteger<T>(value->type == OAR_ATTR_BOOL ? value->v.b : value->v.i);
    std::memcpy(&bits, &v, sizeof(T));
  });
  return bits;
}

void RunFill(const KernelCall& c, gpuStream_t s) {
  RequireCounts(c, 0, 1);
  const TensorArg out = Arg(c, c.raw()->outputs[0]);
  CheckLaunch(c, LaunchFill(out, FillBits(c, out.dtype), s));
}

void RunReduce(const KernelCall& c, const OpSpec& op, gpuStream_t s) {
  RequireCounts(c, 1, 1);
  const TensorArg x = Arg(c, c.raw()->inputs[0]), out = Arg(c, c.raw()->outputs[0]);
  if (c.FindAttr("axes") == nullptr) Invalid(c, "attribute 'axes' is missing");
  uint32_t mask = 0;
  int64_t previous = -1;
  for (int64_t axis : c.GetInts("axes")) {
    if (axis <= previous || axis >= x.rank) Invalid(c, "axes must be sorted, unique and in [0, rank)");
    mask |= 1u << axis;
    previous = axis;
  }
  if (out.rank != x.rank) Invalid(c, "the output must keep x's rank");
  int64_t reduced = 1;
  for (int d = 0; d < x.rank; ++d) {
    const int64_t expected = (mask & (1u << d)) ? 1 : x.shape[d];
    if (out.shape[d] != expected) Invalid(c, "output shape " + c.output(0).ShapeString() + " is not the keepdim shape");
    if (mask & (1u << d)) reduced *= x.shape[d];
  }
  const auto rop = static_cast<ReduceOp>(op.code);
  if ((rop == ReduceOp::kMax || rop == ReduceOp::kMin) && reduced == 0 && out.numel() > 0) {
    Invalid(c, "cannot take the " + std::string(op.name) + " of an empty set");
  }
  CheckLaunch(c, LaunchReduce(rop, x, mask, out, s));
}

void RunArgReduce(const KernelCall& c, const OpSpec& op, gpuStream_t s) {
  RequireCounts(c, 1, 1);
  const TensorArg x = Arg(c, c.raw()->inputs[0]), out = Arg(c, c.raw()->outputs[0]);
  const int axis = static_cast<int>(AxisAttr(c, x.rank));
  if (x.rank > 0 && x.shape[axis] == 0 && out.numel() > 0) Invalid(c, "the axis is empty");
  if (out.rank != x.rank) Invalid(c, "the output must keep x's rank");
  for (int d = 0; d < x.rank; ++d) {
    if (out.shape[d] != (d == axis ? 1 : x.shape[d])) Invalid(c, "the output must be x's shape with 1 along axis");
  }
  CheckLaunch(c, LaunchArgReduce(op.code == 1, x, axis, out, s));
}

void RunSoftmax(const KernelCall& c, const OpSpec& op, gpuStream_t s) {
  RequireCounts(c, 1, 1);
  const TensorArg x = Arg(c, c.raw()->inputs[0]), out = Arg(c, c.raw()->outputs[0]);
  RequireSameShape(c, x, out, "x");
  CheckLaunch(c, LaunchSoftmax(op.code == 1, x, static_cast<int>(AxisAttr(c, x.rank)), out, s));
}

void RunLayerNorm(const KernelCall& c, gpuStream_t s) {
  RequireCounts(c, 3, 3);
  const TensorArg x = Arg(c, c.raw()->inputs[0]), w = Arg(c, c.raw()->inputs[1]), b = Arg(c, c.raw()->inputs[2]);
  const TensorArg y = Arg(c, c.raw()->outputs[0]), mean = Arg(c, c.raw()->outputs[1]),
                  rstd = Arg(c, c.raw()->outputs[2]);
  const int axis = static_cast<int>(AxisAttr(c, x.rank));
  if (c.FindAttr("eps") == nullptr) Invalid(c, "attribute 'eps' is missing");
  RequireSameShape(c, x, y, "x");
  if (w.rank != x.rank - axis || b.rank != w.rank) Invalid(c, "weight and bias must have the normalised shape");
  for (int d = axis; d < x.rank; ++d) {
    if (w.shape[d - axis] != x.shape[d] || b.shape[d - axis] != x.shape[d]) {
      Invalid(c, "weight and bias must have the normalised shape");
    }
  }
  int64_t rows = 1;
  for (int d = 0; d < axis; ++d) rows *= x.shape[d];
  const int32_t stats = x.dtype == OAR_DTYPE_FLOAT64 ? OAR_DTYPE_FLOAT64 : OAR_DTYPE_FLOAT32;
  if (mean.numel() != rows || rstd.numel() != rows || mean.dtype != stats || rstd.dtype != stats) {
    Invalid(c, "mean and rstd must hold one statistic per row");
  }
  CheckLaunch(c, LaunchLayerNorm(x, w, b, axis, c.GetFloat("eps", 0.0), y, mean, rstd, s));
}

void RunMatmul(const KernelCall& c, gpuStream_t s) {
  RequireCounts(c, 2, 1);
  const TensorArg a = Arg(c, c.raw()->inputs[0]), b = Arg(c, c.raw()->inputs[1]), out = Arg(c, c.raw()->outputs[0]);
  const int r = out.rank;
  if (r < 2 || a.rank != r || b.rank != r) Invalid(c, "a, b and out must have the same rank >= 2");
  for (int d = 0; d < r - 2; ++d) {
    if (a.shape[d] != out.shape[d] || b.shape[d] != out.shape[d])
      Invalid(c, "batch dimensions must equal the output's");
  }
  if (a.shape[r - 2] != out.shape[r - 2] || b.shape[r - 1] != out.shape[r - 1] || a.shape[r - 1] != b.shape[r - 2]) {
    Invalid(c, "shapes " + c.input(0).ShapeString() + " @ " + c.input(1).ShapeString() + " -> " +
                   c.output(0).ShapeString() + " do not match");
  }
  Matmul(c.device(), s, a, b, out, c.Where());
}

std::string PositionString(const TensorArg& t, uint64_t linear) {
  std::vector<int64_t> index(t.rank);
  for (int d = t.rank - 1; d >= 0; --d) {
    index[d] = static_cast<int64_t>(linear % static_cast<uint64_t>(t.shape[d]));
    linear /= static_cast<uint64_t>(t.shape[d]);
  }
  std::string s = "[";
  for (int d = 0; d < t.rank; ++d) s += (d ? ", " : "") + std::to_string(index[d]);
  return s + "]";
}

/// One 8-byte device word per device for the index check, allocated once (the stream-ordered
/// allocator is not available on every HIP device). The check holds its mutex until it has read the
/// answer back, so concurrent checks on one device take turns.
struct IndexScratch {
  std::mutex mutex;
  void* word = nullptr;
};
IndexScratch& Scratch(int32_t device) {
  static std::mutex mu;
  static auto* scratch = new std::map<int32_t, std::unique_ptr<IndexScratch>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*scratch)[device];
  if (!slot) slot = std::make_unique<IndexScratch>();
  return *slot;
}

/// OUT_OF_RANGE naming the first bad index (row-major), checked on the device before any is used. This
/// waits for the stream: the answer decides whether the gather may run.
void CheckIndices(const KernelCall& c, const TensorArg& index, int64_t limit, int axis, gpuStream_t s) {
  if (index.numel() == 0) return;
  const int32_t device = c.device();
  IndexScratch& scratch = Scratch(device);
  std::lock_guard<std::mutex> lock(scratch.mutex);
  if (scratch.word == nullptr) OAR_GPU_CHECK(device, gpuMalloc, &scratch.word, sizeof(unsigned long long));
  unsigned long long first_bad = ULLONG_MAX;
  OAR_GPU_CHECK(device, gpuMemsetAsync, scratch.word, 0xff, sizeof(first_bad), s);
  CheckLaunch(c, LaunchFindBadIndex(index, limit, static_cast<unsigned long long*>(scratch.word), s));
  OAR_GPU_CHECK(device, gpuMemcpyAsync, &first_bad, scratch.word, sizeof(first_bad), gpuMemcpyDefault, s);
  OAR_GPU_CHECK(device, gpuStreamSynchronize, s);
  if (first_bad == ULLONG_MAX) return;
  int64_t offset = 0;
  uint64_t rest = first_bad;
  for (int d = index.rank - 1; d >= 0; --d) {
    offset += static_cast<int64_t>(rest % static_cast<uint64_t>(index.shape[d])) * index.strides[d];
    rest /= static_cast<uint64_t>(index.shape[d]);
  }
  int64_t value = 0;
  OAR_GPU_CHECK(device, gpuMemcpyAsync, &value, static_cast<const int64_t*>(index.data) + offset, sizeof(value),
                gpuMemcpyDefault, s);
  OAR_GPU_CHECK(device, gpuStreamSynchronize, s);
  Fail(OAR_STATUS_OUT_OF_RANGE, c.Where() + ": index " + std::to_string(value) + " at position " +
                                    PositionString(index, first_bad) + " is out of range for dimension " +
                                    std::to_string(axis) + " of input 0 (x) (valid: [0, " + std::to_string(limit) +
                                    "))");
}

void RunGather(const KernelCall& c, const OpSpec& op, gpuStream_t s) {
  RequireCounts(c, 2, 1);
  const TensorArg x = Arg(c, c.raw()->inputs[0]), index = Arg(c, c.raw()->inputs[1]), out = Arg(c, c.raw()->outputs[0]);
  const bool index_select = op.code == 1;
  const int axis = static_cast<int>(AxisAttr(c, x.rank));
  if (x.rank == 0) Invalid(c, "x must have rank >= 1");
  if (index_select ? index.rank != 1 : !SameShape(index, out)) Invalid(c, "index has the wrong shape");
  if (out.rank != x.rank) Invalid(c, "the output must have x's rank");
  for (int d = 0; d < x.rank; ++d) {
    if (d == axis) {
      if (index_select && out.shape[d] != index.shape[0]) Invalid(c, "the output's axis extent must be len(index)");
    } else if (index_select ? out.shape[d] != x.shape[d] : out.shape[d] > x.shape[d]) {
      Invalid(c, "output shape " + c.output(0).ShapeString() + " does not fit x " + c.input(0).ShapeString());
    }
  }
  if (out.numel() == 0) return;
  CheckIndices(c, index, x.shape[axis], axis, s);
  CheckLaunch(c, LaunchGather(x, index, axis, index_select, out, s));
}

void RunConcat(const KernelCall& c, gpuStream_t s) {
  if (c.num_inputs() < 1 || c.num_outputs() != 1) Invalid(c, "expects 1 to 15 inputs and 1 output");
  const TensorArg out = Arg(c, c.raw()->outputs[0]);
  const int axis = static_cast<int>(AxisAttr(c, out.rank));
  if (out.rank == 0) Invalid(c, "inputs must have rank >= 1");
  TensorArg view = out;
  ContiguousStrides(out.rank, out.shape, view.strides);
  int64_t position = 0;
  for (int i = 0; i < c.num_inputs(); ++i) {
    const TensorArg x = Arg(c, c.raw()->inputs[i]);
    if (x.rank != out.rank) Invalid(c, "every input must have the output's rank");
    for (int d = 0; d < out.rank; ++d) {
      if (d != axis && x.shape[d] != out.shape[d]) Invalid(c, "input " + std::to_string(i) + " has the wrong shape");
    }
    if (position + x.shape[axis] > out.shape[axis]) Invalid(c, "inputs are longer than the output along the axis");
    if (x.numel() > 0) {
      view.shape[axis] = x.shape[axis];
      view.data = static_cast<char*>(out.data) +
                  position * view.strides[axis] * static_cast<int64_t>(sdk::DTypeSize(out.dtype));
      CheckLaunch(c, LaunchCopy(x, view, s));
    }
    position += x.shape[axis];
  }
  if (position != out.shape[axis]) Invalid(c, "inputs do not fill the output along the axis");
}

void RunScatterAdd(const KernelCall& c, gpuStream_t s) {
  RequireCounts(c, 3, 1);
  const TensorArg x = Arg(c, c.raw()->inputs[0]), index = Arg(c, c.raw()->inputs[1]), src = Arg(c, c.raw()->inputs[2]);
  const TensorArg out = Arg(c, c.raw()->outputs[0]);
  const int axis = static_cast<int>(AxisAttr(c, x.rank));
  RequireSameShape(c, x, out, "x");
  if (index.rank != x.rank || !SameShape(index, src)) Invalid(c, "index must have x's rank and src index's shape");
  for (int d = 0; d < x.rank; ++d) {
    if (d != axis && index.shape[d] > x.shape[d]) Invalid(c, "index is larger than x off the axis");
  }
  if (out.numel() == 0) return;
  CheckIndices(c, index, x.rank == 0 ? 1 : x.shape[axis], axis, s);
  CheckLaunch(c, LaunchScatterAdd(x, index, src, axis, out, s));
}

void RunTopk(const KernelCall& c, gpuStream_t s) {
  RequireCounts(c, 1, 2);
  const TensorArg x = Arg(c, c.raw()->inputs[0]);
  const TensorArg values = Arg(c, c.raw()->outputs[0]), indices = Arg(c, c.raw()->outputs[1]);
  const int axis = static_cast<int>(AxisAttr(c, x.rank));
  if (c.FindAttr("k") == nullptr || c.FindAttr("largest") == nullptr)
    Invalid(c, "attributes 'k' and 'largest' are required");
  const int64_t k = c.GetInt("k", 0);
  const int64_t len = x.rank == 0 ? 1 : x.shape[axis];
  if (k < 0 || k > len) Invalid(c, "k " + std::to_string(k) + " is outside [0, " + std::to_string(len) + "]");
  if (values.rank != x.rank || !SameShape(values, indices))
    Invalid(c, "values and indices must have x's rank and one shape");
  for (int d = 0; d < x.rank; ++d) {
    if (values.shape[d] != (d == axis ? k : x.shape[d])) Invalid(c, "the outputs must be x's shape with k along axis");
  }
  if (values.numel() == 0) return;
  CheckLaunch(c, LaunchTopk(x, k, axis, c.GetBool("largest", true), values, indices, s));
}

/// The kernels below write their outputs at contiguous positions.
bool IsContiguous(const TensorArg& t) {
  int64_t expected[kMaxRank];
  ContiguousStrides(t.rank, t.shape, expected);
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] > 1 && t.strides[d] != expected[d]) return false;
  }
  return true;
}

/// Output extent of a window sweep: (in + 2 pad - dil (k - 1) - 1) / stride + 1, 0 when none fits.
int64_t ConvExtent(int64_t in, int64_t pad, int64_t dil, int64_t k, int64_t stride) {
  const int64_t num = in + 2 * pad - dil * (k - 1) - 1;
  return num < 0 ? int64_t{0} : num / stride + 1;
}

/// The two entries of an INTS attribute of 2 (stride, padding, dilation).
std::pair<int64_t, int64_t> Pair(const KernelCall& c, const char* name) {
  if (c.FindAttr(name) == nullptr) Invalid(c, std::string("attribute '") + name + "' is missing");
  const std::span<const int64_t> v = c.GetInts(name);
  if (v.size() != 2) Invalid(c, std::string("attribute '") + name + "' must hold 2 integers");
  return {v[0], v[1]};
}

void RunConv(const KernelCall& c, const OpSpec& op, gpuStream_t s) {
  RequireCounts(c, 2, 1);
  const TensorArg a = Arg(c, c.raw()->inputs[0]), b = Arg(c, c.raw()->inputs[1]), out = Arg(c, c.raw()->outputs[0]);
  if (a.rank != 4 || b.rank != 4 || out.rank != 4) Invalid(c, "every tensor must have rank 4");
  const auto kind = static_cast<ConvKind>(op.code);
  const TensorArg& x = kind == ConvKind::kForward ? a : kind == ConvKind::kGradInput ? out : b;
  const TensorArg& w = kind == ConvKind::kGradWeight ? out : b;
  const TensorArg& y = kind == ConvKind::kForward ? out : a;
  ConvGeometry g{};
  std::tie(g.stride_h, g.stride_w) = Pair(c, "stride");
  std::tie(g.pad_h, g.pad_w) = Pair(c, "padding");
  std::tie(g.dil_h, g.dil_w) = Pair(c, "dilation");
  if (c.FindAttr("groups") == nullptr) Invalid(c, "attribute 'groups' is missing");
  g.groups = c.GetInt("groups", 1);
  if (g.stride_h < 1 || g.stride_w < 1 || g.dil_h < 1 || g.dil_w < 1 || g.groups < 1 || g.pad_h < 0 || g.pad_w < 0) {
    Invalid(c, "stride, dilation and groups must be >= 1 and padding >= 0");
  }
  g.n = x.shape[0], g.c = x.shape[1], g.h = x.shape[2], g.w = x.shape[3];
  g.o = w.shape[0], g.kh = w.shape[2], g.kw = w.shape[3];
  if (g.c % g.groups != 0 || g.o % g.groups != 0 || w.shape[1] != g.c / g.groups) {
    Invalid(c, "groups must divide C and O, and the weight must have C / groups input channels");
  }
  g.ho = ConvExtent(g.h, g.pad_h, g.dil_h, g.kh, g.stride_h);
  g.wo = ConvExtent(g.w, g.pad_w, g.dil_w, g.kw, g.stride_w);
  if (y.shape[0] != g.n || y.shape[1] != g.o || y.shape[2] != g.ho || y.shape[3] != g.wo) {
    Invalid(c, "shapes disagree with the convolution formula (expected output [" + std::to_string(g.n) + ", " +
                   std::to_string(g.o) + ", " + std::to_string(g.ho) + ", " + std::to_string(g.wo) + "])");
  }
  if (out.numel() == 0) return;
  if (!IsContiguous(out)) Invalid(c, "the output must be contiguous");
  CheckLaunch(c, LaunchConv(kind, g, a, b, out, s));
}

/// Does some tap of every output position along one dimension land inside the input?
bool EveryWindowTouchesInput(int64_t out, int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  for (int64_t o = 0; o < out; ++o) {
    bool touches = false;
    for (int64_t t = 0; t < k && !touches; ++t) {
      const int64_t p = o * stride - pad + t * dil;
      touches = p >= 0 && p < in;
    }
    if (!touches) return false;
  }
  return true;
}

void RunMaxPool(const KernelCall& c, gpuStream_t s) {
  RequireCounts(c, 1, 2);
  const TensorArg x = Arg(c, c.raw()->inputs[0]);
  const TensorArg y = Arg(c, c.raw()->outputs[0]), indices = Arg(c, c.raw()->outputs[1]);
  if (x.rank != 4 || y.rank != 4 || !SameShape(y, indices))
    Invalid(c, "x, y and indices must be NCHW, y and indices alike");
  ConvGeometry g{};
  std::tie(g.kh, g.kw) = Pair(c, "kernel");
  std::tie(g.stride_h, g.stride_w) = Pair(c, "stride");
  std::tie(g.pad_h, g.pad_w) = Pair(c, "padding");
  std::tie(g.dil_h, g.dil_w) = Pair(c, "dilation");
  if (g.kh < 1 || g.kw < 1 || g.stride_h < 1 || g.stride_w < 1 || g.dil_h < 1 || g.dil_w < 1 || g.pad_h < 0 ||
      g.pad_w < 0) {
    Invalid(c, "kernel, stride and dilation must be >= 1 and padding >= 0");
  }
  g.n = x.shape[0], g.c = x.shape[1], g.h = x.shape[2], g.w = x.shape[3];
  g.ho = ConvExtent(g.h, g.pad_h, g.dil_h, g.kh, g.stride_h);
  g.wo = ConvExtent(g.w, g.pad_w, g.dil_w, g.kw, g.stride_w);
  if (y.shape[0] != g.n || y.shape[1] != g.c || y.shape[2] != g.ho || y.shape[3] != g.wo) {
    Invalid(c, "the output shape disagrees with the pooling formula");
  }
  if (y.numel() == 0) return;
  if (!IsContiguous(y) || !IsContiguous(indices)) Invalid(c, "y and indices must be contiguous");
  if (!EveryWindowTouchesInput(g.ho, g.h, g.kh, g.stride_h, g.pad_h, g.dil_h) ||
      !EveryWindowTouchesInput(g.wo, g.w, g.kw, g.stride_w, g.pad_w, g.dil_w)) {
    Invalid(c, "a window covers only padding: nothing to pool");
  }
  CheckLaunch(c, LaunchMaxPool(g, x, y, indices, s));
}

/// avg_pool2d / avg_pool2d_grad (windows from kernel, stride, padding) and the adaptive pair (windows
/// from the shapes). `in` is x or grad_y, `out` is y or grad_x.
void RunAvgPool(const KernelCall& c, const OpSpec& op, gpuStream_t s) {
  RequireCounts(c, 1, 1);
  const TensorArg in = Arg(c, c.raw()->inputs[0]), out = Arg(c, c.raw()->outputs[0]);
  if (in.rank != 4 || out.rank != 4) Invalid(c, "the input and the output must be NCHW (rank 4)");
  const auto kind = static_cast<PoolKind>(op.code);
  const bool grad = kind == PoolKind::kAvgGrad || kind == PoolKind::kAdaptiveAvgGrad;
  const TensorArg& x = grad ? out : in;  // the pooled tensor's shape
  const TensorArg& y = grad ? in : out;  // the pooled result's shape
  ConvGeometry g{};
  g.n = x.shape[0], g.c = x.shape[1], g.h = x.shape[2], g.w = x.shape[3];
  g.dil_h = g.dil_w = g.stride_h = g.stride_w = g.groups = 1;
  bool count_include_pad = false;
  if (kind == PoolKind::kAvg || kind == PoolKind::kAvgGrad) {
    std::tie(g.kh, g.kw) = Pair(c, "kernel");
    std::tie(g.stride_h, g.stride_w) = Pair(c, "stride");
    std::tie(g.pad_h, g.pad_w) = Pair(c, "padding");
    if (c.FindAttr("count_include_pad") == nullptr) Invalid(c, "attribute 'count_include_pad' is missing");
    count_include_pad = c.GetBool("count_include_pad", false);
    if (g.kh < 1 || g.kw < 1 || g.stride_h < 1 || g.stride_w < 1 || g.pad_h < 0 || g.pad_w < 0) {
      Invalid(c, "kernel and stride must be >= 1 and padding >= 0");
    }
    g.ho = ConvExtent(g.h, g.pad_h, 1, g.kh, g.stride_h);
    g.wo = ConvExtent(g.w, g.pad_w, 1, g.kw, g.stride_w);
  } else if (kind == PoolKind::kAdaptiveAvg) {
    std::tie(g.ho, g.wo) = Pair(c, "output_size");
    if (g.ho < 0 || g.wo < 0) Invalid(c, "output_size must be >= 0");
  } else {
    g.ho = y.shape[2], g.wo = y.shape[3];
  }
  if (y.shape[0] != g.n || y.shape[1] != g.c || y.shape[2] != g.ho || y.shape[3] != g.wo) {
    Invalid(c, "expected the " + std::string(grad ? "output gradient" : "output") + " [" + std::to_string(g.n) + ", " +
                   std::to_string(g.c) + ", " + std::to_string(g.ho) + ", " + std::to_string(g.wo) + "]");
  }
  if (out.numel() == 0) return;
  if (!IsContiguous(out)) Invalid(c, "the output must be contiguous");
  if (kind == PoolKind::kAvg && (!EveryWindowTouchesInput(g.ho, g.h, g.kh, g.stride_h, g.pad_h, 1) ||
                                 !EveryWindowTouchesInput(g.wo, g.w, g.kw, g.stride_w, g.pad_w, 1))) {
    Invalid(c, "a window covers only padding: nothing to pool");
  }
  CheckLaunch(c, LaunchPool(kind, g, count_include_pad, in, out, s));
}

/// Constant pad: fill the output with the value, then copy x into the interior view.
void RunPad(const KernelCall& c, gpuStream_t s) {
  RequireCounts(c, 1, 1);
  const TensorArg x = Arg(c, c.raw()->inputs[0]), out = Arg(c, c.raw()->outputs[0]);
  if (c.FindAttr("pads") == nullptr) Invalid(c, "attribute 'pads' is missing");
  const std::span<const int64_t> pads = c.GetInts("pads");
  if (x.rank != out.rank || pads.size() != 2 * static_cast<size_t>(x.rank)) {
    Invalid(c, "pads must hold 2 * rank entries and the output must have x's rank");
  }
  TensorArg interior = x;
  ContiguousStrides(out.rank, out.shape, interior.strides);
  int64_t offset = 0;
  for (int d = 0; d < x.rank; ++d) {
    if (pads[2 * d] < 0 || pads[2 * d + 1] < 0) Invalid(c, "pads must be >= 0");
    if (out.shape[d] != x.shape[d] + pads[2 * d] + pads[2 * d + 1]) Invalid(c, "the output shape disagrees with pads");
    offset += pads[2 * d] * interior.strides[d];
  }
  if (out.numel() == 0) return;
  CheckLaunch(c, LaunchFill(out, FillBits(c, out.dtype), s));
  if (x.numel() == 0) return;
  interior.data = static_cast<char*>(out.data) + offset * static_cast<int64_t>(sdk::DTypeSize(out.dtype));
  CheckLaunch(c, LaunchCopy(x, interior, s));
}

oar_status_t* RunKernel(const oar_kernel_call_t* call) {
  return Guard([&] {
    const KernelCall c(call);
    const auto* op = static_cast<const OpSpec*>(call->kernel_data);
    if (op == nullptr) Invalid(c, "kernel_data is not this plugin's");
    UseDevice(c.device());
    const gpuStream_t s = NativeStream(c.device(), call->stream);
    switch (op->family) {
      case Family::kFill:
        return RunFill(c, s);
      case Family::kReduce:
        return RunReduce(c, *op, s);
      case Family::kArgReduce:
        return RunArgReduce(c, *op, s);
      case Family::kSoftmax:
        return RunSoftmax(c, *op, s);
      case Family::kLayerNorm:
        return RunLayerNorm(c, s);
      case Family::kMatmul:
        return RunMatmul(c, s);
      case Family::kGather:
        return RunGather(c, *op, s);
      case Family::kConcat:
        return RunConcat(c, s);
      case Family::kPad:
        return RunPad(c, s);
      case Family::kScatterAdd:
        return RunScatterAdd(c, s);
      case Family::kTopk:
        return RunTopk(c, s);
      case Family::kConv:
        return RunConv(c, *op, s);
      case Family::kMaxPool:
        return RunMaxPool(c, s);
      case Family::kAvgPool:
        return RunAvgPool(c, *op, s);
      default:
        return RunElementwise(c, *op, s);
    }
  });
}

// ===================================================================================================
// Registration and support queries
// ===================================================================================================

void Register(oar_kernel_registrar_t* registrar, const char* name, std::initializer_list<int32_t> dtypes) {
  const OpSpec* op = FindOp(name);
  sdk::RegisterKernel(registrar, name, dtypes, RunKernel, const_cast<OpSpec*>(op));
}

void RegisterAll(oar_kernel_registrar_t* r) {
  for (const char* op : {"add", "sub", "mul", "maximum", "minimum"}) {
    for (int32_t t : kNumeric) Register(r, op, {t, t, t});
  }
  for (const char* op : {"div", "pow", "relu_grad"}) {
    for (int32_t t : kFloating) Register(r, op, {t, t, t});
  }
  for (const char* op : {"eq", "ne"}) {
    for (int32_t t : kAll) Register(r, op, {t, t, BOOL});
  }
  for (const char* op : {"lt", "le", "gt", "ge"}) {
    for (int32_t t : kNumeric) Register(r, op, {t, t, BOOL});
  }
  Register(r, "logical_and", {BOOL, BOOL, BOOL});
  Register(r, "logical_or", {BOOL, BOOL, BOOL});
  Register(r, "logical_not", {BOOL, BOOL});
  for (int32_t t : {F32, F64, F16, BF16, I8, I32, I64}) Register(r, "neg", {t, t});
  for (int32_t t : kNumeric) Register(r, "relu", {t, t});
  for (const char* op : {"abs", "sign"}) {
    for (int32_t t : kSigned) Register(r, op, {t, t});
  }
  for (const char* op :
       {"exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf", "reciprocal"}) {
    for (int32_t t : kFloating) Register(r, op, {t, t});
  }
  for (const char* op : {"isnan", "isinf"}) {
    for (int32_t t : kFloating) Register(r, op, {t, BOOL});
  }
  for (int32_t t : kAll) {
    Register(r, "where", {BOOL, t, t, t});
    Register(r, "fill", {t});
    Register(r, "copy", {t, t});
    for (int32_t to : kAll) Register(r, "cast", {t, to});
    Register(r, "gather", {t, I64, t});
    Register(r, "index_select", {t, I64, t});
    Register(r, "pad", {t, t});
  }
  for (int32_t t : {F32, F64, F16, BF16, I32, I64}) {
    Register(r, "sum", {t, t});
    Register(r, "prod", {t, t});
  }
  for (int32_t t : kFloating) Register(r, "mean", {t, t});
  for (const char* op : {"max", "min"}) {
    for (int32_t t : kNumeric) Register(r, op, {t, t});
  }
  for (const char* op : {"argmax", "argmin"}) {
    for (int32_t t : kNumeric) Register(r, op, {t, I64});
  }
  for (int32_t t : kNumeric) {
    Register(r, "scatter_add", {t, I64, t, t});
    Register(r, "topk", {t, t, I64});
  }
  for (int32_t t : kFloating) {
    Register(r, "softmax", {t, t});
    Register(r, "log_softmax", {t, t});
    Register(r, "matmul", {t, t, t});
    const int32_t stats = t == F64 ? F64 : F32;
    Register(r, "layer_norm", {t, t, t, t, stats, stats});
    for (const char* op : {"conv2d", "conv2d_grad_input", "conv2d_grad_weight"}) Register(r, op, {t, t, t});
    Register(r, "max_pool2d", {t, t, I64});
    for (const char* op : {"avg_pool2d", "avg_pool2d_grad", "adaptive_avg_pool2d", "adaptive_avg_pool2d_grad"}) {
      Register(r, op, {t, t});
    }
  }
  // concat: the input dtypes then the output dtype, for 1 to 15 inputs.
  for (int32_t t : kAll) {
    for (int n = 1; n <= 15; ++n) {
      std::vector<int32_t> dtypes(static_cast<size_t>(n) + 1, t);
      oar_kernel_def_t def{};
      def.struct_size = OAR_KERNEL_DEF_STRUCT_SIZE;
      def.op = "concat";
      def.dtypes = dtypes.data();
      def.num_dtypes = static_cast<int32_t>(dtypes.size());
      def.format = OAR_FORMAT_PLAIN;
      def.fn = RunKernel;
      def.kernel_data = const_cast<OpSpec*>(FindOp("concat"));
      oar_status_t* s = sdk::Host()->register_kernel(r, &def);
      if (s != nullptr) {
        const std::string message = sdk::Host()->status_message(s);
        const auto code = static_cast<oar_status_code>(sdk::Host()->status_code(s));
        sdk::Host()->status_destroy(s);
        throw sdk::StatusError(code, message);
      }
    }
  }
}

oar_status_t* RegisterKernels(oar_kernel_registrar_t* registrar) {
  return Guard([&] { RegisterAll(registrar); });
}

/// Every registered key runs with any strides, broadcasting and shape the contract allows; what the
/// plugin cannot do is say so here so the core falls back before running.
oar_status_t* Supports(const oar_kernel_call_t* query) {
  return Guard([&]() -> oar_status_t* {
    if (query == nullptr || query->op == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, "supports: NULL query");
    const KernelCall c(query);
    if (FindOp(c.op()) == nullptr) {
      return sdk::MakeStatus(OAR_STATUS_UNIMPLEMENTED, std::string(OAR_GPU_NAME) + ": op '" + std::string(c.op()) +
                                                           "' has no device kernel (the core may run it on cpu)");
    }
    for (int i = 0; i < c.num_inputs() + c.num_outputs(); ++i) {
      const oar_tensor_desc_t& d = i < c.num_inputs() ? query->inputs[i] : query->outputs[i - c.num_inputs()];
      if (d.format != OAR_FORMAT_PLAIN) {
        return sdk::MakeStatus(OAR_STATUS_UNIMPLEMENTED, c.Where() + ": only the PLAIN format is supported");
      }
      if (d.rank < 0 || d.rank > kMaxRank) {
        return sdk::MakeStatus(OAR_STATUS_UNIMPLEMENTED,
                               c.Where() + ": rank " + std::to_string(d.rank) + " is above 8");
      }
    }
    return nullptr;
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

}  // namespace oar::gpu
