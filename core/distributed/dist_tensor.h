// DistTensor: a tensor laid out over a ProcessMesh — its global shape, mesh and placements, and the local
// tensor of every rank (rank r's on mesh.devices()[r]; every rank lives in this process). shard_tensor
// makes one from a whole tensor, Reshard changes its placements (collectives along mesh dims, planned by
// cost on n-d meshes), FullTensor assembles the whole tensor again.
//
// Autograd: the local tensors carry the tape. Local ops record as usual; every collective records its
// exact adjoint (collectives.h). So the gradient of a local tensor is that rank's share of the gradient:
// for a Shard placement the gradient of the shard, for a Replicate placement a Partial(sum) share (the
// ranks' copies are one variable: its gradient is the sum of theirs). DistTensor::grad() returns it with
// the tensor's own placements (reducing those shares); Backward seeds a Replicate scalar loss on one rank
// per replica group, so that nothing is counted twice.
#ifndef OAR_CORE_DISTRIBUTED_DIST_TENSOR_H_
#define OAR_CORE_DISTRIBUTED_DIST_TENSOR_H_

#include <string>
#include <vector>

#include "core/distributed/mesh.h"
#include "core/tensor/tensor.h"

namespace oar::distributed {

class DistTensor {
 public:
  DistTensor() = default;
  /// From the local tensor of every rank (with one rank per process, only this process's rank's is defined;
  /// the others are undefined); throws kInvalidArgument unless each local has the shape that RegionOf
  /// gives its rank, one dtype, and lives on its rank's device.
  DistTensor(ProcessMesh mesh, Placements placements, Dims global_shape, std::vector<Tensor> locals);

  bool defined() const { return !locals_.empty(); }
  const ProcessMesh& mesh() const { return mesh_; }
  const Placements& placements() const { return placements_; }
  const Dims& shape() const { return shape_; }
  int64_t rank() const { return shape_.size(); }
  DType dtype() const { return locals_.at(static_cast<size_t>(mesh_.first_local())).dtype(); }
  /// One per rank; with one rank per process (ProcessMesh::ForProcesses) only this process's is defined.
  const std::vector<Tensor>& locals() const { return locals_; }
  const Tensor& local(int64_t rank) const { return locals_.at(static_cast<size_t>(rank)); }
  /// The locals themselves (an optimiser updates parameters through these).
  std::vector<Tensor>& mutable_locals() { return locals_; }
  /// Set by shard_tensor: the user fixed these placements (SPMD conflict resolution keeps them).
  bool annotated() const { return annotated_; }
  DistTensor& set_annotated(bool v) {
    annotated_ = v;
    return *this;
  }
  /// "DistTensor(shape [8, 6], [S(0), R], dp=2,tp=2 over kunlun_sim:0..3)".
  std::string ToString() const;

  // ---- autograd ----
  bool requires_grad() const;
  /// Makes every local a leaf that requires grad (parameters).
  DistTensor& set_requires_grad(bool value);
  /// The accumulated gradient with this tensor's placements (undefined when no backward reached it): shard
  /// gradients as they are, Replicate dims' shares all-reduced.
  DistTensor grad() const;
  /// Drop the accumulated local gradients.
  void zero_grad();
  /// The locals detached from the tape.
  DistTensor detach() const;

 private:
  ProcessMesh mesh_;
  Placements placements_;
  Dims shape_;
  std::vector<Tensor> locals_;
  bool annotated_ = false;
};

/// Lay `global` out over `mesh` with `placements` (each rank gets its block, copied to its device). A
/// Partial(sum) dim keeps the value on the rank at coordinate 0 and zeros elsewhere (exact: no division;
/// torch divides instead); Partial(avg|max|min) keep it on every rank. The result is annotated.
DistTensor shard_tensor(const Tensor& global, const ProcessMesh& mesh, const Placements& placements);

/// Change the placements (same mesh). Every transition: S->R all_gather, P->R all_reduce, P->S
/// reduce_scatter (sum, avg; max and min all_reduce then slice), S(i)->S(j) all_to_all, R->S local slice,
/// R->P local (zeros off coordinate 0 for sum), and through R for the rest; on n-d meshes a cheapest
/// sequence of one-mesh-dim steps (PlanReshard).
DistTensor Reshard(const DistTensor& x, const Placements& placements);

/// One step of a reshard plan: mesh dim `dim` goes from `from` to `to` with `collective`.
struct ReshardStep {
  int dim = 0;
  Placement from, to;
  std::string collective;  // "all_gather", "all_reduce", "reduce_scatter", "all_to_all", "slice", "partial"
  double cost_us = 0;
};
/// The cheapest sequence of steps (Dijkstra over placements, one mesh dim per step, with the collective
/// cost model of docs/distributed.md). Throws kInvalidArgument for placements that do not fit.
std::vector<ReshardStep> PlanReshard(const ProcessMesh& mesh, const Placements& from, const Placements& to,
                                     const Dims& global_shape, DType dtype);
/// Estimated time of one step (microseconds).
double StepCost(const ProcessMesh& mesh, const ReshardStep& step, const Placements& state, const Dims& global_shape,
                DType dtype);
/// "dim 1: S(0) -> R all_gather (12.3 us); ..."
std::string PlanString(const std::vector<ReshardStep>& plan);

/// The whole tensor on rank 0's device (Reshard to all-Replicate); with one rank per process, on this
/// process's device (every process must call it: it may communicate).
Tensor FullTensor(const DistTensor& x);

}  // namespace oar::distributed

#endif  // OAR_CORE_DISTRIBUTED_DIST_TENSOR_H_
