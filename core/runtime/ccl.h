// Collective communication through a device type's CCL table (oar_ccl_api_t): one communicator per rank,
// every rank in this process, driven by one host thread that batches the per-rank calls between group_start
// and group_end as NCCL does. The only code above the plugins that calls the CCL table; core/distributed
// builds its checked, tensor-level API on top of this.
#ifndef OAR_CORE_RUNTIME_CCL_H_
#define OAR_CORE_RUNTIME_CCL_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"
#include "oar/plugin/ccl.h"

namespace oar::runtime {

/// Reduction of a collective (the ABI's OAR_REDUCE_* codes).
enum class ReduceOp {
  kSum = OAR_REDUCE_SUM,
  kProd = OAR_REDUCE_PROD,
  kMax = OAR_REDUCE_MAX,
  kMin = OAR_REDUCE_MIN,
  kAvg = OAR_REDUCE_AVG
};

/// Communicators over `devices` (rank r = devices[r]), which the caller has checked: one type, distinct,
/// each known to the runtime. Every call takes one buffer per rank (tensor r on devices[r], contiguous, the
/// caller's checks done) and is stream-ordered on each device's compute stream, like a kernel.
class Communicator {
 public:
  /// kUnimplemented when the type's plugin has no CCL table; the plugin's error when it cannot initialise.
  explicit Communicator(std::vector<Device> devices);
  /// One rank of a communicator whose `nranks` ranks are spread over processes (each process constructs
  /// its own): this process holds rank `rank` on `device`. The ranks meet through the host's key/value
  /// `store` (used during the construction only): rank 0 makes the unique id and sets it under `key`, the
  /// others get it (waiting at most `timeout_ms`); the plugin's comm_init_rank gets the store for its own
  /// bootstrap. The calls below then take this process's one tensor.
  Communicator(Device device, int nranks, int rank, const oar_ccl_kv_store_t* store, const std::string& key,
               int64_t timeout_ms);
  /// Waits for each device's queued work (which may still use its communicator), then destroys them.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  /// The ranks held by this process (the tensors each call takes).
  int size() const { return static_cast<int>(devices_.size()); }
  /// The ranks of the communicator, in every process.
  int nranks() const { return nranks_; }

  /// In place: every tensor becomes op(all tensors).
  void AllReduce(std::span<const Tensor> tensors, ReduceOp op);
  /// In place: every tensor becomes tensors[root].
  void Broadcast(std::span<const Tensor> tensors, int root);
  /// outputs[r] = every rank's input, concatenated (outputs hold nranks() * inputs[r].numel() elements).
  void AllGather(std::span<const Tensor> inputs, std::span<const Tensor> outputs);
  /// outputs[r] = op over ranks of the r-th block of the inputs (each block outputs[r].numel() elements).
  void ReduceScatter(std::span<const Tensor> inputs, std::span<const Tensor> outputs, ReduceOp op);
  /// dst (on rank dst_rank) = src (on rank src_rank), with the CCL's send/recv in one group.
  void SendRecv(const Tensor& src, int src_rank, const Tensor& dst, int dst_rank);
  /// This process's one rank (the cross-process constructor) sends `t` to rank `peer`, stream-ordered: `t`
  /// must stay alive until the device's queued work has run.
  void Send(const Tensor& t, int peer);
  /// This process's one rank receives into `t` what rank `peer` sends (same byte count), stream-ordered.
  void Recv(const Tensor& t, int peer);

 private:
  template <typename Call>
  void Grouped(const char* what, Call&& call);

  const oar_ccl_api_t* ccl_ = nullptr;
  std::vector<Device> devices_;
  std::vector<oar_ccl_comm_t> comms_;
  int nranks_ = 0;
};

}  // namespace oar::runtime

#endif  // OAR_CORE_RUNTIME_CCL_H_
