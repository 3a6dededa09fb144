#include "core/distributed/process_group.h"

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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
};

namespace {

constexpr int kArrivalTag = 7117;

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

ProcessGroup::~ProcessGroup() = default;

ProcessGroup& ProcessGroup::World() {
  static ProcessGroup* world = new ProcessGroup();  // never destroyed: MPI_Finalize runs at exit
  return *world;
}

void ProcessGroup::AllReduce(Tensor& t, runtime::ReduceOp op) {
  OAR_CHECK_ARG(t.defined(), "process group all_reduce: the tensor is undefined");
  const Device where = t.device();
  NoGradGuard no_grad;
  Tensor host = t.to(Device("cpu")).contiguous();
  if (host.storage() == t.storage()) host = host.clone();
  const std::string what = "all_reduce #" + std::to_string(++seq_) + " (" + std::to_string(host.numel()) + " " +
                           std::string(DTypeName(host.dtype())) + ")";
  // Arrival: every rank tells every other which collective it is at.
  std::vector<int64_t> theirs(static_cast<size_t>(size_), -1);
  std::vector<MPI_Request> reqs;
  std::vector<int> peers;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    reqs.emplace_back();
    peers.push_back(p);
    MPI_Irecv(&theirs[static_cast<size_t>(p)], 1, MPI_INT64_T, p, kArrivalTag, impl_->comm, &reqs.back());
  }
  std::vector<MPI_Request> sends(reqs.size());
  size_t k = 0;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) MPI_Isend(&seq_, 1, MPI_INT64_T, p, kArrivalTag, impl_->comm, &sends[k++]);
  }
  WaitOrAbort(reqs, peers, rank_, what, timeout_s_);
  MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
  for (int p = 0; p < size_; ++p) {
    OAR_CHECK(p == rank_ || theirs[static_cast<size_t>(p)] == seq_, kFailedPrecondition,
              "process group: rank {} is at collective #{}, rank {} at #{} ({}): the ranks issue different "
              "collectives",
              p, theirs[static_cast<size_t>(p)], rank_, seq_, what);
  }
  std::vector<MPI_Request> coll(1);
  MPI_Iallreduce(MPI_IN_PLACE, host.data_ptr(), static_cast<int>(host.numel()), MpiType(host.dtype()), MpiOp(op),
                 impl_->comm, &coll[0]);
  WaitOrAbort(coll, {-1}, rank_, what, timeout_s_);
  if (op == runtime::ReduceOp::kAvg) host = host / static_cast<double>(size_);
  if (where == host.device()) {
    t = host;
  } else {
    t = host.to(where);
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
void ProcessGroup::AllReduce(Tensor&, runtime::ReduceOp) {}
void ProcessGroup::Barrier() {}

#endif

}  // namespace oar::distributed
