#include "core/compiler/loop_interpreter.h"

#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>

#include "core/base/error.h"

namespace oar::compiler {
namespace {

bool IsFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }

// A scalar: floats as double (rounded to float after every float32 operation), the rest as int64.
struct Val {
  double f = 0;
  int64_t i = 0;
};

class Interp {
 public:
  Interp(const Kernel& k, std::span<const HostBuffer> buffers, std::span<const int64_t> params)
      : k_(k), buffers_(buffers) {
    OAR_CHECK(params.size() == k.int_params.size(), kInternal, "cinn interpreter: {} parameters for {}",
              params.size(), k.int_params.size());
    OAR_CHECK(buffers.size() == k.buffers.size(), kInternal, "cinn interpreter: {} buffers for {}", buffers.size(),
              k.buffers.size());
    for (size_t p = 0; p < params.size(); ++p) env_[k.int_params[p]] = {0, params[p]};
  }

  void RunAll() {
    const int64_t tasks = Eval(k_.num_tasks).i;
    for (int64_t t = 0; t < tasks; ++t) {
      env_[k_.body->var] = {0, t};
      for (const Stmt& s : k_.body->body) Exec(s);
    }
  }

  Val Eval(const Expr& e) {
    const DType t = e->dtype;
    switch (e->op) {
      case ExprOp::kIntImm: return {0, e->int_value};
      case ExprOp::kFloatImm: return Float(e->float_value, t);
      case ExprOp::kVar: {
        auto it = env_.find(e->var);
        OAR_CHECK(it != env_.end(), kInternal, "cinn interpreter: '{}' is not defined", e->var);
        return it->second;
      }
      case ExprOp::kLoad: return LoadAt(e->buffer, Eval(e->args[0]).i);
      case ExprOp::kSelect: return Truth(e->args[0]) ? Eval(e->args[1]) : Eval(e->args[2]);
      case ExprOp::kCast: return CastTo(Eval(e->args[0]), e->args[0]->dtype, t);
      default: break;
    }
    if (e->args.size() == 1) return UnaryOp(e->op, Eval(e->args[0]), e->args[0]->dtype, t);
    return BinaryOp(e->op, Eval(e->args[0]), Eval(e->args[1]), e->args[0]->dtype, t);
  }

 private:
  static Val Float(double v, DType t) { return {t == DType::kFloat32 ? static_cast<double>(static_cast<float>(v)) : v, 0}; }
  static Val Int(int64_t v, DType t) {
    if (t == DType::kInt32) v = static_cast<int32_t>(v);
    if (t == DType::kBool) v = v != 0;
    return {0, v};
  }
  bool Truth(const Expr& e) {
    const Val v = Eval(e);
    return IsFloat(e->dtype) ? v.f != 0 : v.i != 0;
  }

  Val UnaryOp(ExprOp op, Val a, DType in, DType out) {
    if (!IsFloat(in)) {
      switch (op) {
        case ExprOp::kNeg: return Int(-a.i, out);
        case ExprOp::kAbs: return Int(a.i < 0 ? -a.i : a.i, out);
        case ExprOp::kSign: return Int((a.i > 0) - (a.i < 0), out);
        case ExprOp::kRelu: return Int(a.i < 0 ? 0 : a.i, out);
        case ExprOp::kNot: return Int(a.i == 0, out);
        default: Throw(ErrorCode::kInternal, "cinn interpreter: {} on an integer", ExprOpName(op));
      }
    }
    const double x = a.f;
    switch (op) {
      case ExprOp::kNeg: return Float(-x, out);
      case ExprOp::kExp: return Float(std::exp(x), out);
      case ExprOp::kLog: return Float(std::log(x), out);
      case ExprOp::kLog1p: return Float(std::log1p(x), out);
      case ExprOp::kSqrt: return Float(std::sqrt(x), out);
      case ExprOp::kRsqrt: return Float(1.0 / std::sqrt(x), out);
      case ExprOp::kSin: return Float(std::sin(x), out);
      case ExprOp::kCos: return Float(std::cos(x), out);
      case ExprOp::kTanh: return Float(std::tanh(x), out);
      case ExprOp::kErf: return Float(std::erf(x), out);
      case ExprOp::kSigmoid: return Float(1.0 / (1.0 + std::exp(-x)), out);
      case ExprOp::kReciprocal: return Float(1.0 / x, out);
      case ExprOp::kAbs: return Float(std::fabs(x), out);
      case ExprOp::kSign: return Float(x > 0 ? 1.0 : x < 0 ? -1.0 : x, out);
      case ExprOp::kRelu: return Float(x < 0 ? 0.0 : x, out);
      case ExprOp::kNot: return Int(x == 0, out);
      case ExprOp::kIsNan: return Int(std::isnan(x), out);
      case ExprOp::kIsInf: return Int(std::isinf(x), out);
      default: Throw(ErrorCode::kInternal, "cinn interpreter: {} is not unary", ExprOpName(op));
    }
  }

  Val BinaryOp(ExprOp op, Val a, Val b, DType in, DType out) {
    const bool f = IsFloat(in);
    auto cmp = [&](bool r) { return Int(r, DType::kBool); };
    switch (op) {
      case ExprOp::kEq: return cmp(f ? a.f == b.f : a.i == b.i);
      case ExprOp::kNe: return cmp(f ? a.f != b.f : a.i != b.i);
      case ExprOp::kLt: return cmp(f ? a.f < b.f : a.i < b.i);
      case ExprOp::kLe: return cmp(f ? a.f <= b.f : a.i <= b.i);
      case ExprOp::kGt: return cmp(f ? a.f > b.f : a.i > b.i);
      case ExprOp::kGe: return cmp(f ? a.f >= b.f : a.i >= b.i);
      case ExprOp::kAnd: return cmp(a.i != 0 && b.i != 0);
      case ExprOp::kOr: return cmp(a.i != 0 || b.i != 0);
      default: break;
    }
    if (!f) {
      switch (op) {
        case ExprOp::kAdd: return Int(a.i + b.i, out);
        case ExprOp::kSub: return Int(a.i - b.i, out);
        case ExprOp::kMul: return Int(a.i * b.i, out);
        case ExprOp::kDiv:
          OAR_CHECK(b.i != 0, kInternal, "cinn interpreter: integer division by zero");
          return Int(a.i / b.i, out);
        case ExprOp::kMod:
          OAR_CHECK(b.i != 0, kInternal, "cinn interpreter: integer modulo by zero");
          return Int(a.i % b.i, out);
        case ExprOp::kMax: return Int(std::max(a.i, b.i), out);
        case ExprOp::kMin: return Int(std::min(a.i, b.i), out);
        default: Throw(ErrorCode::kInternal, "cinn interpreter: {} on integers", ExprOpName(op));
      }
    }
    const double x = a.f, y = b.f;
    switch (op) {
      case ExprOp::kAdd: return Float(x + y, out);
      case ExprOp::kSub: return Float(x - y, out);
      case ExprOp::kMul: return Float(x * y, out);
      case ExprOp::kDiv: return Float(x / y, out);
      case ExprOp::kMax: return Float(std::isnan(x) || std::isnan(y) ? std::nan("") : std::max(x, y), out);
      case ExprOp::kMin: return Float(std::isnan(x) || std::isnan(y) ? std::nan("") : std::min(x, y), out);
      case ExprOp::kPow: return Float(std::pow(x, y), out);
      default: Throw(ErrorCode::kInternal, "cinn interpreter: {} on floats", ExprOpName(op));
    }
  }

  static Val CastTo(Val v, DType from, DType to) {
    if (to == DType::kBool) return Int(IsFloat(from) ? v.f != 0 : v.i != 0, to);
    if (IsFloat(to)) return Float(IsFloat(from) ? v.f : static_cast<double>(v.i), to);
    if (!IsFloat(from)) return Int(v.i, to);
    // truncate toward zero, saturate, NaN -> 0
    if (std::isnan(v.f)) return Int(0, to);
    const double lo = to == DType::kInt32 ? std::numeric_limits<int32_t>::min() : to == DType::kInt8 ? -128.0
                      : to == DType::kUInt8 ? 0.0 : static_cast<double>(std::numeric_limits<int64_t>::min());
    const double hi = to == DType::kInt32 ? std::numeric_limits<int32_t>::max() : to == DType::kInt8 ? 127.0
                      : to == DType::kUInt8 ? 255.0 : static_cast<double>(std::numeric_limits<int64_t>::max());
    if (v.f >= hi) return {0, to == DType::kInt64 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(hi)};
    if (v.f <= lo) return {0, to == DType::kInt64 ? std::numeric_limits<int64_t>::min() : static_cast<int64_t>(lo)};
    return Int(static_cast<int64_t>(std::trunc(v.f)), to);
  }

  void* Element(int b, int64_t offset) {
    const HostBuffer& hb = buffers_[static_cast<size_t>(b)];
    OAR_CHECK(offset >= 0 && offset < hb.numel, kInternal, "cinn interpreter: {}[{}] is outside its {} elements",
              k_.buffers[static_cast<size_t>(b)].name, offset, hb.numel);
    return static_cast<char*>(hb.data) + offset * static_cast<int64_t>(DTypeSize(k_.buffers[static_cast<size_t>(b)].dtype));
  }

  Val LoadAt(int b, int64_t offset) {
    void* p = Element(b, offset);
    switch (k_.buffers[static_cast<size_t>(b)].dtype) {
      case DType::kFloat32: return {static_cast<double>(*static_cast<float*>(p)), 0};
      case DType::kFloat64: return {*static_cast<double*>(p), 0};
      case DType::kInt32: return {0, *static_cast<int32_t*>(p)};
      case DType::kInt64: return {0, *static_cast<int64_t*>(p)};
      case DType::kInt8: return {0, *static_cast<int8_t*>(p)};
      case DType::kUInt8: return {0, *static_cast<uint8_t*>(p)};
      case DType::kBool: return {0, *static_cast<bool*>(p) ? 1 : 0};
      default: Throw(ErrorCode::kInternal, "cinn interpreter: unsupported buffer dtype");
    }
  }

  void StoreAt(int b, int64_t offset, Val v) {
    void* p = Element(b, offset);
    switch (k_.buffers[static_cast<size_t>(b)].dtype) {
      case DType::kFloat32: *static_cast<float*>(p) = static_cast<float>(v.f); return;
      case DType::kFloat64: *static_cast<double*>(p) = v.f; return;
      case DType::kInt32: *static_cast<int32_t*>(p) = static_cast<int32_t>(v.i); return;
      case DType::kInt64: *static_cast<int64_t*>(p) = v.i; return;
      case DType::kInt8: *static_cast<int8_t*>(p) = static_cast<int8_t>(v.i); return;
      case DType::kUInt8: *static_cast<uint8_t*>(p) = static_cast<uint8_t>(v.i); return;
      case DType::kBool: *static_cast<bool*>(p) = v.i != 0; return;
      default: Throw(ErrorCode::kInternal, "cinn interpreter: unsupported buffer dtype");
    }
  }

  void Exec(const Stmt& s) {
    switch (s->op) {
      case StmtOp::kSeq:
      case StmtOp::kSingle:
        for (const Stmt& c : s->body) Exec(c);
        return;
      case StmtOp::kFor: {
        const int64_t n = Eval(s->extent).i;
        for (int64_t i = 0; i < n; ++i) {
          env_[s->var] = {0, i};
          for (const Stmt& c : s->body) Exec(c);
        }
        return;
      }
      case StmtOp::kLocal:
      case StmtOp::kAssign: env_[s->var] = Eval(s->value); return;
      case StmtOp::kStore: StoreAt(s->buffer, Eval(s->offset).i, Eval(s->value)); return;
      case StmtOp::kBlockReduce: return;  // loops run serially here
    }
  }

  const Kernel& k_;
  std::span<const HostBuffer> buffers_;
  std::unordered_map<std::string, Val> env_;
};

}  // namespace

void InterpretKernel(const Kernel& k, std::span<const HostBuffer> buffers, std::span<const int64_t> params) {
  Interp(k, buffers, params).RunAll();
}

int64_t EvaluateIndex(const Kernel& k, const Expr& e, std::span<const int64_t> params) {
  std::vector<HostBuffer> none(k.buffers.size());
  return Interp(k, none, params).Eval(e).i;
}

}  // namespace oar::compiler
