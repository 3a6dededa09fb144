#include "core/compiler/lower.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/base/error.h"
#include "core/ir/dialect.h"
#include "core/ir/op_dialect.h"
#include "core/ir/types.h"
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

// Adjacent domain dimensions that every value of the group indexes alike — each value runs along both
// (then contiguously: a value's dimensions keep the domain's order, and only extent-1 dimensions can sit
// between the two) or along neither — address memory as one dimension: the analysis is rewritten onto
// the collapsed domain, whose extent is the product of the merged ones (IntParam::end) and along which
// each value runs by its innermost merged dimension's stride. Elementwise groups merge any such pair, row
// reductions the pairs before the reduced last dimension; column reductions are left as they are. A
// kernel then pays its per-row index arithmetic (a division and a modulo per dimension) per collapsed
// row: an Adam update over a [16, 16, 3, 3] weight is one task of 2304 elements instead of 768 rows of 3,
// a batch norm's x - mean over [32, 8, 32, 32] with mean [1, 8, 1, 1] 256 rows of 1024 instead of 8192
// rows of 32. `ranges` gets each collapsed dimension's [first, end) in the original domain.
GroupAnalysis Collapse(const GroupAnalysis& a, std::vector<std::pair<int, int>>* ranges) {
  const int k = a.rank();
  ranges->clear();
  ranges->push_back({0, 1});
  for (int d = 1; d < k; ++d) {
    bool merge = a.kind == GroupTemplate::kElementwise || (a.kind == GroupTemplate::kRowReduce && d < k - 1);
    for (auto it = a.values.begin(); merge && it != a.values.end(); ++it) {
      const std::vector<int>& m = it->second.map;
      merge = (std::find(m.begin(), m.end(), d) != m.end()) == (std::find(m.begin(), m.end(), d - 1) != m.end());
    }
    if (merge) {
      ranges->back().second = d + 1;
    } else {
      ranges->push_back({d, d + 1});
    }
  }
  if (static_cast<int>(ranges->size()) == k) return a;
  std::vector<int> to(static_cast<size_t>(k), -1);  // an original dimension -> its collapsed one, where innermost
  GroupAnalysis c = a;
  c.domain.clear();
  for (size_t r = 0; r < ranges->size(); ++r) {
    const auto [first, end] = (*ranges)[r];
    int64_t extent = 1;  // static where every merged extent is (the lowering reads none of them)
    for (int d = first; d < end && extent >= 0; ++d) {
      const int64_t e = a.domain[static_cast<size_t>(d)];
      extent = ir::SymDim::IsStatic(e) ? extent * e : ir::SymDim::kDynamic;
    }
    c.domain.push_back(extent);
    to[static_cast<size_t>(end - 1)] = static_cast<int>(r);
  }
  std::vector<int> range_of(static_cast<size_t>(k));  // an original dimension -> its collapsed one
  for (size_t r = 0; r < ranges->size(); ++r) {
    for (int d = (*ranges)[r].first; d < (*ranges)[r].second; ++d)
      range_of[static_cast<size_t>(d)] = static_cast<int>(r);
  }
  for (int& d : c.reduced) d = to[static_cast<size_t>(d)];
  for (auto& [v, info] : c.values) {
    // Along the (collapsed) reduced extent when any merged dimension gives the value a real extent (the
    // analysis's rule for ValueInfo::inner): x of [B, 3, 1] runs along nothing, collapsed along B * 3.
    const Dims& dims = v.type().dims();
    for (size_t j = 0; j < info.map.size(); ++j) {
      const int m = info.map[j];
      if (m < 0 || dims[static_cast<int>(j)] == 1) continue;
      info.inner |= std::count(c.reduced.begin(), c.reduced.end(), range_of[static_cast<size_t>(m)]) > 0;
    }
    for (int& m : info.map) m = m < 0 ? -1 : to[static_cast<size_t>(m)];
  }
  return c;
}

class Lowerer {
 public:
  Lowerer(const GroupView& g, const GroupAnalysis& a, const Target& t)
      : g_(g), original_(a), a_(Collapse(a, &ranges_)), t_(t) {}

  LoweredGroup Run() {
    out_.analysis = original_;
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
      out_.params.push_back(
          {IntParam::kExtent, ranges_[static_cast<size_t>(d)].first, ranges_[static_cast<size_t>(d)].second, -1});
    }
    for (size_t b = 0; b < out_.buffer_maps.size(); ++b) {
      for (int m : out_.buffer_maps[b]) {
        if (m < 0 || m == k - 1) continue;
        out_.kernel.int_params.push_back(StrideName(static_cast<int>(b), m));
        out_.params.push_back({IntParam::kStride, m, 0, static_cast<int>(b)});
      }
    }
    out_.kernel.threads_per_task = t_.threads;
    double flops = 0;
    for (const ir::Operation* op : g_.ops) {
      if (Classify(*op) == OpClass::kElementwise || Classify(*op) == OpClass::kReduce) flops += 1;
    }
    out_.kernel.flops_per_element = flops;
    if (a_.kind == GroupTemplate::kColumnReduce) return RunColumns();

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

    if (t_.one_pass_variance && t_.threads == 1) PlanOnePassVariances();
    Stmt last_loop;
    for (int pass = 1; pass <= a_.passes; ++pass) {
      if (!merged_passes_.count(pass)) last_loop = LowerPass(pass, extent);
    }
    if (last_loop) Stash(*last_loop);
    // The final pass: every output that runs along the last extent.
    std::vector<Stmt> body = FinalStores();
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
  // The column schedule: a task is a tile of columns (the last extent) at one index of the other kept
  // dimensions; a kThreads loop runs over the tile's columns, and inside it each reduction pass and the
  // final pass are serial loops over the reduced dimensions (r, decomposed into one index per reduced
  // dimension). A column's accumulators are scalars of its thread (its simd lane in C), the loads of
  // neighbouring columns are contiguous, and no block reduction is needed.
  LoweredGroup RunColumns() {
    const int k = a_.rank();
    const auto ext = [](int d) { return Var("d" + std::to_string(d)); };
    const Expr last = ext(k - 1);
    const int64_t tile_width = t_.threads > 1 ? t_.threads : t_.column_tile;
    const Expr tile = IntImm(tile_width);
    const Expr tiles = Binary(ExprOp::kDiv, Binary(ExprOp::kAdd, last, IntImm(tile_width - 1)), tile);
    std::vector<int> kept;  // the kept dimensions but the last, outermost first
    for (int d = 0; d < k - 1; ++d) {
      if (!std::count(a_.reduced.begin(), a_.reduced.end(), d)) kept.push_back(d);
    }
    std::vector<Stmt> task;
    task.push_back(Local("tile", DType::kInt64, Binary(ExprOp::kMod, Var("t"), tiles)));
    Expr rem = Binary(ExprOp::kDiv, Var("t"), tiles), outer = IntImm(1);
    for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
      const std::string o = "o" + std::to_string(*it);
      task.push_back(Local(o, DType::kInt64, std::next(it) == kept.rend() ? rem : Binary(ExprOp::kMod, rem, ext(*it))));
      if (std::next(it) != kept.rend()) {
        task.push_back(Local("q" + std::to_string(*it), DType::kInt64, Binary(ExprOp::kDiv, rem, ext(*it))));
        rem = Var("q" + std::to_string(*it));
      }
      outer = IndexMul(outer, ext(*it));
    }
    const Expr tile_start = Binary(ExprOp::kMul, Var("tile"), tile);
    for (size_t b = 0; b < out_.buffer_maps.size(); ++b) {
      Expr base = MapsDim(static_cast<int>(b), k - 1) ? tile_start : IntImm(0);
      for (int d : kept) {
        if (MapsDim(static_cast<int>(b), d)) {
          base = IndexAdd(base, IndexMul(Var("o" + std::to_string(d)), Var(StrideName(static_cast<int>(b), d))));
        }
      }
      task.push_back(Local(BaseName(static_cast<int>(b)), DType::kInt64, base));
    }
    reduced_extent_ = IntImm(1);
    for (int d : a_.reduced) reduced_extent_ = IndexMul(reduced_extent_, ext(d));

    std::vector<Stmt> column;  // one column: its passes down the reduced dimensions, then its stores
    row_ = &column;
    for (int pass = 1; pass <= a_.passes; ++pass) LowerPass(pass, reduced_extent_);
    std::vector<Stmt> final_body = FinalStores();
    if (!final_body.empty()) column.push_back(ReductionLoop(reduced_extent_, std::move(final_body)));
    for (size_t b = out_.num_inputs; b < out_.buffer_values.size(); ++b) {
      if (Inner(static_cast<int>(b))) continue;
      column.push_back(Store(static_cast<int>(b), Offset(static_cast<int>(b), false), Get(out_.buffer_values[b])));
    }
    const Expr width = Binary(ExprOp::kMin, tile, Binary(ExprOp::kSub, last, tile_start));
    task.push_back(For("j", width, LoopKind::kThreads, std::move(column)));
    out_.kernel.num_tasks = IndexMul(outer, tiles);
    out_.kernel.body = For("t", out_.kernel.num_tasks, LoopKind::kTask, std::move(task));
    return std::move(out_);
  }

  bool Columns() const { return a_.kind == GroupTemplate::kColumnReduce; }

  // The final pass's body: a store of every output that runs along the reduced (or last) extent, its
  // values computed inside the loop (rows and column tiles alike).
  std::vector<Stmt> FinalStores() {
    std::vector<Stmt> body;
    loop_ = &body;
    loop_done_.clear();
    for (size_t b = out_.num_inputs; b < out_.buffer_values.size(); ++b) {
      if (!Inner(static_cast<int>(b))) continue;
      body.push_back(Store(static_cast<int>(b), Offset(static_cast<int>(b), true), Get(out_.buffer_values[b])));
    }
    loop_ = nullptr;
    return body;
  }

  bool MapsDim(int b, int d) const {
    const auto& m = out_.buffer_maps[static_cast<size_t>(b)];
    return std::find(m.begin(), m.end(), d) != m.end();
  }

  // A loop over the reduced space: along the row (kThreads over the last extent), or down the columns
  // (serial loops over the reduced dimensions, the innermost last, so each index is a loop variable and
  // no element pays a division to find it). `body` goes into the innermost loop (Innermost).
  Stmt ReductionLoop(const Expr& extent, std::vector<Stmt> body) const {
    if (!Columns()) return For("j", extent, LoopKind::kThreads, std::move(body));
    Stmt loop;
    for (size_t i = a_.reduced.size(); i-- > 0;) {
      const int d = a_.reduced[i];
      std::vector<Stmt> inner;
      if (loop) {
        inner.push_back(loop);
      } else {
        inner = std::move(body);
      }
      loop = For("r" + std::to_string(d), Var("d" + std::to_string(d)), LoopKind::kSerial, std::move(inner));
    }
    return loop;
  }

  // The loop of ReductionLoop's nest whose body is the pass's.
  static StmtNode& Innermost(const Stmt& loop, bool columns, size_t depth) {
    StmtNode* s = loop.get();
    for (size_t i = 1; columns && i < depth; ++i) s = s->body.front().get();
    return *s;
  }

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

  // Whether buffer `b` runs along a reduced dimension (the last one but in column reductions).
  bool Inner(int b) const {
    for (int d : a_.reduced) {
      if (MapsDim(b, d)) return true;
    }
    return false;
  }

  Expr Offset(int b, bool in_loop) const {
    Expr off = Var(BaseName(b));
    if (!Columns()) return in_loop && Inner(b) ? IndexAdd(off, Var("j")) : off;
    if (MapsDim(b, a_.rank() - 1)) off = IndexAdd(off, Var("j"));
    if (in_loop) {
      for (int d : a_.reduced) {
        if (MapsDim(b, d)) off = IndexAdd(off, IndexMul(Var("r" + std::to_string(d)), Var(StrideName(b, d))));
      }
    }
    return off;
  }

  // An op whose recomputation costs more than storing its value and loading it back from a row in cache.
  static bool Expensive(const ir::Operation& op) {
    if (Classify(op) != OpClass::kElementwise) return false;
    switch (op.info().schema->op) {
      case ops::Op::kExp:
      case ops::Op::kLog:
      case ops::Op::kLog1p:
      case ops::Op::kTanh:
      case ops::Op::kSigmoid:
      case ops::Op::kErf:
      case ops::Op::kSin:
      case ops::Op::kCos:
      case ops::Op::kPow: return true;
      default: return false;
    }
  }

  // Whether computing `v` along the last extent runs an expensive op (stopping at row values and inputs).
  bool CostsToRecompute(ir::Value v) const {
    if (!a_.values.at(v).inner || input_buffer_.count(v)) return false;
    auto it = def_.find(v);
    if (it == def_.end() || Classify(*it->second) == OpClass::kReduce) return false;
    if (Expensive(*it->second)) return true;
    for (uint32_t i = 0; i < it->second->num_operands(); ++i) {
      if (CostsToRecompute(it->second->operand(i))) return true;
    }
    return false;
  }

  // The largest value under `v` that the last reduction pass computed and that is expensive to recompute.
  std::optional<ir::Value> StashCandidate(ir::Value v) const {
    if (!a_.values.at(v).inner || input_buffer_.count(v)) return std::nullopt;
    if (loop_done_.count(v)) return CostsToRecompute(v) ? std::optional(v) : std::nullopt;
    auto it = def_.find(v);
    if (it == def_.end() || Classify(*it->second) == OpClass::kReduce) return std::nullopt;
    for (uint32_t i = 0; i < it->second->num_operands(); ++i) {
      if (auto c = StashCandidate(it->second->operand(i))) return c;
    }
    return std::nullopt;
  }

  // Softmax-like groups: a value the last reduction pass computed (exp(x - max)) would be computed again
  // in the final pass. Where an output covers the whole domain with that value's dtype, the last pass
  // stores the value there and the final pass loads it back and overwrites it in place: each element is
  // written and re-read by the same thread (the threads loops share one mapping), and a group's outputs
  // never alias its inputs (cinn.group is not marked in-place).
  void Stash(StmtNode& last_loop) {
    const int k = a_.rank();
    for (size_t b = out_.num_inputs; b < out_.buffer_values.size(); ++b) {
      std::vector<int> dims;  // the domain dimensions the buffer runs along (a collapsed one's others are -1)
      for (int m : out_.buffer_maps[b]) {
        if (m >= 0) dims.push_back(m);
      }
      bool full = static_cast<int>(dims.size()) == k;
      for (int d = 0; full && d < k; ++d) full = dims[static_cast<size_t>(d)] == d;
      if (!full) continue;
      const std::optional<ir::Value> v = StashCandidate(out_.buffer_values[b]);
      if (!v || stash_.count(*v) || v->type().dtype() != out_.kernel.buffers[b].dtype) continue;
      last_loop.body.push_back(Store(static_cast<int>(b), Offset(static_cast<int>(b), true),
                                     Var(loop_done_.at(*v), v->type().dtype())));
      stash_[*v] = static_cast<int>(b);
    }
  }

  // One-pass variance (Target::one_pass_variance): a float32 reduction mean(d * d) or sum(d * d) with d = a -
  // mean(a), the mean one pass before it, is computed in the mean's pass from float64 sums of a and a^2:
  // var = sum(a^2) / n - (sum(a) / n)^2, negative rounding clamped to 0 (NaN kept). A layer_norm row is then
  // read twice (the sums, then the normalised stores) instead of three times. The mean itself and every
  // other value are computed as before; the variance differs from the float32 two-pass one by rounding:
  // float64 sums of float32 values lose to cancellation only where mean^2 / var exceeds ~1e9, where the
  // float32 two-pass sum of squares is already off by its own n * 2^-24. A pass merges only when every
  // reduction in it is such a variance.
  void PlanOnePassVariances() {
    if (Columns()) return;
    std::map<int, std::vector<std::pair<const ir::Operation*, const ir::Operation*>>> by_level;
    std::map<int, int> reduces_at;
    for (const ir::Operation* op : g_.ops) {
      if (Classify(*op) != OpClass::kReduce) continue;
      const int level = a_.values.at(op->result(0)).level;
      reduces_at[level]++;
      if (const ir::Operation* mean = VarianceMeanOf(*op)) by_level[level].push_back({mean, op});
    }
    for (const auto& [level, pairs] : by_level) {
      if (static_cast<int>(pairs.size()) != reduces_at[level]) continue;
      merged_passes_.insert(level);
      for (const auto& [mean, var] : pairs) {
        variances_[mean].push_back(var);
        one_pass_.insert(var);
      }
    }
  }

  // The mean reduction of a float32 `var` = mean|sum(d * d) over the last dimension with d = a - mean(a),
  // the mean one pass before `var`; null otherwise.
  const ir::Operation* VarianceMeanOf(const ir::Operation& var) const {
    const ops::Op kind = var.info().schema->op;
    if ((kind != ops::Op::kMean && kind != ops::Op::kSum) || var.result(0).type().dtype() != DType::kFloat32) {
      return nullptr;
    }
    const ir::Operation* q = Def(var.operand(0));
    if (q == nullptr || Classify(*q) != OpClass::kElementwise || q->info().schema->op != ops::Op::kMul ||
        q->operand(0) != q->operand(1)) {
      return nullptr;
    }
    const ir::Operation* d = Def(q->operand(0));
    if (d == nullptr || Classify(*d) != OpClass::kElementwise || d->info().schema->op != ops::Op::kSub) return nullptr;
    const ir::Operation* mean = Def(d->operand(1));
    if (mean == nullptr || Classify(*mean) != OpClass::kReduce || mean->info().schema->op != ops::Op::kMean) {
      return nullptr;
    }
    const ir::Value a = mean->operand(0);
    if (d->operand(0) != a || !a_.values.at(a).inner || a.type().dtype() != DType::kFloat32) return nullptr;
    if (a_.values.at(mean->result(0)).level + 1 != a_.values.at(var.result(0)).level) return nullptr;
    return mean;
  }

  const ir::Operation* Def(ir::Value v) const {
    auto it = def_.find(v);
    return it == def_.end() ? nullptr : it->second;
  }

  // The float64 sums of a and a^2 in the mean's pass (x: a at the loop's element); after the loop, each
  // variance of that mean from them.
  void LowerVariances(const ir::Operation* mean, const Expr& x, StmtNode* loop, std::vector<Stmt>* body,
                      std::vector<Stmt>* after) {
    const DType f64 = DType::kFloat64;
    const std::string p = "acc" + std::to_string(counter_++), q = "acc" + std::to_string(counter_++),
                      xd = "v" + std::to_string(counter_++);
    row_->push_back(Local(p, f64, FloatImm(0.0, f64)));
    row_->push_back(Local(q, f64, FloatImm(0.0, f64)));
    body->push_back(Local(xd, f64, Cast(x, f64)));
    body->push_back(Assign(p, Binary(ExprOp::kAdd, Var(p, f64), Var(xd, f64))));
    body->push_back(Assign(q, Binary(ExprOp::kAdd, Var(q, f64), Binary(ExprOp::kMul, Var(xd, f64), Var(xd, f64)))));
    loop->reductions.push_back({p, ReduceOp::kSum});
    loop->reductions.push_back({q, ReduceOp::kSum});
    after->push_back(BlockReduce(p, f64, ReduceOp::kSum));
    after->push_back(BlockReduce(q, f64, ReduceOp::kSum));
    const Expr n = Cast(Var("d" + std::to_string(a_.rank() - 1)), f64);
    const std::string mu = "v" + std::to_string(counter_++), var = "v" + std::to_string(counter_++);
    after->push_back(Local(mu, f64, Binary(ExprOp::kDiv, Var(p, f64), n)));
    const Expr v =
        Binary(ExprOp::kSub, Binary(ExprOp::kDiv, Var(q, f64), n), Binary(ExprOp::kMul, Var(mu, f64), Var(mu, f64)));
    after->push_back(Local(var, f64, Select(Binary(ExprOp::kLt, v, FloatImm(0.0, f64)), FloatImm(0.0, f64), v)));
    for (const ir::Operation* op : variances_.at(mean)) {
      const bool sum = op->info().schema->op == ops::Op::kSum;
      const std::string name = "red" + std::to_string(counter_++);
      after->push_back(Local(name, DType::kFloat32,
                             Cast(sum ? Binary(ExprOp::kMul, Var(var, f64), n) : Var(var, f64), DType::kFloat32)));
      reduce_result_[op] = name;
    }
  }

  Stmt LowerPass(int pass, const Expr& extent) {
    std::vector<Stmt> body;
    loop_ = &body;
    loop_done_.clear();
    std::vector<const ir::Operation*> reduces;
    for (const ir::Operation* op : g_.ops) {
      if (Classify(*op) == OpClass::kReduce && a_.values.at(op->result(0)).level == pass) reduces.push_back(op);
    }
    std::vector<Stmt> after;
    Stmt loop = ReductionLoop(extent, {});
    for (const ir::Operation* op : reduces) {
      if (one_pass_.count(op)) continue;  // lowered with its mean (LowerVariances)
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
      if (!Columns()) {  // along a row, the threads of the task share the accumulator
        loop->reductions.push_back({acc, r});
        after.push_back(BlockReduce(acc, dt, r));
      }
      Expr result = a;
      if (r == ReduceOp::kMax || r == ReduceOp::kMin) {  // NaN propagates, as in the host kernels
        const std::string nan = "nan" + std::to_string(counter_++);
        row_->push_back(Local(nan, DType::kInt32, Cast(IntImm(0), DType::kInt32)));
        body.push_back(Assign(nan, Binary(ExprOp::kAdd, Var(nan, DType::kInt32),
                                          Cast(Unary(ExprOp::kIsNan, x), DType::kInt32))));
        if (!Columns()) {
          loop->reductions.push_back({nan, ReduceOp::kSum});
          after.push_back(BlockReduce(nan, DType::kInt32, ReduceOp::kSum));
        }
        result = Select(Binary(ExprOp::kGt, Var(nan, DType::kInt32), Cast(IntImm(0), DType::kInt32)),
                        FloatImm(std::numeric_limits<double>::quiet_NaN(), dt), a);
      }
      if (kind == ops::Op::kMean) {
        result = Binary(ExprOp::kDiv, result, Cast(Columns() ? reduced_extent_ : Var("d" + std::to_string(a_.rank() - 1)), dt));
      }
      const std::string name = "red" + std::to_string(counter_++);
      after.push_back(Local(name, dt, result));
      reduce_result_[op] = name;
      if (variances_.count(op)) LowerVariances(op, x, loop.get(), &body, &after);
    }
    StmtNode& innermost = Innermost(loop, Columns(), a_.reduced.size());
    for (Stmt& st : body) innermost.body.push_back(std::move(st));
    loop_ = nullptr;
    row_->push_back(loop);
    for (Stmt& s : after) row_->push_back(std::move(s));
    return loop;
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
    if (auto it = stash_.find(v); it != stash_.end() && in_loop && loop_ != nullptr) {
      return Load(it->second, v.type().dtype(), Offset(it->second, true));
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
    if (s.op == ops::Op::kDiv && in_loop && !a_.values.at(op.operand(1)).inner && IsFloat(dt)) {
      // Division by a row value (softmax's sum, a norm): one reciprocal per row, a multiply per element, as
      // Oar's and PyTorch's softmax kernels do (within 1 ulp of dividing).
      const Expr num = Get(op.operand(0));
      return Binary(ExprOp::kMul, num, Reciprocal(op.operand(1)));
    }
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

  // 1 / v for a row value v, computed once per row (per column in a column reduction).
  Expr Reciprocal(ir::Value v) {
    if (auto it = reciprocal_.find(v); it != reciprocal_.end()) return Var(it->second, v.type().dtype());
    const DType dt = v.type().dtype();
    const Expr x = Get(v);
    const std::string name = "rcp" + std::to_string(counter_++);
    row_->push_back(Local(name, dt, Binary(ExprOp::kDiv, FloatImm(1.0, dt), x)));
    reciprocal_[v] = name;
    return Var(name, dt);
  }

  static bool IsFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }

  const GroupView& g_;
  const GroupAnalysis& original_;
  std::vector<std::pair<int, int>> ranges_;  ///< per kernel dimension: its domain dimensions [first, end)
  const GroupAnalysis a_;                    ///< collapsed onto the kernel's dimensions
  Target t_;
  LoweredGroup out_;
  std::unordered_map<ir::Value, const ir::Operation*, ir::ValueHash> def_;
  std::unordered_map<ir::Value, int, ir::ValueHash> input_buffer_;
  std::unordered_map<ir::Value, int, ir::ValueHash> stash_;  ///< value -> the output buffer holding it
  std::unordered_map<ir::Value, std::string, ir::ValueHash> row_done_, loop_done_;
  std::unordered_map<const ir::Operation*, std::string> reduce_result_;
  std::unordered_map<ir::Value, std::string, ir::ValueHash> reciprocal_;
  Expr reduced_extent_;  ///< column reduce: the product of the reduced extents
  /// One-pass variances (PlanOnePassVariances): mean -> the variances lowered in its pass, those variances,
  /// and the passes they had (now empty).
  std::unordered_map<const ir::Operation*, std::vector<const ir::Operation*>> variances_;
  std::unordered_set<const ir::Operation*> one_pass_;
  std::set<int> merged_passes_;
  std::vector<Stmt>* row_ = nullptr;
  std::vector<Stmt>* loop_ = nullptr;
  int counter_ = 0;
};

}  // namespace

LoweredGroup Lower(const GroupView& g, const GroupAnalysis& a, const Target& target) {
  return Lowerer(g, a, target).Run();
}

std::vector<int64_t> EvaluateParams(const LoweredGroup& lg, const Dims& domain,
                                    const std::vector<Dims>& buffer_shapes) {
  OAR_CHECK(buffer_shapes.size() == lg.buffer_maps.size(), kInternal, "cinn: {} buffer shapes for {} buffers",
            buffer_shapes.size(), lg.buffer_maps.size());
  std::vector<int64_t> out;
  out.reserve(lg.params.size());
  for (const IntParam& p : lg.params) {
    if (p.kind == IntParam::kExtent) {
      OAR_CHECK(p.end <= static_cast<int>(domain.size()), kInternal,
                "cinn: an extent of domain dimensions [{}, {}) "
                "of a rank-{} domain",
                p.dim, p.end, domain.size());
      int64_t extent = 1;
      for (int d = p.dim; d < p.end; ++d) extent *= domain[d];
      out.push_back(extent);
      continue;
    }
    const Dims& shape = buffer_shapes[static_cast<size_t>(p.buffer)];
    const std::vector<int>& map = lg.buffer_maps[static_cast<size_t>(p.buffer)];
    int64_t stride = 1, found = 0;
    for (int j = static_cast<int>(map.size()) - 1; j >= 0; --j) {
      if (map[static_cast<size_t>(j)] == p.dim) found = stride;
      stride *= shape[j];
    }
    out.push_back(found);
  }
  return out;
}

}  // namespace oar::compiler
