// The MPI engine of ProcessGroup (process_group_engine.h): collectives on host memory through MPI, started
// by `mpirun`, and the MPI store (a rank-0 service thread on a duplicated communicator).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/base/error.h"
#include "core/distributed/process_group_engine.h"

#if OAR_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only (no C++ bindings to link)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace oar::distributed {

#if OAR_HAVE_MPI

bool HaveMpiEngine() { return true; }

namespace {

int g_thread_level = MPI_THREAD_SINGLE;  // what MPI_Init_thread provided

constexpr int kArrivalTag = 7117, kHeaderTag = 7118, kDataTag = 7119;

MPI_Datatype MpiType(DType t) {
  switch (t) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kInt64:
      return MPI_INT64_T;
    default:
      Throw(ErrorCode::kInvalidArgument, "process group: dtype {} is not supported (float32, float64, int32, int64)",
            DTypeName(t));
  }
}

MPI_Op MpiOp(runtime::ReduceOp op) {
  switch (op) {
    case runtime::ReduceOp::kSum:
    case runtime::ReduceOp::kAvg:
      return MPI_SUM;
    case runtime::ReduceOp::kMax:
      return MPI_MAX;
    case runtime::ReduceOp::kMin:
      return MPI_MIN;
    case runtime::ReduceOp::kProd:
      return MPI_PROD;
  }
  return MPI_SUM;
}

// Poll `reqs` until all complete; past the deadline, print who is missing and abort the job. `peers[i]`
// names the rank request i waits for (-1: the collective itself).
void WaitOrAbort(std::vector<MPI_Request>& reqs, const std::vector<int>& peers, int rank, const std::string& what,
                 double timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(50);
  while (true) {
    int done = 0;
    MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
    if (done) return;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout_s) {
      std::string missing;
      for (size_t i = 0; i < reqs.size(); ++i) {
        if (reqs[i] == MPI_REQUEST_NULL) continue;
        int flag = 0;
        MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
        if (!flag && peers[i] >= 0) missing += (missing.empty() ? "" : ", ") + std::to_string(peers[i]);
      }
      std::fprintf(stderr, "%s; aborting the job (OAR_DIST_TIMEOUT_S sets the timeout)\n",
                   TimeoutMessage(rank, what, timeout_s, missing).c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    std::this_thread::sleep_for(pause);  // sleep, do not spin: ranks may outnumber cores
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

std::unique_ptr<Store> NewMpiStore(MPI_Comm parent, int world_rank, std::chrono::milliseconds timeout);

class MpiEngine final : public Engine {
 public:
  // The world.
  explicit MpiEngine(double timeout_s) : timeout_s_(timeout_s) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      // MPI_THREAD_MULTIPLE: the stores' rank-0 service thread (NewStore) calls MPI beside the main thread.
      // OpenMPI 4.1 provides it (ob1/vader and tcp support it); with less, only NewStore is refused.
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &g_thread_level);
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    } else {
      MPI_Query_thread(&g_thread_level);
    }
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  // The members `world_ranks` of the world; only they call this (MPI-3's MPI_Comm_create_group).
  MpiEngine(const std::vector<int>& world_ranks, double timeout_s) : timeout_s_(timeout_s), world_ranks_(world_ranks) {
    MPI_Group all = MPI_GROUP_NULL, sub = MPI_GROUP_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &all);
    MPI_Group_incl(all, static_cast<int>(world_ranks.size()), world_ranks.data(), &sub);
    MPI_Comm_create_group(MPI_COMM_WORLD, sub, /*tag=*/7120, &comm_);
    MPI_Group_free(&sub);
    MPI_Group_free(&all);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  const char* name() const override { return "MPI"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::vector<int64_t> Arrive(int64_t seq, const std::string& what) override {
    std::vector<int64_t> theirs(static_cast<size_t>(size_), -1);
    theirs[static_cast<size_t>(rank_)] = seq;
    std::vector<MPI_Request> reqs;
    std::vector<int> peers;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      reqs.emplace_back();
      peers.push_back(WorldRank(p));
      MPI_Irecv(&theirs[static_cast<size_t>(p)], 1, MPI_INT64_T, p, kArrivalTag, comm_, &reqs.back());
    }
    std::vector<MPI_Request> sends(reqs.size());
    size_t k = 0;
    for (int p = 0; p < size_; ++p) {
      if (p != rank_) MPI_Isend(&seq, 1, MPI_INT64_T, p, kArrivalTag, comm_, &sends[k++]);
    }
    WaitOrAbort(reqs, peers, WorldRank(rank_), what, timeout_s_);
    MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
    return theirs;
  }

  void AllReduce(Tensor& host, runtime::ReduceOp op, const std::string& what) override {
    std::vector<MPI_Request> coll(1);
    MPI_Iallreduce(MPI_IN_PLACE, host.data_ptr(), static_cast<int>(host.numel()), MpiType(host.dtype()), MpiOp(op),
                   comm_, &coll[0]);
    WaitOrAbort(coll, {-1}, WorldRank(rank_), what, timeout_s_);
  }

  void AllGather(const Tensor& in, Tensor& out, const std::string& what) override {
    std::vector<MPI_Request> coll(1);
    MPI_Iallgather(in.data_ptr(), static_cast<int>(in.numel()), MpiType(in.dtype()), out.data_ptr(),
                   static_cast<int>(in.numel()), MpiType(in.dtype()), comm_, &coll[0]);
    WaitOrAbort(coll, {-1}, WorldRank(rank_), what, timeout_s_);
  }

  void ReduceScatterSum(const Tensor& in, Tensor& out, const std::string& what) override {
    std::vector<MPI_Request> coll(1);
    MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), static_cast<int>(out.numel()), MpiType(in.dtype()),
                              MPI_SUM, comm_, &coll[0]);
    WaitOrAbort(coll, {-1}, WorldRank(rank_), what, timeout_s_);
  }

  void AllToAllv(const void* send, const std::vector<int>& scount, const std::vector<int>& sdispl, void* recv,
                 const std::vector<int>& rcount, const std::vector<int>& rdispl, DType dtype,
                 const std::string& what) override {
    std::vector<MPI_Request> coll(1);
    MPI_Ialltoallv(send, scount.data(), sdispl.data(), MpiType(dtype), recv, rcount.data(), rdispl.data(),
                   MpiType(dtype), comm_, &coll[0]);
    WaitOrAbort(coll, {-1}, WorldRank(rank_), what, timeout_s_);
  }

  void Send(Tensor header, Tensor data, int dst) override {
    sends_.push_back(Pending{{MPI_REQUEST_NULL, MPI_REQUEST_NULL}, std::move(header), std::move(data), dst});
    Pending& q = sends_.back();
    MPI_Isend(q.header.data_ptr(), static_cast<int>(q.header.numel()), MPI_INT64_T, dst, kHeaderTag, comm_, &q.reqs[0]);
    if (q.data.numel() > 0) {
      MPI_Isend(q.data.data_ptr(), static_cast<int>(q.data.numel()), MpiType(q.data.dtype()), dst, kDataTag, comm_,
                &q.reqs[1]);
    }
    // Release the sends that have completed.
    while (!sends_.empty()) {
      int done = 0;
      MPI_Testall(2, sends_.front().reqs.data(), &done, MPI_STATUSES_IGNORE);
      if (!done) break;
      sends_.pop_front();
    }
  }

  void Recv(Tensor& into, int src, bool header, const std::string& what) override {
    std::vector<MPI_Request> req(1);
    MPI_Irecv(into.data_ptr(), static_cast<int>(into.numel()), MpiType(into.dtype()), src,
              header ? kHeaderTag : kDataTag, comm_, &req[0]);
    WaitOrAbort(req, {WorldRank(src)}, WorldRank(rank_), what, timeout_s_);
  }

  void WaitSends() override {
    while (!sends_.empty()) {
      Pending& p = sends_.front();
      WaitOrAbort(p.reqs, {WorldRank(p.dst), WorldRank(p.dst)}, WorldRank(rank_),
                  "a send to rank " + std::to_string(WorldRank(p.dst)), timeout_s_);
      sends_.pop_front();
    }
  }

  std::unique_ptr<Store> NewStore(std::chrono::milliseconds timeout) override {
    OAR_CHECK(g_thread_level >= MPI_THREAD_MULTIPLE, kUnimplemented,
              "process group: the MPI store needs MPI_THREAD_MULTIPLE, this MPI library provides level {}; launch "
              "with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT to use the TCP store",
              g_thread_level);
    return NewMpiStore(comm_, WorldRank(rank_), timeout);
  }

  std::unique_ptr<Engine> Subgroup(const std::vector<int>& world_ranks) override {
    return std::make_unique<MpiEngine>(world_ranks, timeout_s_);
  }

 private:
  int WorldRank(int r) const { return world_ranks_.empty() ? r : world_ranks_.at(static_cast<size_t>(r)); }

  // A send still in flight: its requests and the buffers they read.
  struct Pending {
    std::vector<MPI_Request> reqs;
    Tensor header, data;
    int dst = 0;
  };
  MPI_Comm comm_ = MPI_COMM_WORLD;
  int rank_ = 0, size_ = 1;
  double timeout_s_;
  std::vector<int> world_ranks_;  // empty: the world
  std::deque<Pending> sends_;
};

}  // namespace

// ===================================================================================================
// The MPI store: rank 0's service thread answers requests on a duplicated communicator
// ===================================================================================================
// A request is one message to rank 0 (tag kStoreRequestTag): op ('S' set, 'G' get, 'D' done), the key's byte
// count (4 bytes), the key, the value. The answer to a get is one message (kStoreReplyTag) holding the value,
// sent when the key exists. Sets need no answer: MPI delivers in order and a dead rank ends the job.

namespace {

constexpr int kStoreRequestTag = 7121, kStoreReplyTag = 7122;

class MpiStore final : public Store {
 public:
  MpiStore(MPI_Comm parent, int world_rank, std::chrono::milliseconds timeout)
      : world_rank_(world_rank), timeout_(timeout) {
    MPI_Comm_dup(parent, &comm_);  // collective: its own matching space, away from the group's collectives
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    if (rank_ == 0) thread_ = std::thread([this] { Serve(); });
  }

  ~MpiStore() override {
    if (rank_ != 0) {
      const std::string done = Message('D', "-", {});
      MPI_Send(done.data(), static_cast<int>(done.size()), MPI_CHAR, 0, kStoreRequestTag, comm_);
    } else {
      // Serve until every peer's store is gone (a peer may still be waiting for a key), at most timeout_.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, timeout_, [&] { return done_ == size_ - 1; });
      stop_ = true;
      lock.unlock();
      thread_.join();
    }
    MPI_Comm_free(&comm_);
  }

  void Set(std::string_view key, std::string_view value) override {
    CheckKey(key, value);
    if (rank_ == 0) {
      std::lock_guard<std::mutex> lock(mu_);
      kv_[std::string(key)] = std::string(value);
      cv_.notify_all();
      return;
    }
    const std::string m = Message('S', key, value);
    MPI_Send(m.data(), static_cast<int>(m.size()), MPI_CHAR, 0, kStoreRequestTag, comm_);
  }

  std::string Get(std::string_view key, std::chrono::milliseconds timeout) override {
    CheckKey(key, {});
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto timed_out = [&] {
      broken_ = true;
      Throw(
          ErrorCode::kDeadlineExceeded,
          "MPI store (rank {}, group rank {}): get '{}' timed out after {} ms: no rank set the key (is a peer missing "
          "or late?)",
          world_rank_, rank_, key, timeout.count());
    };
    if (rank_ == 0) {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_until(lock, deadline, [&] { return kv_.count(std::string(key)) > 0; })) timed_out();
      return kv_[std::string(key)];
    }
    std::lock_guard<std::mutex> one_at_a_time(client_mu_);
    OAR_CHECK(!broken_, kFailedPrecondition, "MPI store (rank {}): get '{}': an earlier get timed out", world_rank_,
              key);
    const std::string m = Message('G', key, {});
    MPI_Send(m.data(), static_cast<int>(m.size()), MPI_CHAR, 0, kStoreRequestTag, comm_);
    auto pause = std::chrono::microseconds(20);
    while (true) {
      int flag = 0, count = 0;
      MPI_Status st;
      MPI_Iprobe(0, kStoreReplyTag, comm_, &flag, &st);
      if (flag) {
        MPI_Get_count(&st, MPI_CHAR, &count);
        std::string value(static_cast<size_t>(count), '\0');
        MPI_Recv(value.data(), count, MPI_CHAR, 0, kStoreReplyTag, comm_, MPI_STATUS_IGNORE);
        return value;
      }
      if (std::chrono::steady_clock::now() > deadline) timed_out();
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }

 private:
  static std::string Message(char op, std::string_view key, std::string_view value) {
    std::string m(1, op);
    const auto n = static_cast<uint32_t>(key.size());
    m.append(reinterpret_cast<const char*>(&n), sizeof(n));
    m.append(key);
    m.append(value);
    return m;
  }

  void CheckKey(std::string_view key, std::string_view value) const {
    OAR_CHECK_ARG(!key.empty() && key.size() <= kMaxKeyBytes && value.size() <= kMaxValueBytes,
                  "MPI store (rank {}): key '{}' ({} bytes) or its value ({} bytes) is empty or too long", world_rank_,
                  key.substr(0, 64), key.size(), value.size());
  }

  // Rank 0's service thread: receive requests, answer gets once their key exists (sleeping between polls:
  // the ranks may outnumber the cores).
  void Serve() {
    std::multimap<std::string, int> waiters;  // key -> rank waiting for it
    auto pause = std::chrono::microseconds(20);
    while (true) {
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, kStoreRequestTag, comm_, &flag, &st);
      if (flag) {
        int count = 0;
        MPI_Get_count(&st, MPI_CHAR, &count);
        std::string m(static_cast<size_t>(count), '\0');
        MPI_Recv(m.data(), count, MPI_CHAR, st.MPI_SOURCE, kStoreRequestTag, comm_, MPI_STATUS_IGNORE);
        uint32_t n = 0;
        if (m.size() >= 5) std::memcpy(&n, m.data() + 1, sizeof(n));
        if (m.size() < 5 + static_cast<size_t>(n)) continue;  // not ours
        std::string key = m.substr(5, n);
        std::lock_guard<std::mutex> lock(mu_);
        if (m[0] == 'S') {
          kv_[key] = m.substr(5 + n);
        } else if (m[0] == 'G') {
          waiters.emplace(std::move(key), st.MPI_SOURCE);
        } else if (m[0] == 'D') {
          ++done_;
          cv_.notify_all();
        }
        cv_.notify_all();
        pause = std::chrono::microseconds(20);
      }
      std::vector<std::pair<int, std::string>> answers;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) return;
        for (auto it = waiters.begin(); it != waiters.end();) {
          if (auto v = kv_.find(it->first); v != kv_.end()) {
            answers.emplace_back(it->second, v->second);
            it = waiters.erase(it);
          } else {
            ++it;
          }
        }
      }
      for (const auto& [peer, value] : answers) {
        MPI_Send(value.data(), static_cast<int>(value.size()), MPI_CHAR, peer, kStoreReplyTag, comm_);
      }
      if (!flag && answers.empty()) {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(1000));
      }
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, world_rank_ = 0;
  std::chrono::milliseconds timeout_;
  std::mutex mu_, client_mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;  // rank 0
  int done_ = 0;
  bool stop_ = false, broken_ = false;
  std::thread thread_;
};

}  // namespace

namespace {
std::unique_ptr<Store> NewMpiStore(MPI_Comm parent, int world_rank, std::chrono::milliseconds timeout) {
  return std::make_unique<MpiStore>(parent, world_rank, timeout);
}
}  // namespace

std::unique_ptr<Engine> NewMpiWorld(double timeout_s) { return std::make_unique<MpiEngine>(timeout_s); }

#else  // !OAR_HAVE_MPI

bool HaveMpiEngine() { return false; }
std::unique_ptr<Engine> NewMpiWorld(double) { return nullptr; }

#endif

}  // namespace oar::distributed
