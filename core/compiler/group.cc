#include "core/compiler/group.h"

#include <algorithm>
#include <set>
#include <unordered_set>

#include "core/base/error.h"
#include "core/ir/dialect.h"
#include "core/ir/op_dialect.h"
#include "core/ops/schema.h"

namespace oar::compiler {
namespace {

bool SupportedDType(DType t, bool reduce) {
  if (t == DType::kFloat32 || t == DType::kFloat64) return true;
  return !reduce && (t == DType::kBool || t == DType::kInt32 || t == DType::kInt64);
}

bool AllTensorsSupported(const ir::Operation& op, bool reduce) {
  for (uint32_t i = 0; i < op.num_operands(); ++i) {
    const ir::Type t = op.operand(i).type();
    if (!t.IsTensor() || !SupportedDType(t.dtype(), reduce)) return false;
  }
  for (uint32_t i = 0; i < op.num_results(); ++i) {
    const ir::Type t = op.result(i).type();
    if (!t.IsTensor() || !SupportedDType(t.dtype(), reduce)) return false;
  }
  return true;
}

bool IsInteger(DType t) { return t == DType::kInt32 || t == DType::kInt64; }

// The non-1 extents of a shape, in order.
std::vector<int64_t> NonUnit(const Dims& d) {
  std::vector<int64_t> out;
  for (int64_t e : d) {
    if (e != 1) out.push_back(e);
  }
  return out;
}

bool Known(int64_t e) { return !ir::SymDim::IsDynamic(e); }

}  // namespace

OpClass Classify(const ir::Operation& op) {
  if (op.name() == "builtin.constant") {
    const ir::Type t = op.result(0).type();
    if (t.IsTensor() && SupportedDType(t.dtype(), false) && t.HasStaticShape() && Dims(t.dims()).Product() == 1) {
      return OpClass::kConstant;
    }
    return OpClass::kOpaque;
  }
  const ops::OpSchema* s = op.info().schema;
  if (s == nullptr || op.info().dialect->name() != "op" || op.num_regions() != 0) return OpClass::kOpaque;
  if (s->op == ops::Op::kFill) {  // a scalar made on the device: inlined like a constant
    const ir::Type t = op.result(0).type();
    return t.HasStaticShape() && Dims(t.dims()).Product() == 1 && SupportedDType(t.dtype(), false) ? OpClass::kConstant
                                                                                               : OpClass::kOpaque;
  }
  switch (s->kind) {
    case ops::OpKind::kUnary:
    case ops::OpKind::kPredicate:
    case ops::OpKind::kBinary:
    case ops::OpKind::kCompare:
    case ops::OpKind::kWhere:
    case ops::OpKind::kCast: {
      if (!AllTensorsSupported(op, false)) return OpClass::kOpaque;
      // Integer division and powers have no single C spelling that matches the host kernels.
      if ((s->op == ops::Op::kDiv || s->op == ops::Op::kPow) && IsInteger(op.result(0).type().dtype())) {
        return OpClass::kOpaque;
      }
      return OpClass::kElementwise;
    }
    case ops::OpKind::kReduce:
      if (s->op == ops::Op::kSum || s->op == ops::Op::kMean || s->op == ops::Op::kMax || s->op == ops::Op::kMin ||
          s->op == ops::Op::kProd) {
        return AllTensorsSupported(op, true) ? OpClass::kReduce : OpClass::kOpaque;
      }
      return OpClass::kOpaque;
    case ops::OpKind::kView: {
      if (!AllTensorsSupported(op, false)) return OpClass::kOpaque;
      if (s->op == ops::Op::kUnsqueeze || s->op == ops::Op::kSqueeze || s->op == ops::Op::kExpand) {
        return OpClass::kUnitView;
      }
      if (s->op == ops::Op::kView &&
          NonUnit(op.operand(0).type().dims()) == NonUnit(op.result(0).type().dims())) {
        return OpClass::kUnitView;
      }
      return OpClass::kOpaque;
    }
    default:
      return OpClass::kOpaque;
  }
}

const char* OpClassName(OpClass c) {
  switch (c) {
    case OpClass::kElementwise: return "elementwise";
    case OpClass::kUnitView: return "unit-view";
    case OpClass::kReduce: return "reduce";
    case OpClass::kConstant: return "constant";
    case OpClass::kOpaque: return "opaque";
  }
  return "?";
}

const char* GroupTemplateName(GroupTemplate t) {
  switch (t) {
    case GroupTemplate::kElementwise: return "elementwise";
    case GroupTemplate::kRowReduce: return "row_reduce";
    case GroupTemplate::kColumnReduce: return "column_reduce";
  }
  return "?";
}

namespace {

class Analyzer {
 public:
  Analyzer(const GroupView& g, std::string* why) : g_(g), why_(why) {}

  std::optional<GroupAnalysis> Run() {
    if (!ChooseDomain()) return std::nullopt;
    for (ir::Value v : g_.inputs) {
      if (!MapInput(v)) return std::nullopt;
    }
    for (const ir::Operation* op : g_.ops) {
      if (!MapOp(*op)) return std::nullopt;
    }
    if (!CheckOutputs()) return std::nullopt;
    return std::move(a_);
  }

 private:
  bool Fail(std::string reason) {
    if (why_ != nullptr) *why_ = std::move(reason);
    return false;
  }

  bool Same(int64_t a, int64_t b) const { return a == b && Known(a); }

  bool ChooseDomain() {
    const ir::Operation* first_reduce = nullptr;
    for (const ir::Operation* op : g_.ops) {
      if (Classify(*op) == OpClass::kReduce) {
        first_reduce = op;
        break;
      }
    }
    if (first_reduce != nullptr) {
      a_.kind = GroupTemplate::kRowReduce;
      a_.anchor = first_reduce->operand(0);
    } else {
      a_.kind = GroupTemplate::kElementwise;
      for (ir::Value v : g_.outputs) {
        if (!a_.anchor || v.type().rank() > a_.anchor.type().rank()) a_.anchor = v;
      }
    }
    if (!a_.anchor) return Fail("the group has no outputs");
    const Dims& d = a_.anchor.type().dims();
    a_.domain.assign(d.begin(), d.end());
    for (int64_t e : a_.domain) {
      if (!Known(e)) return Fail("the domain has an unknown extent (?)");
    }
    if (a_.domain.empty()) {
      a_.domain = {1};
      a_.anchor = ir::Value();
    }
    a_.reduced = {k() - 1};
    if (first_reduce != nullptr) {  // the anchor is its operand: its axes are domain dimensions
      const std::vector<int64_t> axes = ReduceAxes(*first_reduce);
      if (std::find(axes.begin(), axes.end(), k() - 1) == axes.end()) {
        a_.kind = GroupTemplate::kColumnReduce;
        a_.reduced.clear();
        for (int64_t ax : axes) a_.reduced.push_back(static_cast<int>(ax));
        std::sort(a_.reduced.begin(), a_.reduced.end());
      }
    }
    return true;
  }

  static std::vector<int64_t> ReduceAxes(const ir::Operation& op) {
    const ops::OpSchema& s = *op.info().schema;
    const ops::AttrValues attrs = ir::SchemaAttrValues(s, op.attributes());
    return ops::NormalizeAxes(std::get<std::vector<int64_t>>(attrs[s.AttrIndex("axes")]), op.operand(0).type().rank(),
                              s.name);
  }

  bool Reduced(int m) const { return std::find(a_.reduced.begin(), a_.reduced.end(), m) != a_.reduced.end(); }

  int k() const { return a_.rank(); }

  // Right-aligned against the domain (NumPy broadcasting); extent-1 dimensions broadcast.
  bool MapInput(ir::Value v) {
    const Dims& d = v.type().dims();
    ValueInfo info;
    const int r = static_cast<int>(d.size());
    for (int j = 0; j < r; ++j) {
      const int pos = j + k() - r;
      if (pos >= 0 && Same(d[j], a_.domain[pos])) {  // an extent-1 domain dimension maps too: one kernel for all
        info.map.push_back(pos);
      } else if (d[j] == 1) {
        info.map.push_back(-1);
      } else {
        return Fail("an input's extent does not broadcast to the domain");
      }
    }
    return Set(v, std::move(info));
  }

  bool Set(ir::Value v, ValueInfo info) {
    int last = -1;
    for (int m : info.map) {
      if (m < 0) continue;
      if (m <= last) return Fail("a value's dimensions are not in the domain's order (transposed or repeated)");
      last = m;
    }
    // Along the last extent: mapped there with a real extent (an extent-1 dimension mapped onto an extent-1
    // domain dimension carries no index, and views may drop it).
    const Dims& d = v.type().dims();
    info.inner = false;
    for (size_t j = 0; j < info.map.size(); ++j) info.inner |= Reduced(info.map[j]) && d[static_cast<int>(j)] != 1;
    a_.values[v] = std::move(info);
    return true;
  }

  const ValueInfo* Info(ir::Value v) const {
    auto it = a_.values.find(v);
    return it == a_.values.end() ? nullptr : &it->second;
  }

  bool MapOp(const ir::Operation& op) {
    const OpClass c = Classify(op);
    if (c == OpClass::kOpaque) return Fail("op " + std::string(op.name()) + " is not fusible");
    std::vector<const ValueInfo*> in;
    int level = 0;
    for (uint32_t i = 0; i < op.num_operands(); ++i) {
      const ValueInfo* info = Info(op.operand(i));
      if (info == nullptr) return Fail("an operand of " + std::string(op.name()) + " is not in the group");
      in.push_back(info);
      level = std::max(level, info->level);
    }
    const ir::Value out = op.result(0);
    const Dims& od = out.type().dims();
    ValueInfo info;
    info.level = level;
    switch (c) {
      case OpClass::kConstant:
        info.map.assign(od.size(), -1);
        break;
      case OpClass::kElementwise: {
        const int r = static_cast<int>(od.size());
        for (int j = 0; j < r; ++j) {
          int m = -1;
          for (uint32_t i = 0; i < op.num_operands(); ++i) {
            const int ri = op.operand(i).type().rank();
            const int jj = j - (r - ri);
            if (jj < 0) continue;
            const int mi = in[i]->map[jj];
            if (mi < 0) continue;
            if (m >= 0 && m != mi) return Fail("operands of " + std::string(op.name()) + " disagree on a dimension");
            m = mi;
          }
          if (m < 0 && od[j] != 1) return Fail("a broadcast result dimension has no source");
          if (m >= 0 && !Same(od[j], a_.domain[m])) return Fail("a result extent differs from the domain's");
          info.map.push_back(m);
        }
        break;
      }
      case OpClass::kUnitView:
        if (!MapView(op, *in[0], &info)) return false;
        break;
      case OpClass::kReduce: {
        if (a_.kind == GroupTemplate::kElementwise) return Fail("internal: reduce in an elementwise group");
        const ops::OpSchema& s = *op.info().schema;
        const ops::AttrValues attrs = ir::SchemaAttrValues(s, op.attributes());
        const int r = op.operand(0).type().rank();
        const std::vector<int64_t> axes = ReduceAxes(op);
        const bool keepdim = std::get<bool>(attrs[s.AttrIndex("keepdim")]);
        // Every reduction of the group runs over the same domain dimensions, the first one's.
        std::set<int> over;
        for (int64_t ax : axes) {
          const int m = in[0]->map[static_cast<size_t>(ax)];
          if (m >= 0 && !Reduced(m)) {
            return Fail(a_.kind == GroupTemplate::kRowReduce
                            ? "a reduction over a dimension other than the domain's last, in a row reduction"
                            : "a reduction over other dimensions than the group's first reduction");
          }
          if (m >= 0) over.insert(m);
        }
        for (int m : a_.reduced) {
          if (!over.count(m) && a_.domain[static_cast<size_t>(m)] != 1) {
            return Fail(a_.kind == GroupTemplate::kRowReduce
                            ? "a reduction that does not run along the domain's last dimension"
                            : "a reduction that does not run over all of the group's reduced dimensions");
          }
        }
        for (int j = 0; j < r; ++j) {
          const bool reduced = std::find(axes.begin(), axes.end(), j) != axes.end();
          if (!reduced) {
            info.map.push_back(in[0]->map[static_cast<size_t>(j)]);
          } else if (keepdim) {
            info.map.push_back(-1);
          }
        }
        info.level = in[0]->level + 1;
        if (info.level > kMaxPasses) return Fail("more than 4 dependent reductions");
        a_.passes = std::max(a_.passes, info.level);
        break;
      }
      case OpClass::kOpaque: break;
    }
    return Set(out, std::move(info));
  }

  bool MapView(const ir::Operation& op, const ValueInfo& in, ValueInfo* info) {
    const ops::OpSchema& s = *op.info().schema;
    const ops::AttrValues attrs = ir::SchemaAttrValues(s, op.attributes());
    const Dims& id = op.operand(0).type().dims();
    const Dims& od = op.result(0).type().dims();
    switch (s.op) {
      case ops::Op::kUnsqueeze: {
        int64_t dim = std::get<int64_t>(attrs[s.AttrIndex("dim")]);
        if (dim < 0) dim += static_cast<int64_t>(id.size()) + 1;
        info->map = in.map;
        info->map.insert(info->map.begin() + dim, -1);
        return true;
      }
      case ops::Op::kSqueeze: {
        int64_t dim = std::get<int64_t>(attrs[s.AttrIndex("dim")]);
        if (dim < 0) dim += static_cast<int64_t>(id.size());
        info->map = in.map;
        if (info->map[static_cast<size_t>(dim)] >= 0) return Fail("squeeze of a dimension that is not of extent 1");
        info->map.erase(info->map.begin() + dim);
        return true;
      }
      case ops::Op::kExpand: {
        const int r = static_cast<int>(od.size()), ri = static_cast<int>(id.size());
        for (int j = 0; j < r; ++j) {
          const int jj = j - (r - ri);
          const int mi = jj >= 0 ? in.map[static_cast<size_t>(jj)] : -1;
          if (mi >= 0) {
            info->map.push_back(mi);
          } else if (od[j] == 1) {
            info->map.push_back(-1);
          } else {
            const int pos = j + k() - r;
            if (pos < 0 || !Same(od[j], a_.domain[pos])) return Fail("an expanded extent is not the domain's");
            info->map.push_back(pos);
          }
        }
        return true;
      }
      case ops::Op::kView: {  // only adds or drops extent-1 dimensions (Classify checked)
        std::vector<int> nonunit;
        for (int j = 0; j < id.size(); ++j) {
          if (id[j] != 1) nonunit.push_back(in.map[static_cast<size_t>(j)]);
        }
        size_t next = 0;
        for (int64_t e : od) info->map.push_back(e == 1 ? -1 : nonunit[next++]);
        return true;
      }
      default:
        return Fail("internal: not a unit view");
    }
  }

  bool CheckOutputs() {
    for (ir::Value v : g_.outputs) {
      const ValueInfo* info = Info(v);
      if (info == nullptr) return Fail("an output is not computed by the group");
      std::set<int> dims(info->map.begin(), info->map.end());
      for (int d = 0; d < k(); ++d) {
        if (a_.kind != GroupTemplate::kElementwise && Reduced(d) && !info->inner) continue;
        if (!dims.count(d) && a_.domain[static_cast<size_t>(d)] != 1) {
          return Fail("an output does not cover the domain (it would be written more than once)");
        }
      }
    }
    return true;
  }

  static constexpr int kMaxPasses = 4;
  const GroupView& g_;
  std::string* why_;
  GroupAnalysis a_;
};

}  // namespace

std::optional<GroupAnalysis> Analyze(const GroupView& g, std::string* why) { return Analyzer(g, why).Run(); }

GroupView BodyView(const ir::Operation& group) {
  GroupView g;
  const ir::Block& body = group.region(0).front();
  for (size_t i = 0; i < body.num_arguments(); ++i) g.inputs.push_back(body.argument(i));
  for (ir::Operation* op : body) {
    if (op->info().Has(ir::kTerminator)) {
      g.outputs = op->OperandValues();
    } else {
      g.ops.push_back(op);
    }
  }
  return g;
}

}  // namespace oar::compiler
