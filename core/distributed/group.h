// Collectives across the devices of one type, every rank in this process, on the runtime's communicators
// (runtime::Communicator: one host thread drives all ranks through the plugin's CCL table). This layer
// checks the arguments and allocates the results. Results are stream-ordered on each device's compute
// stream, like any kernel: the next op on that device sees them, a host read waits for them.
#ifndef OAR_CORE_DISTRIBUTED_GROUP_H_
#define OAR_CORE_DISTRIBUTED_GROUP_H_

#include <memory>
#include <span>
#include <vector>

#include "core/runtime/ccl.h"
#include "core/tensor/tensor.h"

namespace oar::nn {
class Module;
}

namespace oar::distributed {

/// kSum, kProd, kMax, kMin, kAvg.
using ReduceOp = runtime::ReduceOp;

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

  std::vector<Device> devices_;
  std::unique_ptr<runtime::Communicator> comm_;
};

/// Data parallelism: average the gradients of `replicas` (replica r on group.devices()[r], the same
/// architecture) in place, parameter by parameter. Every replica's parameters must have gradients.
void AverageGradients(Group& group, std::span<nn::Module* const> replicas);

}  // namespace oar::distributed

#endif  // OAR_CORE_DISTRIBUTED_GROUP_H_
