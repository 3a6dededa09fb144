#include "core/distributed/process_group.h"

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>
#include <vector>

#include "core/base/error.h"
#include "core/distributed/process_group_engine.h"
#include "core/ops/ops.h"
#include "core/runtime/runtime.h"
#include "core/tensor/autograd_meta.h"

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

bool HaveMpi() { return HaveMpiEngine(); }

std::string TimeoutMessage(int world_rank, const std::string& what, double timeout_s, const std::string& missing) {
  return fmt::format("oar: rank {}: {} did not complete within {:.1f} s: {} never arrived (dead or hung)", world_rank,
                     what, timeout_s, missing.empty() ? "a peer inside the collective" : "rank(s) " + missing);
}

namespace {
constexpr size_t kMaxDims = 8;
}  // namespace

struct ProcessGroup::Impl {
  std::unique_ptr<Engine> engine;
  std::vector<int> world_ranks;  // empty: the world
  int64_t received = 0;
  // Device CCL communicators of this group, by device.
  std::map<std::string, std::unique_ptr<runtime::Communicator>> device_comms;
};

ProcessGroup::ProcessGroup() : impl_(std::make_unique<Impl>()) {
  if (const char* t = Env("OAR_DIST_TIMEOUT_S")) {
    char* end = nullptr;
    timeout_s_ = std::strtod(t, &end);
    OAR_CHECK_ARG(end != t && *end == '\0' && timeout_s_ > 0, "OAR_DIST_TIMEOUT_S='{}' is not a positive number", t);
  }
  const LaunchInfo l = LaunchInfo::FromEnv();
  if (l.launcher == "env") {
    impl_->engine = NewGlooWorld(l, timeout_s_);
    OAR_CHECK(impl_->engine != nullptr, kUnimplemented,
              "process group: launched with RANK/WORLD_SIZE (torchrun-style), which needs Gloo, and this build has "
              "none (install libgloo-dev: ci/install-deps.sh, then reconfigure); or start the job with mpirun");
  } else {
    impl_->engine = NewMpiWorld(timeout_s_);
    OAR_CHECK(impl_->engine != nullptr, kUnimplemented,
              "this build has no MPI process group (install libopenmpi-dev: ci/install-deps.sh, then reconfigure)");
  }
  rank_ = impl_->engine->rank();
  size_ = impl_->engine->size();
  OAR_CHECK(l.world_size == size_, kFailedPrecondition,
            "process group: the launcher says {} processes ({}), {} sees {}; start the job with mpirun -np {}",
            l.world_size, l.launcher, impl_->engine->name(), size_, l.world_size);
}

ProcessGroup::ProcessGroup(const std::vector<int>& world_ranks) : impl_(std::make_unique<Impl>()) {
  ProcessGroup& world = World();
  timeout_s_ = world.timeout_s_;
  impl_->world_ranks = world_ranks;
  impl_->engine = world.impl_->engine->Subgroup(world_ranks);
  rank_ = impl_->engine->rank();
  size_ = impl_->engine->size();
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
  const std::vector<int64_t> theirs = impl_->engine->Arrive(seq_, what);
  for (int p = 0; p < size_; ++p) {
    OAR_CHECK(theirs[static_cast<size_t>(p)] == seq_, kFailedPrecondition,
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
  impl_->engine->AllReduce(host, op, what);
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
  impl_->engine->AllGather(host, out, what);
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
  impl_->engine->ReduceScatterSum(host, out, what);
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
  constexpr int kHeader = static_cast<int>(kMaxDims + 1);
  std::vector<int64_t> header(static_cast<size_t>(size_) * kHeader, 0);
  for (int j = 0; j < size_; ++j) {
    const Tensor& c = chunks[static_cast<size_t>(j)];
    OAR_CHECK_ARG(c.defined() && c.dtype() == dtype && c.rank() <= static_cast<int64_t>(kMaxDims),
                  "process group all_to_all: chunk {} must be defined, {} and of at most {} dims", j,
                  DTypeName(dtype), kMaxDims);
    host.push_back(c.to(Device("cpu")).contiguous());
    int64_t* h = &header[static_cast<size_t>(j) * kHeader];
    h[0] = c.rank();
    for (int64_t d = 0; d < c.rank(); ++d) h[1 + d] = c.dim(d);
  }
  Tensor probe = zeros({1}, dtype, Device("cpu"));
  const std::string what = Arrive("all_to_all", probe);
  // The chunks' shapes first (one header of kHeader int64 to and from every rank), then the chunks.
  std::vector<int64_t> theirs(header.size(), 0);
  std::vector<int> hcount(static_cast<size_t>(size_), kHeader), hdispl;
  for (int j = 0; j < size_; ++j) hdispl.push_back(j * kHeader);
  impl_->engine->AllToAllv(header.data(), hcount, hdispl, theirs.data(), hcount, hdispl, DType::kInt64, what);
  // One send buffer (chunks in rank order) and one receive buffer, counts and displacements in elements.
  std::vector<int> scount, sdispl, rcount, rdispl;
  std::vector<Tensor> received;
  int64_t soff = 0, roff = 0;
  for (int j = 0; j < size_; ++j) {
    scount.push_back(static_cast<int>(host[static_cast<size_t>(j)].numel()));
    sdispl.push_back(static_cast<int>(soff));
    soff += scount.back();
    const int64_t* h = &theirs[static_cast<size_t>(j) * kHeader];
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
  impl_->engine->AllToAllv(sendbuf.data_ptr(), scount, sdispl, recvbuf.data_ptr(), rcount, rdispl, dtype, what);
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
  Tensor data = t.to(Device("cpu")).contiguous();
  if (data.storage() == t.storage()) data = data.clone();
  std::vector<int64_t> header(kMaxDims + 2, 0);
  header[0] = static_cast<int64_t>(data.dtype());
  header[1] = data.rank();
  for (int64_t d = 0; d < data.rank(); ++d) header[static_cast<size_t>(2 + d)] = data.dim(d);
  impl_->engine->Send(FromVector<int64_t>(header, {static_cast<int64_t>(header.size())}), std::move(data), dst);
}

Tensor ProcessGroup::Recv(int src, Device device) {
  OAR_CHECK_ARG(src >= 0 && src < size_ && src != rank_, "process group recv: source {} is not a peer of rank {} in a "
                "group of {}", src, rank_, size_);
  const std::string what = "recv #" + std::to_string(++impl_->received) + " from rank " + std::to_string(WorldRank(src));
  Tensor header = zeros({static_cast<int64_t>(kMaxDims + 2)}, DType::kInt64, Device("cpu"));
  impl_->engine->Recv(header, src, /*header=*/true, what);
  const std::vector<int64_t> h = header.ToVector<int64_t>();
  Dims shape;
  for (int64_t d = 0; d < h[1]; ++d) shape.push_back(h[static_cast<size_t>(2 + d)]);
  Tensor out = empty(shape, static_cast<DType>(h[0]), Device("cpu"));
  if (out.numel() > 0) impl_->engine->Recv(out, src, /*header=*/false, what);
  return out.device() == device ? out : out.to(device);
}

void ProcessGroup::WaitSends() { impl_->engine->WaitSends(); }

void ProcessGroup::Barrier() {
  Tensor one = zeros({1}, DType::kInt64, Device("cpu"));
  AllReduce(one, runtime::ReduceOp::kSum);
}

std::unique_ptr<Store> ProcessGroup::NewStore(std::chrono::milliseconds timeout) {
  return impl_->engine->NewStore(timeout);
}

const char* ProcessGroup::engine() const { return impl_->engine->name(); }

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

}  // namespace oar::distributed
