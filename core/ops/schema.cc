#include "core/ops/schema.h"

#include <algorithm>

#include "core/base/error.h"
#include "core/runtime/kernel_registry.h"
#include "core/tensor/tensor.h"

namespace oar::ops {
namespace {

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

std::vector<TensorMeta> InferUnary(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues&) {
  CheckDType(s, 0, in[0].dtype);
  return {in[0]};
}

std::vector<TensorMeta> InferBinary(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues&) {
  CheckDType(s, 0, in[0].dtype);
  OAR_CHECK_ARG(in[0].dtype == in[1].dtype,
                "{}: arguments '{}' ({}) and '{}' ({}) have different dtypes; cast one with .to(dtype) first",
                s.name, s.inputs[0], MetaString(in[0]), s.inputs[1], MetaString(in[1]));
  return {{in[0].dtype, BroadcastShapes(in[0].shape, in[1].shape, std::string(s.name).c_str())}};
}

std::vector<TensorMeta> InferMatmul(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues&) {
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
  return {{a.dtype, out}};
}

std::vector<TensorMeta> InferReduce(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& attrs) {
  CheckDType(s, 0, in[0].dtype);
  const auto& axes_in = std::get<std::vector<int64_t>>(attrs[s.AttrIndex("axes")]);
  const bool keepdim = std::get<bool>(attrs[s.AttrIndex("keepdim")]);
  const std::vector<int64_t> axes = NormalizeAxes(axes_in, in[0].shape.size(), s.name);
  Dims out;
  for (int d = 0; d < in[0].shape.size(); ++d) {
    const bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!reduced) out.push_back(in[0].shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return {{in[0].dtype, out}};
}

std::vector<TensorMeta> InferCast(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues& attrs) {
  CheckDType(s, 0, in[0].dtype);
  const int64_t to = std::get<int64_t>(attrs[s.AttrIndex("dtype")]);
  OAR_CHECK_ARG(DTypeSize(static_cast<DType>(to)) != 0, "cast: target dtype {} is not a valid dtype", to);
  return {{static_cast<DType>(to), in[0].shape}};
}

std::vector<TensorMeta> InferFill(const OpSchema& s, std::span<const TensorMeta>, const AttrValues& attrs) {
  const auto& shape = std::get<std::vector<int64_t>>(attrs[s.AttrIndex("shape")]);
  const int64_t dtype = std::get<int64_t>(attrs[s.AttrIndex("dtype")]);
  OAR_CHECK_ARG(DTypeSize(static_cast<DType>(dtype)) != 0, "fill: dtype {} is not a valid dtype", dtype);
  Dims dims(shape);
  for (int64_t d : dims) OAR_CHECK_ARG(d >= 0, "fill: shape {} has a negative extent", dims.ToString());
  return {{static_cast<DType>(dtype), dims}};
}

std::vector<TensorMeta> InferCopy(const OpSchema& s, std::span<const TensorMeta> in, const AttrValues&) {
  CheckDType(s, 0, in[0].dtype);
  return {in[0]};
}

AttrSpec Axes() {
  return {"axes", OAR_ATTR_INTS, std::vector<int64_t>{}, "axes to reduce (negative counts from the end); empty = all"};
}
AttrSpec Keepdim() { return {"keepdim", OAR_ATTR_BOOL, false, "keep reduced axes as extent 1"}; }

std::vector<OpSchema> BuildSchemas() {
  auto binary = [](Op op, std::string_view name, uint32_t dtypes, std::string_view doc) {
    return OpSchema{op, name, OpKind::kBinary, {"a", "b"}, {"out"}, {}, dtypes, doc, 0};
  };
  auto unary = [](Op op, std::string_view name, uint32_t dtypes, std::string_view doc) {
    return OpSchema{op, name, OpKind::kUnary, {"x"}, {"out"}, {}, dtypes, doc, 0};
  };
  std::vector<OpSchema> all = {
      binary(Op::kAdd, "add", kNumeric, "a + b, broadcasting"),
      binary(Op::kSub, "sub", kNumeric, "a - b, broadcasting"),
      binary(Op::kMul, "mul", kNumeric, "a * b, broadcasting"),
      binary(Op::kDiv, "div", kFloating, "a / b, broadcasting (floating dtypes)"),
      binary(Op::kMaximum, "maximum", kNumeric, "elementwise max, broadcasting (NaN propagates)"),
      binary(Op::kMinimum, "minimum", kNumeric, "elementwise min, broadcasting (NaN propagates)"),
      unary(Op::kNeg, "neg", kFloating | kSignedInt, "-x"),
      unary(Op::kExp, "exp", kFloating, "e^x"),
      unary(Op::kRelu, "relu", kNumeric, "max(x, 0)"),
      OpSchema{Op::kMatmul, "matmul", OpKind::kMatmul, {"a", "b"}, {"out"}, {}, kFloating,
               "matrix product with NumPy semantics: batched, broadcast batch dims, 1-D operands promoted", 0},
      OpSchema{Op::kSum, "sum", OpKind::kReduce, {"x"}, {"out"}, {Axes(), Keepdim()}, kSummable,
               "sum over axes (16-bit floats accumulate in float32, integers in int64)", 0},
      OpSchema{Op::kMean, "mean", OpKind::kReduce, {"x"}, {"out"}, {Axes(), Keepdim()}, kFloating,
               "mean over axes", 0},
      OpSchema{Op::kCast, "cast", OpKind::kCast, {"x"}, {"out"},
               {{"dtype", OAR_ATTR_INT, int64_t{OAR_DTYPE_FLOAT32}, "target oar_dtype"}}, kAll,
               "convert dtype (float->int truncates toward zero and saturates; NaN->0; nonzero->true)", 0},
      OpSchema{Op::kFill, "fill", OpKind::kFill, {}, {"out"},
               {{"value", OAR_ATTR_FLOAT, 0.0, "the value (INT for integer and bool outputs)"},
                {"shape", OAR_ATTR_INTS, std::vector<int64_t>{}, "output shape"},
                {"dtype", OAR_ATTR_INT, int64_t{OAR_DTYPE_FLOAT32}, "output oar_dtype"}},
               0, "a tensor filled with one value", 0},
      OpSchema{Op::kCopy, "copy", OpKind::kCopy, {"src"}, {"dst"}, {}, kAll,
               "copy elements into a (possibly strided) destination of the same shape and dtype", 0},
  };
  for (size_t i = 0; i < all.size(); ++i) {
    OAR_CHECK(static_cast<int>(all[i].op) == static_cast<int>(i), kInternal, "op table out of order at {}", all[i].name);
    all[i].kernel_id = runtime::InternOp(all[i].name);
  }
  OAR_CHECK(all.size() == static_cast<size_t>(Op::kCount_), kInternal, "op table has {} entries", all.size());
  return all;
}

}  // namespace

std::vector<TensorMeta> OpSchema::Infer(std::span<const TensorMeta> in, const AttrValues& attrs) const {
  OAR_CHECK_ARG(in.size() == inputs.size(), "{}: expected {} inputs, got {}", name, inputs.size(), in.size());
  OAR_CHECK(attrs.size() == this->attrs.size(), kInternal, "{}: expected {} attributes, got {}", name,
            this->attrs.size(), attrs.size());
  switch (kind) {
    case OpKind::kUnary: return InferUnary(*this, in, attrs);
    case OpKind::kBinary: return InferBinary(*this, in, attrs);
    case OpKind::kMatmul: return InferMatmul(*this, in, attrs);
    case OpKind::kReduce: return InferReduce(*this, in, attrs);
    case OpKind::kCast: return InferCast(*this, in, attrs);
    case OpKind::kFill: return InferFill(*this, in, attrs);
    case OpKind::kCopy: return InferCopy(*this, in, attrs);
  }
  Throw(ErrorCode::kInternal, "{}: unknown op kind", name);
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
