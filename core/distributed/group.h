// Collectives across the devices of one type, every rank in this process: one host thread drives all
// ranks through the device plugin's CCL table (oar_ccl_api_t), batching the per-rank calls between
// group_start and group_end as NCCL does. Results are stream-ordered on each device's compute stream,
// like any kernel: the next op on that device sees them, a host read waits for them.
#ifndef OAR_CORE_DISTRIBUTED_GROUP_H_
#define OAR_CORE_DISTRIBUTED_GROUP_H_

#include <functional>
#include <span>
#include <vector>

#include "core/tensor/tensor.h"
#include "oar/plugin/ccl.h"

namespace oar::nn {
class Module;
}

namespace oar::distributed {

enum class ReduceOp {
  kSum = OAR_REDUCE_SUM,
  kProd = OAR_REDUCE_PROD,
  kMax = OAR_REDUCE_MAX,
  kMin = OAR_REDUCE_MIN,
  kAvg = OAR_REDUCE_AVG
};

class Group {
 public:
  /// A communicator over `devices` (rank r = devices[r]): one type, distinct devices. kUnimplemented when
  /// the type's plugin has no CCL table, kInvalidArgument for a bad device list.
  explicit Group(std::vector<Device> devices);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int size() const { return static_cast<int>(devices_.size()); }
  const std::vector<Device>& devices() const { return devices_; }

  // Every call takes one tensor per rank, tensor r on devices()[r], contiguous, all of one dtype.
  /// In place: every tensor becomes op(all tensors). Same shapes.
  void AllReduce(std::span<const Tensor> tensors, ReduceOp op);
  /// In place: every tensor becomes tensors[root]. Same shapes.
  void Broadcast(std::span<const Tensor> tensors, int root);
  /// Each rank gets every rank's input concatenated along a new leading dimension: [size, ...shape].
  std::vector<Tensor> AllGather(std::span<const Tensor> inputs);
  /// Inputs of shape [size * k, ...]; rank r gets op over ranks of the r-th block: [k, ...].
  std::vector<Tensor> ReduceScatter(std::span<const Tensor> inputs, ReduceOp op);
  /// Copy `src` (on rank src_rank) into `dst` (on rank dst_rank) with the CCL's send/recv.
  void SendRecv(const Tensor& src, int src_rank, const Tensor& dst, int dst_rank);

 private:
  void Check(std::span<const Tensor> tensors, const char* what, bool same_shape) const;
  /// Run `call(rank)` for every rank inside one CCL group.
  void Grouped(const char* what, const std::function<oar_status_t*(int rank)>& call);

  const oar_ccl_api_t* ccl_ = nullptr;
  std::vector<Device> devices_;
  std::vector<oar_ccl_comm_t> comms_;
};

/// Data parallelism: average the gradients of `replicas` (replica r on group.devices()[r], the same
/// architecture) in place, parameter by parameter. Every replica's parameters must have gradients.
void AverageGradients(Group& group, std::span<nn::Module* const> replicas);

}  // namespace oar::distributed

#endif  // OAR_CORE_DISTRIBUTED_GROUP_H_
