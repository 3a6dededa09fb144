#include "core/distributed/process_group.h"

#include <charconv>
#include <chrono>
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
};

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
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
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

#endif

}  // namespace oar::distributed
