// The cinn dialect and the `cinn` pass: fusion groups formed greedily along the data flow.
//
// Matmuls with one row (matrix-vector products) first become mul + sum reductions (RewriteVectorMatmuls).
// Ops are visited in program order; each fusible op (group.h's classes) starts a group and tries to join
// the group of each operand's producer. A merge is kept when it creates no cycle (no path between the two
// groups through an op outside them) and when the merged ops still analyse as one kernel. Then sibling
// groups that read a common value merge under the same two conditions (horizontal fusion), and every op tries
// its producers' groups once more (their operands may now share one). Groups with at
// least two computing ops become `cinn.group` ops: operands are the group's inputs, results its outputs,
// the body a copy of the ops (one-element constants copied in) ending in `cinn.yield`.
#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/base/env.h"
#include "core/base/error.h"
#include "core/compiler/compiler.h"
#include "core/compiler/group.h"
#include "core/compiler/kernel.h"
#include "core/ir/dialect.h"
#include "core/ir/op_dialect.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/ops/schema.h"
#include "core/passes/pass.h"
#include "core/scheduler/op_runner.h"

namespace oar::compiler {
namespace {

void VerifyGroup(const ir::Operation& op) {
  OAR_CHECK_ARG(op.region(0).size() == 1, "cinn.group: the body must be one block, got {}", op.region(0).size());
  const ir::Block& body = op.region(0).front();
  OAR_CHECK_ARG(body.num_arguments() == op.num_operands(), "cinn.group: {} body arguments for {} operands",
                body.num_arguments(), op.num_operands());
  for (uint32_t i = 0; i < op.num_operands(); ++i) {
    OAR_CHECK_ARG(body.argument(i).type() == op.operand(i).type(), "cinn.group: body argument {} has another type "
                  "than operand {}", i, i);
  }
  const ir::Operation* yield = body.back();
  OAR_CHECK_ARG(yield != nullptr && yield->name() == "cinn.yield", "cinn.group: the body must end in cinn.yield");
  OAR_CHECK_ARG(yield->num_operands() == op.num_results(), "cinn.group: cinn.yield gives {} values for {} results",
                yield->num_operands(), op.num_results());
  for (uint32_t i = 0; i < op.num_results(); ++i) {
    OAR_CHECK_ARG(yield->operand(i).type() == op.result(i).type(), "cinn.group: result {} is not the type yielded", i);
  }
}

void LoadCinnDialect(ir::IrContext& ctx) {
  if (ctx.FindDialect("cinn") != nullptr) return;
  auto d = std::make_unique<ir::Dialect>(ctx, "cinn");
  d->AddOp({.name = "group",
            .traits = ir::kPure | ir::kIsolatedFromAbove,
            .num_operands = -1,
            .num_results = -1,
            .num_regions = 1,
            .attrs = {{"template", ir::AttrKind::kString, ctx.StringAttr("")}},
            .verify = VerifyGroup});
  d->AddOp({.name = "yield",
            .traits = ir::kTerminator,  // not pure: dce must keep it
            .num_operands = -1,
            .verify = [](const ir::Operation& op) {
              OAR_CHECK_ARG(op.parent_op() != nullptr && op.parent_op()->name() == "cinn.group",
                            "cinn.yield: must end the body of a cinn.group");
            }});
  ctx.AddDialect(std::move(d));
}

// A matrix-vector product (a matmul whose rows, M, are one: a decoding step's projections and attention at
// batch 1) is a reduction CINN can run, so it becomes one: out[..., 0, n] = sum_k a[..., 0, k] * b[..., k, n].
// Where b is a permute of w that swaps its last two dimensions (a weight [N, K] used as w^T, attention's
// keys), the product runs along w's rows, a row reduce over K:
//   sum(mul(unsqueeze(a, -2), unsqueeze(w, -3)), axes = [-1])      [..., 1, N, K] -> [..., 1, N]
// otherwise down b's columns, a column reduce over K:
//   sum(mul(unsqueeze(a, -1), unsqueeze(b, -3)), axes = [-2])      [..., 1, K, N] -> [..., 1, N]
// The mul and the sum always form a group (two computing ops that analyse as one kernel), and the
// epilogue and prologue ops the analysis accepts join it. Only float32 / float64 operands of rank >= 2
// whose extents are all known (symbolic ones included); other matmuls stay library kernels.
bool VectorMatmul(const ir::Operation& op) {
  const ops::OpSchema* s = op.info().schema;
  if (s == nullptr || s->op != ops::Op::kMatmul || op.info().dialect->name() != "op") return false;
  for (uint32_t i = 0; i < 2; ++i) {
    const ir::Type t = op.operand(i).type();
    if (!t.IsTensor() || t.rank() < 2 || (t.dtype() != DType::kFloat32 && t.dtype() != DType::kFloat64)) return false;
    for (int64_t e : t.dims()) {
      if (ir::SymDim::IsDynamic(e)) return false;
    }
  }
  const Dims& a = op.operand(0).type().dims();
  return a[a.size() - 2] == 1;
}

// The w of b = permute(w) when the permute swaps b's last two dimensions and keeps the others; null otherwise.
ir::Value TransposedOperand(ir::Value b) {
  const ir::Operation* p = b.defining_op();
  if (p == nullptr || p->info().schema == nullptr || p->info().schema->op != ops::Op::kPermute) return {};
  const ops::AttrValues attrs = ir::SchemaAttrValues(*p->info().schema, p->attributes());
  const auto& dims = std::get<std::vector<int64_t>>(attrs[p->info().schema->AttrIndex("dims")]);
  const int64_t r = static_cast<int64_t>(dims.size());
  if (r < 2 || r != b.type().rank()) return {};
  for (int64_t j = 0; j < r; ++j) {
    const int64_t want = j < r - 2 ? j : (j == r - 2 ? r - 1 : r - 2);
    if (dims[static_cast<size_t>(j)] != want && dims[static_cast<size_t>(j)] != want - r) return {};
  }
  return p->operand(0);
}

void RewriteVectorMatmuls(ir::Program& program) {
  ir::IrContext& ctx = program.context();
  std::vector<ir::Operation*> matmuls;
  for (ir::Operation* op : program.block()) {
    if (VectorMatmul(*op)) matmuls.push_back(op);
  }
  const auto create = [&](ir::Builder& b, ops::Op o, std::vector<ir::Value> operands, ops::AttrValues attrs) {
    const ops::OpSchema& s = ops::Schema(o);
    return b.Create1("op." + std::string(s.name), operands, ir::SchemaAttributes(ctx, s, attrs));
  };
  // One unsqueeze per (value, dim): products of one vector (a layer's gate and up projections) then read
  // one value, and horizontal fusion makes them one kernel.
  std::map<std::pair<ir::Operation*, int64_t>, ir::Value> unsqueezed;
  const auto unsqueeze = [&](ir::Builder& b, ir::Value v, int64_t dim) {
    ir::Operation* def = v.defining_op();
    const std::pair<ir::Operation*, int64_t> key{def, dim};
    if (def != nullptr && def->num_results() == 1) {
      auto it = unsqueezed.find(key);
      if (it != unsqueezed.end()) return it->second;
    }
    const ir::Value u = create(b, ops::Op::kUnsqueeze, {v}, {dim});
    if (def != nullptr && def->num_results() == 1) unsqueezed.emplace(key, u);
    return u;
  };
  for (ir::Operation* op : matmuls) {
    ir::Builder b(ctx);
    b.SetInsertionPoint(op);
    const ir::Value w = TransposedOperand(op->operand(1));
    const bool rows = static_cast<bool>(w);
    const ir::Value a = unsqueeze(b, op->operand(0), rows ? -2 : -1);
    const ir::Value m = unsqueeze(b, rows ? w : op->operand(1), -3);
    const ir::Value product = create(b, ops::Op::kMul, {a, m}, {});
    const ir::Value sum = create(b, ops::Op::kSum, {product}, {std::vector<int64_t>{rows ? -1 : -2}, false});
    OAR_CHECK(sum.type() == op->result(0).type(), kInternal, "cinn: {} as a reduction has type {}", ir::DescribeOp(*op),
              ir::PrintType(ctx, sum.type()));
    op->result(0).ReplaceAllUsesWith(sum);
    op->Erase();
  }
}

bool Computes(OpClass c) { return c == OpClass::kElementwise || c == OpClass::kReduce; }
bool Fusible(OpClass c) { return c == OpClass::kElementwise || c == OpClass::kReduce || c == OpClass::kUnitView; }

class Fuser {
 public:
  explicit Fuser(ir::Program& program) : program_(program) {}

  FusionReport Run() {
    LoadCinnDialect(program_.context());
    RewriteVectorMatmuls(program_);
    for (ir::Operation* op : program_.block()) {
      pos_[op] = static_cast<int>(order_.size());
      order_.push_back(op);
    }
    for (ir::Operation* op : order_) {
      const OpClass c = Classify(*op);
      class_[op] = c;
      if (!Fusible(c)) continue;
      group_[op] = NewGroup(op);
      JoinProducers(op);
    }
    FuseSiblings();
    // Horizontal fusion can put an op's operands into one group where they were in two (a gate and an up
    // projection, then their product): such ops try their producers' groups once more.
    for (ir::Operation* op : order_) {
      if (group_.count(op)) JoinProducers(op);
    }
    FusionReport report;
    std::vector<int> roots;
    for (const auto& [op, g] : group_) {
      if (Find(g) == g) roots.push_back(g);
    }
    // Materialise later groups first: positions of earlier ones stay valid.
    std::sort(roots.begin(), roots.end(), [&](int x, int y) { return pos_[*members_[x].rbegin()] > pos_[*members_[y].rbegin()]; });
    for (int g : roots) {
      const auto& m = members_[g];
      if (std::count_if(m.begin(), m.end(), [&](ir::Operation* op) { return Computes(class_[op]); }) < 2) continue;
      std::string why;
      std::optional<GroupAnalysis> a = Analyze(View(m), &why);
      if (!a) continue;
      Materialise(m, a->kind);
      ++report.groups;
      report.fused_ops += m.size();
      ++(a->kind == GroupTemplate::kElementwise ? report.elementwise
         : a->kind == GroupTemplate::kRowReduce ? report.row_reduce
                                                : report.column_reduce);
    }
    return report;
  }

 private:
  struct ByPos {
    const std::unordered_map<const ir::Operation*, int>* pos;
    bool operator()(const ir::Operation* a, const ir::Operation* b) const { return pos->at(a) < pos->at(b); }
  };
  using Members = std::set<ir::Operation*, ByPos>;

  // `op`'s group joins each operand's producer group where the merge creates no cycle and analyses as one kernel.
  void JoinProducers(ir::Operation* op) {
    for (uint32_t i = 0; i < op->num_operands(); ++i) {
      ir::Operation* p = op->operand(i).defining_op();
      if (p == nullptr || !group_.count(p)) continue;
      const int a = Find(group_[p]), b = Find(group_[op]);
      if (a == b || CreatesCycle(a, b)) continue;
      Members merged = members_[static_cast<size_t>(a)];
      merged.insert(members_[static_cast<size_t>(b)].begin(), members_[static_cast<size_t>(b)].end());
      if (Analyze(View(merged), nullptr)) Union(a, b);
    }
  }

  // Horizontal fusion: groups that read a common value and do not depend on each other through an op
  // outside them become one kernel when their ops still analyse as one (the same domain; for reductions
  // the same reduced dimensions), so the shared value is read once and one launch serves both.
  void FuseSiblings() {
    for (ir::Operation* producer : order_) {
      for (uint32_t r = 0; r < producer->num_results(); ++r) {
        std::vector<int> readers;
        for (ir::OpOperand* u = producer->result(r).first_use(); u != nullptr; u = u->next_use()) {
          auto it = group_.find(u->owner());
          if (it == group_.end()) continue;
          const int g = Find(it->second);
          if (std::find(readers.begin(), readers.end(), g) == readers.end()) readers.push_back(g);
        }
        // Each reader joins the first earlier one it can merge with.
        for (size_t i = 1; i < readers.size(); ++i) {
          for (size_t j = 0; j < i; ++j) {
            const int a = Find(readers[j]), b = Find(readers[i]);
            if (a == b) break;
            if (CreatesCycle(a, b)) continue;
            Members merged = members_[static_cast<size_t>(a)];
            merged.insert(members_[static_cast<size_t>(b)].begin(), members_[static_cast<size_t>(b)].end());
            if (Analyze(View(merged), nullptr)) {
              Union(a, b);
              break;
            }
          }
        }
      }
    }
  }

  int NewGroup(ir::Operation* op) {
    parent_.push_back(static_cast<int>(parent_.size()));
    members_.emplace_back(ByPos{&pos_});
    members_.back().insert(op);
    return parent_.back();
  }
  int Find(int g) {
    while (parent_[static_cast<size_t>(g)] != g) g = parent_[static_cast<size_t>(g)] = parent_[static_cast<size_t>(parent_[static_cast<size_t>(g)])];
    return g;
  }
  void Union(int a, int b) {
    members_[static_cast<size_t>(a)].insert(members_[static_cast<size_t>(b)].begin(), members_[static_cast<size_t>(b)].end());
    members_[static_cast<size_t>(b)].clear();
    parent_[static_cast<size_t>(b)] = a;
  }

  // A path from group a to group b (or back) through an op outside both makes the merge a cycle.
  bool CreatesCycle(int a, int b) {
    return ReachesThroughOutside(a, b) || ReachesThroughOutside(b, a);
  }
  // Does any op of `to` depend on an op of `from` through an op in neither?
  bool ReachesThroughOutside(int from, int to) {
    const Members& f = members_[static_cast<size_t>(from)];
    const Members& t = members_[static_cast<size_t>(to)];
    const int lo = pos_[*f.begin()];
    std::vector<ir::Operation*> stack;
    std::unordered_set<ir::Operation*> seen;
    for (ir::Operation* op : t) {
      for (uint32_t i = 0; i < op->num_operands(); ++i) {
        ir::Operation* p = op->operand(i).defining_op();
        if (p != nullptr && pos_.count(p) && !f.count(p) && !t.count(p)) stack.push_back(p);
      }
    }
    while (!stack.empty()) {
      ir::Operation* op = stack.back();
      stack.pop_back();
      if (!seen.insert(op).second || pos_[op] < lo) continue;
      for (uint32_t i = 0; i < op->num_operands(); ++i) {
        ir::Operation* p = op->operand(i).defining_op();
        if (p == nullptr || !pos_.count(p)) continue;
        if (f.count(p)) return true;
        stack.push_back(p);
      }
    }
    return false;
  }

  // The group's ops (one-element constants they use pulled in) and its boundary.
  GroupView View(const Members& m) {
    std::set<const ir::Operation*> in(m.begin(), m.end());
    for (ir::Operation* op : m) {
      for (uint32_t i = 0; i < op->num_operands(); ++i) {
        ir::Operation* p = op->operand(i).defining_op();
        if (p != nullptr && class_.count(p) && class_[p] == OpClass::kConstant) in.insert(p);
      }
    }
    GroupView g;
    for (ir::Operation* op : order_) {
      if (in.count(op)) g.ops.push_back(op);
    }
    std::unordered_set<ir::Value, ir::ValueHash> seen;
    for (const ir::Operation* op : g.ops) {
      for (uint32_t i = 0; i < op->num_operands(); ++i) {
        const ir::Value v = op->operand(i);
        if ((v.defining_op() == nullptr || !in.count(v.defining_op())) && seen.insert(v).second) g.inputs.push_back(v);
      }
    }
    for (const ir::Operation* op : g.ops) {
      if (class_[op] == OpClass::kConstant) continue;
      for (uint32_t r = 0; r < op->num_results(); ++r) {
        const ir::Value v = op->result(r);
        for (ir::OpOperand* u = v.first_use(); u != nullptr; u = u->next_use()) {
          if (!in.count(u->owner())) {
            g.outputs.push_back(v);
            break;
          }
        }
      }
    }
    return g;
  }

  void Materialise(const Members& m, GroupTemplate kind) {
    ir::IrContext& ctx = program_.context();
    GroupView g = View(m);
    const std::unordered_set<const ir::Operation*> members(m.begin(), m.end());
    // The group's first and last op in the block as it is now: a group materialised before this one may
    // have moved some of these members after itself (they used its results), past members that stayed, so
    // the original positions no longer say which comes last (the cnn step's recomputed batch-norm
    // statistics: the group op was placed before a moved member's users, an operand used before its
    // definition).
    ir::Operation* first = nullptr;
    ir::Operation* last = nullptr;
    for (ir::Operation* op : program_.block()) {
      if (!members.count(op)) continue;
      if (first == nullptr) first = op;
      last = op;
    }
    // Outside ops between the group's first and last op that use its results (directly, inside their
    // regions, or through another such op) move after the group. The block is walked as it is now: groups
    // materialised before this one replaced some ops.
    std::unordered_set<const ir::Operation*> moved;
    std::vector<ir::Operation*> move;
    for (ir::Operation* op = first->next(); op != nullptr && op != last; op = op->next()) {
      if (members.count(op)) continue;
      bool depends = false;
      op->Walk([&](ir::Operation* inner) {
        for (uint32_t i = 0; i < inner->num_operands() && !depends; ++i) {
          const ir::Operation* d = inner->operand(i).defining_op();
          depends = d != nullptr && (members.count(d) || moved.count(d));
        }
      });
      if (depends) {
        move.push_back(op);
        moved.insert(op);
      }
    }
    std::vector<ir::Type> types;
    for (ir::Value v : g.outputs) types.push_back(v.type());
    ir::Builder b(ctx);
    b.SetInsertionPointAfter(last);
    ir::Operation* group =
        b.Create("cinn.group", g.inputs, {b.Attr("template", ctx.StringAttr(GroupTemplateName(kind)))}, types);
    ir::Block& body = group->region(0).AddBlock();
    std::unordered_map<ir::Value, ir::Value, ir::ValueHash> mapping;
    for (ir::Value v : g.inputs) mapping[v] = body.AddArgument(v.type());
    for (const ir::Operation* op : g.ops) body.PushBack(op->Clone(mapping));
    std::vector<ir::Value> yielded;
    for (ir::Value v : g.outputs) yielded.push_back(mapping.at(v));
    ir::Builder inner(ctx, body);
    inner.Create("cinn.yield", yielded);
    for (size_t i = 0; i < g.outputs.size(); ++i) g.outputs[i].ReplaceAllUsesWith(group->result(static_cast<uint32_t>(i)));
    for (ir::Operation* op : move) {
      op->RemoveFromParent();
      program_.block().Insert(group->next(), op);
      group = op;  // keep their order
    }
    for (auto it = m.rbegin(); it != m.rend(); ++it) (*it)->Erase();
    // Constants pulled in stay outside for their other users; dce drops the unused ones.
  }

  ir::Program& program_;
  std::vector<ir::Operation*> order_;
  std::unordered_map<const ir::Operation*, int> pos_;
  std::unordered_map<const ir::Operation*, OpClass> class_;
  std::unordered_map<ir::Operation*, int> group_;
  std::vector<int> parent_;
  std::vector<Members> members_;
};

class CinnPass : public passes::Pass {
 public:
  std::string_view name() const override { return "cinn"; }
  void Run(ir::Program& program) override { FuseGroups(program); }
};

}  // namespace

FusionReport FuseGroups(ir::Program& program) { return Fuser(program).Run(); }

void RegisterCinn() {
  static std::once_flag once;
  std::call_once(once, [] {
    ir::RegisterDialectLoader(LoadCinnDialect);
    passes::RegisterPass("cinn",
                         "CINN fusion: group elementwise chains and row reductions with their prologue and epilogue "
                         "(RMSNorm, softmax, layer_norm) and matrix-vector products into cinn.group ops, compiled per device "
                         "when run",
                         [](const passes::PassOptions& o) {
                           passes::CheckPassOptions("cinn", o, {});
                           return std::make_unique<CinnPass>();
                         });
    scheduler::RegisterOpCompiler("cinn.group", CompileGroupOp);
  });
}

bool CinnFromEnvironment() {
  const std::optional<std::string> v = GetEnv("OAR_CINN");
  if (!v || v->empty() || *v == "0") return false;
  OAR_CHECK_ARG(*v == "1", "OAR_CINN must be 0 or 1, got '{}'", *v);
  return true;
}

}  // namespace oar::compiler
