// The `op` dialect: one IR op per op schema (core/ops), generated when the context is built. Operands,
// results, attributes (names, kinds, defaults) and result-type inference all come from the schema, so an op
// added to the schema table is an IR op with nothing more to write.
//
// Symbolic extents go through the schemas' shape rules by shape_infer.h.
#include <algorithm>
#include <memory>

#include "core/base/error.h"
#include "core/ir/context.h"
#include "core/ir/dialect.h"
#include "core/ir/op_dialect.h"
#include "core/ir/shape_infer.h"
#include "core/ops/schema.h"

namespace oar::ir {
namespace {

AttrKind KindOf(const ops::AttrSpec& spec) {
  if (spec.name == "dtype" && spec.type == OAR_ATTR_INT) return AttrKind::kDType;
  switch (spec.type) {
    case OAR_ATTR_INT: return AttrKind::kInt;
    case OAR_ATTR_FLOAT: return AttrKind::kFloat;
    case OAR_ATTR_BOOL: return AttrKind::kBool;
    case OAR_ATTR_INTS: return AttrKind::kArray;
    default: Throw(ErrorCode::kInternal, "op schema attribute '{}' has an unsupported type {}", spec.name, spec.type);
  }
}

Attribute ToAttribute(IrContext& ctx, AttrKind kind, const ops::AttrValue& v) {
  switch (kind) {
    case AttrKind::kDType: return ctx.DTypeAttr(static_cast<DType>(std::get<int64_t>(v)));
    case AttrKind::kInt: return ctx.IntAttr(std::get<int64_t>(v));
    case AttrKind::kFloat: return ctx.FloatAttr(std::get<double>(v));
    case AttrKind::kBool: return ctx.BoolAttr(std::get<bool>(v));
    case AttrKind::kArray: return ctx.IntArrayAttr(std::get<std::vector<int64_t>>(v));
    default: Throw(ErrorCode::kInternal, "unsupported attribute kind {}", AttrKindName(kind));
  }
}

}  // namespace

/// The schema's attribute values for an op's attributes (schema order).
ops::AttrValues SchemaAttrValues(const ops::OpSchema& s, const std::vector<NamedAttribute>& attrs) {
  ops::AttrValues values;
  values.reserve(s.attrs.size());
  for (const ops::AttrSpec& spec : s.attrs) {
    Attribute a;
    for (const NamedAttribute& n : attrs) {
      if (n.name == spec.name) a = n.value;
    }
    OAR_CHECK(static_cast<bool>(a), kInternal, "{}: attribute '{}' is missing", s.name, spec.name);
    switch (a.kind()) {
      case AttrKind::kDType: values.emplace_back(int64_t{static_cast<int32_t>(a.AsDType())}); break;
      case AttrKind::kInt: values.emplace_back(a.AsInt()); break;
      case AttrKind::kFloat: values.emplace_back(a.AsFloat()); break;
      case AttrKind::kBool: values.emplace_back(a.AsBool()); break;
      case AttrKind::kArray: values.emplace_back(a.AsInts(spec.name)); break;
      default: Throw(ErrorCode::kInternal, "{}: attribute '{}' has kind {}", s.name, spec.name, AttrKindName(a.kind()));
    }
  }
  return values;
}

std::vector<NamedAttribute> SchemaAttributes(IrContext& ctx, const ops::OpSchema& s, const ops::AttrValues& values) {
  OAR_CHECK(values.size() == s.attrs.size(), kInternal, "{}: {} attribute values for {} attributes", s.name,
            values.size(), s.attrs.size());
  std::vector<NamedAttribute> out;
  out.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    out.push_back({ctx.Intern(s.attrs[i].name), ToAttribute(ctx, KindOf(s.attrs[i]), values[i])});
  }
  return out;
}

namespace {

std::vector<Type> InferFromSchema(IrContext& ctx, const OpInfo& info, const OpSignature& sig) {
  return InferSymbolic(ctx, *info.schema, sig.operand_types, sig.attributes).types;
}

uint32_t TraitsOf(const ops::OpSchema& s) {
  uint32_t t = kPure;
  switch (s.kind) {
    case ops::OpKind::kUnary:
    case ops::OpKind::kPredicate:
    case ops::OpKind::kBinary:
    case ops::OpKind::kCompare:
    case ops::OpKind::kWhere:
    case ops::OpKind::kCast: t |= kElementwise; break;
    case ops::OpKind::kReduce:
    case ops::OpKind::kArgReduce: t |= kReduction; break;
    case ops::OpKind::kView: t |= kView; break;
    case ops::OpKind::kFill: t |= kConstantLike; break;
    default: break;
  }
  using ops::Op;
  switch (s.op) {
    case Op::kAdd: case Op::kMul: case Op::kMaximum: case Op::kMinimum: case Op::kEq: case Op::kNe:
    case Op::kLogicalAnd: case Op::kLogicalOr: t |= kCommutative; break;
    // fused_adam's param, grad, m and v, and relu_grad's grad and x, are read at each result element's index
    // (fused_adam's scalars are 0-d).
    case Op::kFusedAdam: case Op::kReluGrad: t |= kElementwise; break;
    // grad and the forward's result are read at each result element's index (one is 0-d).
    case Op::kFusedTanhGrad: case Op::kFusedSigmoidGrad: t |= kElementwise; break;
    default: break;
  }
  if (s.kind == ops::OpKind::kUnary || s.kind == ops::OpKind::kPredicate || s.kind == ops::OpKind::kCast ||
      s.kind == ops::OpKind::kAxiswise) {
    t |= kSameShape;
  }
  return t;
}

OpInfo InfoFromSchema(IrContext& ctx, const ops::OpSchema& s) {
  OpInfo info;
  info.name = std::string(s.name);
  info.traits = TraitsOf(s);
  info.num_operands = s.variadic ? -1 : static_cast<int>(s.inputs.size());
  info.num_results = static_cast<int>(s.outputs.size());
  info.infer = InferFromSchema;
  info.schema = &s;
  for (const ops::AttrSpec& spec : s.attrs) {
    const AttrKind kind = KindOf(spec);
    info.attrs.push_back({spec.name, kind, ToAttribute(ctx, kind, spec.default_value), AttrKind::kInt});
  }
  return info;
}

void VerifyDeviceAttr(const Operation& op) {
  OAR_CHECK_ARG(!op.attr("device").AsString().empty(), "{}: 'device' must name a device", op.name());
}

}  // namespace

void RegisterOpDialect(IrContext& ctx) {
  auto d = std::make_unique<Dialect>(ctx, "op");
  for (const ops::OpSchema& s : ops::AllSchemas()) d->AddOp(InfoFromSchema(ctx, s));
  ctx.AddDialect(std::move(d));
}

void RegisterKernelDialect(IrContext& ctx) {
  auto d = std::make_unique<Dialect>(ctx, "kernel");
  const Attribute required;
  const Attribute plain = ctx.StringAttr("plain");
  // kernel.<op>: the op bound to a device and a storage format; the kernel key is its operand and result
  // dtypes. Same operands, results, attributes and inference as op.<op>.
  for (const ops::OpSchema& s : ops::AllSchemas()) {
    OpInfo info = InfoFromSchema(ctx, s);
    info.attrs.push_back({"device", AttrKind::kDevice, required});
    info.attrs.push_back({"format", AttrKind::kString, plain});
    info.verify = VerifyDeviceAttr;
    d->AddOp(std::move(info));
  }
  // Explicit data movement inserted by kernel selection.
  auto same_type = [](IrContext&, const OpInfo&, const OpSignature& sig) {
    return std::vector<Type>(sig.operand_types.begin(), sig.operand_types.end());
  };
  d->AddOp({.name = "transfer",
            .traits = kPure | kSameShape,
            .num_operands = 1,
            .num_results = 1,
            .attrs = {{"from", AttrKind::kDevice, required}, {"to", AttrKind::kDevice, required}},
            .infer = same_type});
  d->AddOp({.name = "format_cast",
            .traits = kPure | kSameShape,
            .num_operands = 1,
            .num_results = 1,
            .attrs = {{"device", AttrKind::kDevice, required},
                      {"from", AttrKind::kString, plain},
                      {"to", AttrKind::kString, plain}},
            .infer = same_type,
            .verify = VerifyDeviceAttr});
  ctx.AddDialect(std::move(d));
}

}  // namespace oar::ir
