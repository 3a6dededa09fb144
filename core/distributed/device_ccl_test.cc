// A device type's CCL across processes, bootstrapped through the host's key/value store: kunlun_sim's
// collectives (the simulators' shared-memory path) with four ranks in four processes equal, bit for bit,
// the same collectives with four ranks in one process (the in-process path). Three ways in:
//   - TcpStore: four forked processes with RANK/WORLD_SIZE/MASTER_ADDR=127.0.0.1/MASTER_PORT (a free port);
//   - the MPI store: under `mpirun -np 4` (distributed.mpirun_np4_device_ccl), ProcessGroup's
//     DeviceCommunicator and the process group's AllReduce/AllGather/ReduceScatter/AllToAll on kunlun tensors;
//   - failures: a rank that never joins, and one that skips a collective, fail the others within
//     OAR_SIM_CCL_TIMEOUT_MS with messages naming the missing rank (and the store's key for the join).
// Every test runs in its own process (ctest), so the forks happen before this process has any thread.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/distributed/process_group.h"
#include "core/distributed/store.h"
#include "core/distributed/testing_port.h"
#include "core/ops/ops.h"
#include "core/runtime/ccl.h"
#include "core/runtime/testing.h"

namespace oar::distributed {
namespace {

using runtime::Communicator;
using runtime::ReduceOp;
using std::chrono::milliseconds;

const bool kConfigured = runtime::testing::UseOnlyPlugins(OAR_PLUGIN_DIR, {"cpu", "kunlun_sim"});
constexpr int kRanks = 4;
// Above the shared segment's 4 MiB slot: the all_reduce runs in two rounds, the reduce_scatter in three.
constexpr int64_t kBig = (int64_t{1} << 20) + 4099, kBlock = 300001, kSmall = 1003;

/// Rank r's input of `n` floats: magnitudes that differ by rank, so a different summation order would show.
std::vector<float> Input(int r, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[static_cast<size_t>(i)] =
        static_cast<float>(std::sin(0.37 * static_cast<double>(i) + r) * std::pow(10.0, r % 3 - 1));
  }
  return v;
}

std::string Bytes(const Tensor& t) {
  const Tensor h = t.to(Device("cpu")).contiguous();
  return std::string(static_cast<const char*>(h.data_ptr()), static_cast<size_t>(h.numel()) * DTypeSize(h.dtype()));
}

/// The collectives every test runs, with `comm` holding the ranks `ranks` (all four in one process, or one
/// per process); returns each held rank's outputs, as bytes, in a fixed order.
std::vector<std::vector<std::string>> RunCollectives(Communicator& comm, const std::vector<int>& ranks) {
  auto on = [&](size_t i) {
    return ranks.size() == 1 ? Device("kunlun_sim:0") : Device("kunlun_sim:" + std::to_string(i));
  };
  std::vector<std::vector<std::string>> out(ranks.size());
  auto collect = [&](const std::vector<Tensor>& ts) {
    for (size_t i = 0; i < ts.size(); ++i) out[i].push_back(Bytes(ts[i]));
  };
  std::vector<Tensor> a, b, g, gin, rs, rsin, bc, mx;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    a.push_back(FromVector<float>(Input(r, kBig), {kBig}).to(on(i)));
    b.push_back(FromVector<float>(Input(r, kSmall), {kSmall}).to(on(i)));
    gin.push_back(FromVector<float>(Input(r + 7, kSmall), {kSmall}).to(on(i)));
    g.push_back(empty({kRanks * kSmall}, DType::kFloat32, on(i)));
    rsin.push_back(FromVector<float>(Input(r + 3, kRanks * kBlock), {kRanks * kBlock}).to(on(i)));
    rs.push_back(empty({kBlock}, DType::kFloat32, on(i)));
    bc.push_back(FromVector<float>(Input(r + 11, kSmall), {kSmall}).to(on(i)));
    std::vector<int64_t> m(64);
    for (size_t k = 0; k < m.size(); ++k) m[k] = static_cast<int64_t>((k * 31 + static_cast<size_t>(r) * 17) % 97) - 40;
    mx.push_back(FromVector<int64_t>(m, {64}).to(on(i)));
  }
  comm.AllReduce(a, ReduceOp::kSum);
  comm.AllReduce(b, ReduceOp::kAvg);
  comm.AllReduce(mx, ReduceOp::kMax);
  comm.AllGather(gin, g);
  comm.ReduceScatter(rsin, rs, ReduceOp::kSum);
  comm.Broadcast(bc, 2);
  collect(a);
  collect(b);
  collect(mx);
  collect(g);
  collect(rs);
  collect(bc);
  return out;
}

/// What one process with all four ranks computes (the in-process path, no store).
std::vector<std::vector<std::string>> OneProcessReference() {
  Communicator comm({Device("kunlun_sim:0"), Device("kunlun_sim:1"), Device("kunlun_sim:2"), Device("kunlun_sim:3")});
  return RunCollectives(comm, {0, 1, 2, 3});
}

void ExpectBitwiseEqual(const std::vector<std::string>& got, const std::vector<std::string>& want, int rank) {
  const char* names[] = {"all_reduce(sum, 2 rounds)",     "all_reduce(avg)",  "all_reduce(max, int64)", "all_gather",
                         "reduce_scatter(sum, 3 rounds)", "broadcast(root 2)"};
  ASSERT_EQ(got.size(), want.size()) << "rank " << rank;
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k].size(), want[k].size()) << names[k] << " on rank " << rank;
    EXPECT_TRUE(got[k] == want[k]) << names[k] << " on rank " << rank << " differs from the one-process result";
  }
}

using testing::FreePort;

/// Fork `kRanks` processes with torchrun-style variables; each runs `body(rank)` and writes what it returns
/// to dir/rank<r>. Returns the files' contents (empty for a rank that wrote nothing) after all have exited.
std::vector<std::string> ForkRanks(const std::function<std::string(int)>& body) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("oar-device-ccl-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string port = std::to_string(FreePort());
  std::vector<pid_t> pids;
  for (int r = 0; r < kRanks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(kRanks).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      std::string result;
      try {
        result = body(r);
      } catch (const std::exception& e) {
        result = std::string("error: ") + e.what();
      }
      std::ofstream(dir / ("rank" + std::to_string(r)), std::ios::binary) << result;
      std::fflush(nullptr);
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a rank process crashed";
  }
  std::vector<std::string> results;
  for (int r = 0; r < kRanks; ++r) {
    std::ifstream in(dir / ("rank" + std::to_string(r)), std::ios::binary);
    results.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::filesystem::remove_all(dir);
  return results;
}

std::string Join(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) s += std::to_string(p.size()) + ":" + p;
  return s;
}
std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < s.size();) {
    const size_t colon = s.find(':', i);
    const size_t n = std::stoull(s.substr(i, colon - i));
    parts.push_back(s.substr(colon + 1, n));
    i = colon + 1 + n;
  }
  return parts;
}

TEST(DeviceCcl, KunlunCclAcrossFourProcessesOverTcpStoreEqualsOneProcessBitwise) {
  ASSERT_TRUE(kConfigured);
  const std::vector<std::string> results = ForkRanks([](int r) {
    std::unique_ptr<Store> store = StoreForLaunch(milliseconds(30000));
    Communicator comm(Device("kunlun_sim:0"), kRanks, r, store->ccl(), "test/ccl", 30000);
    return Join(RunCollectives(comm, {r})[0]);
  });
  const auto want = OneProcessReference();  // after the forks: this process had no thread before them
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_NE(results[static_cast<size_t>(r)].rfind("error: ", 0), 0u)
        << "rank " << r << ": " << results[static_cast<size_t>(r)];
    ExpectBitwiseEqual(Split(results[static_cast<size_t>(r)]), want[static_cast<size_t>(r)], r);
  }
}

// send/recv around a ring of four processes: a message over the 2 MiB ring (three chunks; the receiver
// drains while the sender writes) and a small one, byte for byte.
TEST(DeviceCcl, SendRecvAroundFourProcessesDeliverEveryByte) {
  ASSERT_TRUE(kConfigured);
  constexpr int64_t kLong = (int64_t{5} << 18) + 77;  // floats: 2.5 MiB and a bit
  const std::vector<std::string> results = ForkRanks([](int r) {
    std::unique_ptr<Store> store = StoreForLaunch(milliseconds(30000));
    Communicator comm(Device("kunlun_sim:0"), kRanks, r, store->ccl(), "test/ccl", 30000);
    const Device dev("kunlun_sim:0");
    const Tensor big = FromVector<float>(Input(r, kLong), {kLong}).to(dev);
    const Tensor small = FromVector<float>(Input(r + 5, 17), {17}).to(dev);
    Tensor big_in = empty({kLong}, DType::kFloat32, dev), small_in = empty({17}, DType::kFloat32, dev);
    const int next = (r + 1) % kRanks, prev = (r + kRanks - 1) % kRanks;
    if (r % 2 == 0) {  // even ranks send first, odd ones receive first: both orders
      comm.Send(big, next);
      comm.Send(small, next);
      comm.Recv(big_in, prev);
      comm.Recv(small_in, prev);
    } else {
      comm.Recv(big_in, prev);
      comm.Recv(small_in, prev);
      comm.Send(big, next);
      comm.Send(small, next);
    }
    return Join({Bytes(big_in), Bytes(small_in)});
  });
  for (int r = 0; r < kRanks; ++r) {
    const std::string& got = results[static_cast<size_t>(r)];
    ASSERT_NE(got.rfind("error: ", 0), 0u) << "rank " << r << ": " << got;
    const int prev = (r + kRanks - 1) % kRanks;
    const std::vector<std::string> parts = Split(got);
    ASSERT_EQ(parts.size(), 2u);
    EXPECT_TRUE(parts[0] == Bytes(FromVector<float>(Input(prev, kLong), {kLong}))) << "rank " << r << " long message";
    EXPECT_TRUE(parts[1] == Bytes(FromVector<float>(Input(prev + 5, 17), {17}))) << "rank " << r << " short message";
  }
}

TEST(DeviceCcl, RankThatNeverJoinsTimesOutNamingIt) {
  ASSERT_TRUE(kConfigured);
  ::setenv("OAR_SIM_CCL_TIMEOUT_MS", "1500", 1);
  const std::vector<std::string> results = ForkRanks([](int r) -> std::string {
    std::unique_ptr<Store> store = StoreForLaunch(milliseconds(10000));
    if (r == 3) {
      ::sleep(4);  // never joins in time (but keeps its store up)
      return "absent";
    }
    Communicator comm(Device("kunlun_sim:0"), kRanks, r, store->ccl(), "test/ccl", 10000);
    return "joined";
  });
  for (int r = 0; r < 3; ++r) {
    const std::string& m = results[static_cast<size_t>(r)];
    EXPECT_NE(m.find("error: "), std::string::npos) << "rank " << r << ": " << m;
    EXPECT_NE(m.find("timed out waiting for rank(s) 3"), std::string::npos) << "rank " << r << ": " << m;
  }
}

TEST(DeviceCcl, RankThatSkipsACollectiveFailsItsPeersNamingIt) {
  ASSERT_TRUE(kConfigured);
  ::setenv("OAR_SIM_CCL_TIMEOUT_MS", "1500", 1);
  const std::vector<std::string> results = ForkRanks([](int r) -> std::string {
    std::unique_ptr<Store> store = StoreForLaunch(milliseconds(10000));
    Communicator comm(Device("kunlun_sim:0"), kRanks, r, store->ccl(), "test/ccl", 10000);
    if (r == 2) return "skipped";  // leaves without the all_reduce
    std::vector<Tensor> t{FromVector<float>(Input(r, 10), {10}).to(Device("kunlun_sim:0"))};
    comm.AllReduce(t, ReduceOp::kSum);
    return Bytes(t[0]);  // reading it waits for the collective: here the timeout surfaces
  });
  for (int r : {0, 1, 3}) {
    const std::string& m = results[static_cast<size_t>(r)];
    EXPECT_EQ(m.rfind("error: ", 0), 0u) << "rank " << r << " did not fail";
    EXPECT_NE(m.find("rank(s) 2"), std::string::npos) << "rank " << r << ": " << m;
  }
}

TEST(DeviceCcl, KeyNobodySetsTimesOutNamingTheKey) {
  ASSERT_TRUE(kConfigured);
  const std::vector<std::string> results = ForkRanks([](int r) -> std::string {
    std::unique_ptr<Store> store = StoreForLaunch(milliseconds(10000));
    if (r != 1) return "ok";
    try {
      store->Get("ccl/never", milliseconds(300));
    } catch (const Error& e) {
      return e.what();
    }
    return "found";
  });
  EXPECT_NE(results[1].find("'ccl/never'"), std::string::npos) << results[1];
  EXPECT_NE(results[1].find("rank 1"), std::string::npos) << results[1];
}

// Under mpirun -np 4 (or a torchrun-style launch of 4): the group's store — MPI's, or under Gloo a view of
// the TCP store — bootstraps the same communicator, and the process group's collectives on kunlun tensors go
// through it.
TEST(DeviceCcl, UnderALauncherGroupStoreBootstrapsKunlunCclBitwiseAsOneProcess) {
  ASSERT_TRUE(kConfigured);
  ASSERT_NE(LaunchInfo::FromEnv().launcher, "single") << "run under mpirun -np 4 or torchrun_mpirun.sh";
  ProcessGroup& g = ProcessGroup::World();
  ASSERT_EQ(g.size(), kRanks);
  Communicator& comm = g.DeviceCommunicator(Device("kunlun_sim:0"));
  EXPECT_EQ(comm.nranks(), kRanks);
  const auto got = RunCollectives(comm, {g.rank()});
  const auto want = OneProcessReference();  // kunlun_sim:0..3 of this process
  ExpectBitwiseEqual(got[0], want[static_cast<size_t>(g.rank())], g.rank());
  g.Barrier();
}

// Under a launcher of 4: ProcessGroup's collectives on kunlun tensors go through kunlun's CCL (not the
// host's MPI or Gloo, whose summation orders differ): bitwise the one-process CCL's results, on the device.
TEST(DeviceCcl, UnderALauncherProcessGroupCollectivesOnKunlunTensorsUseItsCcl) {
  ASSERT_TRUE(kConfigured);
  ASSERT_NE(LaunchInfo::FromEnv().launcher, "single") << "run under mpirun -np 4 or torchrun_mpirun.sh";
  ProcessGroup& g = ProcessGroup::World();
  ASSERT_EQ(g.size(), kRanks);
  const int r = g.rank();
  const Device dev("kunlun_sim:0");
  Tensor a = FromVector<float>(Input(r, kBig), {kBig}).to(dev);
  g.AllReduce(a, ReduceOp::kSum);
  Tensor b = FromVector<float>(Input(r, kSmall), {kSmall}).to(dev);
  g.AllReduce(b, ReduceOp::kAvg);
  const Tensor gathered = g.AllGather(FromVector<float>(Input(r + 7, kSmall), {kSmall}).to(dev));
  const Tensor scattered =
      g.ReduceScatter(FromVector<float>(Input(r + 3, kRanks * kBlock), {kRanks, kBlock}).to(dev), ReduceOp::kSum);
  EXPECT_EQ(a.device(), dev);
  EXPECT_EQ(gathered.device(), dev);
  EXPECT_EQ(gathered.shape(), Dims({kRanks, kSmall}));
  EXPECT_EQ(scattered.shape(), Dims({kBlock}));
  const auto want = OneProcessReference()[static_cast<size_t>(r)];
  EXPECT_TRUE(Bytes(a) == want[0]) << "all_reduce(sum) on rank " << r << " differs from kunlun's one-process CCL";
  EXPECT_TRUE(Bytes(b) == want[1]) << "all_reduce(avg) on rank " << r;
  EXPECT_TRUE(Bytes(gathered) == want[3]) << "all_gather on rank " << r;
  EXPECT_TRUE(Bytes(scattered) == want[4]) << "reduce_scatter on rank " << r;
  g.Barrier();
}

}  // namespace
}  // namespace oar::distributed
