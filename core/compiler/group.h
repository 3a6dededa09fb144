// Fusion groups: which ops CINN can fuse, and the analysis that decides whether a set of ops forms ONE
// kernel. The analysis puts every value of the group on a common iteration domain D (the shape of the
// reduction's input, or of the largest output) by mapping each of its dimensions onto a dimension of D
// (or none, for extent-1 dimensions that broadcast): NumPy broadcasting, reductions with or without
// keepdim and unit-dimension views (unsqueeze, squeeze, expand, views that only add or drop 1s) all
// become index maps, so no intermediate is ever materialised. Two templates come out of it:
//   elementwise — every output covers D; one pass over D;
//   row reduce  — reductions over D's last dimension, each with its prologue; reductions that need an
//                 earlier one's result (softmax's sum after its max) run as later passes over the row;
//                 epilogue values (RMSNorm's x * rsqrt(mean) * w) are computed in a final pass.
//   column reduce — reductions over dimensions other than D's last, which every value keeps (a bias
//                 gradient's sum over the batch, statistics over the rows of a [rows, features] tensor):
//                 the same passes, run down each column instead of along each row.
#ifndef OAR_CORE_COMPILER_GROUP_H_
#define OAR_CORE_COMPILER_GROUP_H_

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/ir/operation.h"

namespace oar::compiler {

enum class OpClass {
  kElementwise,  ///< unary, binary, compare, where, cast (NumPy broadcasting)
  kUnitView,     ///< unsqueeze, squeeze, expand, views adding or dropping extent-1 dimensions
  kReduce,       ///< sum, mean, max, min, prod over axes
  kConstant,     ///< builtin.constant or op.fill of one element (inlined into every group that uses it)
  kOpaque,       ///< everything else: runs as its own kernel
};
OpClass Classify(const ir::Operation& op);
const char* OpClassName(OpClass c);

/// A candidate group: its ops (in program order) and its boundary.
struct GroupView {
  std::vector<const ir::Operation*> ops;
  std::vector<ir::Value> inputs;   ///< defined outside, used inside: the kernel's first buffers
  std::vector<ir::Value> outputs;  ///< defined inside, used outside: the kernel's result buffers
};

enum class GroupTemplate { kElementwise, kRowReduce, kColumnReduce };
const char* GroupTemplateName(GroupTemplate t);

struct ValueInfo {
  /// Per dimension of the value: the domain dimension it runs along, or -1 (extent 1, broadcast).
  std::vector<int> map;
  /// Reduction passes needed before the value is known (0: inputs and values computed from them).
  int level = 0;
  /// Whether the value runs along a reduced dimension of the domain (the last one in a row reduce, or in
  /// an elementwise group; the reduced ones in a column reduce): it is computed inside the reduction loops.
  bool inner = false;
};

struct GroupAnalysis {
  GroupTemplate kind = GroupTemplate::kElementwise;
  /// The domain: its extents as IR dims (static, symbolic); rank >= 1 (a scalar group gets [1]).
  std::vector<int64_t> domain;
  /// A value whose shape at run time is the domain (null for a synthetic [1]), and the reduction's
  /// input of the first pass in a row reduce.
  ir::Value anchor;
  int passes = 0;  ///< number of reduction passes (row and column reduce)
  /// The domain dimensions the reductions run over: {rank - 1} for row reduce and elementwise groups (the
  /// loop dimension), the reduced ones (never the last) for column reduce.
  std::vector<int> reduced;
  std::unordered_map<ir::Value, ValueInfo, ir::ValueHash> values;
  int rank() const { return static_cast<int>(domain.size()); }
};

/// The analysis of `g`, or nullopt with the reason in `why` when its ops cannot be one kernel.
std::optional<GroupAnalysis> Analyze(const GroupView& g, std::string* why);

/// The group view of a cinn.group op's body (block arguments as inputs, the yield's operands as outputs).
GroupView BodyView(const ir::Operation& group);

}  // namespace oar::compiler

#endif  // OAR_CORE_COMPILER_GROUP_H_
