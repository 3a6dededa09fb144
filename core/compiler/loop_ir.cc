#include "core/compiler/loop_ir.h"

#include "core/base/error.h"

namespace oar::compiler {
namespace {
Expr Make(ExprNode n) { return std::make_shared<const ExprNode>(std::move(n)); }
Stmt MakeStmt(StmtNode n) { return std::make_shared<StmtNode>(std::move(n)); }
}  // namespace

Expr IntImm(int64_t v) { return Make({.op = ExprOp::kIntImm, .dtype = DType::kInt64, .int_value = v}); }
Expr FloatImm(double v, DType dtype) { return Make({.op = ExprOp::kFloatImm, .dtype = dtype, .float_value = v}); }
Expr Var(std::string name, DType dtype) { return Make({.op = ExprOp::kVar, .dtype = dtype, .var = std::move(name)}); }
Expr Load(int buffer, DType dtype, Expr offset) {
  return Make({.op = ExprOp::kLoad, .dtype = dtype, .buffer = buffer, .args = {std::move(offset)}});
}
Expr Unary(ExprOp op, Expr a) {
  const DType t = op == ExprOp::kNot || op == ExprOp::kIsNan || op == ExprOp::kIsInf ? DType::kBool : a->dtype;
  return Make({.op = op, .dtype = t, .args = {std::move(a)}});
}
Expr Binary(ExprOp op, Expr a, Expr b) {
  const DType t = IsComparison(op) ? DType::kBool : a->dtype;
  return Make({.op = op, .dtype = t, .args = {std::move(a), std::move(b)}});
}
Expr Select(Expr cond, Expr a, Expr b) {
  const DType t = a->dtype;
  return Make({.op = ExprOp::kSelect, .dtype = t, .args = {std::move(cond), std::move(a), std::move(b)}});
}
Expr Cast(Expr a, DType to) {
  if (a->dtype == to) return a;
  return Make({.op = ExprOp::kCast, .dtype = to, .args = {std::move(a)}});
}

Expr IndexAdd(Expr a, Expr b) {
  if (a->op == ExprOp::kIntImm && a->int_value == 0) return b;
  if (b->op == ExprOp::kIntImm && b->int_value == 0) return a;
  if (a->op == ExprOp::kIntImm && b->op == ExprOp::kIntImm) return IntImm(a->int_value + b->int_value);
  return Binary(ExprOp::kAdd, std::move(a), std::move(b));
}

Expr IndexMul(Expr a, Expr b) {
  for (const Expr* x : {&a, &b}) {
    if ((*x)->op == ExprOp::kIntImm && (*x)->int_value == 0) return IntImm(0);
  }
  if (a->op == ExprOp::kIntImm && a->int_value == 1) return b;
  if (b->op == ExprOp::kIntImm && b->int_value == 1) return a;
  return Binary(ExprOp::kMul, std::move(a), std::move(b));
}

bool IsComparison(ExprOp op) {
  switch (op) {
    case ExprOp::kEq: case ExprOp::kNe: case ExprOp::kLt: case ExprOp::kLe: case ExprOp::kGt: case ExprOp::kGe:
    case ExprOp::kAnd: case ExprOp::kOr:
      return true;
    default:
      return false;
  }
}

const char* ExprOpName(ExprOp op) {
  switch (op) {
    case ExprOp::kIntImm: return "int";
    case ExprOp::kFloatImm: return "float";
    case ExprOp::kVar: return "var";
    case ExprOp::kLoad: return "load";
    case ExprOp::kNeg: return "neg";
    case ExprOp::kExp: return "exp";
    case ExprOp::kLog: return "log";
    case ExprOp::kLog1p: return "log1p";
    case ExprOp::kSqrt: return "sqrt";
    case ExprOp::kRsqrt: return "rsqrt";
    case ExprOp::kSin: return "sin";
    case ExprOp::kCos: return "cos";
    case ExprOp::kTanh: return "tanh";
    case ExprOp::kSigmoid: return "sigmoid";
    case ExprOp::kErf: return "erf";
    case ExprOp::kAbs: return "abs";
    case ExprOp::kSign: return "sign";
    case ExprOp::kRelu: return "relu";
    case ExprOp::kReciprocal: return "reciprocal";
    case ExprOp::kNot: return "not";
    case ExprOp::kIsNan: return "isnan";
    case ExprOp::kIsInf: return "isinf";
    case ExprOp::kAdd: return "add";
    case ExprOp::kSub: return "sub";
    case ExprOp::kMul: return "mul";
    case ExprOp::kDiv: return "div";
    case ExprOp::kMod: return "mod";
    case ExprOp::kMax: return "max";
    case ExprOp::kMin: return "min";
    case ExprOp::kPow: return "pow";
    case ExprOp::kEq: return "eq";
    case ExprOp::kNe: return "ne";
    case ExprOp::kLt: return "lt";
    case ExprOp::kLe: return "le";
    case ExprOp::kGt: return "gt";
    case ExprOp::kGe: return "ge";
    case ExprOp::kAnd: return "and";
    case ExprOp::kOr: return "or";
    case ExprOp::kSelect: return "select";
    case ExprOp::kCast: return "cast";
  }
  return "?";
}

Stmt Seq(std::vector<Stmt> body) { return MakeStmt({.op = StmtOp::kSeq, .body = std::move(body)}); }
Stmt For(std::string var, Expr extent, LoopKind kind, std::vector<Stmt> body) {
  return MakeStmt({.op = StmtOp::kFor, .body = std::move(body), .var = std::move(var), .extent = std::move(extent),
                   .loop = kind});
}
Stmt Local(std::string var, DType dtype, Expr value) {
  return MakeStmt({.op = StmtOp::kLocal, .var = std::move(var), .dtype = dtype, .value = std::move(value)});
}
Stmt Assign(std::string var, Expr value) {
  return MakeStmt({.op = StmtOp::kAssign, .var = std::move(var), .value = std::move(value)});
}
Stmt Store(int buffer, Expr offset, Expr value) {
  return MakeStmt({.op = StmtOp::kStore, .value = std::move(value), .buffer = buffer, .offset = std::move(offset)});
}
Stmt BlockReduce(std::string var, DType dtype, ReduceOp op) {
  return MakeStmt({.op = StmtOp::kBlockReduce, .var = std::move(var), .dtype = dtype, .reduce = op});
}
Stmt Single(std::vector<Stmt> body) { return MakeStmt({.op = StmtOp::kSingle, .body = std::move(body)}); }

const char* CTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "float";
    case DType::kFloat64: return "double";
    case DType::kInt32: return "int32_t";
    case DType::kInt64: return "int64_t";
    case DType::kInt8: return "int8_t";
    case DType::kUInt8: return "uint8_t";
    case DType::kBool: return "bool";
    default: Throw(ErrorCode::kUnimplemented, "cinn: no scalar type for {} in generated code", DTypeName(t));
  }
}

}  // namespace oar::compiler
