#include "core/ir/verifier.h"

#include <unordered_set>

#include "core/base/error.h"
#include "core/ir/dim_expr.h"
#include "core/ir/text.h"

namespace oar::ir {

std::string DescribeOp(const Operation& op) {
  std::string where;
  if (op.location().line > 0) where = fmt::format(" at {}:{}", op.location().line, op.location().col);
  if (const Block* b = op.parent_block()) {
    size_t index = 0;
    for (const Operation* o = b->front(); o && o != &op; o = o->next()) ++index;
    const Operation* parent = b->parent_op();
    where += fmt::format(" (op {} of a block of {})", index, parent ? parent->name() : std::string_view("?"));
  }
  return fmt::format("{}{}", op.name(), where);
}

namespace {

class Verifier {
 public:
  void Run(const Operation& root) {
    scopes_.emplace_back();
    VerifyOp(root, false);
  }

 private:
  template <typename... Args>
  [[noreturn]] void Fail(const Operation& op, fmt::format_string<Args...> f, Args&&... args) {
    Throw(ErrorCode::kInvalidArgument, "verifier: {}: {}", DescribeOp(op), fmt::format(f, std::forward<Args>(args)...));
  }

  bool Visible(Value v) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      if (it->contains(v.impl())) return true;
      if (it->isolated) return false;
    }
    return false;
  }

  void VerifyOp(const Operation& op, bool in_block) {
    const OpInfo& info = op.info();
    if (info.num_operands >= 0 && op.num_operands() != static_cast<uint32_t>(info.num_operands)) {
      Fail(op, "expected {} operands, got {}", info.num_operands, op.num_operands());
    }
    if (info.num_results >= 0 && op.num_results() != static_cast<uint32_t>(info.num_results)) {
      Fail(op, "expected {} results, got {}", info.num_results, op.num_results());
    }
    if (op.num_regions() != static_cast<uint32_t>(info.num_regions)) {
      Fail(op, "expected {} regions, got {}", info.num_regions, op.num_regions());
    }
    for (uint32_t i = 0; i < op.num_operands(); ++i) {
      const Value v = op.operand(i);
      if (!v) Fail(op, "operand {} is null", i);
      if (!Visible(v)) {
        Fail(op, "operand {} is used before its definition or outside the region that defines it (SSA dominance)", i);
      }
    }
    for (uint32_t i = 0; i < op.num_results(); ++i) {
      if (!op.result(i).type()) Fail(op, "result {} has no type", i);
    }
    // Attributes: exactly the declared ones, of the declared kinds.
    try {
      const std::vector<NamedAttribute> complete = CompleteAttributes(op.context(), info, op.attributes());
      if (complete.size() != op.attributes().size()) {
        for (const NamedAttribute& a : complete) {
          if (!op.attr(a.name)) Fail(op, "attribute '{}' is missing", a.name);
        }
      }
    } catch (const Error& e) {
      Fail(op, "{}", e.what());
    }
    if (in_block && info.Has(kTerminator) && op.next() != nullptr) {
      Fail(op, "a terminator must be the last op of its block");
    }
    if (info.infer != nullptr) CheckInference(op);
    if (info.verify != nullptr) {
      try {
        info.verify(op);
      } catch (const Error& e) {
        Fail(op, "{}", e.what());
      }
    }
    for (uint32_t r = 0; r < op.num_regions(); ++r) {
      for (const auto& block : op.region(r).blocks()) {
        Scope& scope = scopes_.emplace_back();
        scope.isolated = info.Has(kIsolatedFromAbove);
        for (size_t a = 0; a < block->num_arguments(); ++a) scope.insert(block->argument(a).impl());
        for (const Operation* inner : *block) {
          if (inner->parent_block() != block.get()) Fail(*inner, "its parent block link is broken");
          VerifyOp(*inner, true);
          for (uint32_t i = 0; i < inner->num_results(); ++i) scopes_.back().insert(inner->result(i).impl());
        }
        scopes_.pop_back();
      }
    }
  }

  void CheckInference(const Operation& op) {
    std::vector<Type> operand_types;
    for (uint32_t i = 0; i < op.num_operands(); ++i) operand_types.push_back(op.operand(i).type());
    std::vector<Type> inferred;
    try {
      inferred = op.info().infer(op.context(), op.info(), OpSignature{operand_types, op.attributes()});
    } catch (const Error& e) {
      Fail(op, "{}", e.what());
    }
    if (inferred.size() != op.num_results()) {
      Fail(op, "the op's rule gives {} results, the op has {}", inferred.size(), op.num_results());
    }
    for (uint32_t i = 0; i < op.num_results(); ++i) {
      const Type got = op.result(i).type();
      const Type want = inferred[i];
      if (got == want) continue;
      // Either side may know less than the other (a `?`), and the program may state how a broadcast
      // resolves (`S` where the rule gives `bcast(S,T)`); any other difference is an error.
      bool ok = got.IsTensor() && want.IsTensor() && got.dtype() == want.dtype() && got.rank() == want.rank();
      for (int d = 0; ok && d < got.rank(); ++d) ok = CompatibleExtent(op.context(), got.dims()[d], want.dims()[d]);
      if (!ok) {
        Fail(op, "result {} has type {} but the op's rule gives {}", i, PrintType(op.context(), got),
             PrintType(op.context(), want));
      }
    }
  }

  static bool CompatibleExtent(const IrContext& ctx, int64_t got, int64_t want) {
    if (got == want || SymDim::IsDynamic(got) || SymDim::IsDynamic(want)) return true;
    const DimExprNode* n = DimNode(ctx, want);
    return n != nullptr && n->op == DimOp::kBroadcast &&
           (CompatibleExtent(ctx, got, n->operands[0]) || CompatibleExtent(ctx, got, n->operands[1]));
  }

  struct Scope : std::unordered_set<const void*> {
    bool isolated = false;
  };
  std::vector<Scope> scopes_;
};

}  // namespace

void Verify(const Operation& root) { Verifier().Run(root); }

}  // namespace oar::ir
