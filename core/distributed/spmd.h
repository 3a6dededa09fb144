// SPMD rules: how placements flow through an op. One rule per op of the table (ops::AllSchemas(); the
// rule family follows the schema's OpKind, and kDirect/kView ops have their own), plus the nn-level
// composites the models use (linear, rms_norm, embedding, cross_entropy, attention).
//
// A rule is written in factor form (Shardy's OpShardingRule, einsum-like): every tensor dim carries a
// factor; dims that share a factor must be sharded alike. A factor missing from the outputs is a
// contraction: sharding it makes the outputs Partial (matmul's k gives Partial(sum), max's axes
// Partial(max)) or is not allowed. Blocked factors (softmax's axis, normalised axes, concat's axis, a
// broadcast extent-1 dim: factor -1) stay replicated. Partial inputs pass through only where the op is
// linear in them (add of two Partial(sum), mul by a replicated tensor, sum, views).
//
// Decide picks, for each mesh dim on its own, one candidate — replicate everything, shard one factor, or
// pass Partial through — by this order: (1) fewest changes to annotated inputs (placements the user set
// with shard_tensor); (2) the op's preference: a candidate that keeps the work split beats replicating
// everything; (3) the cheapest input reshards by the cost model of PlanReshard; then the lowest factor.
// ExplainScope records each decision as text.
#ifndef OAR_CORE_DISTRIBUTED_SPMD_H_
#define OAR_CORE_DISTRIBUTED_SPMD_H_

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/distributed/mesh.h"
#include "core/ops/schema.h"

namespace oar::distributed {

struct SpmdRule {
  std::string name;    // op or composite name
  std::string family;  // "elementwise", "matmul", "reduction", "normalisation", "view", ...
  std::vector<int64_t> factor_size;
  /// Per input, per dim: its factor, or -1 (must be replicated). An absent input has no dims.
  std::vector<std::vector<int>> inputs;
  std::vector<std::vector<int>> outputs;
  /// Per factor: sharding it when it is absent from the outputs makes them Partial(op); nullopt: it may
  /// not be sharded then.
  std::vector<std::optional<runtime::ReduceOp>> contraction;
  /// Per factor: never sharded.
  std::vector<bool> blocked;
  /// Per factor: only sharded when the mesh dim divides it (views, mean).
  std::vector<bool> even;
  /// Ways Partial inputs flow through: the inputs marked may be Partial(op) (the others replicated), and
  /// the outputs are then Partial(op).
  struct PartialPass {
    std::vector<bool> partial_inputs;
    std::vector<runtime::ReduceOp> ops;
  };
  std::vector<PartialPass> partial;
  /// Further factors a dim carries at a stride: a reshape's merged dim [3 · heads · hd] carries, besides its
  /// leftmost factor (3), heads after 3 — sharding heads places that dim Shard(dim, 3) (strided), so the
  /// fused qkv output shards by heads. `split` is the product of the extents before the factor.
  struct StridedDim {
    bool output = false;
    int tensor = 0, dim = 0, factor = 0;
    int64_t split = 1;
  };
  std::vector<StridedDim> strided;
  /// Per factor (may be shorter than factor_size), per input: the op adds its result into that input, which
  /// must then be Partial(op) when the factor is contracted — scatter_add's x, into which each rank scatters
  /// the rows it holds (the sum over ranks is the whole scatter).
  std::vector<std::vector<bool>> accumulates;

  int AddFactor(int64_t size, bool blocked_factor = false);
};

/// Whether `op` has a rule (every op should: the test iterates ops::AllSchemas()).
bool HasSpmdRule(ops::Op op);
/// The rule of `op` for these input shapes and attributes (attrs in schema order, defaults filled).
SpmdRule SpmdRuleFor(ops::Op op, std::span<const ops::TensorMeta> inputs, const ops::AttrValues& attrs);

// Rules of the nn-level composites (core/ops/nn.h), run as one local call per rank.
SpmdRule LinearRule(const Dims& x, const Dims& w, bool bias);
SpmdRule NormRule(const std::string& name, const Dims& x, int normalized_ndim, int params);
SpmdRule EmbeddingRule(const Dims& weight, const Dims& indices);
SpmdRule CrossEntropyRule(const Dims& logits, const Dims& target);
SpmdRule AttentionRule(const Dims& q, const Dims& k, const Dims& v);
SpmdRule ElementwiseRule(const std::string& name, std::span<const Dims> inputs, bool linear);

struct SpmdDecision {
  std::vector<Placements> inputs;   // what each input must have
  std::vector<Placements> outputs;  // what the outputs then have
  std::string explain;
};

/// Choose placements for an op whose inputs have `current` placements (absent inputs: empty) and shapes
/// `shapes`; `annotated[i]` marks inputs whose placements the user fixed.
SpmdDecision Decide(const SpmdRule& rule, const ProcessMesh& mesh, std::span<const Placements> current,
                    std::span<const Dims> shapes, std::span<const bool> annotated, DType dtype);

/// Whether the outputs of an op decided as `d` inherit the user's annotation: the op has exactly one input,
/// annotated, and keeps its placements. A view, cast or unary op of an annotated tensor (the transpose of a
/// column-parallel weight) is that tensor, so later decisions treat it as fixed too rather than gathering it
/// because it looks like an ordinary intermediate. Eager execution (Execute) and spmd-propagate both apply it.
bool InheritsAnnotation(std::span<const Placements> current, std::span<const bool> annotated, const SpmdDecision& d);

/// Collects the explanation of every decision made on this thread while it lives (nested scopes: the
/// innermost collects).
class ExplainScope {
 public:
  ExplainScope();
  ~ExplainScope();
  ExplainScope(const ExplainScope&) = delete;
  ExplainScope& operator=(const ExplainScope&) = delete;
  const std::string& text() const { return text_; }

 private:
  friend void AppendExplain(const std::string& s);
  std::string text_;
  ExplainScope* previous_;
};
/// Add a line to the innermost ExplainScope of this thread (nothing without one).
void AppendExplain(const std::string& s);

}  // namespace oar::distributed

#endif  // OAR_CORE_DISTRIBUTED_SPMD_H_
