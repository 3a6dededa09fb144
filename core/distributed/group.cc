#include "core/distributed/group.h"

#include <set>

#include "core/base/error.h"
#include "core/nn/module.h"
#include "core/ops/ops.h"
#include "core/runtime/runtime.h"

namespace oar::distributed {
namespace {

runtime::DeviceContext& Ctx(Device d) { return runtime::Runtime::Get().Context(d); }

std::string DevicesString(const std::vector<Device>& devices) {
  std::string s;
  for (const Device& d : devices) s += (s.empty() ? "" : ", ") + d.str();
  return s;
}

}  // namespace

Group::Group(std::vector<Device> devices) : devices_(std::move(devices)) {
  OAR_CHECK_ARG(!devices_.empty(), "distributed::Group needs at least one device");
  std::set<int> seen;
  for (const Device& d : devices_) {
    OAR_CHECK_ARG(d.type() == devices_[0].type(), "distributed::Group: every device must be of one type; got {}",
                  DevicesString(devices_));
    OAR_CHECK_ARG(seen.insert(d.index()).second, "distributed::Group: {} appears twice in {}", d.str(),
                  DevicesString(devices_));
    Ctx(d);  // throws kNotFound naming the available devices
  }
  comm_ = std::make_unique<runtime::Communicator>(devices_);
}

Group::~Group() = default;

void Group::Check(std::span<const Tensor> tensors, const char* what, bool same_shape) const {
  OAR_CHECK_ARG(tensors.size() == devices_.size(), "{}: expected one tensor per rank ({}), got {}", what, size(),
                tensors.size());
  for (int r = 0; r < size(); ++r) {
    const Tensor& t = tensors[r];
    OAR_CHECK_ARG(t.defined(), "{}: the tensor of rank {} is undefined", what, r);
    OAR_CHECK_ARG(t.device() == devices_[r], "{}: the tensor of rank {} is on {}, expected {}", what, r,
                  t.device().str(), devices_[r].str());
    OAR_CHECK_ARG(t.is_contiguous(), "{}: the tensor of rank {} must be contiguous (call .contiguous())", what, r);
    OAR_CHECK_ARG(t.dtype() == tensors[0].dtype(), "{}: rank {} has dtype {}, rank 0 has {}", what, r,
                  DTypeName(t.dtype()), DTypeName(tensors[0].dtype()));
    if (same_shape) {
      OAR_CHECK_ARG(t.shape() == tensors[0].shape(), "{}: rank {} has shape {}, rank 0 has {}", what, r,
                    t.shape().ToString(), tensors[0].shape().ToString());
    }
  }
}

void Group::AllReduce(std::span<const Tensor> tensors, ReduceOp op) {
  Check(tensors, "all_reduce", true);
  for (const Tensor& t : tensors) t.storage()->DropShadows();
  comm_->AllReduce(tensors, op);
}

void Group::Broadcast(std::span<const Tensor> tensors, int root) {
  Check(tensors, "broadcast", true);
  OAR_CHECK_ARG(root >= 0 && root < size(), "broadcast: root {} is not a rank of this group of {}", root, size());
  for (const Tensor& t : tensors) t.storage()->DropShadows();
  comm_->Broadcast(tensors, root);
}

std::vector<Tensor> Group::AllGather(std::span<const Tensor> inputs) {
  Check(inputs, "all_gather", true);
  Dims shape{size()};
  for (int64_t d : inputs[0].shape()) shape.push_back(d);
  std::vector<Tensor> out;
  for (int r = 0; r < size(); ++r) out.push_back(empty(shape, inputs[0].dtype(), devices_[r]));
  comm_->AllGather(inputs, out);
  return out;
}

std::vector<Tensor> Group::ReduceScatter(std::span<const Tensor> inputs, ReduceOp op) {
  Check(inputs, "reduce_scatter", true);
  OAR_CHECK_ARG(inputs[0].rank() >= 1 && inputs[0].shape()[0] % size() == 0,
                "reduce_scatter: the leading dimension of {} must be a multiple of the group size {}",
                inputs[0].shape().ToString(), size());
  Dims shape = inputs[0].shape();
  shape[0] /= size();
  std::vector<Tensor> out;
  for (int r = 0; r < size(); ++r) out.push_back(empty(shape, inputs[0].dtype(), devices_[r]));
  comm_->ReduceScatter(inputs, out, op);
  return out;
}

void Group::SendRecv(const Tensor& src, int src_rank, const Tensor& dst, int dst_rank) {
  OAR_CHECK_ARG(src_rank >= 0 && src_rank < size() && dst_rank >= 0 && dst_rank < size() && src_rank != dst_rank,
                "send_recv: ranks {} -> {} must be two different ranks of this group of {}", src_rank, dst_rank,
                size());
  OAR_CHECK_ARG(src.device() == devices_[src_rank] && dst.device() == devices_[dst_rank],
                "send_recv: the source must be on {} and the destination on {}; got {} and {}",
                devices_[src_rank].str(), devices_[dst_rank].str(), src.device().str(), dst.device().str());
  OAR_CHECK_ARG(src.is_contiguous() && dst.is_contiguous() && src.dtype() == dst.dtype() && src.numel() == dst.numel(),
                "send_recv: source and destination must be contiguous with the same dtype and element count; got "
                "{} {} and {} {}",
                DTypeName(src.dtype()), src.shape().ToString(), DTypeName(dst.dtype()), dst.shape().ToString());
  dst.storage()->DropShadows();
  comm_->SendRecv(src, src_rank, dst, dst_rank);
}

void AverageGradients(Group& group, std::span<nn::Module* const> replicas) {
  OAR_CHECK_ARG(static_cast<int>(replicas.size()) == group.size(), "AverageGradients: {} replicas for a group of {}",
                replicas.size(), group.size());
  std::vector<std::vector<Tensor*>> params;
  for (nn::Module* m : replicas) params.push_back(m->Parameters());
  for (size_t r = 1; r < params.size(); ++r) {
    OAR_CHECK_ARG(params[r].size() == params[0].size(), "AverageGradients: replica {} has {} parameters, replica 0 {}",
                  r, params[r].size(), params[0].size());
  }
  for (size_t i = 0; i < params[0].size(); ++i) {
    std::vector<Tensor> grads;
    for (size_t r = 0; r < params.size(); ++r) {
      Tensor g = params[r][i]->grad();
      OAR_CHECK_ARG(g.defined(), "AverageGradients: parameter {} of replica {} has no gradient (run backward first)", i,
                    r);
      grads.push_back(g);
    }
    group.AllReduce(grads, ReduceOp::kAvg);
  }
}

}  // namespace oar::distributed
