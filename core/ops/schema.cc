#include "core/ops/schema.h"

#include <algorithm>
#include <cmath>

#include "core/base/error.h"
#include "core/runtime/kernel_registry.h"
#include "core/tensor/autograd_meta.h"
#include "core/tensor/tensor.h"
#include "core/ops/trace.h"
#include "core/ops/decompose.h"
#include "core/ops/ops.h"
#include "core/ops/vjp.h"

namespace oar::ops {
namespace {

// For the unary elementwise VJP rules written in their records: the upstream gradient and the input.
using vjp::Grads;
const Tensor& G(const VjpArgs& a) { return a.grads[0]; }
const Tensor& X(const VjpArgs& a) { return a.inputs[0]; }

constexpr uint32_t Bit(DType t) { return 1u << static_cast<int>(t); }
constexpr uint32_t kFloating = Bit(DType::kFloat32) | Bit(DType::kFloat64) | Bit(DType::kFloat16) | Bit(DType::kBFloat16);
constexpr uint32_t kSignedInt = Bit(DType::kInt8) | Bit(DType::kInt32) | Bit(DType::kInt64);
constexpr uint32_t kNumeric = kFloating | kSignedInt | Bit(DType::kUInt8);
constexpr uint32_t kAll = kNumeric | Bit(DType::kBool);
constexpr uint32_t kSummable = kFloating | Bit(DType::kInt32) | Bit(DType::kInt64);

std::string MetaString(const TensorMeta& m) { return fmt::format("{}{}", DTypeName(m.dtype), m.shape.ToString()); }

void CheckDType(const OpSchema& s, int i, DType t) {
  OAR_CHECK_ARG(s.Accepts(t), "{}: argument '{}' has dtype {}; expected one of {}", s.name, s.inputs[i], DTypeName(t),
                DTypeMaskString(s.dtypes));
}

// The checks every rule relies on: the input count, and one attribute value per spec (Run completes them).
void CheckInferArgs(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& attrs) {
  OAR_CHECK_ARG(s.variadic ? !in.empty() : in.size() == s.inputs.size(), "{}: expected {} inputs, got {}", s.name,
                s.variadic ? std::string("at least 1") : std::to_string(s.inputs.size()), in.size());
  OAR_CHECK(attrs.size() == s.attrs.size(), kInternal, "{}: expected {} attributes, got {}", s.name, s.attrs.size(),
            attrs.size());
}

TensorMeta InferUnary(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues&) {
  CheckDType(s, 0, in[0].dtype);
  return {in[0]};
}

TensorMeta InferBinary(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues&) {
  CheckDType(s, 0, in[0].dtype);
  OAR_CHECK_ARG(in[0].dtype == in[1].dtype,
                "{}: arguments '{}' ({}) and '{}' ({}) have different dtypes; cast one with .to(dtype) first",
                s.name, s.inputs[0], MetaString(in[0]), s.inputs[1], MetaString(in[1]));
  // Equal shapes (most calls) broadcast to themselves: no op-name string for BroadcastShapes' message.
  // (Compared inline: Dims' operator== is a memcmp call.)
  bool same = in[0].shape.size() == in[1].shape.size();
  for (int d = 0; same && d < in[0].shape.size(); ++d) same = in[0].shape[d] == in[1].shape[d];
  if (same) return {in[0].dtype, in[0].shape};
  return {in[0].dtype, BroadcastShapes(in[0].shape, in[1].shape, std::string(s.name).c_str())};
}

TensorMeta InferPredicate(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues&) {
  CheckDType(s, 0, in[0].dtype);
  return {DType::kBool, in[0].shape};
}

TensorMeta InferCompare(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& attrs) {
  TensorMeta out = InferBinary(s, in, attrs);
  out.dtype = DType::kBool;
  return out;
}

TensorMeta InferWhere(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues&) {
  OAR_CHECK_ARG(in[0].dtype == DType::kBool, "where: argument 'cond' must be bool, got {}", DTypeName(in[0].dtype));
  OAR_CHECK_ARG(in[1].dtype == in[2].dtype, "where: arguments 'a' ({}) and 'b' ({}) have different dtypes",
                MetaString(in[1]), MetaString(in[2]));
  CheckDType(s, 1, in[1].dtype);
  const Dims shape = BroadcastShapes(BroadcastShapes(in[0].shape, in[1].shape, "where"), in[2].shape, "where");
  return {in[1].dtype, shape};
}

TensorMeta InferArgReduce(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& attrs) {
  CheckDType(s, 0, in[0].dtype);
  const int rank = in[0].shape.size();
  OAR_CHECK_ARG(rank > 0, "{}: the input must have at least one dimension", s.name);
  const int axis = NormalizeAxis(std::get<int64_t>(attrs[s.AttrIndex("axis")]), rank, std::string(s.name).c_str());
  OAR_CHECK_ARG(in[0].shape[axis] > 0, "{}: cannot reduce the empty axis {} of shape {}", s.name, axis,
                in[0].shape.ToString());
  Dims out = in[0].shape;
  if (std::get<bool>(attrs[s.AttrIndex("keepdim")])) out[axis] = 1;
  else out.erase(axis);
  return {DType::kInt64, out};
}

TensorMeta InferAxiswise(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& attrs) {
  CheckDType(s, 0, in[0].dtype);
  NormalizeAxis(std::get<int64_t>(attrs[s.AttrIndex("axis")]), in[0].shape.size(), std::string(s.name).c_str());
  return {in[0]};
}

TensorMeta InferMatmul(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues&) {
  const TensorMeta& a = in[0];
  const TensorMeta& b = in[1];
  CheckDType(s, 0, a.dtype);
  OAR_CHECK_ARG(a.dtype == b.dtype, "matmul: a ({}) and b ({}) have different dtypes", MetaString(a), MetaString(b));
  OAR_CHECK_ARG(a.shape.size() >= 1 && b.shape.size() >= 1,
                "matmul: both operands need at least one dimension, got a {} and b {}", a.shape.ToString(),
                b.shape.ToString());
  // 1-D operands are promoted (a: [K] -> [1, K], b: [K] -> [K, 1]) and the extra dim dropped afterwards.
  Dims as = a.shape, bs = b.shape;
  if (as.size() == 1) as.insert(0, 1);
  if (bs.size() == 1) bs.push_back(1);
  const int64_t k = as[as.size() - 1];
  OAR_CHECK_ARG(k == bs[bs.size() - 2],
                "matmul: a {} and b {} do not chain: a has {} columns but b has {} rows", a.shape.ToString(),
                b.shape.ToString(), k, bs[bs.size() - 2]);
  Dims abatch(std::span<const int64_t>(as.data(), as.size() - 2));
  Dims bbatch(std::span<const int64_t>(bs.data(), bs.size() - 2));
  Dims out = BroadcastShapes(abatch, bbatch, "matmul (batch dimensions)");
  if (a.shape.size() > 1) out.push_back(as[as.size() - 2]);
  if (b.shape.size() > 1) out.push_back(bs[bs.size() - 1]);
  return {a.dtype, out};
}

TensorMeta InferReduce(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& attrs) {
  CheckDType(s, 0, in[0].dtype);
  if (s.op == Op::kMax || s.op == Op::kMin) {
    OAR_CHECK_ARG(in[0].shape.Product() > 0, "{}: cannot reduce an empty tensor of shape {} (no identity)", s.name,
                  in[0].shape.ToString());
  }
  const auto& axes_in = std::get<std::vector<int64_t>>(attrs[s.AttrIndex("axes")]);
  const bool keepdim = std::get<bool>(attrs[s.AttrIndex("keepdim")]);
  const std::vector<int64_t> axes = NormalizeAxes(axes_in, in[0].shape.size(), s.name);
  Dims out;
  for (int d = 0; d < in[0].shape.size(); ++d) {
    const bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!reduced) out.push_back(in[0].shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return {in[0].dtype, out};
}

TensorMeta InferCast(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& attrs) {
  CheckDType(s, 0, in[0].dtype);
  const int64_t to = std::get<int64_t>(attrs[s.AttrIndex("dtype")]);
  OAR_CHECK_ARG(DTypeSize(static_cast<DType>(to)) != 0, "cast: target dtype {} is not a valid dtype", to);
  return {static_cast<DType>(to), in[0].shape};
}

TensorMeta InferFill(const OpSchema& s, std::span<const TensorMeta>, const AttrValues& attrs) {
  const auto& shape = std::get<std::vector<int64_t>>(attrs[s.AttrIndex("shape")]);
  const int64_t dtype = std::get<int64_t>(attrs[s.AttrIndex("dtype")]);
  OAR_CHECK_ARG(DTypeSize(static_cast<DType>(dtype)) != 0, "fill: dtype {} is not a valid dtype", dtype);
  Dims dims(shape);
  for (int64_t d : dims) OAR_CHECK_ARG(d >= 0, "fill: shape {} has a negative extent", dims.ToString());
  return {static_cast<DType>(dtype), dims};
}

TensorMeta InferCopy(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues&) {
  CheckDType(s, 0, in[0].dtype);
  return {in[0]};
}

// Views. Extents may be symbolic (negative, the graph IR's encoding) and pass through unchanged: these rules
// move extents around but never do arithmetic on an extent they did not check is static.
TensorMeta InferView(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& attrs) {
  const Dims& x = in[0].shape;
  const int rank = x.size();
  Dims out;
  switch (s.op) {
    case Op::kView: {
      out = Dims(std::get<std::vector<int64_t>>(attrs[s.AttrIndex("shape")]));
      int infer_at = -1;
      int64_t known = 1;
      bool static_in = true;
      for (int64_t d : x) static_in = static_in && d >= 0;
      for (int i = 0; i < out.size(); ++i) {
        if (out[i] == -1) {
          OAR_CHECK_ARG(infer_at < 0, "view: shape {} has more than one -1", out.ToString());
          infer_at = i;
        } else {
          OAR_CHECK_ARG(out[i] >= 0, "view: shape {} has a negative extent", out.ToString());
          known *= out[i];
        }
      }
      if (static_in) {
        const int64_t numel = x.Product();
        if (infer_at >= 0) {
          OAR_CHECK_ARG(known > 0 && numel % known == 0, "view: cannot view {} elements (shape {}) as {}", numel,
                        x.ToString(), out.ToString());
          out[infer_at] = numel / known;
        }
        OAR_CHECK_ARG(out.Product() == numel, "view: shape {} has {} elements but the input {} has {}", out.ToString(),
                      out.Product(), x.ToString(), numel);
      }
      break;  // a -1 left with a non-static input stays unknown (-1)
    }
    case Op::kPermute: {
      const auto& dims = std::get<std::vector<int64_t>>(attrs[s.AttrIndex("dims")]);
      OAR_CHECK_ARG(static_cast<int>(dims.size()) == rank, "permute: got {} dims for a tensor of rank {}", dims.size(),
                    rank);
      bool seen[Dims::kMaxRank] = {};
      for (int64_t d : dims) {
        const int a = NormalizeAxis(d, rank, "permute");
        OAR_CHECK_ARG(!seen[a], "permute: dimension {} appears twice", a);
        seen[a] = true;
        out.push_back(x[a]);
      }
      break;
    }
    case Op::kSlice: {
      out = x;
      const int d = NormalizeAxis(std::get<int64_t>(attrs[s.AttrIndex("dim")]), rank, "slice");
      int64_t start = std::get<int64_t>(attrs[s.AttrIndex("start")]);
      int64_t end = std::get<int64_t>(attrs[s.AttrIndex("end")]);
      const int64_t step = std::get<int64_t>(attrs[s.AttrIndex("step")]);
      OAR_CHECK_ARG(step > 0, "slice: step must be positive, got {}", step);
      const int64_t n = x[d];
      if (n < 0) {
        out[d] = -1;  // a slice of an unknown extent is unknown
        break;
      }
      if (start < 0) start += n;
      if (end < 0) end += n;
      start = std::clamp<int64_t>(start, 0, n);
      end = std::clamp<int64_t>(end, start, n);
      out[d] = (end - start + step - 1) / step;
      break;
    }
    case Op::kExpand: {
      const Dims target(std::get<std::vector<int64_t>>(attrs[s.AttrIndex("shape")]));
      OAR_CHECK_ARG(target.size() >= rank, "expand: cannot expand shape {} to fewer dimensions {}", x.ToString(),
                    target.ToString());
      const int lead = target.size() - rank;
      for (int i = 0; i < target.size(); ++i) {
        const int64_t have = i < lead ? 1 : x[i - lead];
        const int64_t want = target[i] == -1 && i >= lead ? have : target[i];
        OAR_CHECK_ARG(have == want || have == 1 || want < -1 || have < 0,
                      "expand: dimension {} has extent {} and cannot become {} (shape {} -> {})", i, have, want,
                      x.ToString(), target.ToString());
        out.push_back(have == 1 || have < 0 ? want : have);
      }
      break;
    }
    case Op::kSqueeze: {
      out = x;
      const int d = NormalizeAxis(std::get<int64_t>(attrs[s.AttrIndex("dim")]), rank, "squeeze");
      if (rank > 0 && x[d] == 1) out.erase(d);
      break;
    }
    case Op::kUnsqueeze: {
      out = x;
      const int64_t dim = std::get<int64_t>(attrs[s.AttrIndex("dim")]);
      OAR_CHECK(dim >= -(rank + 1) && dim <= rank, kOutOfRange,
                "unsqueeze: dim {} is out of range for a tensor of rank {} (expected {} <= dim <= {})", dim, rank,
                -(rank + 1), rank);
      out.insert(static_cast<int>(dim < 0 ? dim + rank + 1 : dim), 1);
      break;
    }
    case Op::kClone: out = x; break;
    case Op::kSliceScatter: out = Dims(std::get<std::vector<int64_t>>(attrs[s.AttrIndex("shape")])); break;
    default: Throw(ErrorCode::kInternal, "{}: not a view", s.name);
  }
  return {in[0].dtype, out};
}

AttrSpec Axes() {
  return {"axes", OAR_ATTR_INTS, std::vector<int64_t>{}, "axes to reduce (negative counts from the end); empty = all"};
}
AttrSpec Keepdim() { return {"keepdim", OAR_ATTR_BOOL, false, "keep reduced axes as extent 1"}; }

std::vector<OpSchema> BuildSchemas() {
  auto make = [](Op op, std::string_view name, OpKind kind, std::vector<std::string_view> inputs,
                 std::vector<std::string_view> outputs, std::vector<AttrSpec> attrs, uint32_t dtypes,
                 std::string_view doc, VjpFn vjp = nullptr) {
    return OpSchema{op, name, kind, std::move(inputs), std::move(outputs), std::move(attrs), dtypes, doc, 0, vjp};
  };
  auto binary = [&](Op op, std::string_view name, uint32_t dtypes, std::string_view doc, VjpFn vjp) {
    return make(op, name, OpKind::kBinary, {"a", "b"}, {"out"}, {}, dtypes, doc, vjp);
  };
  auto compare = [&](Op op, std::string_view name, uint32_t dtypes, std::string_view doc) {
    return make(op, name, OpKind::kCompare, {"a", "b"}, {"out"}, {}, dtypes, doc);
  };
  auto unary = [&](Op op, std::string_view name, uint32_t dtypes, std::string_view doc, VjpFn vjp) {
    return make(op, name, OpKind::kUnary, {"x"}, {"out"}, {}, dtypes, doc, vjp);
  };
  auto reduce = [&](Op op, std::string_view name, uint32_t dtypes, std::string_view doc, VjpFn vjp) {
    return make(op, name, OpKind::kReduce, {"x"}, {"out"}, {Axes(), Keepdim()}, dtypes, doc, vjp);
  };
  auto arg_reduce = [&](Op op, std::string_view name, std::string_view doc) {
    return make(op, name, OpKind::kArgReduce, {"x"}, {"out"},
                {{"axis", OAR_ATTR_INT, int64_t{0}, "the axis"}, Keepdim()}, kNumeric, doc);
  };
  auto axiswise = [&](Op op, std::string_view name, std::string_view doc, VjpFn vjp) {
    return make(op, name, OpKind::kAxiswise, {"x"}, {"out"}, {{"axis", OAR_ATTR_INT, int64_t{-1}, "the axis"}},
                kFloating, doc, vjp);
  };
  auto composite = [](OpSchema s, DecomposeFn decompose) {
    s.decompose = decompose;
    return s;
  };
  auto view = [&](Op op, std::string_view name, std::vector<AttrSpec> attrs, std::string_view doc, VjpFn vjp) {
    return make(op, name, OpKind::kView, {"x"}, {"out"}, std::move(attrs), kAll, doc, vjp);
  };
  const AttrSpec shape_attr{"shape", OAR_ATTR_INTS, std::vector<int64_t>{}, "the shape"};
  const AttrSpec dim_attr{"dim", OAR_ATTR_INT, int64_t{0}, "the dimension"};
  std::vector<OpSchema> all = {
      binary(Op::kAdd, "add", kNumeric, "a + b, broadcasting", vjp::Add),
      binary(Op::kSub, "sub", kNumeric, "a - b, broadcasting", vjp::Sub),
      binary(Op::kMul, "mul", kNumeric, "a * b, broadcasting", vjp::Mul),
      binary(Op::kDiv, "div", kFloating, "a / b, broadcasting (floating dtypes)", vjp::Div),
      binary(Op::kMaximum, "maximum", kNumeric, "elementwise max, broadcasting (NaN propagates)", vjp::Maximum),
      binary(Op::kMinimum, "minimum", kNumeric, "elementwise min, broadcasting (NaN propagates)", vjp::Minimum),
      binary(Op::kPow, "pow", kFloating, "a ** b, broadcasting", vjp::Pow),
      compare(Op::kEq, "eq", kAll, "a == b"),
      compare(Op::kNe, "ne", kAll, "a != b"),
      compare(Op::kLt, "lt", kNumeric, "a < b"),
      compare(Op::kLe, "le", kNumeric, "a <= b"),
      compare(Op::kGt, "gt", kNumeric, "a > b"),
      compare(Op::kGe, "ge", kNumeric, "a >= b"),
      compare(Op::kLogicalAnd, "logical_and", Bit(DType::kBool), "a && b"),
      compare(Op::kLogicalOr, "logical_or", Bit(DType::kBool), "a || b"),
      make(Op::kLogicalNot, "logical_not", OpKind::kUnary, {"x"}, {"out"}, {}, Bit(DType::kBool), "!x"),
      make(Op::kIsNan, "isnan", OpKind::kPredicate, {"x"}, {"out"}, {}, kFloating, "x is NaN"),
      make(Op::kIsInf, "isinf", OpKind::kPredicate, {"x"}, {"out"}, {}, kFloating, "x is +-inf"),
      make(Op::kWhere, "where", OpKind::kWhere, {"cond", "a", "b"}, {"out"}, {}, kAll, "cond ? a : b, broadcasting",
           vjp::Where),
      unary(Op::kNeg, "neg", kFloating | kSignedInt, "-x",
            [](const VjpArgs& a) -> Grads { return {neg(G(a))}; }),
      unary(Op::kExp, "exp", kFloating, "e^x",
            [](const VjpArgs& a) -> Grads { return {G(a) * exp(X(a))}; }),
      unary(Op::kRelu, "relu", kNumeric, "max(x, 0)", vjp::Relu),
      unary(Op::kAbs, "abs", kFloating | kSignedInt, "|x|",
            [](const VjpArgs& a) -> Grads { return {G(a) * sign(X(a))}; }),
      unary(Op::kSign, "sign", kFloating | kSignedInt, "-1, 0 or 1 (NaN stays NaN)",
            [](const VjpArgs& a) -> Grads { return {G(a) * 0.0}; }),
      unary(Op::kLog, "log", kFloating, "natural logarithm",
            [](const VjpArgs& a) -> Grads { return {G(a) / X(a)}; }),
      unary(Op::kLog1p, "log1p", kFloating, "log(1 + x), accurate near 0",
            [](const VjpArgs& a) -> Grads { return {G(a) / (X(a) + 1.0)}; }),
      unary(Op::kExpm1, "expm1", kFloating, "e^x - 1, accurate near 0",
            [](const VjpArgs& a) -> Grads { return {G(a) * exp(X(a))}; }),
      unary(Op::kSqrt, "sqrt", kFloating, "square root",
            [](const VjpArgs& a) -> Grads { return {G(a) * rsqrt(X(a)) * 0.5}; }),
      unary(Op::kRsqrt, "rsqrt", kFloating, "1 / sqrt(x)",
            [](const VjpArgs& a) -> Grads { return {G(a) * rsqrt(X(a)) / X(a) * -0.5}; }),
      unary(Op::kSin, "sin", kFloating, "sine",
            [](const VjpArgs& a) -> Grads { return {G(a) * cos(X(a))}; }),
      unary(Op::kCos, "cos", kFloating, "cosine",
            [](const VjpArgs& a) -> Grads { return {neg(G(a) * sin(X(a)))}; }),
      unary(Op::kTanh, "tanh", kFloating, "hyperbolic tangent",
            [](const VjpArgs& a) -> Grads { return {G(a) * (1.0 - square(tanh(X(a))))}; }),
      unary(Op::kSigmoid, "sigmoid", kFloating, "1 / (1 + e^-x)",
            [](const VjpArgs& a) -> Grads { return {G(a) * sigmoid(X(a)) * (1.0 - sigmoid(X(a)))}; }),
      unary(Op::kErf, "erf", kFloating, "error function",
            [](const VjpArgs& a) -> Grads { return {G(a) * exp(neg(square(X(a)))) * (2.0 / std::sqrt(M_PI))}; }),
      unary(Op::kReciprocal, "reciprocal", kFloating, "1 / x",
            [](const VjpArgs& a) -> Grads { return {neg(G(a)) / square(X(a))}; }),
      make(Op::kMatmul, "matmul", OpKind::kMatmul, {"a", "b"}, {"out"}, {}, kFloating,
           "matrix product with NumPy semantics: batched, broadcast batch dims, 1-D operands promoted", vjp::Matmul),
      reduce(Op::kSum, "sum", kSummable, "sum over axes (16-bit floats accumulate in float32)", vjp::Sum),
      reduce(Op::kMean, "mean", kFloating, "mean over axes", vjp::Mean),
      reduce(Op::kMax, "max", kNumeric, "maximum over axes (NaN propagates)", vjp::Max),
      reduce(Op::kMin, "min", kNumeric, "minimum over axes (NaN propagates)", vjp::Min),
      reduce(Op::kProd, "prod", kSummable, "product over axes", vjp::Prod),
      arg_reduce(Op::kArgmax, "argmax", "index of the maximum along an axis (first on ties)"),
      arg_reduce(Op::kArgmin, "argmin", "index of the minimum along an axis (first on ties)"),
      composite(axiswise(Op::kSoftmax, "softmax", "exp(x) / sum(exp(x)) along an axis, max-subtracted", vjp::Softmax),
                DecomposeSoftmax),
      composite(axiswise(Op::kLogSoftmax, "log_softmax", "x - logsumexp(x) along an axis", vjp::LogSoftmax),
                DecomposeLogSoftmax),
      make(Op::kCast, "cast", OpKind::kCast, {"x"}, {"out"},
           {{"dtype", OAR_ATTR_INT, int64_t{OAR_DTYPE_FLOAT32}, "target oar_dtype"}}, kAll,
           "convert dtype (float->int truncates toward zero and saturates; NaN->0; nonzero->true)", vjp::Cast),
      make(Op::kFill, "fill", OpKind::kFill, {}, {"out"},
           {{"value", OAR_ATTR_FLOAT, 0.0, "the value (INT for integer and bool outputs)"},
            {"shape", OAR_ATTR_INTS, std::vector<int64_t>{}, "output shape"},
            {"dtype", OAR_ATTR_INT, int64_t{OAR_DTYPE_FLOAT32}, "output oar_dtype"}},
           0, "a tensor filled with one value"),
      make(Op::kCopy, "copy", OpKind::kCopy, {"src"}, {"dst"}, {}, kAll,
           "copy elements into a (possibly strided) destination of the same shape and dtype"),
      view(Op::kView, "view", {shape_attr}, "the same elements with another shape", vjp::View),
      view(Op::kPermute, "permute", {{"dims", OAR_ATTR_INTS, std::vector<int64_t>{}, "new order of the dims"}},
           "reorder dimensions", vjp::Permute),
      view(Op::kSlice, "slice",
           {dim_attr, {"start", OAR_ATTR_INT, int64_t{0}, ""}, {"end", OAR_ATTR_INT, int64_t{0}, ""},
            {"step", OAR_ATTR_INT, int64_t{1}, ""}},
           "every step-th element of [start, end) along dim", vjp::Slice),
      view(Op::kExpand, "expand", {shape_attr}, "broadcast to a shape (stride 0)", vjp::Expand),
      view(Op::kSqueeze, "squeeze", {dim_attr}, "drop a dimension of extent 1", vjp::Squeeze),
      view(Op::kUnsqueeze, "unsqueeze", {dim_attr}, "insert a dimension of extent 1", vjp::Squeeze),
      make(Op::kSliceScatter, "slice_scatter", OpKind::kComposite, {"src"}, {"out"},
           {shape_attr, dim_attr, {"start", OAR_ATTR_INT, int64_t{0}, ""}, {"end", OAR_ATTR_INT, int64_t{0}, ""},
            {"step", OAR_ATTR_INT, int64_t{1}, ""}},
           kAll, "zeros of `shape` with src written into the slice (the VJP of slice)", vjp::SliceScatterVjp),
      make(Op::kClone, "clone", OpKind::kComposite, {"x"}, {"out"}, {}, kAll,
           "a contiguous copy (runs the copy kernel; recorded so gradients flow through contiguous())", vjp::Identity),
  };
  AppendNnSchemas(all);
  for (size_t i = 0; i < all.size(); ++i) {
    OAR_CHECK(static_cast<int>(all[i].op) == static_cast<int>(i), kInternal, "op table out of order at {}", all[i].name);
    all[i].kernel_id = runtime::InternOp(all[i].name);
  }
  OAR_CHECK(all.size() == static_cast<size_t>(Op::kCount_), kInternal, "op table has {} entries", all.size());
  // The eager functions generated from schema.h's op lists (ops.h) run the record of their own name.
  struct Listed {
    Op op;
    std::string_view name;
  };
#define OAR_LISTED_(e, n) Listed{Op::e, #n},
  for (const Listed& l : {OAR_BINARY_OPS(OAR_LISTED_) OAR_COMPARE_OPS(OAR_LISTED_) OAR_PREDICATE_OPS(OAR_LISTED_)
                              OAR_UNARY_OPS(OAR_LISTED_)}) {
    OAR_CHECK(all[static_cast<int>(l.op)].name == l.name, kInternal,
              "schema.h lists op '{}' where the table has '{}'", l.name, all[static_cast<int>(l.op)].name);
  }
#undef OAR_LISTED_
  return all;
}

}  // namespace

std::vector<TensorMeta> OpSchema::Infer(std::span<const TensorMeta> in, const AttrValues& attrs) const {
  if (kind == OpKind::kDirect) {
    CheckInferArgs(*this, in, attrs);
    OAR_CHECK(infer != nullptr, kInternal, "{}: no shape inference", name);
    return infer(*this, in, attrs);
  }
  return {InferOne(in, attrs)};
}

TensorMeta OpSchema::InferOne(std::span<const TensorMeta> in, const AttrValues& attrs) const {
  CheckInferArgs(*this, in, attrs);
  switch (kind) {
    case OpKind::kUnary: return InferUnary(*this, in, attrs);
    case OpKind::kBinary: return InferBinary(*this, in, attrs);
    case OpKind::kMatmul: return InferMatmul(*this, in, attrs);
    case OpKind::kReduce: return InferReduce(*this, in, attrs);
    case OpKind::kCast: return InferCast(*this, in, attrs);
    case OpKind::kFill: return InferFill(*this, in, attrs);
    case OpKind::kCopy: return InferCopy(*this, in, attrs);
    case OpKind::kPredicate: return InferPredicate(*this, in, attrs);
    case OpKind::kCompare: return InferCompare(*this, in, attrs);
    case OpKind::kWhere: return InferWhere(*this, in, attrs);
    case OpKind::kArgReduce: return InferArgReduce(*this, in, attrs);
    case OpKind::kAxiswise: return InferAxiswise(*this, in, attrs);
    case OpKind::kDirect: {
      std::vector<TensorMeta> out = Infer(in, attrs);
      OAR_CHECK(out.size() == 1, kInternal, "{}: InferOne on an op with {} outputs", name, out.size());
      return std::move(out[0]);
    }
    case OpKind::kView:
    case OpKind::kComposite: return InferView(*this, in, attrs);
  }
  Throw(ErrorCode::kInternal, "{}: no shape inference for op kind {}", name, static_cast<int>(kind));
}

int OpSchema::AttrIndex(std::string_view attr) const {
  for (size_t i = 0; i < attrs.size(); ++i) {
    if (attrs[i].name == attr) return static_cast<int>(i);
  }
  Throw(ErrorCode::kInternal, "op '{}' has no attribute '{}'", name, attr);
}

const std::vector<OpSchema>& AllSchemas() {
  static const std::vector<OpSchema> schemas = BuildSchemas();
  return schemas;
}

const OpSchema& SchemaByName(std::string_view name) {
  for (const OpSchema& s : AllSchemas()) {
    if (s.name == name) return s;
  }
  std::string known;
  for (const OpSchema& s : AllSchemas()) known += (known.empty() ? "" : ", ") + std::string(s.name);
  Throw(ErrorCode::kNotFound, "unknown op '{}'; known ops: {}", name, known);
}

namespace {
Recorder g_recorder = nullptr;
}  // namespace

void SetRecorder(Recorder recorder) { g_recorder = recorder; }

ViewCall ViewCallOf(const Tensor& view, ViewOp op, std::span<const int64_t> args) {
  const std::vector<int64_t> shape(view.shape().begin(), view.shape().end());
  switch (op) {
    case ViewOp::kView: return {Op::kView, {shape}};
    case ViewOp::kExpand: return {Op::kExpand, {shape}};
    case ViewOp::kPermute: return {Op::kPermute, {std::vector<int64_t>(args.begin(), args.end())}};
    case ViewOp::kSlice: return {Op::kSlice, {args[0], args[1], args[2], args[3]}};
    case ViewOp::kSqueeze: return {Op::kSqueeze, {args[0]}};
    case ViewOp::kUnsqueeze: return {Op::kUnsqueeze, {args[0]}};
  }
  Throw(ErrorCode::kInternal, "unknown view op {}", static_cast<int>(op));
}

void Record(Op op, std::span<const Tensor> inputs, std::span<Tensor> outputs, const AttrValues& attrs) {
  if (g_recorder == nullptr || !GradModeEnabled() || Schema(op).vjp == nullptr) return;
  for (const Tensor& t : inputs) {
    if (t.requires_grad()) {
      g_recorder(op, inputs, outputs, attrs);
      return;
    }
  }
}

std::string DTypeMaskString(uint32_t mask) {
  std::string s;
  for (int t = 1; t < OAR_DTYPE_COUNT_; ++t) {
    if ((mask >> t) & 1u) s += (s.empty() ? "" : ", ") + std::string(DTypeName(static_cast<DType>(t)));
  }
  return s;
}

std::vector<int64_t> NormalizeAxes(std::span<const int64_t> axes, int rank, std::string_view op) {
  std::vector<int64_t> out;
  if (axes.empty()) {
    for (int d = 0; d < rank; ++d) out.push_back(d);
    return out;
  }
  const std::string what(op);
  for (int64_t a : axes) {
    const int d = rank == 0 ? (a == 0 || a == -1 ? 0 : NormalizeAxis(a, 0, what.c_str())) : NormalizeAxis(a, rank, what.c_str());
    OAR_CHECK_ARG(std::find(out.begin(), out.end(), d) == out.end(), "{}: axis {} appears twice", op, d);
    out.push_back(d);
  }
  std::sort(out.begin(), out.end());
  if (rank == 0) out.clear();  // a scalar has no axes to reduce
  return out;
}

}  // namespace oar::ops
