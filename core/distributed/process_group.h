// Across processes: the launcher's environment and a process group over an existing engine.
//
// Oar does not launch processes itself. Under OpenMPI's `mpirun` it reads OMPI_COMM_WORLD_{RANK,SIZE,
// LOCAL_RANK}; under torchrun, Slurm wrappers or Kubernetes operators the torchrun-style RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT. ProcessGroup::World() is every process of the job, one rank per
// process, with collectives on host memory through an existing engine, so CPU clusters work as they are:
// MPI under mpirun, Gloo (TCP) under the torchrun-style variables, Gloo's rendezvous going through the
// launch's TCP store (LaunchTcpStore). Device tensors of a type whose plugin has a CCL go through that CCL
// instead (all_reduce, all_gather, reduce_scatter; float32, int32, int64), its communicator bootstrapped
// through a store of the group (NewStore: the MPI store, or a view of the TCP store); everything else stages
// through the host (OAR_DIST_DEVICE_CCL=0 forces that). Each collective first exchanges its sequence number
// with the peers and then runs, and a blocked rank sleeps between polls (4 ranks fit on 2 cores). A rank
// that waits longer than the timeout (OAR_DIST_TIMEOUT_S, default 300) reports which peers never arrived at
// which collective: under MPI it aborts the whole job (MPI_Abort); under Gloo it throws kDeadlineExceeded
// (kUnavailable when a peer's connection broke: it died), which ends the process, and the launcher ends
// the others. So nothing hangs.
#ifndef OAR_CORE_DISTRIBUTED_PROCESS_GROUP_H_
#define OAR_CORE_DISTRIBUTED_PROCESS_GROUP_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/distributed/store.h"
#include "core/runtime/ccl.h"
#include "core/tensor/tensor.h"

namespace oar::distributed {

/// Where this process sits in the job, from the launcher's environment.
struct LaunchInfo {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  /// "mpirun", "env" (RANK/WORLD_SIZE...) or "single" (no launcher).
  std::string launcher = "single";
  /// Throws kInvalidArgument for a malformed or inconsistent variable (naming it).
  static LaunchInfo FromEnv();
};

/// Whether this build has the MPI engine (mpirun); HaveGloo: the Gloo engine (torchrun-style variables).
bool HaveMpi();
bool HaveGloo();

class ProcessGroup {
 public:
  /// Every process of the job: under mpirun (or no launcher: a world of one) MPI, initialised on first use;
  /// under the torchrun-style variables Gloo, connected through the launch's TCP store (rank 0 serves it on
  /// MASTER_PORT). kUnimplemented when the build lacks the engine; kFailedPrecondition when the launcher's
  /// world size is not the engine's.
  static ProcessGroup& World();
  /// The processes `world_ranks` of World() (distinct, ascending or not: rank i of the subgroup is
  /// world_ranks[i]), created on first use by its members only (MPI_Comm_create_group; a Gloo context
  /// connected through the TCP store) and kept for the process; World() itself when it is every rank in order. The
  /// calling process must be a member.
  static ProcessGroup& Subgroup(const std::vector<int>& world_ranks);
  ~ProcessGroup();
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Seconds a rank waits for its peers before aborting the job.
  double timeout_s() const { return timeout_s_; }
  /// The engine that moves the host's bytes: "MPI" or "Gloo".
  const char* engine() const;

  /// `t` becomes op of every process's tensor (same shape and dtype everywhere; float32, float64, int32
  /// or int64), on t's device (a device tensor goes through the host).
  void AllReduce(Tensor& t, runtime::ReduceOp op);
  /// [size, ...shape]: every process's tensor in rank order (same shape and dtype everywhere), on t's device.
  Tensor AllGather(const Tensor& t);
  /// `t` of shape [size, ...]: this rank gets op (kSum, kAvg) over every process's block `rank()`: [...].
  Tensor ReduceScatter(const Tensor& t, runtime::ReduceOp op);
  /// chunks[j] goes to rank j (chunks[rank()] stays); returns received[i], what rank i sent here. Chunks
  /// may differ in shape (their shapes are exchanged first); one dtype. On chunks[rank()]'s device.
  std::vector<Tensor> AllToAll(const std::vector<Tensor>& chunks);
  /// Send `t` to rank `dst` without waiting for it to be received (the data is copied to the host first;
  /// WaitSends waits for every send still in flight).
  void Send(const Tensor& t, int dst);
  /// The next tensor rank `src` sent here (in send order), its shape and dtype the sender's, on `device`.
  Tensor Recv(int src, Device device);
  /// Wait until every Send of this process has been received.
  void WaitSends();
  /// Wait until every process arrives.
  void Barrier();

  /// A new key/value store over this group's processes (a collective: every member calls it, in the same
  /// order as its other collectives), for bootstrapping a device type's CCL (Store::ccl()). Under MPI it
  /// talks MPI on a communicator of its own, rank 0 answering from a service thread, so a Get completes
  /// while the other ranks do anything else; this needs MPI_THREAD_MULTIPLE, which World() requests
  /// (kUnimplemented when the MPI library does not provide it: use the TCP store instead), and the
  /// destructor is a collective too: rank 0's waits (at most `timeout`) until every peer's store is gone.
  /// Under Gloo it is a view of the launch's TCP store whose keys carry a prefix of their own (the group's
  /// world ranks and the call's number).
  std::unique_ptr<Store> NewStore(std::chrono::milliseconds timeout);
  /// The device type's CCL communicator of this group, one rank per process, rank i on `device` of process
  /// i, bootstrapped through a NewStore() (created on first use per device, a collective then; kept for the
  /// group). kUnimplemented when the type has no CCL table or its CCL cannot span processes.
  runtime::Communicator& DeviceCommunicator(Device device);

 private:
  ProcessGroup();
  explicit ProcessGroup(const std::vector<int>& world_ranks);
  int WorldRank(int r) const;
  // The device CCL communicator a collective on `t` uses, or nullptr when it goes through the host.
  runtime::Communicator* DeviceCclFor(const Tensor& t);
  int WorldSize() const;
  // Check that every peer is at this collective (its sequence number), or abort after the timeout.
  std::string Arrive(const std::string& op, const Tensor& t);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;
  double timeout_s_ = 300;
  int64_t seq_ = 0;
};

}  // namespace oar::distributed

#endif  // OAR_CORE_DISTRIBUTED_PROCESS_GROUP_H_
