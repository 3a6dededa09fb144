#include "core/distributed/process_group.h"

#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "core/base/error.h"
#include "core/ops/ops.h"
#include "core/runtime/runtime.h"
#include "core/tensor/autograd_meta.h"

#if OAR_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only (no C++ bindings to link)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace oar::distributed {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

int IntEnv(const char* name, int min) {
  const char* v = Env(name);
  int x = 0;
  const std::string_view s(v);
  const auto r = std::from_chars(s.data(), s.data() + s.size(), x);
  OAR_CHECK_ARG(r.ec == std::errc() && r.ptr == s.data() + s.size() && x >= min,
                "launcher environment: {}='{}' is not an integer >= {}", name, s, min);
  return x;
}

}  // namespace

LaunchInfo LaunchInfo::FromEnv() {
  LaunchInfo l;
  if (Env("OMPI_COMM_WORLD_SIZE") != nullptr) {
    l.launcher = "mpirun";
    l.world_size = IntEnv("OMPI_COMM_WORLD_SIZE", 1);
    l.rank = IntEnv("OMPI_COMM_WORLD_RANK", 0);
    l.local_rank = Env("OMPI_COMM_WORLD_LOCAL_RANK") ? IntEnv("OMPI_COMM_WORLD_LOCAL_RANK", 0) : l.rank;
  } else if (Env("WORLD_SIZE") != nullptr || Env("RANK") != nullptr) {
    l.launcher = "env";
    OAR_CHECK_ARG(Env("WORLD_SIZE") != nullptr && Env("RANK") != nullptr,
                  "launcher environment: RANK and WORLD_SIZE must be set together (got only {})",
                  Env("RANK") ? "RANK" : "WORLD_SIZE");
    l.world_size = IntEnv("WORLD_SIZE", 1);
    l.rank = IntEnv("RANK", 0);
    l.local_rank = Env("LOCAL_RANK") ? IntEnv("LOCAL_RANK", 0) : l.rank;
    if (Env("MASTER_ADDR")) l.master_addr = Env("MASTER_ADDR");
    if (Env("MASTER_PORT")) l.master_port = IntEnv("MASTER_PORT", 1);
  }
  OAR_CHECK_ARG(l.rank < l.world_size, "launcher environment ({}): rank {} is not below the world size {}", l.launcher,
                l.rank, l.world_size);
  return l;
}

#if OAR_HAVE_MPI

bool HaveMpi() { return true; }

struct ProcessGroup::Impl {
  MPI_Comm comm = MPI_COMM_WORLD;
  // Sends still in flight: their requests and the buffers they read.
  struct Pending {
    std::vector<MPI_Request> reqs;
    std::vector<int64_t> header;
    Tensor data;
    int dst = 0;
  };
  std::deque<Pending> sends;
  int64_t sent = 0, received = 0;
  std::vector<int> world_ranks;  // empty: the world
  // Device CCL communicators of this group, by device.
  std::map<std::string, std::unique_ptr<runtime::Communicator>> device_comms;
};

namespace {
int g_thread_level = MPI_THREAD_SINGLE;  // what MPI_Init_thread provided
}  // namespace

namespace {

constexpr int kArrivalTag = 7117, kHeaderTag = 7118, kDataTag = 7119;
constexpr size_t kMaxDims = 8;

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
      std::fprintf(stderr,
                   "oar: rank %d: %s did not complete within %.1f s: %s never arrived (dead or hung); aborting the "
                   "job (OAR_DIST_TIMEOUT_S sets the timeout)\n",
                   rank, what.c_str(), timeout_s,
                   missing.empty() ? "a peer inside the collective" : ("rank(s) " + missing).c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    std::this_thread::sleep_for(pause);  // sleep, do not spin: ranks may outnumber cores
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

}  // namespace

ProcessGroup::ProcessGroup() : impl_(std::make_unique<Impl>()) {
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
  MPI_Comm_rank(impl_->comm, &rank_);
  MPI_Comm_size(impl_->comm, &size_);
  const LaunchInfo l = LaunchInfo::FromEnv();
  OAR_CHECK(l.world_size == size_, kFailedPrecondition,
            "process group: the launcher says {} processes ({}), MPI sees {}; start the job with mpirun -np {}",
            l.world_size, l.launcher, size_, l.world_size);
  if (const char* t = Env("OAR_DIST_TIMEOUT_S")) {
    char* end = nullptr;
    timeout_s_ = std::strtod(t, &end);
    OAR_CHECK_ARG(end != t && *end == '\0' && timeout_s_ > 0, "OAR_DIST_TIMEOUT_S='{}' is not a positive number", t);
  }
}

ProcessGroup::ProcessGroup(const std::vector<int>& world_ranks) : impl_(std::make_unique<Impl>()) {
  const ProcessGroup& world = World();
  timeout_s_ = world.timeout_s_;
  impl_->world_ranks = world_ranks;
  MPI_Group all = MPI_GROUP_NULL, sub = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &all);
  MPI_Group_incl(all, static_cast<int>(world_ranks.size()), world_ranks.data(), &sub);
  // Only the members call this (MPI-3): groups along one mesh dim are created by their own ranks.
  MPI_Comm_create_group(MPI_COMM_WORLD, sub, /*tag=*/7120, &impl_->comm);
  MPI_Group_free(&sub);
  MPI_Group_free(&all);
  MPI_Comm_rank(impl_->comm, &rank_);
  MPI_Comm_size(impl_->comm, &size_);
}

ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::WorldRank(int r) const {
  return impl_->world_ranks.empty() ? r : impl_->world_ranks.at(static_cast<size_t>(r));
}
int ProcessGroup::WorldSize() const { return World().size(); }

ProcessGroup& ProcessGroup::World() {
  static ProcessGroup* world = new ProcessGroup();  // never destroyed: MPI_Finalize runs at exit
  return *world;
}

ProcessGroup& ProcessGroup::Subgroup(const std::vector<int>& world_ranks) {
  ProcessGroup& world = World();
  std::vector<int> seen(static_cast<size_t>(world.size()), 0);
  bool member = false, identity = static_cast<int>(world_ranks.size()) == world.size();
  for (size_t i = 0; i < world_ranks.size(); ++i) {
    const int r = world_ranks[i];
    OAR_CHECK_ARG(r >= 0 && r < world.size() && !seen[static_cast<size_t>(r)]++,
                  "process group: subgroup rank {} is outside the world of {} or repeated", r, world.size());
    member |= r == world.rank();
    identity &= r == static_cast<int>(i);
  }
  OAR_CHECK_ARG(member, "process group: rank {} is not a member of the subgroup it asked for", world.rank());
  if (identity) return world;
  static std::mutex mu;
  static std::map<std::vector<int>, ProcessGroup*> groups;  // never destroyed, like the world
  std::lock_guard<std::mutex> lock(mu);
  ProcessGroup*& g = groups[world_ranks];
  if (g == nullptr) g = new ProcessGroup(world_ranks);
  return *g;
}

std::string ProcessGroup::Arrive(const std::string& op, const Tensor& host) {
  const std::string what = op + " #" + std::to_string(++seq_) + " (" + std::to_string(host.numel()) + " " +
                           std::string(DTypeName(host.dtype())) + (size_ < WorldSize() ? ", a subgroup" : "") + ")";
  // Arrival: every rank tells every other which collective it is at.
  std::vector<int64_t> theirs(static_cast<size_t>(size_), -1);
  std::vector<MPI_Request> reqs;
  std::vector<int> peers;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    reqs.emplace_back();
    peers.push_back(WorldRank(p));
    MPI_Irecv(&theirs[static_cast<size_t>(p)], 1, MPI_INT64_T, p, kArrivalTag, impl_->comm, &reqs.back());
  }
  std::vector<MPI_Request> sends(reqs.size());
  size_t k = 0;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) MPI_Isend(&seq_, 1, MPI_INT64_T, p, kArrivalTag, impl_->comm, &sends[k++]);
  }
  WaitOrAbort(reqs, peers, WorldRank(rank_), what, timeout_s_);
  MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
  for (int p = 0; p < size_; ++p) {
    OAR_CHECK(p == rank_ || theirs[static_cast<size_t>(p)] == seq_, kFailedPrecondition,
              "process group: rank {} is at collective #{}, rank {} at #{} ({}): the ranks issue different "
              "collectives",
              WorldRank(p), theirs[static_cast<size_t>(p)], WorldRank(rank_), seq_, what);
  }
  return what;
}

void ProcessGroup::AllReduce(Tensor& t, runtime::ReduceOp op) {
  OAR_CHECK_ARG(t.defined(), "process group all_reduce: the tensor is undefined");
  const Device where = t.device();
  NoGradGuard no_grad;
  if (runtime::Communicator* ccl = DeviceCclFor(t)) {
    Tensor buf = t.contiguous();
    if (buf.storage() == t.storage()) buf = buf.clone();
    Arrive("all_reduce", buf);
    ccl->AllReduce({&buf, 1}, op);
    t = buf;
    return;
  }
  Tensor host = t.to(Device("cpu")).contiguous();
  if (host.storage() == t.storage()) host = host.clone();
  const std::string what = Arrive("all_reduce", host);
  std::vector<MPI_Request> coll(1);
  MPI_Iallreduce(MPI_IN_PLACE, host.data_ptr(), static_cast<int>(host.numel()), MpiType(host.dtype()), MpiOp(op),
                 impl_->comm, &coll[0]);
  WaitOrAbort(coll, {-1}, WorldRank(rank_), what, timeout_s_);
  if (op == runtime::ReduceOp::kAvg) host = host / static_cast<double>(size_);
  if (where == host.device()) {
    t = host;
  } else {
    t = host.to(where);
  }
}

Tensor ProcessGroup::AllGather(const Tensor& t) {
  OAR_CHECK_ARG(t.defined(), "process group all_gather: the tensor is undefined");
  NoGradGuard no_grad;
  if (runtime::Communicator* ccl = DeviceCclFor(t)) {
    const Tensor in = t.contiguous();
    Arrive("all_gather", in);
    Dims shape = in.shape();
    shape.insert(0, size_);
    Tensor out = empty(shape, in.dtype(), in.device());
    ccl->AllGather({&in, 1}, {&out, 1});
    return out;
  }
  const Tensor host = t.to(Device("cpu")).contiguous();
  const std::string what = Arrive("all_gather", host);
  Dims shape = host.shape();
  shape.insert(0, size_);
  Tensor out = empty(shape, host.dtype(), Device("cpu"));
  std::vector<MPI_Request> coll(1);
  MPI_Iallgather(host.data_ptr(), static_cast<int>(host.numel()), MpiType(host.dtype()), out.data_ptr(),
                 static_cast<int>(host.numel()), MpiType(host.dtype()), impl_->comm, &coll[0]);
  WaitOrAbort(coll, {-1}, WorldRank(rank_), what, timeout_s_);
  return out.device() == t.device() ? out : out.to(t.device());
}

Tensor ProcessGroup::ReduceScatter(const Tensor& t, runtime::ReduceOp op) {
  OAR_CHECK_ARG(t.defined() && t.rank() >= 1 && t.dim(0) == size_,
                "process group reduce_scatter: expected a tensor of shape [{}, ...], got {}", size_,
                t.defined() ? t.shape().ToString() : "undefined");
  OAR_CHECK_ARG(op == runtime::ReduceOp::kSum || op == runtime::ReduceOp::kAvg,
                "process group reduce_scatter: the reduction must be sum or avg");
  NoGradGuard no_grad;
  if (runtime::Communicator* ccl = DeviceCclFor(t)) {
    const Tensor in = t.contiguous();
    Arrive("reduce_scatter", in);
    Dims piece = in.shape();
    piece.erase(0);
    Tensor out = empty(piece, in.dtype(), in.device());
    ccl->ReduceScatter({&in, 1}, {&out, 1}, op);
    return out;
  }
  const Tensor host = t.to(Device("cpu")).contiguous();
  const std::string what = Arrive("reduce_scatter", host);
  Dims piece = host.shape();
  piece.erase(0);
  Tensor out = empty(piece, host.dtype(), Device("cpu"));
  std::vector<MPI_Request> coll(1);
  MPI_Ireduce_scatter_block(host.data_ptr(), out.data_ptr(), static_cast<int>(out.numel()), MpiType(host.dtype()),
                            MPI_SUM, impl_->comm, &coll[0]);
  WaitOrAbort(coll, {-1}, WorldRank(rank_), what, timeout_s_);
  if (op == runtime::ReduceOp::kAvg) out = out / static_cast<double>(size_);
  return out.device() == t.device() ? out : out.to(t.device());
}

std::vector<Tensor> ProcessGroup::AllToAll(const std::vector<Tensor>& chunks) {
  OAR_CHECK_ARG(static_cast<int>(chunks.size()) == size_, "process group all_to_all: {} chunks for {} ranks",
                chunks.size(), size_);
  NoGradGuard no_grad;
  const Tensor& self = chunks[static_cast<size_t>(rank_)];
  OAR_CHECK_ARG(self.defined(), "process group all_to_all: this rank's own chunk is undefined");
  const DType dtype = self.dtype();
  std::vector<Tensor> host;
  std::vector<int64_t> header(static_cast<size_t>(size_) * (kMaxDims + 1), 0);
  for (int j = 0; j < size_; ++j) {
    const Tensor& c = chunks[static_cast<size_t>(j)];
    OAR_CHECK_ARG(c.defined() && c.dtype() == dtype && c.rank() <= static_cast<int64_t>(kMaxDims),
                  "process group all_to_all: chunk {} must be defined, {} and of at most {} dims", j,
                  DTypeName(dtype), kMaxDims);
    host.push_back(c.to(Device("cpu")).contiguous());
    int64_t* h = &header[static_cast<size_t>(j) * (kMaxDims + 1)];
    h[0] = c.rank();
    for (int64_t d = 0; d < c.rank(); ++d) h[1 + d] = c.dim(d);
  }
  Tensor probe = zeros({1}, dtype, Device("cpu"));
  const std::string what = Arrive("all_to_all", probe);
  std::vector<int64_t> theirs(header.size(), 0);
  std::vector<MPI_Request> coll(1);
  MPI_Ialltoall(header.data(), static_cast<int>(kMaxDims + 1), MPI_INT64_T, theirs.data(),
                static_cast<int>(kMaxDims + 1), MPI_INT64_T, impl_->comm, &coll[0]);
  WaitOrAbort(coll, {-1}, WorldRank(rank_), what, timeout_s_);
  // One send buffer (chunks in rank order) and one receive buffer, counts and displacements in elements.
  std::vector<int> scount, sdispl, rcount, rdispl;
  std::vector<Tensor> received;
  int64_t soff = 0, roff = 0;
  for (int j = 0; j < size_; ++j) {
    scount.push_back(static_cast<int>(host[static_cast<size_t>(j)].numel()));
    sdispl.push_back(static_cast<int>(soff));
    soff += scount.back();
    const int64_t* h = &theirs[static_cast<size_t>(j) * (kMaxDims + 1)];
    Dims s;
    for (int64_t d = 0; d < h[0]; ++d) s.push_back(h[1 + d]);
    received.push_back(empty(s, dtype, Device("cpu")));
    rcount.push_back(static_cast<int>(received.back().numel()));
    rdispl.push_back(static_cast<int>(roff));
    roff += rcount.back();
  }
  Tensor sendbuf = empty({std::max<int64_t>(soff, 1)}, dtype, Device("cpu"));
  Tensor recvbuf = empty({std::max<int64_t>(roff, 1)}, dtype, Device("cpu"));
  const size_t esize = DTypeSize(dtype);
  for (int j = 0; j < size_; ++j) {
    if (scount[static_cast<size_t>(j)] == 0) continue;
    std::memcpy(static_cast<char*>(sendbuf.data_ptr()) + static_cast<size_t>(sdispl[static_cast<size_t>(j)]) * esize,
                host[static_cast<size_t>(j)].data_ptr(), static_cast<size_t>(scount[static_cast<size_t>(j)]) * esize);
  }
  MPI_Ialltoallv(sendbuf.data_ptr(), scount.data(), sdispl.data(), MpiType(dtype), recvbuf.data_ptr(), rcount.data(),
                 rdispl.data(), MpiType(dtype), impl_->comm, &coll[0]);
  WaitOrAbort(coll, {-1}, WorldRank(rank_), what, timeout_s_);
  for (int i = 0; i < size_; ++i) {
    Tensor& r = received[static_cast<size_t>(i)];
    if (rcount[static_cast<size_t>(i)] > 0) {
      std::memcpy(r.data_ptr(),
                  static_cast<const char*>(recvbuf.data_ptr()) + static_cast<size_t>(rdispl[static_cast<size_t>(i)]) * esize,
                  static_cast<size_t>(rcount[static_cast<size_t>(i)]) * esize);
    }
    if (self.device() != r.device()) r = r.to(self.device());
  }
  received[static_cast<size_t>(rank_)] = self;
  return received;
}

void ProcessGroup::Send(const Tensor& t, int dst) {
  OAR_CHECK_ARG(t.defined() && t.rank() <= static_cast<int64_t>(kMaxDims),
                "process group send: the tensor must be defined and of at most {} dims", kMaxDims);
  OAR_CHECK_ARG(dst >= 0 && dst < size_ && dst != rank_, "process group send: destination {} is not a peer of rank {} "
                "in a group of {}", dst, rank_, size_);
  NoGradGuard no_grad;
  Impl::Pending p;
  p.data = t.to(Device("cpu")).contiguous();
  if (p.data.storage() == t.storage()) p.data = p.data.clone();
  p.header.assign(kMaxDims + 2, 0);
  p.header[0] = static_cast<int64_t>(p.data.dtype());
  p.header[1] = p.data.rank();
  for (int64_t d = 0; d < p.data.rank(); ++d) p.header[static_cast<size_t>(2 + d)] = p.data.dim(d);
  p.dst = dst;
  p.reqs.resize(2, MPI_REQUEST_NULL);
  ++impl_->sent;
  impl_->sends.push_back(std::move(p));
  Impl::Pending& q = impl_->sends.back();
  MPI_Isend(q.header.data(), static_cast<int>(q.header.size()), MPI_INT64_T, dst, kHeaderTag, impl_->comm, &q.reqs[0]);
  if (q.data.numel() > 0) {
    MPI_Isend(q.data.data_ptr(), static_cast<int>(q.data.numel()), MpiType(q.data.dtype()), dst, kDataTag,
              impl_->comm, &q.reqs[1]);
  }
  // Release the sends that have completed.
  while (!impl_->sends.empty()) {
    int done = 0;
    MPI_Testall(2, impl_->sends.front().reqs.data(), &done, MPI_STATUSES_IGNORE);
    if (!done) break;
    impl_->sends.pop_front();
  }
}

Tensor ProcessGroup::Recv(int src, Device device) {
  OAR_CHECK_ARG(src >= 0 && src < size_ && src != rank_, "process group recv: source {} is not a peer of rank {} in a "
                "group of {}", src, rank_, size_);
  const std::string what = "recv #" + std::to_string(++impl_->received) + " from rank " + std::to_string(WorldRank(src));
  std::vector<int64_t> header(kMaxDims + 2, 0);
  std::vector<MPI_Request> req(1);
  MPI_Irecv(header.data(), static_cast<int>(header.size()), MPI_INT64_T, src, kHeaderTag, impl_->comm, &req[0]);
  WaitOrAbort(req, {WorldRank(src)}, WorldRank(rank_), what, timeout_s_);
  Dims shape;
  for (int64_t d = 0; d < header[1]; ++d) shape.push_back(header[static_cast<size_t>(2 + d)]);
  Tensor out = empty(shape, static_cast<DType>(header[0]), Device("cpu"));
  if (out.numel() > 0) {
    MPI_Irecv(out.data_ptr(), static_cast<int>(out.numel()), MpiType(out.dtype()), src, kDataTag, impl_->comm, &req[0]);
    WaitOrAbort(req, {WorldRank(src)}, WorldRank(rank_), what, timeout_s_);
  }
  return out.device() == device ? out : out.to(device);
}

void ProcessGroup::WaitSends() {
  while (!impl_->sends.empty()) {
    Impl::Pending& p = impl_->sends.front();
    WaitOrAbort(p.reqs, {p.dst, p.dst}, WorldRank(rank_), "a send to rank " + std::to_string(WorldRank(p.dst)),
                timeout_s_);
    impl_->sends.pop_front();
  }
}

void ProcessGroup::Barrier() {
  Tensor one = zeros({1}, DType::kInt64, Device("cpu"));
  AllReduce(one, runtime::ReduceOp::kSum);
}

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

std::unique_ptr<Store> ProcessGroup::NewStore(std::chrono::milliseconds timeout) {
  OAR_CHECK(g_thread_level >= MPI_THREAD_MULTIPLE, kUnimplemented,
            "process group: the MPI store needs MPI_THREAD_MULTIPLE, this MPI library provides level {}; launch with "
            "RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT to use the TCP store",
            g_thread_level);
  return std::make_unique<MpiStore>(impl_->comm, WorldRank(rank_), timeout);
}

runtime::Communicator* ProcessGroup::DeviceCclFor(const Tensor& t) {
  const Device d = t.device();
  if (d.type() == "cpu" || size_ == 1) return nullptr;
  if (t.dtype() != DType::kFloat32 && t.dtype() != DType::kInt32 && t.dtype() != DType::kInt64) return nullptr;
  static const bool enabled = [] {
    const char* v = Env("OAR_DIST_DEVICE_CCL");
    OAR_CHECK_ARG(v == nullptr || std::string_view(v) == "0" || std::string_view(v) == "1",
                  "OAR_DIST_DEVICE_CCL='{}' is neither 0 nor 1", v);
    return v == nullptr || std::string_view(v) == "1";
  }();
  if (!enabled) return nullptr;
  // The same answer in every process (one plugin build), so every rank takes the same path.
  runtime::DeviceType* type = runtime::Runtime::Get().FindType(d.type());
  if (type == nullptr || type->plugin().ccl() == nullptr) return nullptr;
  return &DeviceCommunicator(d);
}

runtime::Communicator& ProcessGroup::DeviceCommunicator(Device device) {
  std::unique_ptr<runtime::Communicator>& c = impl_->device_comms[device.str()];
  if (c == nullptr) {
    const std::unique_ptr<Store> store = NewStore(std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000)));
    c = std::make_unique<runtime::Communicator>(device, size_, rank_, store->ccl(), "ccl/" + device.str(),
                                                static_cast<int64_t>(timeout_s_ * 1000));
  }
  return *c;
}

#else  // !OAR_HAVE_MPI

bool HaveMpi() { return false; }
struct ProcessGroup::Impl {};
ProcessGroup::ProcessGroup() = default;
ProcessGroup::~ProcessGroup() = default;
ProcessGroup& ProcessGroup::World() {
  Throw(ErrorCode::kUnimplemented,
        "this build has no MPI process group (install libopenmpi-dev: ci/install-deps.sh, then reconfigure)");
}
ProcessGroup::ProcessGroup(const std::vector<int>&) {}
ProcessGroup& ProcessGroup::Subgroup(const std::vector<int>&) { return World(); }
int ProcessGroup::WorldRank(int r) const { return r; }
int ProcessGroup::WorldSize() const { return 1; }
std::string ProcessGroup::Arrive(const std::string&, const Tensor&) { return {}; }
void ProcessGroup::AllReduce(Tensor&, runtime::ReduceOp) {}
Tensor ProcessGroup::AllGather(const Tensor& t) { return t; }
Tensor ProcessGroup::ReduceScatter(const Tensor& t, runtime::ReduceOp) { return t; }
std::vector<Tensor> ProcessGroup::AllToAll(const std::vector<Tensor>& chunks) { return chunks; }
void ProcessGroup::Send(const Tensor&, int) {}
Tensor ProcessGroup::Recv(int, Device) { return {}; }
void ProcessGroup::WaitSends() {}
void ProcessGroup::Barrier() {}
std::unique_ptr<Store> ProcessGroup::NewStore(std::chrono::milliseconds) {
  Throw(ErrorCode::kUnimplemented, "this build has no MPI process group (no MPI store)");
}
runtime::Communicator& ProcessGroup::DeviceCommunicator(Device) {
  Throw(ErrorCode::kUnimplemented, "this build has no MPI process group");
}
runtime::Communicator* ProcessGroup::DeviceCclFor(const Tensor&) { return nullptr; }

#endif

}  // namespace oar::distributed
