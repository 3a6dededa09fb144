// Pattern rewriting: RewritePattern, the PatternRewriter patterns change the IR through, and a greedy
// worklist driver that applies a set of patterns until nothing matches (or an iteration cap is hit).
#ifndef OAR_CORE_PASSES_PATTERN_H_
#define OAR_CORE_PASSES_PATTERN_H_

#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/ir/builder.h"

namespace oar::passes {

class PatternRewriter;

/// A rewrite rooted at ops named `root` (empty: any op). Higher `benefit` is tried first.
class RewritePattern {
 public:
  RewritePattern(std::string root, int benefit, std::string name)
      : root_(std::move(root)), benefit_(benefit), name_(std::move(name)) {}
  virtual ~RewritePattern() = default;
  const std::string& root() const { return root_; }
  int benefit() const { return benefit_; }
  const std::string& name() const { return name_; }
  /// Match `op` and, on a match, rewrite through `rewriter` and return true. Must not change the IR when
  /// returning false.
  virtual bool MatchAndRewrite(ir::Operation* op, PatternRewriter& rewriter) const = 0;

 private:
  std::string root_;
  int benefit_;
  std::string name_;
};

using PatternList = std::vector<std::unique_ptr<RewritePattern>>;

/// A Builder that tells the driver about every change, so the ops around a rewrite are revisited.
class PatternRewriter : public ir::Builder {
 public:
  explicit PatternRewriter(ir::IrContext& ctx) : Builder(ctx) {}
  /// Replace every result of `op` with `values` (one per result) and erase `op`.
  void ReplaceOp(ir::Operation* op, std::span<const ir::Value> values);
  void ReplaceOp(ir::Operation* op, ir::Value value) { ReplaceOp(op, std::span<const ir::Value>(&value, 1)); }
  /// Erase `op` (its results must be unused).
  void EraseOp(ir::Operation* op);
  /// Ops created since the last call (the driver visits them).
  std::vector<ir::Operation*> TakeCreated() { return std::exchange(created_, {}); }
  /// Ops created since the last TakeCreated.
  const std::vector<ir::Operation*>& created() const { return created_; }
  /// Create through the rewriter (recorded for the driver).
  ir::Operation* Create(std::string_view name, std::span<const ir::Value> operands,
                        std::vector<ir::NamedAttribute> attrs = {}, std::span<const ir::Type> result_types = {});
  ir::Value Create1(std::string_view name, std::span<const ir::Value> operands,
                    std::vector<ir::NamedAttribute> attrs = {}, std::span<const ir::Type> result_types = {});

  // Driver hooks.
  std::unordered_set<ir::Operation*>* live = nullptr;   // ops the driver may still visit
  std::vector<ir::Operation*>* revisit = nullptr;       // ops to visit again

 private:
  void Forget(ir::Operation* op);
  std::vector<ir::Operation*> created_;
};

struct GreedyConfig {
  int max_iterations = 10;        ///< full sweeps over the program
  int64_t max_rewrites = -1;      ///< -1: no limit
  bool erase_dead_pure_ops = true;
};

struct GreedyResult {
  bool converged = false;  ///< the last sweep changed nothing
  int64_t rewrites = 0;
  int iterations = 0;
};

/// Apply `patterns` to every op of `program` (regions included) until a sweep changes nothing.
GreedyResult ApplyPatternsGreedily(ir::Program& program, const PatternList& patterns, const GreedyConfig& config = {});

}  // namespace oar::passes

#endif  // OAR_CORE_PASSES_PATTERN_H_
