// The generic passes: dead-code elimination, common-subexpression elimination and canonicalisation.
#include <algorithm>
#include <unordered_map>

#include "core/base/error.h"
#include "core/ir/dialect.h"
#include "core/passes/drr.h"
#include "core/passes/pass.h"
#include "core/passes/transforms.h"

namespace oar::passes {

// ---- dce -------------------------------------------------------------------------------------------------

int64_t EraseDeadOps(ir::Program& program) {
  int64_t erased = 0;
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<ir::Operation*> order;
    program.module()->WalkPostOrder([&](ir::Operation* op) { order.push_back(op); });
    // Later ops first, so a chain of dead ops goes in one sweep.
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      ir::Operation* op = *it;
      if (op == program.module() || !op->info().Has(ir::kPure) || op->num_regions() > 0 || op->HasUses()) continue;
      op->Erase();
      ++erased;
      changed = true;
    }
  }
  return erased;
}

// ---- cse -------------------------------------------------------------------------------------------------

namespace {

struct OpKey {
  const ir::Operation* op;
  bool operator==(const OpKey& o) const {
    const ir::Operation& a = *op;
    const ir::Operation& b = *o.op;
    if (&a.info() != &b.info() || a.num_operands() != b.num_operands() || a.num_results() != b.num_results()) {
      return false;
    }
    for (uint32_t i = 0; i < a.num_operands(); ++i) {
      if (a.operand(i) != b.operand(i)) return false;
    }
    for (uint32_t i = 0; i < a.num_results(); ++i) {
      if (a.result(i).type() != b.result(i).type()) return false;
    }
    if (a.attributes().size() != b.attributes().size()) return false;
    for (size_t i = 0; i < a.attributes().size(); ++i) {
      if (a.attributes()[i].name != b.attributes()[i].name || a.attributes()[i].value != b.attributes()[i].value) {
        return false;
      }
    }
    return true;
  }
};

struct OpKeyHash {
  size_t operator()(const OpKey& k) const {
    size_t h = std::hash<const void*>()(&k.op->info());
    auto mix = [&](const void* p) { h ^= std::hash<const void*>()(p) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
    for (uint32_t i = 0; i < k.op->num_operands(); ++i) mix(k.op->operand(i).impl());
    for (const ir::NamedAttribute& a : k.op->attributes()) mix(a.value.storage());
    for (uint32_t i = 0; i < k.op->num_results(); ++i) mix(k.op->result(i).type().storage());
    return h;
  }
};

using Scope = std::unordered_map<OpKey, ir::Operation*, OpKeyHash>;

void CseBlock(ir::Block& block, std::vector<Scope>& scopes, int64_t& removed) {
  scopes.emplace_back();
  for (ir::Operation* op : block) {
    for (uint32_t r = 0; r < op->num_regions(); ++r) {
      for (const auto& b : op->region(r).blocks()) {
        std::vector<Scope> inner;
        if (!op->info().Has(ir::kIsolatedFromAbove)) inner = scopes;  // values from outside stay visible
        CseBlock(*b, inner, removed);
      }
    }
    if (!op->info().Has(ir::kPure) || op->num_regions() > 0 || op->num_results() == 0) continue;
    ir::Operation* same = nullptr;
    for (auto it = scopes.rbegin(); it != scopes.rend() && same == nullptr; ++it) {
      auto found = it->find(OpKey{op});
      if (found != it->end()) same = found->second;
    }
    if (same == nullptr) {
      scopes.back().emplace(OpKey{op}, op);
      continue;
    }
    for (uint32_t i = 0; i < op->num_results(); ++i) op->result(i).ReplaceAllUsesWith(same->result(i));
    op->Erase();
    ++removed;
  }
  scopes.pop_back();
}

}  // namespace

int64_t EliminateCommonSubexpressions(ir::Program& program) {
  int64_t removed = 0;
  std::vector<Scope> scopes;
  CseBlock(program.block(), scopes, removed);
  return removed;
}

// ---- canonicalize ----------------------------------------------------------------------------------------

namespace {

// Every value of `from` is exactly representable in `to`.
bool IsWidening(DType from, DType to) {
  if (from == to || from == DType::kBool) return true;
  switch (from) {
    case DType::kFloat16:
    case DType::kBFloat16: return to == DType::kFloat32 || to == DType::kFloat64;
    case DType::kFloat32: return to == DType::kFloat64;
    case DType::kInt8: return to == DType::kInt32 || to == DType::kInt64 || IsFloating(to);
    case DType::kUInt8: return to == DType::kInt32 || to == DType::kInt64 || IsFloating(to);
    case DType::kInt32: return to == DType::kInt64 || to == DType::kFloat64;
    default: return false;
  }
}

// A fill or splat constant of `value` whose type is at most as large as `like`'s (so `x op c` has x's type).
bool IsSplat(ir::Value v, double value) {
  const ir::Operation* def = v.defining_op();
  if (def == nullptr) return false;
  if (def->name() == "op.fill") return def->attr("value").AsFloat() == value;
  if (def->name() == "builtin.constant") {
    const auto values = def->attr("value").AsArray();
    return std::all_of(values.begin(), values.end(), [&](ir::Attribute a) {
      return (a.kind() == ir::AttrKind::kFloat && a.AsFloat() == value) ||
             (a.kind() == ir::AttrKind::kInt && static_cast<double>(a.AsInt()) == value);
    });
  }
  return false;
}

// x + 0, x - 0, x * 1, x / 1 (and 0 + x, 1 * x) -> x, when the result has x's type (no broadcast).
class IdentityOperand : public RewritePattern {
 public:
  IdentityOperand(std::string op, double identity, bool either_side)
      : RewritePattern(op, 1, op + "_identity"), identity_(identity), either_side_(either_side) {}
  bool MatchAndRewrite(ir::Operation* op, PatternRewriter& rewriter) const override {
    for (uint32_t keep = 0; keep < 2; ++keep) {
      if (keep == 1 && !either_side_) break;
      const ir::Value x = op->operand(keep);
      if (x.type() == op->result(0).type() && IsSplat(op->operand(1 - keep), identity_)) {
        rewriter.ReplaceOp(op, x);
        return true;
      }
    }
    return false;
  }

 private:
  double identity_;
  bool either_side_;
};

// permute(permute(x, p), q) -> permute(x, p∘q), or x when that is the identity.
class PermuteOfPermute : public RewritePattern {
 public:
  PermuteOfPermute() : RewritePattern("op.permute", 1, "permute_of_permute") {}
  bool MatchAndRewrite(ir::Operation* op, PatternRewriter& rewriter) const override {
    ir::Operation* inner = op->operand(0).defining_op();
    if (inner == nullptr || inner->name() != "op.permute") return false;
    const std::vector<int64_t> p = inner->attr("dims").AsInts("permute dims");
    const std::vector<int64_t> q = op->attr("dims").AsInts("permute dims");
    const int64_t rank = static_cast<int64_t>(p.size());
    std::vector<int64_t> composed;
    bool identity = true;
    for (int64_t d : q) {
      const int64_t a = p[static_cast<size_t>(d < 0 ? d + rank : d)];
      composed.push_back(a < 0 ? a + rank : a);
      identity = identity && composed.back() == static_cast<int64_t>(composed.size() - 1);
    }
    const ir::Value x = inner->operand(0);
    if (identity) {
      rewriter.ReplaceOp(op, x);
    } else {
      rewriter.ReplaceOp(op, rewriter.Create1("op.permute", std::vector<ir::Value>{x},
                                              {rewriter.Attr("dims", rewriter.context().IntArrayAttr(composed))}));
    }
    return true;
  }
};

bool SameType(const drr::Match& m, const char* a, const char* b) { return m.Tensor(a).type() == m.Tensor(b).type(); }

}  // namespace

void AddCanonicalizationPatterns(PatternList& patterns) {
  patterns.push_back(std::make_unique<IdentityOperand>("op.add", 0.0, true));
  patterns.push_back(std::make_unique<IdentityOperand>("op.sub", 0.0, false));
  patterns.push_back(std::make_unique<IdentityOperand>("op.mul", 1.0, true));
  patterns.push_back(std::make_unique<IdentityOperand>("op.div", 1.0, false));
  patterns.push_back(std::make_unique<PermuteOfPermute>());
  {
    drr::Rule r("cast_to_same_dtype");
    r.Source().Op("op.cast", {"x"}, {"out"});
    r.Require([](const drr::Match& m) { return SameType(m, "x", "out"); });
    r.Result().Alias("out", "x");
    patterns.push_back(r.Build());
  }
  {
    // The DRR form of the redundant-cast rule (compare CastOfWideningCastByHand in passes_test.cc).
    drr::Rule r("cast_of_widening_cast", 2);
    r.Source().Op("op.cast", {"x"}, {"mid"}).Op("op.cast", {"mid"}, {"out"}, {{"dtype", "to"}});
    r.Require([](const drr::Match& m) {
      return IsWidening(m.Tensor("x").type().dtype(), m.Tensor("mid").type().dtype());
    });
    r.Result().Op("op.cast", {"x"}, {"out"}, {{"dtype", drr::FromMatch{"to"}}});
    patterns.push_back(r.Build());
  }
  {
    // Copies and format casts that undo each other (kernel selection leaves them between fallback ops).
    drr::Rule r("copy_round_trip");
    r.Source().Op("kernel.transfer", {"x"}, {"there"}, {{"from", "a"}, {"to", "b"}}).Op("kernel.transfer", {"there"}, {"out"},
                                                                                     {{"from", "b"}, {"to", "a"}});
    r.Result().Alias("out", "x");
    patterns.push_back(r.Build());
    drr::Rule f("format_cast_round_trip");
    f.Source()
        .Op("kernel.format_cast", {"x"}, {"there"}, {{"device", "d"}, {"from", "a"}, {"to", "b"}})
        .Op("kernel.format_cast", {"there"}, {"out"}, {{"device", "d"}, {"from", "b"}, {"to", "a"}});
    f.Result().Alias("out", "x");
    patterns.push_back(f.Build());
  }
  {
    drr::Rule r("neg_of_neg");
    r.Source().Op("op.neg", {"x"}, {"y"}).Op("op.neg", {"y"}, {"out"});
    r.Result().Alias("out", "x");
    patterns.push_back(r.Build());
  }
  {
    drr::Rule r("view_of_view");
    r.Source().Op("op.view", {"x"}, {"mid"}).Op("op.view", {"mid"}, {"out"}, {{"shape", "shape"}});
    r.Result().Op("op.view", {"x"}, {"out"}, {{"shape", drr::FromMatch{"shape"}}});
    patterns.push_back(r.Build());
  }
  {
    drr::Rule r("squeeze_of_unsqueeze");  // the same binding "d" twice: the dims must be equal
    r.Source().Op("op.unsqueeze", {"x"}, {"mid"}, {{"dim", "d"}}).Op("op.squeeze", {"mid"}, {"out"}, {{"dim", "d"}});
    r.Require([](const drr::Match& m) { return SameType(m, "x", "out"); });
    r.Result().Alias("out", "x");
    patterns.push_back(r.Build());
  }
}

namespace {

class DcePass : public Pass {
 public:
  std::string_view name() const override { return "dce"; }
  void Run(ir::Program& program) override { EraseDeadOps(program); }
};

class CsePass : public Pass {
 public:
  std::string_view name() const override { return "cse"; }
  void Run(ir::Program& program) override { EliminateCommonSubexpressions(program); }
};

class CanonicalizePass : public Pass {
 public:
  CanonicalizePass() { AddCanonicalizationPatterns(patterns_); }
  std::string_view name() const override { return "canonicalize"; }
  void Run(ir::Program& program) override {
    const GreedyResult r = ApplyPatternsGreedily(program, patterns_);
    OAR_CHECK(r.converged, kInternal, "canonicalize did not converge in {} sweeps ({} rewrites)", r.iterations,
              r.rewrites);
  }

 private:
  PatternList patterns_;
};

}  // namespace

void RegisterGenericPasses() {
  static const bool once = [] {
    RegisterPass("dce", "erase side-effect-free ops whose results are unused",
                 [](const PassOptions& o) {
                   CheckPassOptions("dce", o, {});
                   return std::make_unique<DcePass>();
                 });
    RegisterPass("cse", "merge identical side-effect-free ops (same op, operands, attributes, types)",
                 [](const PassOptions& o) {
                   CheckPassOptions("cse", o, {});
                   return std::make_unique<CsePass>();
                 });
    RegisterPass("canonicalize",
                 "algebraic identities (x+0, x*1), permute/view/cast chains, neg(neg(x)), squeeze(unsqueeze(x))",
                 [](const PassOptions& o) {
                   CheckPassOptions("canonicalize", o, {});
                   return std::make_unique<CanonicalizePass>();
                 });
    RegisterKernelSelectPass();
    RegisterConstantFoldPass();
    RegisterInplacePass();
    RegisterDecomposePass();
    RegisterShapeInferPass();
    RegisterFuseLinearPass();
    RegisterFuseElementwisePasses();
    RegisterRematPass();
    return true;
  }();
  (void)once;
}

}  // namespace oar::passes
