// Collectives along one dim of a ProcessMesh, on the local tensors of every rank (rank r's tensor on
// mesh.devices()[r], all in this process), differentiable: each call records one autograd node whose VJP
// is the exact adjoint collective (all_gather <-> reduce_scatter(sum), all_reduce(sum) -> all_reduce(sum),
// all_to_all -> the reverse all_to_all). One call is one logical collective, however many groups the
// mesh dim has (a dp=2,tp=2 mesh has two tp groups); CollectiveCounts counts logical collectives, which
// is what a rank of a multi-process run would issue.
#ifndef OAR_CORE_DISTRIBUTED_COLLECTIVES_H_
#define OAR_CORE_DISTRIBUTED_COLLECTIVES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/distributed/mesh.h"
#include "core/tensor/tensor.h"

namespace oar::distributed {

/// Logical collectives issued since the last ResetCollectiveCounts (this process, every thread).
struct CollectiveCounts {
  int64_t all_reduce = 0, all_gather = 0, reduce_scatter = 0, all_to_all = 0;
  int64_t total() const { return all_reduce + all_gather + reduce_scatter + all_to_all; }
  std::string ToString() const;
};
CollectiveCounts GetCollectiveCounts();
void ResetCollectiveCounts();

/// locals[r] becomes op over the ranks of r's group along `dim` (same shapes within a group). kSum, kAvg,
/// kMax, kMin. Returns new tensors (the inputs are not modified).
std::vector<Tensor> AllReduceAlong(const ProcessMesh& mesh, int dim, const std::vector<Tensor>& locals,
                                   runtime::ReduceOp op);
/// Rank r gets [p, ...shape] holding its group's tensors in coordinate order (same shapes within a group).
std::vector<Tensor> AllGatherAlong(const ProcessMesh& mesh, int dim, const std::vector<Tensor>& locals);
/// locals[r] of shape [p, ...]; the rank at coordinate i gets op over its group of block i: [...]. kSum, kAvg.
std::vector<Tensor> ReduceScatterAlong(const ProcessMesh& mesh, int dim, const std::vector<Tensor>& locals,
                                       runtime::ReduceOp op);
/// chunks[r][j]: what rank r sends to the rank at coordinate j of its group; returns received[r][i]: what
/// the rank at coordinate i sent to r. Chunks may differ in shape; empty chunks are not sent.
std::vector<std::vector<Tensor>> AllToAllAlong(const ProcessMesh& mesh, int dim,
                                               const std::vector<std::vector<Tensor>>& chunks);

/// x copied to `device`, differentiable (Tensor::to is not recorded by autograd): the gradient goes back
/// to x's device.
Tensor CopyToDevice(const Tensor& x, Device device);

}  // namespace oar::distributed

#endif  // OAR_CORE_DISTRIBUTED_COLLECTIVES_H_
