// The builtin and cf dialects.
//
// builtin: the structure of a program.
//   builtin.module            one region holding the program; isolated from above
//   builtin.data              an input of the program, by name and position; its type is the input spec
//   builtin.parameter         a named parameter (weights live in Program::parameters)
//   builtin.constant          a tensor literal: `value` holds one element (splat) or every element
//   builtin.output            the program's results (names optional)
//   builtin.combine / split   pack tensors into a vec value and back
// cf: structured control flow with regions.
//   cf.if(%cond) ({then}, {else})         each region yields the results
//   cf.while(%init...) ({cond}, {body})  cond's block takes the loop values and ends in
//                                         cf.condition(%continue, %values...); body takes them and yields
//                                         the next ones; the results are the values when cond is false
#include <memory>

#include "core/base/error.h"
#include "core/ir/context.h"
#include "core/ir/dialect.h"

namespace oar::ir {
namespace {

std::vector<Type> InferCombine(IrContext& ctx, const OpInfo&, const OpSignature& sig) {
  return {ctx.VectorType(sig.operand_types)};
}

std::vector<Type> InferSplit(IrContext&, const OpInfo& info, const OpSignature& sig) {
  OAR_CHECK_ARG(sig.operand_types.size() == 1 && sig.operand_types[0].kind() == TypeKind::kVector,
                "{}: the operand must be a vec value", info.name);
  const auto e = sig.operand_types[0].elements();
  return {e.begin(), e.end()};
}

void VerifyConstant(const Operation& op) {
  const Type t = op.result(0).type();
  OAR_CHECK_ARG(t.IsTensor() || t.kind() == TypeKind::kScalar, "builtin.constant: the result must be a tensor or a scalar");
  const auto values = op.attr("value").AsArray();
  for (Attribute v : values) {
    OAR_CHECK_ARG(v.kind() == AttrKind::kInt || v.kind() == AttrKind::kFloat || v.kind() == AttrKind::kBool,
                  "builtin.constant: 'value' elements must be int, float or bool, got {}", AttrKindName(v.kind()));
  }
  if (t.IsTensor()) {
    OAR_CHECK_ARG(t.HasStaticShape(), "builtin.constant: the result type must have a static shape");
    const int64_t n = t.dims().Product();
    OAR_CHECK_ARG(static_cast<int64_t>(values.size()) == n || values.size() == 1,
                  "builtin.constant: 'value' has {} elements; the type {} needs {} (or 1 to splat)", values.size(),
                  t.dims().ToString(), n);
  } else {
    OAR_CHECK_ARG(values.size() == 1, "builtin.constant: a scalar constant needs exactly one value, got {}", values.size());
  }
}

void VerifyDataOrParameter(const Operation& op) {
  OAR_CHECK_ARG(op.result(0).type().IsTensor(), "{}: the result must be a tensor", op.name());
  OAR_CHECK_ARG(!op.attr("name").AsString().empty(), "{}: 'name' must not be empty", op.name());
}

void VerifyIsBoolCondition(const Operation& op, Type t, const char* what) {
  const bool ok = t.dtype() == DType::kBool &&
                  (t.kind() == TypeKind::kScalar || (t.IsTensor() && t.HasStaticShape() && t.dims().Product() == 1));
  OAR_CHECK_ARG(ok, "{}: {} must be a one-element bool tensor or an i1 scalar", op.name(), what);
}

// The terminator of the single block of region `r` of `op`, which must be `name`.
const Operation& Terminator(const Operation& op, uint32_t r, std::string_view name) {
  const Region& region = op.region(r);
  OAR_CHECK_ARG(region.size() == 1, "{}: region {} must have exactly one block, has {}", op.name(), r, region.size());
  const Operation* term = region.front().back();
  OAR_CHECK_ARG(term != nullptr && term->name() == name, "{}: region {} must end with {}, ends with {}", op.name(), r,
                name, term ? term->name() : std::string_view("nothing"));
  return *term;
}

void CheckTypes(const Operation& op, std::string_view what, std::span<const Type> want, std::span<const Type> got) {
  OAR_CHECK_ARG(want.size() == got.size(), "{}: {} has {} values, expected {}", op.name(), what, got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    OAR_CHECK_ARG(want[i] == got[i], "{}: {} value {} has another type than expected", op.name(), what, i);
  }
}

std::vector<Type> TypesOf(std::span<const Value> values) {
  std::vector<Type> t;
  for (Value v : values) t.push_back(v.type());
  return t;
}

std::vector<Type> ResultTypes(const Operation& op) { return TypesOf(op.results()); }

void VerifyIf(const Operation& op) {
  VerifyIsBoolCondition(op, op.operand(0).type(), "the condition");
  for (uint32_t r = 0; r < 2; ++r) {
    OAR_CHECK_ARG(op.region(r).empty() || op.region(r).front().num_arguments() == 0,
                  "cf.if: region {} must not take arguments", r);
    const Operation& y = Terminator(op, r, "cf.yield");
    CheckTypes(op, r == 0 ? "the then-region's yield" : "the else-region's yield", ResultTypes(op),
               TypesOf(y.OperandValues()));
  }
}

void VerifyWhile(const Operation& op) {
  const std::vector<Type> loop = TypesOf(op.OperandValues());
  CheckTypes(op, "the results", loop, ResultTypes(op));
  for (uint32_t r = 0; r < 2; ++r) {
    OAR_CHECK_ARG(op.region(r).size() == 1, "cf.while: region {} must have exactly one block", r);
    const Block& b = op.region(r).front();
    std::vector<Type> args;
    for (size_t i = 0; i < b.num_arguments(); ++i) args.push_back(b.argument(i).type());
    CheckTypes(op, r == 0 ? "the condition region's arguments" : "the body region's arguments", loop, args);
  }
  const Operation& c = Terminator(op, 0, "cf.condition");
  OAR_CHECK_ARG(c.num_operands() >= 1, "cf.condition: expects the continue flag first");
  VerifyIsBoolCondition(c, c.operand(0).type(), "the continue flag");
  std::vector<Type> carried = TypesOf(c.OperandValues());
  carried.erase(carried.begin());
  CheckTypes(op, "cf.condition's forwarded values", loop, carried);
  const Operation& y = Terminator(op, 1, "cf.yield");
  CheckTypes(op, "the body's yield", loop, TypesOf(y.OperandValues()));
}

void VerifyTerminatorParent(const Operation& op) {
  const Operation* parent = op.parent_op();
  OAR_CHECK_ARG(parent != nullptr && (parent->name() == "cf.if" || parent->name() == "cf.while"),
                "{}: must end a region of cf.if or cf.while", op.name());
  OAR_CHECK_ARG(op.name() != "cf.condition" || &parent->region(0) == op.parent_block()->parent_region(),
                "cf.condition: must end the condition region of cf.while");
}

}  // namespace

void RegisterBuiltinDialect(IrContext& ctx) {
  auto d = std::make_unique<Dialect>(ctx, "builtin");
  const Attribute no_default;
  d->AddOp({.name = "module", .traits = kIsolatedFromAbove, .num_regions = 1});
  d->AddOp({.name = "data",
            .num_results = 1,
            .attrs = {{"index", AttrKind::kInt, no_default}, {"name", AttrKind::kString, no_default}},
            .verify = VerifyDataOrParameter});
  d->AddOp({.name = "parameter",
            .traits = kPure,
            .num_results = 1,
            .attrs = {{"name", AttrKind::kString, no_default}},
            .verify = VerifyDataOrParameter});
  d->AddOp({.name = "constant",
            .traits = kPure | kConstantLike,
            .num_results = 1,
            .attrs = {{"value", AttrKind::kArray, no_default, AttrKind::kFloat, true}},
            .verify = VerifyConstant});
  d->AddOp({.name = "output",
            .num_operands = -1,
            .attrs = {{"names", AttrKind::kArray, ctx.ArrayAttr({}), AttrKind::kString}},
            .verify = [](const Operation& op) {
              const auto names = op.attr("names").AsArray();
              OAR_CHECK_ARG(names.empty() || names.size() == op.num_operands(),
                            "builtin.output: {} names for {} outputs", names.size(), op.num_operands());
            }});
  d->AddOp({.name = "combine", .traits = kPure, .num_operands = -1, .num_results = 1, .infer = InferCombine});
  d->AddOp({.name = "split", .traits = kPure, .num_operands = 1, .num_results = -1, .infer = InferSplit});
  ctx.AddDialect(std::move(d));
}

void RegisterControlFlowDialect(IrContext& ctx) {
  auto d = std::make_unique<Dialect>(ctx, "cf");
  d->AddOp({.name = "if", .num_operands = 1, .num_results = -1, .num_regions = 2, .verify = VerifyIf});
  d->AddOp({.name = "while", .num_operands = -1, .num_results = -1, .num_regions = 2, .verify = VerifyWhile});
  d->AddOp({.name = "yield", .traits = kTerminator, .num_operands = -1, .verify = VerifyTerminatorParent});
  d->AddOp({.name = "condition", .traits = kTerminator, .num_operands = -1, .verify = VerifyTerminatorParent});
  ctx.AddDialect(std::move(d));
}

}  // namespace oar::ir
