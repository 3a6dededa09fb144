// Static auto-parallel: placement propagation over a captured op-dialect program (jit::Capture), and a
// runner that executes the placed program over its mesh.
//
// The program carries its distribution in discardable attributes, so it prints, parses and passes through
// other passes as it is:
//   - builtin.module: `dist.mesh = "dp=2,tp=2"` (the mesh's shape and dim names) and optionally
//     `dist.device = "kunlun_sim"` (the device type its ranks run on; default cpu);
//   - builtin.data / builtin.parameter: `dist.placements = ["[S(0), R]"]`, the user's annotation;
//   - after the pass, every op: `dist.placements`, one string per result.
//
// The pass (`spmd-propagate`, PropagatePlacements) walks the program in order. Annotated inputs and
// parameters keep their placements (unannotated ones are replicated); every op.* op applies its SPMD rule
// (spmd.h: the same rules and the same Decide as eager execution on DistTensors), and where the rule needs
// an input in other placements it inserts the reshard plan (PlanReshard) as explicit ops, one per step:
// `dist.all_reduce`, `dist.all_gather`, `dist.reduce_scatter`, `dist.all_to_all`, `dist.slice` (R -> S,
// local) and `dist.partial` (R -> P, local), each with `mesh_dim`, `from` and `to` (that mesh dim's
// placement before and after). One value resharded to the same placements for several users is resharded
// once. With replicate_outputs (the default) the program's outputs are made Replicate, as FullTensor
// would. Shapes must be static (capture with a static batch).
#ifndef OAR_CORE_DISTRIBUTED_SPMD_PASS_H_
#define OAR_CORE_DISTRIBUTED_SPMD_PASS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/distributed/dist_tensor.h"
#include "core/ir/builder.h"

namespace oar::scheduler {
class Executor;
}

namespace oar::distributed {

inline constexpr std::string_view kMeshAttr = "dist.mesh";
inline constexpr std::string_view kMeshDeviceAttr = "dist.device";
inline constexpr std::string_view kPlacementsAttr = "dist.placements";

/// Register the `dist` dialect (the reshard ops above) into `ctx`; a second call does nothing.
void RegisterDistDialect(ir::IrContext& ctx);
/// Register the `spmd-propagate` pass (options: `outputs=replicate|keep`); a second call does nothing.
void RegisterAutoParallelPasses();

/// Set the module's dist.mesh and dist.device from `mesh` (its shape, dim names and device type).
void SetProgramMesh(ir::Program& program, const ProcessMesh& mesh);
/// The mesh of dist.mesh / dist.device; throws kInvalidArgument when the module has none.
ProcessMesh ProgramMesh(const ir::Program& program);
/// Annotate the builtin.data or builtin.parameter called `name`; throws kNotFound naming the inputs and
/// parameters when there is none, kInvalidArgument when the placements do not fit its rank.
void AnnotatePlacements(ir::Program& program, std::string_view name, const Placements& placements);
/// The placements of a value (dist.placements of its defining op); throws kInvalidArgument when absent.
Placements PlacementsOf(ir::Value value);
/// Give optimiser state its parameter's placements, so that the state lives with the parameter's shard and
/// the update needs no collective: for each k whose parameter `params[k]` is annotated, the parameters
/// named `prefix + k` (for each of `prefixes`, e.g. AdamW's "adam.m." and "adam.v.") that the program has
/// get the same placements. Returns how many were annotated.
int AnnotateStateLikeParameters(ir::Program& program, std::span<const std::string> params,
                                std::span<const std::string_view> prefixes);

struct PropagateOptions {
  bool replicate_outputs = true;
};
struct PropagationReport {
  int64_t ops = 0;                             // op.* ops placed
  std::map<std::string, int64_t> reshard_ops;  // inserted dist.* ops by name ("dist.all_reduce": 1)
  std::string explain;                         // each op's decision (spmd.h's explain text)
  int64_t count(std::string_view op) const;
};
/// The pass on `program` (in place). Throws kInvalidArgument for a program without a mesh, a symbolic or
/// dynamic extent, or a bad annotation; kUnimplemented for ops it has no rule for (control flow, kernel.*).
PropagationReport PropagatePlacements(ir::Program& program, const PropagateOptions& options = {});

/// The program rank `rank` of `mesh` runs (mesh: ProgramMesh's shape, the ranks' devices): every value in
/// its rank-local type (RegionOf its placements), op.* shape attributes (shape, input_shape, weight_shape)
/// local, parameters the rank's shards, and each dist.* step a `dist.rank_reshard` (attributes rank,
/// mesh_dim, from and to: the whole placements before and after, global_shape), which is not pure, so
/// the ranks issue their collectives in program order. It runs only inside an SpmdExecutor (the op meets
/// the other ranks there). Throws kInvalidArgument for a mesh of another shape, kUnimplemented for an op
/// without operands whose result is not replicated.
std::unique_ptr<ir::Program> RankProgram(const ir::Program& placed, const ProcessMesh& mesh, int64_t rank);

/// A placed program compiled into one scheduler::Executor per rank (RankProgram), run with one host thread
/// per rank: the same executor as static training and the Predictor. With one rank per process
/// (ProcessMesh::ForProcesses, under a launcher) only this process's rank is compiled and run, its
/// collectives through the process group (rank_executor of another rank: kInvalidArgument; Run's outputs
/// hold this rank's local only).
/// The ranks meet at each collective, and the last to arrive runs it for all of them (Reshard on
/// DistTensors, so CollectiveCounts counts each once). A rank that fails stops the others (its error is
/// rethrown); a rank that does not arrive within OAR_DIST_TIMEOUT_S (default 300 s) fails the run with
/// kDeadlineExceeded naming the missing ranks and the collective.
class SpmdExecutor {
 public:
  SpmdExecutor(const ir::Program& placed, const ProcessMesh& mesh);
  ~SpmdExecutor();
  SpmdExecutor(const SpmdExecutor&) = delete;
  SpmdExecutor& operator=(const SpmdExecutor&) = delete;

  /// Whole inputs (by builtin.data index), laid out by their placements; returns the outputs placed as the
  /// program places them. One run at a time (concurrent calls wait).
  std::vector<DistTensor> Run(std::span<const Tensor> inputs) const;
  /// Rank `rank`'s executor (its instruction list, statistics).
  const scheduler::Executor& rank_executor(int64_t rank) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// SpmdExecutor(program, mesh).Run(inputs).
std::vector<DistTensor> RunSpmd(const ir::Program& program, const ProcessMesh& mesh, std::span<const Tensor> inputs);

/// The reference runner: the placed program op by op on DistTensors in this thread: inputs and parameters
/// laid out by their placements, op.* ops through eager execution (eager.h), which must need no reshard of
/// its own (the pass inserted them; a disagreement is kInternal, naming the op), dist.* ops through Reshard.
std::vector<DistTensor> RunSpmdEager(const ir::Program& program, const ProcessMesh& mesh,
                                     std::span<const Tensor> inputs);

}  // namespace oar::distributed

#endif  // OAR_CORE_DISTRIBUTED_SPMD_PASS_H_
