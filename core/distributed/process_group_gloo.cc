// The Gloo engine of ProcessGroup (process_group_engine.h): collectives on host memory through Gloo's TCP
// transport (Debian libgloo-dev), for jobs started by a torchrun-style launcher (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT). Gloo's rendezvous (each rank publishes its pairs' addresses, reads the others')
// goes through the launch's TCP store behind Gloo's rendezvous::Store interface; the data moves over
// Gloo's own connections, one per pair of ranks.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/distributed/process_group.h"
#include "core/distributed/process_group_engine.h"

#if OAR_HAVE_GLOO
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#endif

namespace oar::distributed {

#if OAR_HAVE_GLOO

bool HaveGloo() { return true; }

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Slots of this engine's point-to-point messages; Gloo's collectives use prefixes 0x01..0x08 (gloo/types.h).
constexpr uint64_t kSlotBase = uint64_t{0x70} << 56;
constexpr uint64_t kArrivalSlot = kSlotBase + 1, kHeaderSlot = kSlotBase + 2, kDataSlot = kSlotBase + 3;

// Our store behind Gloo's rendezvous interface (Gloo's keys under `prefix`).
class RendezvousStore final : public gloo::rendezvous::Store {
 public:
  RendezvousStore(std::shared_ptr<distributed::Store> store, std::string prefix, milliseconds timeout)
      : store_(std::move(store)), prefix_(std::move(prefix)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->Set(prefix_ + key, std::string_view(data.data(), data.size()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string v = store_->Get(prefix_ + key, timeout_);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    for (const std::string& k : keys) store_->Get(prefix_ + k, timeout);
  }

 private:
  std::shared_ptr<distributed::Store> store_;
  std::string prefix_;
  milliseconds timeout_;
};

// Gloo's TCP device on the address the peers reach this process at: GLOO_SOCKET_IFNAME's interface (torch's
// variable) if set, the loopback when MASTER_ADDR is a loopback address (one machine), else this host's name.
std::shared_ptr<gloo::transport::Device> MakeDevice(const LaunchInfo& l) {
  gloo::transport::tcp::attr attr;
  const char* iface = std::getenv("GLOO_SOCKET_IFNAME");
  if (iface != nullptr && *iface != '\0') {
    attr.iface = iface;
  } else if (l.master_addr.starts_with("127.") || l.master_addr == "localhost" || l.master_addr == "::1") {
    attr.hostname = "127.0.0.1";
  } else {
    char host[256] = {};
    OAR_CHECK(::gethostname(host, sizeof(host) - 1) == 0, kUnavailable, "Gloo: gethostname failed");
    attr.hostname = host;
  }
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    Throw(ErrorCode::kUnavailable, "Gloo (rank {}): cannot open a TCP device on {}: {} (set GLOO_SOCKET_IFNAME)",
          l.rank, attr.iface.empty() ? attr.hostname : "interface " + attr.iface, e.what());
  }
}

template <typename F>
void WithType(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat64:
      return f(double{});
    case DType::kInt32:
      return f(int32_t{});
    case DType::kInt64:
      return f(int64_t{});
    default:
      Throw(ErrorCode::kInvalidArgument, "process group: dtype {} is not supported (float32, float64, int32, int64)",
            DTypeName(t));
  }
}

template <typename T>
gloo::AllreduceOptions::Func ReduceFunc(runtime::ReduceOp op) {
  using Fn = void (*)(void*, const void*, const void*, size_t);
  switch (op) {
    case runtime::ReduceOp::kSum:
    case runtime::ReduceOp::kAvg:
      return static_cast<Fn>(&gloo::sum<T>);
    case runtime::ReduceOp::kMax:
      return static_cast<Fn>(&gloo::max<T>);
    case runtime::ReduceOp::kMin:
      return static_cast<Fn>(&gloo::min<T>);
    case runtime::ReduceOp::kProd:
      return static_cast<Fn>(&gloo::product<T>);
  }
  return static_cast<Fn>(&gloo::sum<T>);
}

class GlooEngine final : public Engine {
 public:
  // The world, or the members `world_ranks` of it (`world` is then the world's engine).
  GlooEngine(const LaunchInfo& l, double timeout_s)
      : timeout_s_(timeout_s), timeout_(static_cast<int64_t>(timeout_s * 1000)) {
    store_ = LaunchTcpStore(timeout_);
    device_ = MakeDevice(l);
    Connect(l.rank, l.world_size, "gloo/world/");
  }
  GlooEngine(const GlooEngine& world, const std::vector<int>& world_ranks)
      : timeout_s_(world.timeout_s_),
        timeout_(world.timeout_),
        store_(world.store_),
        device_(world.device_),
        world_ranks_(world_ranks) {
    const int me =
        static_cast<int>(std::find(world_ranks.begin(), world_ranks.end(), world.rank()) - world_ranks.begin());
    Connect(me, static_cast<int>(world_ranks.size()), "gloo/group/" + Name() + "/");
  }

  const char* name() const override { return "Gloo"; }
  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }

  std::vector<int64_t> Arrive(int64_t seq, const std::string& what) override {
    const int n = size(), me = rank();
    std::vector<int64_t> theirs(static_cast<size_t>(n), -1);
    theirs[static_cast<size_t>(me)] = seq;
    int64_t mine = seq;
    auto out = ctx_->createUnboundBuffer(&mine, sizeof(mine));
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> in(static_cast<size_t>(n));
    std::string missing, why;
    bool broken = false;
    auto missed = [&](int p, const gloo::Exception& e) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(WorldRank(p));
      broken |= !TimedOut(e);
      if (why.empty()) why = e.what();
    };
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      try {  // posting to a peer whose connection broke throws here
        in[static_cast<size_t>(p)] = ctx_->createUnboundBuffer(&theirs[static_cast<size_t>(p)], sizeof(int64_t));
        in[static_cast<size_t>(p)]->recv(p, kArrivalSlot);
        out->send(p, kArrivalSlot);
      } catch (const gloo::Exception& e) {
        missed(p, e);
      }
    }
    if (!missing.empty()) Fail(what, missing, why, broken);
    const auto deadline = Clock::now() + timeout_;
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      try {
        in[static_cast<size_t>(p)]->waitRecv(Left(deadline));
      } catch (const gloo::Exception& e) {
        missed(p, e);
      }
    }
    if (!missing.empty()) Fail(what, missing, why, broken);
    for (int p = 0; p < n - 1; ++p) Wait(*out, /*send=*/true, what, -1);
    return theirs;
  }

  void AllReduce(Tensor& host, runtime::ReduceOp op, const std::string& what) override {
    WithType(host.dtype(), [&](auto zero) {
      using T = decltype(zero);
      gloo::AllreduceOptions opts(ctx_);
      opts.setOutput(static_cast<T*>(host.data_ptr()), static_cast<size_t>(host.numel()));
      opts.setReduceFunction(ReduceFunc<T>(op));
      opts.setTimeout(timeout_);
      Run([&] { gloo::allreduce(opts); }, what);
    });
  }

  void AllGather(const Tensor& in, Tensor& out, const std::string& what) override {
    WithType(in.dtype(), [&](auto zero) {
      using T = decltype(zero);
      gloo::AllgatherOptions opts(ctx_);
      opts.setInput(static_cast<T*>(const_cast<void*>(in.data_ptr())), static_cast<size_t>(in.numel()));
      opts.setOutput(static_cast<T*>(out.data_ptr()), static_cast<size_t>(out.numel()));
      opts.setTimeout(timeout_);
      Run([&] { gloo::allgather(opts); }, what);
    });
  }

  // Gloo 0.5 (Debian's) has no options-style reduce_scatter: an all_reduce of the whole input, then this
  // rank's block (the same sums; twice the bytes of a ring reduce_scatter).
  void ReduceScatterSum(const Tensor& in, Tensor& out, const std::string& what) override {
    Tensor whole = in.clone();
    AllReduce(whole, runtime::ReduceOp::kSum, what);
    const size_t bytes = static_cast<size_t>(out.numel()) * DTypeSize(out.dtype());
    std::memcpy(out.data_ptr(), static_cast<const char*>(whole.data_ptr()) + static_cast<size_t>(rank()) * bytes,
                bytes);
  }

  void AllToAllv(const void* send, const std::vector<int>& scount, const std::vector<int>& sdispl, void* recv,
                 const std::vector<int>& rcount, const std::vector<int>& rdispl, DType dtype,
                 const std::string& what) override {
    // Gloo packs each rank's piece contiguously in rank order, which is how ProcessGroup lays them out.
    for (size_t j = 1; j < scount.size(); ++j) {
      OAR_CHECK(sdispl[j] == sdispl[j - 1] + scount[j - 1] && rdispl[j] == rdispl[j - 1] + rcount[j - 1], kInternal,
                "Gloo all_to_all: the pieces must be contiguous in rank order");
    }
    WithType(dtype, [&](auto zero) {
      using T = decltype(zero);
      gloo::AlltoallvOptions opts(ctx_);
      opts.setInput(static_cast<T*>(const_cast<void*>(send)), std::vector<int64_t>(scount.begin(), scount.end()));
      opts.setOutput(static_cast<T*>(recv), std::vector<int64_t>(rcount.begin(), rcount.end()));
      opts.setTimeout(timeout_);
      Run([&] { gloo::alltoallv(opts); }, what);
    });
  }

  void Send(Tensor header, Tensor data, int dst) override {
    Pending p{std::move(header), std::move(data), dst, nullptr, nullptr};
    try {
      p.header_buf = ctx_->createUnboundBuffer(p.header.data_ptr(), Bytes(p.header));
      p.header_buf->send(dst, kHeaderSlot);
      if (p.data.numel() > 0) {
        p.data_buf = ctx_->createUnboundBuffer(p.data.data_ptr(), Bytes(p.data));
        p.data_buf->send(dst, kDataSlot);
      }
    } catch (const gloo::Exception& e) {
      Fail("a send to rank " + std::to_string(WorldRank(dst)), std::to_string(WorldRank(dst)), e.what(), !TimedOut(e));
    }
    sends_.push_back(std::move(p));
  }

  void Recv(Tensor& into, int src, bool header, const std::string& what) override {
    std::unique_ptr<gloo::transport::UnboundBuffer> buf;
    try {
      buf = ctx_->createUnboundBuffer(into.data_ptr(), Bytes(into));
      buf->recv(src, header ? kHeaderSlot : kDataSlot);
    } catch (const gloo::Exception& e) {
      Fail(what, std::to_string(WorldRank(src)), e.what(), !TimedOut(e));
    }
    Wait(*buf, /*send=*/false, what, src);
  }

  void WaitSends() override {
    while (!sends_.empty()) {
      Pending& p = sends_.front();
      const std::string what = "a send to rank " + std::to_string(WorldRank(p.dst));
      Wait(*p.header_buf, /*send=*/true, what, p.dst);
      if (p.data_buf) Wait(*p.data_buf, /*send=*/true, what, p.dst);
      sends_.pop_front();
    }
  }

  std::unique_ptr<Store> NewStore(milliseconds) override {
    return std::make_unique<PrefixStore>(store_, "pg/" + Name() + "/store" + std::to_string(stores_++) + "/");
  }

  std::unique_ptr<Engine> Subgroup(const std::vector<int>& world_ranks) override {
    return std::make_unique<GlooEngine>(*this, world_ranks);
  }

 private:
  struct Pending {
    Tensor header, data;
    int dst = 0;
    std::unique_ptr<gloo::transport::UnboundBuffer> header_buf, data_buf;
  };

  void Connect(int rank, int size, const std::string& prefix) {
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(timeout_);
    RendezvousStore rendezvous(store_, prefix, timeout_);
    try {
      ctx->connectFullMesh(rendezvous, device_);
    } catch (const gloo::Exception& e) {
      Throw(ErrorCode::kUnavailable, "Gloo (rank {} of '{}'): connecting to the other ranks failed: {}",
            WorldRank(rank), prefix, e.what());
    }
    ctx_ = std::move(ctx);
  }
  // "world" or the members' world ranks, "0,2".
  std::string Name() const {
    if (world_ranks_.empty()) return "world";
    std::string s;
    for (int r : world_ranks_) s += (s.empty() ? "" : ",") + std::to_string(r);
    return s;
  }
  int WorldRank(int r) const { return world_ranks_.empty() ? r : world_ranks_.at(static_cast<size_t>(r)); }
  // Gloo reports a timeout and a broken connection with one exception type; its message tells them apart.
  static bool TimedOut(const gloo::Exception& e) {
    return std::string_view(e.what()).find("Timed out") != std::string_view::npos;
  }
  static size_t Bytes(const Tensor& t) { return static_cast<size_t>(t.numel()) * DTypeSize(t.dtype()); }
  static milliseconds Left(Clock::time_point deadline) {
    return std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
  }
  // A wait on one point-to-point buffer; `peer` (group rank) is named on failure (-1: unknown).
  void Wait(gloo::transport::UnboundBuffer& buf, bool send, const std::string& what, int peer) {
    try {
      if (send) {
        buf.waitSend(timeout_);
      } else {
        buf.waitRecv(timeout_);
      }
    } catch (const gloo::Exception& e) {
      Fail(what, peer >= 0 ? std::to_string(WorldRank(peer)) : "", e.what(), !TimedOut(e));
    }
  }
  template <typename F>
  void Run(F&& collective, const std::string& what) {
    try {
      collective();
    } catch (const gloo::Exception& e) {
      Fail(what, "", e.what(), !TimedOut(e));
    }
  }
  [[noreturn]] void Fail(const std::string& what, const std::string& missing, const std::string& why, bool broken) {
    if (broken) {
      Throw(ErrorCode::kUnavailable, "oar: rank {}: {} failed: {} lost its connection (it died?): {}",
            WorldRank(rank()), what, missing.empty() ? "a peer" : "rank(s) " + missing, why);
    }
    Throw(ErrorCode::kDeadlineExceeded, "{} (OAR_DIST_TIMEOUT_S sets the timeout)",
          TimeoutMessage(WorldRank(rank()), what, timeout_s_, missing));
  }

  double timeout_s_;
  milliseconds timeout_;
  std::shared_ptr<Store> store_;  // the launch's TCP store
  std::shared_ptr<gloo::transport::Device> device_;
  std::vector<int> world_ranks_;  // empty: the world
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  int64_t stores_ = 0;  // NewStore calls
  std::deque<Pending> sends_;
};

}  // namespace

std::unique_ptr<Engine> NewGlooWorld(const LaunchInfo& launch, double timeout_s) {
  return std::make_unique<GlooEngine>(launch, timeout_s);
}

#else  // !OAR_HAVE_GLOO

bool HaveGloo() { return false; }
std::unique_ptr<Engine> NewGlooWorld(const LaunchInfo&, double) { return nullptr; }

#endif

}  // namespace oar::distributed
