// Lowering: an analysed fusion group becomes a loop-IR Kernel by its template (group.h).
//
// The one schedule, for both templates: the task loop runs over the rows of the domain (the product of
// every extent but the last), one row per task; each row gets the outer indices and every buffer's base
// offset once, then one kThreads loop over the last extent per reduction pass (each reduction's
// prologue recomputed from the inputs, which a row keeps in cache) and a final kThreads loop that stores
// the full-domain outputs. Values that do not run along the last extent (the row values: a reduction's
// result, a broadcast input) are computed once per row, outside the loops. Targets differ only in the
// knobs: threads per task (1 for C, where the kThreads loop is a vectorised serial loop; 256 on GPUs).
//
// Column reductions (over dimensions other than the last) transpose that schedule: a task is a tile of
// columns, its kThreads loop runs over them, and each pass is a serial loop down the reduced dimensions.
//
// Every extent and stride is a run-time int64 parameter, so one kernel serves every shape with the same
// broadcasting pattern (the symbolic signature): batch or sequence changes never recompile.
#ifndef OAR_CORE_COMPILER_LOWER_H_
#define OAR_CORE_COMPILER_LOWER_H_

#include <vector>

#include "core/compiler/group.h"
#include "core/compiler/loop_ir.h"
#include "core/tensor/dims.h"

namespace oar::compiler {

struct Target {
  /// Threads per task (kThreads loops); 1 for C (serial, vectorised), a power of two for GPUs.
  int threads = 1;
  /// Columns per task of a column reduction where threads == 1 (on GPUs a task has one per thread): two
  /// AVX2 vectors, one cache line of float32 per row, so that the few columns of a norm weight's or a
  /// bias's gradient (64 in the example llama) still make several tasks for the threads to share.
  int column_tile = 16;
  /// Row reductions: a variance, mean((a - mean(a))^2), accumulated in the mean's pass as float64 sums of
  /// a and a^2 (Lowerer::PlanOnePassVariances), so that a float32 layer_norm reads its row in two passes
  /// instead of three. Where threads == 1 only (C targets; GPUs keep the two-pass form, without float64
  /// arithmetic).
  bool one_pass_variance = true;
};

/// How a run-time int64 parameter is computed from the run's shapes.
struct IntParam {
  enum Kind { kExtent, kStride } kind = kExtent;
  /// kExtent: the kernel dimension's extent is the product of the domain's extents [dim, end) (adjacent
  /// dimensions every value indexes alike are one kernel dimension: Lower's collapse). kStride: the kernel
  /// dimension `dim` (an entry of buffer_maps).
  int dim = 0;
  int end = 0;
  int buffer = -1;  ///< kStride: the kernel buffer whose element stride along `dim` this is
};

struct LoweredGroup {
  GroupAnalysis analysis;
  Kernel kernel;
  /// Per kernel buffer: the group value (inputs first, then outputs) and its dimension map.
  std::vector<ir::Value> buffer_values;
  std::vector<std::vector<int>> buffer_maps;
  std::vector<IntParam> params;  ///< Kernel::int_params, in order
  size_t num_inputs = 0;
};

/// The kernel's int64 parameters (Kernel::int_params, in order) for a run whose domain has the extents
/// `domain` (the analysis's rank) and whose buffers (kernel order) have the shapes `buffer_shapes`.
std::vector<int64_t> EvaluateParams(const LoweredGroup& lg, const Dims& domain, const std::vector<Dims>& buffer_shapes);

/// Lower `g` (analysed as `a`) for `target`. Throws oar::Error (kUnimplemented) for an op the code
/// generator cannot express.
LoweredGroup Lower(const GroupView& g, const GroupAnalysis& a, const Target& target);

}  // namespace oar::compiler

#endif  // OAR_CORE_COMPILER_LOWER_H_
