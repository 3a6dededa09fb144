#include "core/compiler/lower.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "core/base/error.h"
#include "core/ir/dialect.h"
#include "core/ir/op_dialect.h"
#include "core/ops/schema.h"

namespace oar::compiler {
namespace {

// Elementwise groups split a long last extent into tiles so that 1-D and few-row domains still spread.
constexpr int64_t kElementwiseTile = 8192;

ExprOp UnaryOf(ops::Op op) {
  switch (op) {
    case ops::Op::kNeg: return ExprOp::kNeg;
    case ops::Op::kExp: return ExprOp::kExp;
    case ops::Op::kRelu: return ExprOp::kRelu;
    case ops::Op::kAbs: return ExprOp::kAbs;
    case ops::Op::kSign: return ExprOp::kSign;
    case ops::Op::kLog: return ExprOp::kLog;
    case ops::Op::kLog1p: return ExprOp::kLog1p;
    case ops::Op::kSqrt: return ExprOp::kSqrt;
    case ops::Op::kRsqrt: return ExprOp::kRsqrt;
    case ops::Op::kSin: return ExprOp::kSin;
    case ops::Op::kCos: return ExprOp::kCos;
    case ops::Op::kTanh: return ExprOp::kTanh;
    case ops::Op::kSigmoid: return ExprOp::kSigmoid;
    case ops::Op::kErf: return ExprOp::kErf;
    case ops::Op::kReciprocal: return ExprOp::kReciprocal;
    case ops::Op::kLogicalNot: return ExprOp::kNot;
    case ops::Op::kIsNan: return ExprOp::kIsNan;
    case ops::Op::kIsInf: return ExprOp::kIsInf;
    default: Throw(ErrorCode::kUnimplemented, "cinn: {} has no loop-IR form", ops::Schema(op).name);
  }
}

ExprOp BinaryOf(ops::Op op) {
  switch (op) {
    case ops::Op::kAdd: return ExprOp::kAdd;
    case ops::Op::kSub: return ExprOp::kSub;
    case ops::Op::kMul: return ExprOp::kMul;
    case ops::Op::kDiv: return ExprOp::kDiv;
    case ops::Op::kMaximum: return ExprOp::kMax;
    case ops::Op::kMinimum: return ExprOp::kMin;
    case ops::Op::kPow: return ExprOp::kPow;
    case ops::Op::kEq: return ExprOp::kEq;
    case ops::Op::kNe: return ExprOp::kNe;
    case ops::Op::kLt: return ExprOp::kLt;
    case ops::Op::kLe: return ExprOp::kLe;
    case ops::Op::kGt: return ExprOp::kGt;
    case ops::Op::kGe: return ExprOp::kGe;
    case ops::Op::kLogicalAnd: return ExprOp::kAnd;
    case ops::Op::kLogicalOr: return ExprOp::kOr;
    default: Throw(ErrorCode::kUnimplemented, "cinn: {} has no loop-IR form", ops::Schema(op).name);
  }
}

ReduceOp ReduceOf(ops::Op op) {
  switch (op) {
    case ops::Op::kSum:
    case ops::Op::kMean: return ReduceOp::kSum;
    case ops::Op::kProd: return ReduceOp::kProd;
    case ops::Op::kMax: return ReduceOp::kMax;
    case ops::Op::kMin: return ReduceOp::kMin;
    default: Throw(ErrorCode::kUnimplemented, "cinn: {} is not a fusible reduction", ops::Schema(op).name);
  }
}

class Lowerer {
 public:
  Lowerer(const GroupView& g, const GroupAnalysis& a, const Target& t) : g_(g), a_(a), t_(t) {}

  LoweredGroup Run() {
    out_.analysis = a_;
    for (const ir::Operation* op : g_.ops) {
      for (uint32_t i = 0; i < op->num_results(); ++i) def_[op->result(i)] = op;
    }
    // Buffers: the inputs that are read (a block argument may be unused), then the outputs.
    for (ir::Value v : g_.inputs) AddBuffer(v, false);
    out_.num_inputs = out_.buffer_values.size();
    for (ir::Value v : g_.outputs) AddBuffer(v, true);
    const int k = a_.rank();
    for (int d = 0; d < k; ++d) {
      out_.kernel.int_params.push_back("d" + std::to_string(d));
      out_.params.push_back({IntParam::kExtent, d, -1});
    }
    for (size_t b = 0; b < out_.buffer_maps.size(); ++b) {
      for (int m : out_.buffer_maps[b]) {
        if (m < 0 || m == k - 1) continue;
        out_.kernel.int_params.push_back(StrideName(static_cast<int>(b), m));
        out_.params.push_back({IntParam::kStride, m, static_cast<int>(b)});
      }
    }
    out_.kernel.threads_per_task = t_.threads;

    std::vector<Stmt> row;
    row_ = &row;
    // task -> (row, tile) -> outer indices -> each buffer's base offset.
    const Expr last = Var("d" + std::to_string(k - 1));
    Expr rows = IntImm(1);
    for (int d = 0; d < k - 1; ++d) rows = IndexMul(rows, Var("d" + std::to_string(d)));
    const bool tiled = a_.kind == GroupTemplate::kElementwise;
    Expr tiles = IntImm(1), tile_start = IntImm(0), extent = last;
    Expr row_index = Var("t");
    if (tiled) {
      const Expr tile = IntImm(kElementwiseTile);
      tiles = Binary(ExprOp::kDiv, Binary(ExprOp::kAdd, last, IntImm(kElementwiseTile - 1)), tile);
      row.push_back(Local("tile", DType::kInt64, Binary(ExprOp::kMod, Var("t"), tiles)));
      row.push_back(Local("row", DType::kInt64, Binary(ExprOp::kDiv, Var("t"), tiles)));
      row_index = Var("row");
      tile_start = Binary(ExprOp::kMul, Var("tile"), tile);
      extent = Binary(ExprOp::kMin, tile, Binary(ExprOp::kSub, last, tile_start));
    }
    Expr rem = row_index;
    for (int d = k - 2; d >= 0; --d) {
      const Expr ext = Var("d" + std::to_string(d));
      row.push_back(Local("o" + std::to_string(d), DType::kInt64, d == 0 ? rem : Binary(ExprOp::kMod, rem, ext)));
      if (d > 0) {
        row.push_back(Local("q" + std::to_string(d), DType::kInt64, Binary(ExprOp::kDiv, rem, ext)));
        rem = Var("q" + std::to_string(d));
      }
    }
    for (size_t b = 0; b < out_.buffer_maps.size(); ++b) {
      Expr base = tiled && Inner(static_cast<int>(b)) ? tile_start : IntImm(0);
      for (int m : out_.buffer_maps[b]) {
        if (m < 0 || m == k - 1) continue;
        base = IndexAdd(base, IndexMul(Var("o" + std::to_string(m)), Var(StrideName(static_cast<int>(b), m))));
      }
      row.push_back(Local(BaseName(static_cast<int>(b)), DType::kInt64, base));
    }

    double flops = 0;
    for (const ir::Operation* op : g_.ops) {
      if (Classify(*op) == OpClass::kElementwise || Classify(*op) == OpClass::kReduce) flops += 1;
    }
    out_.kernel.flops_per_element = flops;

    for (int pass = 1; pass <= a_.passes; ++pass) LowerPass(pass, extent);
    // The final pass: every output that runs along the last extent.
    std::vector<Stmt> body;
    loop_ = &body;
    loop_done_.clear();
    for (size_t b = out_.num_inputs; b < out_.buffer_values.size(); ++b) {
      if (!Inner(static_cast<int>(b))) continue;
      body.push_back(Store(static_cast<int>(b), Offset(static_cast<int>(b), true), Get(out_.buffer_values[b])));
    }
    loop_ = nullptr;
    if (!body.empty()) row.push_back(For("j", extent, LoopKind::kThreads, std::move(body)));
    // Row outputs, once per row.
    std::vector<Stmt> single;
    for (size_t b = out_.num_inputs; b < out_.buffer_values.size(); ++b) {
      if (Inner(static_cast<int>(b))) continue;
      const Expr v = Get(out_.buffer_values[b]);
      single.push_back(Store(static_cast<int>(b), Offset(static_cast<int>(b), false), v));
    }
    if (!single.empty()) row.push_back(Single(std::move(single)));

    out_.kernel.num_tasks = IndexMul(rows, tiles);
    out_.kernel.body = For("t", out_.kernel.num_tasks, LoopKind::kTask, std::move(row));
    return std::move(out_);
  }

 private:
  static std::string StrideName(int b, int d) { return "s" + std::to_string(b) + "_" + std::to_string(d); }
  static std::string BaseName(int b) { return "base" + std::to_string(b); }

  void AddBuffer(ir::Value v, bool output) {
    const ValueInfo& info = a_.values.at(v);
    if (!output) {
      if (v.use_empty() || IsConstant(v)) return;
    }
    const int b = static_cast<int>(out_.buffer_values.size());
    out_.buffer_values.push_back(v);
    out_.buffer_maps.push_back(info.map);
    out_.kernel.buffers.push_back({(output ? "out" : "in") + std::to_string(b), v.type().dtype(), output});
    if (!output) input_buffer_[v] = b;
  }

  bool IsConstant(ir::Value v) const {
    auto it = def_.find(v);
    return it != def_.end() && Classify(*it->second) == OpClass::kConstant;
  }

  bool Inner(int b) const {
    const auto& m = out_.buffer_maps[static_cast<size_t>(b)];
    return std::find(m.begin(), m.end(), a_.rank() - 1) != m.end();
  }

  Expr Offset(int b, bool in_loop) const {
    const Expr base = Var(BaseName(b));
    return in_loop && Inner(b) ? IndexAdd(base, Var("j")) : base;
  }

  void LowerPass(int pass, const Expr& extent) {
    std::vector<Stmt> body;
    loop_ = &body;
    loop_done_.clear();
    std::vector<const ir::Operation*> reduces;
    for (const ir::Operation* op : g_.ops) {
      if (Classify(*op) == OpClass::kReduce && a_.values.at(op->result(0)).level == pass) reduces.push_back(op);
    }
    std::vector<Stmt> after;
    Stmt loop = For("j", extent, LoopKind::kThreads);
    for (const ir::Operation* op : reduces) {
      const ops::Op kind = op->info().schema->op;
      const ReduceOp r = ReduceOf(kind);
      const DType dt = op->result(0).type().dtype();
      const std::string acc = "acc" + std::to_string(counter_++);
      const double init = r == ReduceOp::kSum   ? 0.0
                          : r == ReduceOp::kProd ? 1.0
                          : r == ReduceOp::kMax  ? -std::numeric_limits<double>::infinity()
                                                 : std::numeric_limits<double>::infinity();
      row_->push_back(Local(acc, dt, FloatImm(init, dt)));
      const Expr x = Get(op->operand(0));
      const Expr a = Var(acc, dt);
      Expr next;
      switch (r) {
        case ReduceOp::kSum: next = Binary(ExprOp::kAdd, a, x); break;
        case ReduceOp::kProd: next = Binary(ExprOp::kMul, a, x); break;
        case ReduceOp::kMax: next = Select(Binary(ExprOp::kGt, x, a), x, a); break;
        case ReduceOp::kMin: next = Select(Binary(ExprOp::kLt, x, a), x, a); break;
        case ReduceOp::kOr: break;
      }
      body.push_back(Assign(acc, next));
      loop->reductions.push_back({acc, r});
      after.push_back(BlockReduce(acc, dt, r));
      Expr result = a;
      if (r == ReduceOp::kMax || r == ReduceOp::kMin) {  // NaN propagates, as in the host kernels
        const std::string nan = "nan" + std::to_string(counter_++);
        row_->push_back(Local(nan, DType::kInt32, Cast(IntImm(0), DType::kInt32)));
        body.push_back(Assign(nan, Binary(ExprOp::kAdd, Var(nan, DType::kInt32),
                                          Cast(Unary(ExprOp::kIsNan, x), DType::kInt32))));
        loop->reductions.push_back({nan, ReduceOp::kSum});
        after.push_back(BlockReduce(nan, DType::kInt32, ReduceOp::kSum));
        result = Select(Binary(ExprOp::kGt, Var(nan, DType::kInt32), Cast(IntImm(0), DType::kInt32)),
                        FloatImm(std::numeric_limits<double>::quiet_NaN(), dt), a);
      }
      if (kind == ops::Op::kMean) {
        result = Binary(ExprOp::kDiv, result, Cast(Var("d" + std::to_string(a_.rank() - 1)), dt));
      }
      const std::string name = "red" + std::to_string(counter_++);
      after.push_back(Local(name, dt, result));
      reduce_result_[op] = name;
    }
    loop->body = std::move(body);
    loop_ = nullptr;
    row_->push_back(loop);
    for (Stmt& s : after) row_->push_back(std::move(s));
  }

  // The value of `v` at the current point: a local emitted once per row (row values) or once per
  // iteration of the current loop (values along the last extent).
  Expr Get(ir::Value v) {
    const ValueInfo& info = a_.values.at(v);
    auto& done = info.inner ? loop_done_ : row_done_;
    if (auto it = done.find(v); it != done.end()) return Var(it->second, v.type().dtype());
    OAR_CHECK(!info.inner || loop_ != nullptr, kInternal, "cinn: a value along the last extent outside a loop");
    const Expr e = Compute(v, info.inner);
    if (e->op == ExprOp::kVar || e->op == ExprOp::kFloatImm || e->op == ExprOp::kIntImm) return e;
    const std::string name = "v" + std::to_string(counter_++);
    (info.inner ? loop_ : row_)->push_back(Local(name, v.type().dtype(), e));
    done[v] = name;
    return Var(name, v.type().dtype());
  }

  Expr Compute(ir::Value v, bool in_loop) {
    if (auto it = input_buffer_.find(v); it != input_buffer_.end()) {
      return Load(it->second, v.type().dtype(), Offset(it->second, in_loop));
    }
    auto it = def_.find(v);
    OAR_CHECK(it != def_.end(), kInternal, "cinn: a group value with no definition");
    const ir::Operation& op = *it->second;
    const DType dt = v.type().dtype();
    switch (Classify(op)) {
      case OpClass::kConstant: {
        const ir::Attribute a = op.name() == "op.fill" ? op.attr("value") : op.attr("value").AsArray()[0];
        const double x = a.kind() == ir::AttrKind::kFloat ? a.AsFloat()
                         : a.kind() == ir::AttrKind::kInt ? static_cast<double>(a.AsInt())
                                                          : (a.AsBool() ? 1.0 : 0.0);
        if (dt == DType::kFloat32 || dt == DType::kFloat64) return FloatImm(x, dt);
        return Cast(IntImm(static_cast<int64_t>(x)), dt);
      }
      case OpClass::kUnitView: return Get(op.operand(0));
      case OpClass::kReduce: {
        auto r = reduce_result_.find(&op);
        OAR_CHECK(r != reduce_result_.end(), kInternal, "cinn: a reduction used before its pass");
        return Var(r->second, dt);
      }
      case OpClass::kElementwise: break;
      case OpClass::kOpaque: Throw(ErrorCode::kInternal, "cinn: opaque op {} in a group", op.name());
    }
    const ops::OpSchema& s = *op.info().schema;
    std::vector<Expr> in;
    for (uint32_t i = 0; i < op.num_operands(); ++i) in.push_back(Get(op.operand(i)));
    switch (s.kind) {
      case ops::OpKind::kUnary:
      case ops::OpKind::kPredicate: return Unary(UnaryOf(s.op), in[0]);
      case ops::OpKind::kBinary:
      case ops::OpKind::kCompare: return Binary(BinaryOf(s.op), in[0], in[1]);
      case ops::OpKind::kWhere: return Select(in[0], in[1], in[2]);
      case ops::OpKind::kCast: return Cast(in[0], dt);
      default: Throw(ErrorCode::kInternal, "cinn: {} is not elementwise", s.name);
    }
  }

  const GroupView& g_;
  const GroupAnalysis& a_;
  Target t_;
  LoweredGroup out_;
  std::unordered_map<ir::Value, const ir::Operation*, ir::ValueHash> def_;
  std::unordered_map<ir::Value, int, ir::ValueHash> input_buffer_;
  std::unordered_map<ir::Value, std::string, ir::ValueHash> row_done_, loop_done_;
  std::unordered_map<const ir::Operation*, std::string> reduce_result_;
  std::vector<Stmt>* row_ = nullptr;
  std::vector<Stmt>* loop_ = nullptr;
  int counter_ = 0;
};

}  // namespace

LoweredGroup Lower(const GroupView& g, const GroupAnalysis& a, const Target& target) {
  return Lowerer(g, a, target).Run();
}

}  // namespace oar::compiler
