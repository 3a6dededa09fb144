// Internal to core/distributed: the engine under ProcessGroup that moves host memory between the processes
// of one group. Two existing engines, one per launcher (LaunchInfo):
//   - MPI under `mpirun` (process_group_mpi.cc);
//   - Gloo under torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), its rendezvous
//     through the launch's TCP store (process_group_gloo.cc).
// ProcessGroup does the tensor work once (host staging, the device CCL path, the average's division, shapes)
// and hands each engine host (cpu), contiguous buffers. `what` names the collective (e.g. "all_reduce #3
// (1000 float32)") for the failure message. A wait longer than the group's timeout ends with a message that
// names this rank, the collective and the peer(s) that never arrived: MPI aborts the job (MPI_Abort), Gloo
// throws kDeadlineExceeded (kUnavailable when a peer's connection broke), which ends this process, and the
// launcher then stops the others.
#ifndef OAR_CORE_DISTRIBUTED_PROCESS_GROUP_ENGINE_H_
#define OAR_CORE_DISTRIBUTED_PROCESS_GROUP_ENGINE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/distributed/store.h"
#include "core/runtime/ccl.h"
#include "core/tensor/tensor.h"

namespace oar::distributed {

struct LaunchInfo;

class Engine {
 public:
  virtual ~Engine() = default;
  /// "MPI", "Gloo".
  virtual const char* name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  /// Every member's sequence number at this collective (theirs[rank()] = seq), exchanged point to point, so
  /// that the peers that never send theirs can be named.
  virtual std::vector<int64_t> Arrive(int64_t seq, const std::string& what) = 0;
  /// In place over every member's `host` (float32, float64, int32, int64); kAvg sums (the caller divides).
  virtual void AllReduce(Tensor& host, runtime::ReduceOp op, const std::string& what) = 0;
  /// `out` (size() × in.numel() elements): every member's `in` in rank order.
  virtual void AllGather(const Tensor& in, Tensor& out, const std::string& what) = 0;
  /// `out` (in.numel() / size() elements): the sum over the members of their block rank() of `in`.
  virtual void ReduceScatterSum(const Tensor& in, Tensor& out, const std::string& what) = 0;
  /// Member j gets scount[j] elements of `send` from sdispl[j]; what member i sent here lands at rdispl[i]
  /// (rcount[i] elements) of `recv`. Counts and displacements in elements of `dtype`.
  virtual void AllToAllv(const void* send, const std::vector<int>& scount, const std::vector<int>& sdispl, void* recv,
                         const std::vector<int>& rcount, const std::vector<int>& rdispl, DType dtype,
                         const std::string& what) = 0;
  /// Send `header` (int64) and then `data` (skipped when empty) to member `dst` without waiting for it to
  /// receive them; the engine keeps both alive until they are sent.
  virtual void Send(Tensor header, Tensor data, int dst) = 0;
  /// The next message member `src` sent here into `into` (its size known from the header): `header`
  /// says which of Send's two it is.
  virtual void Recv(Tensor& into, int src, bool header, const std::string& what) = 0;
  /// Wait until every Send has been received.
  virtual void WaitSends() = 0;
  /// A key/value store among the members (a collective: every member calls it in the same order).
  virtual std::unique_ptr<Store> NewStore(std::chrono::milliseconds timeout) = 0;
  /// The members `world_ranks` of this (world) engine, created by those members only.
  virtual std::unique_ptr<Engine> Subgroup(const std::vector<int>& world_ranks) = 0;
};

/// MPI's world (MPI_Init_thread on first use); nullptr in a build without MPI.
std::unique_ptr<Engine> NewMpiWorld(double timeout_s);
/// Gloo's world over the launch's TCP store; nullptr in a build without Gloo.
std::unique_ptr<Engine> NewGlooWorld(const LaunchInfo& launch, double timeout_s);
/// Whether this build has the MPI engine.
bool HaveMpiEngine();

/// The failure message of a wait that ran past `timeout_s` (one format for both engines):
/// "oar: rank 3: all_reduce #1 (1000 float32) did not complete within 2.0 s: rank(s) 2 never arrived (dead
/// or hung)...". `missing` empty: a peer inside the collective.
std::string TimeoutMessage(int world_rank, const std::string& what, double timeout_s, const std::string& missing);

}  // namespace oar::distributed

#endif  // OAR_CORE_DISTRIBUTED_PROCESS_GROUP_ENGINE_H_
