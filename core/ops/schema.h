// Op schemas: the ONE definition of every op — signature, typed attributes, dtypes, shape inference, VJP rule,
// decomposition (composite kernels). Eager dispatch and entry points (ops.h), autograd, kernel keys, the IR's
// op dialect and the SDK's op-name header (gen_op_header.cc) all read these records; no second op list exists.
//
// Shape inference works on TensorMeta (dtype + extents). It is written against Dims so that symbolic
// extents can replace int64 later without changing the rules' structure.
#ifndef OAR_CORE_OPS_SCHEMA_H_
#define OAR_CORE_OPS_SCHEMA_H_

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/tensor/dims.h"
#include "core/tensor/dtype.h"
#include "core/tensor/tensor.h"
#include "oar/plugin/types.h"

namespace oar::ops {

/// The elementwise ops whose eager function is nothing but the op: X(enumerator, name) in Op order. Each
/// line gives the Op enumerator and the eager function `Tensor name(const Tensor& a, const Tensor& b)`
/// (binary, comparison) or `Tensor name(const Tensor& x)` (unary) of ops.h; the schema record of the same
/// name (schema.cc) carries everything else, and building the table checks that the names agree.
#define OAR_BINARY_OPS(X) X(kAdd, add) X(kSub, sub) X(kMul, mul) X(kDiv, div) X(kMaximum, maximum) \
  X(kMinimum, minimum) X(kPow, pow)
#define OAR_COMPARE_OPS(X) X(kEq, eq) X(kNe, ne) X(kLt, lt) X(kLe, le) X(kGt, gt) X(kGe, ge) \
  X(kLogicalAnd, logical_and) X(kLogicalOr, logical_or)
#define OAR_PREDICATE_OPS(X) X(kLogicalNot, logical_not) X(kIsNan, isnan) X(kIsInf, isinf)
#define OAR_UNARY_OPS(X) X(kNeg, neg) X(kExp, exp) X(kRelu, relu) X(kAbs, abs) X(kSign, sign) X(kLog, log) \
  X(kLog1p, log1p) X(kExpm1, expm1) X(kSqrt, sqrt) X(kRsqrt, rsqrt) X(kSin, sin) X(kCos, cos) X(kTanh, tanh) X(kSigmoid, sigmoid) \
  X(kErf, erf) X(kReciprocal, reciprocal)
#define OAR_OP_ENUMERATOR_(e, name) e,

// The enumerators grouped by kind, as the schema table lists them (kept by hand):
// clang-format off
/// Identifies an op in the built-in table (index into AllSchemas()).
enum class Op : int {
  // binary elementwise
  OAR_BINARY_OPS(OAR_OP_ENUMERATOR_)
  // comparisons and logic (bool results)
  OAR_COMPARE_OPS(OAR_OP_ENUMERATOR_) OAR_PREDICATE_OPS(OAR_OP_ENUMERATOR_) kWhere,
  // unary elementwise
  OAR_UNARY_OPS(OAR_OP_ENUMERATOR_) kMatmul,
  // reductions
  kSum,
  kMean,
  kMax,
  kMin,
  kProd,
  kArgmax,
  kArgmin,
  kSoftmax,
  kLogSoftmax,
  kCast,
  kFill,
  kCopy,
  // metadata views (no kernel; recorded for autograd) and their gradient helper
  kView,
  kPermute,
  kSlice,
  kExpand,
  kSqueeze,
  kUnsqueeze,
  kSliceScatter,
  kClone,
  // neural-network and indexing primitives (schema_nn.cc)
  kConv2d,
  kConv2dGradInput,
  kConv2dGradWeight,
  kMaxPool2d,
  kAvgPool2d,
  kAvgPool2dGrad,
  kAdaptiveAvgPool2d,
  kAdaptiveAvgPool2dGrad,
  kLayerNorm,
  kConcat,
  kGather,
  kIndexSelect,
  kScatterAdd,
  kTopk,
  kPad,
  // fused ops with a kernel where one exists and a decomposition elsewhere (schema_nn.cc); relu_grad is
  // relu's VJP in one pass, batch_norm_train(_grad) batch_norm's training forward and its VJP chain
  kFusedLinear,
  kFusedRotary,
  kFusedRmsScale,
  kReluGrad,
  kBatchNormTrain,
  kBatchNormTrainGrad,
  // Adam's update of one parameter (passes/fuse_optimizer.cc makes it in static training programs)
  kFusedAdam,
  // the backward of tanh and sigmoid as their VJPs record it (passes/fuse_elementwise.cc's fuse-act-grad makes
  // them in static training programs)
  kFusedTanhGrad, kFusedSigmoidGrad,
  // log_softmax and softmax of one tensor along one axis in one pass (fuse-log-softmax makes it in static
  // training programs, where cross_entropy's backward recomputes the softmax of the logits)
  kFusedLogSoftmax,
  // attention's masked, scaled softmax over the last axis and its backward (fuse-masked-softmax makes them in
  // static training programs)
  kFusedMaskedSoftmax, kFusedMaskedSoftmaxGrad,
  // the rotary rotation's backward as rotary_embedding's VJP records it (fuse-rotary-grad, static training)
  kFusedRotaryGrad,
  kCount_
};
// clang-format on

/// How an op's inputs reach its kernel (the kernel contract in docs/ops.md).
enum class OpKind {
  kUnary,      // x -> out, same shape
  kPredicate,  // x -> bool out, same shape
  kBinary,     // a, b broadcast -> out
  kCompare,    // a, b broadcast -> bool out
  kWhere,      // cond, a, b broadcast -> out
  kMatmul,
  kReduce,     // attr axes, keepdim
  kArgReduce,  // attr axis, keepdim -> int64
  kAxiswise,   // attr axis, same shape (softmax)
  kCast, kFill, kCopy,
  kDirect,     // inputs reach the kernel as given; outputs as inferred (conv, pooling, indexing, ...)
  kView,       // metadata only; eager entry points are Tensor methods
  kComposite,  // runs other ops; no kernel of its own
};



/// An attribute value; ints lists for axes and shapes.
using AttrValue = std::variant<int64_t, double, bool, std::vector<int64_t>>;

struct AttrSpec {
  std::string_view name;
  int32_t type;  // oar_attr_type
  AttrValue default_value;
  std::string_view doc;
};

struct TensorMeta {
  DType dtype = DType::kInvalid;
  Dims shape;
};

/// Attribute values of one call, in schema order.
using AttrValues = std::vector<AttrValue>;

/// What a VJP rule sees: the op's saved inputs, its attributes, the output metadata and one upstream
/// gradient per output (undefined when that output got none).
struct VjpArgs {
  std::span<const Tensor> inputs;
  const std::vector<AttrValue>& attrs;
  std::span<const TensorMeta> outputs;
  std::span<const Tensor> grads;
};
/// Returns one gradient per input (undefined for inputs that get none). Written with eager ops, so the
/// rule itself is differentiable and higher-order gradients need nothing more.
using VjpFn = std::vector<Tensor> (*)(const VjpArgs& args);

class Emitter;  // decompose.h
/// A decomposition: emits the op's computation as primitive ops through `e` (eager tensors or IR values,
/// decompose.h) and returns one value per output, or nothing when it declines for these inputs (the op
/// then stays as it is). Written once; eager and the IR's `decompose` pass both run it.
using DecomposeFn = std::vector<int32_t> (*)(Emitter& e, std::span<const int32_t> inputs, const AttrValues& attrs);

struct OpSchema {
  Op op;
  std::string_view name;
  OpKind kind;
  std::vector<std::string_view> inputs;
  std::vector<std::string_view> outputs;
  std::vector<AttrSpec> attrs;
  uint32_t dtypes;  // bit (1 << oar_dtype) for every dtype the op accepts
  std::string_view doc;
  int kernel_id;    // runtime::InternOp(name)
  VjpFn vjp = nullptr;  // null: not differentiable (its results never require grad)
  /// Its decomposition into primitive ops, for ops whose kernel computes a composite (softmax,
  /// layer_norm); null for primitives.
  DecomposeFn decompose = nullptr;
  /// The single declared input takes any number of tensors (concat).
  bool variadic = false;
  /// The name of input `i` for messages (variadic inputs share one name).
  std::string_view InputName(size_t i) const { return inputs[std::min(i, inputs.size() - 1)]; }
  /// Shape/dtype inference for kDirect ops (other kinds share a rule per kind).
  std::vector<TensorMeta> (*infer)(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& attrs) = nullptr;

  bool Accepts(DType t) const { return (dtypes >> static_cast<int>(t)) & 1u; }
  /// Output metadata for these inputs and attributes; throws oar::Error naming the op, the argument and
  /// the shapes/dtypes on bad input.
  std::vector<TensorMeta> Infer(std::span<const TensorMeta> inputs, const AttrValues& attrs) const;
  /// The same for an op with one output (every kind but kDirect has exactly one), without the vector:
  /// eager dispatch's path. Throws kInternal for a kDirect op whose rule gives several outputs.
  TensorMeta InferOne(std::span<const TensorMeta> inputs, const AttrValues& attrs) const;
  /// Index of attribute `name`; throws kInternal when the schema has none.
  int AttrIndex(std::string_view name) const;
};

/// Every built-in op, indexed by Op.
const std::vector<OpSchema>& AllSchemas();
inline const OpSchema& Schema(Op op) { return AllSchemas()[static_cast<int>(op)]; }
/// By name; throws kNotFound listing the known ops.
const OpSchema& SchemaByName(std::string_view name);

/// "float32, float64, ..." for an accepted-dtype mask.
std::string DTypeMaskString(uint32_t mask);

/// The neural-network and indexing schemas (schema_nn.cc), appended to the table in Op order.
void AppendNnSchemas(std::vector<OpSchema>& table);


/// Record `op` on the autograd tape when grad mode is on and an input requires grad (installed by
/// core/autograd; a no-op without it).
using Recorder = void (*)(Op op, std::span<const Tensor> inputs, std::span<Tensor> outputs, const AttrValues& attrs);
void SetRecorder(Recorder recorder);
void Record(Op op, std::span<const Tensor> inputs, std::span<Tensor> outputs, const AttrValues& attrs);

/// Normalise reduction axes (negative allowed) into a sorted, unique list; empty means all axes.
std::vector<int64_t> NormalizeAxes(std::span<const int64_t> axes, int rank, std::string_view op);

}  // namespace oar::ops

#endif  // OAR_CORE_OPS_SCHEMA_H_
