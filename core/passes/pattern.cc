#include "core/passes/pattern.h"

#include <algorithm>
#include <unordered_map>

#include "core/base/error.h"
#include "core/ir/dialect.h"

namespace oar::passes {

void PatternRewriter::Forget(ir::Operation* op) {
  if (live == nullptr) return;
  op->Walk([&](ir::Operation* o) { live->erase(o); });
}

void PatternRewriter::ReplaceOp(ir::Operation* op, std::span<const ir::Value> values) {
  OAR_CHECK(values.size() == op->num_results(), kInternal, "ReplaceOp: {} has {} results, got {} values", op->name(),
            op->num_results(), values.size());
  for (uint32_t i = 0; i < op->num_results(); ++i) {
    if (revisit) {
      for (ir::OpOperand* u = op->result(i).first_use(); u; u = u->next_use()) revisit->push_back(u->owner());
    }
    op->result(i).ReplaceAllUsesWith(values[i]);
  }
  EraseOp(op);
}

void PatternRewriter::EraseOp(ir::Operation* op) {
  if (revisit) {
    for (ir::OpOperand& u : op->operands()) {
      if (u.get() && u.get().defining_op()) revisit->push_back(u.get().defining_op());
    }
  }
  Forget(op);
  op->Erase();
}

ir::Operation* PatternRewriter::Create(std::string_view name, std::span<const ir::Value> operands,
                                       std::vector<ir::NamedAttribute> attrs, std::span<const ir::Type> result_types) {
  ir::Operation* op = Builder::Create(name, operands, std::move(attrs), result_types);
  created_.push_back(op);
  return op;
}

ir::Value PatternRewriter::Create1(std::string_view name, std::span<const ir::Value> operands,
                                   std::vector<ir::NamedAttribute> attrs, std::span<const ir::Type> result_types) {
  ir::Operation* op = Create(name, operands, std::move(attrs), result_types);
  OAR_CHECK(op->num_results() == 1, kInternal, "{} has {} results, not 1", name, op->num_results());
  return op->result(0);
}

GreedyResult ApplyPatternsGreedily(ir::Program& program, const PatternList& patterns, const GreedyConfig& config) {
  // Patterns by root op name, highest benefit first; "" roots apply to every op.
  std::unordered_map<std::string_view, std::vector<const RewritePattern*>> by_root;
  std::vector<const RewritePattern*> any;
  for (const auto& p : patterns) (p->root().empty() ? any : by_root[p->root()]).push_back(p.get());
  auto by_benefit = [](const RewritePattern* a, const RewritePattern* b) { return a->benefit() > b->benefit(); };
  for (auto& [root, list] : by_root) std::stable_sort(list.begin(), list.end(), by_benefit);
  std::stable_sort(any.begin(), any.end(), by_benefit);

  GreedyResult result;
  PatternRewriter rewriter(program.context());
  std::unordered_set<ir::Operation*> live;
  std::vector<ir::Operation*> worklist;
  rewriter.live = &live;
  rewriter.revisit = &worklist;
  for (result.iterations = 1; result.iterations <= config.max_iterations; ++result.iterations) {
    bool changed = false;
    live.clear();
    worklist.clear();
    program.module()->Walk([&](ir::Operation* op) {
      if (op != program.module()) {
        live.insert(op);
        worklist.push_back(op);
      }
    });
    std::reverse(worklist.begin(), worklist.end());  // pop_back visits ops in program order
    while (!worklist.empty()) {
      ir::Operation* op = worklist.back();
      worklist.pop_back();
      if (!live.contains(op)) continue;
      if (config.erase_dead_pure_ops && op->info().Has(ir::kPure) && op->num_results() > 0 && !op->HasUses() &&
          op->num_regions() == 0) {
        rewriter.EraseOp(op);
        changed = true;
        continue;
      }
      auto try_list = [&](const std::vector<const RewritePattern*>& list) {
        for (const RewritePattern* p : list) {
          rewriter.SetInsertionPoint(op);
          if (p->MatchAndRewrite(op, rewriter)) return true;
        }
        return false;
      };
      auto it = by_root.find(op->name());
      const bool rewritten = (it != by_root.end() && try_list(it->second)) || try_list(any);
      if (!rewritten) continue;
      changed = true;
      ++result.rewrites;
      for (ir::Operation* created : rewriter.TakeCreated()) {
        live.insert(created);
        worklist.push_back(created);
      }
      if (config.max_rewrites >= 0 && result.rewrites >= config.max_rewrites) return result;
    }
    if (!changed) {
      result.converged = true;
      return result;
    }
  }
  result.iterations = config.max_iterations;
  return result;
}

}  // namespace oar::passes
