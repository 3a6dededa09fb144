// The process group under `mpirun -np 4` (MPI) and under a torchrun-style launch of 4 (Gloo over the TCP
// store; ctest runs both): collectives against values computed from every rank's known input, the launcher
// environment, and — with OAR_TEST_HANG_RANK=r — a rank that never arrives (or, with OAR_TEST_DIE_RANK=r,
// dies), which must fail the whole job within OAR_DIST_TIMEOUT_S naming rank r and the collective.
#include "core/distributed/process_group.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "core/base/error.h"
#include "core/distributed/spmd_pass.h"
#include "core/jit/capture.h"
#include "core/nn/layers.h"
#include "core/ops/ops.h"
#include "core/runtime/runtime.h"
#include "core/runtime/testing.h"

namespace oar::distributed {
namespace {

const bool kConfigured = runtime::testing::UseOnlyPlugins(OAR_PLUGIN_DIR, {"cpu"});

// The engine this launch needs is in the build (else the test is skipped, saying which).
bool HaveEngine() { return LaunchInfo::FromEnv().launcher == "env" ? HaveGloo() : HaveMpi(); }

TEST(ProcessGroup, LaunchEnvironmentMatchesTheEngine) {
  ASSERT_TRUE(kConfigured);
  if (!HaveEngine()) GTEST_SKIP() << "built without the launch's engine (MPI or Gloo)";
  const LaunchInfo l = LaunchInfo::FromEnv();
  ProcessGroup& g = ProcessGroup::World();
  ASSERT_NE(l.launcher, "single") << "run under mpirun -np 4 or a torchrun-style launcher";
  EXPECT_STREQ(g.engine(), l.launcher == "mpirun" ? "MPI" : "Gloo");
  EXPECT_EQ(l.rank, g.rank());
  EXPECT_EQ(l.world_size, g.size());
  EXPECT_GE(g.size(), 2) << "run under mpirun -np 4";
}

TEST(ProcessGroup, AllReduceSumAvgMaxMatchEveryRanksInputs) {
  if (!HaveEngine()) GTEST_SKIP() << "built without the launch's engine";
  ProcessGroup& g = ProcessGroup::World();
  if (const char* hang = std::getenv("OAR_TEST_HANG_RANK"); hang != nullptr && std::atoi(hang) == g.rank()) {
    std::this_thread::sleep_for(std::chrono::seconds(120));  // never arrives in time
  }
  if (const char* die = std::getenv("OAR_TEST_DIE_RANK"); die != nullptr && std::atoi(die) == g.rank()) {
    std::_Exit(3);  // dies before the collective
  }
  const int64_t n = 1000;
  auto input = [&](int r) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>((i * 7 + r * 13) % 11) - 5;
    return v;
  };
  for (runtime::ReduceOp op : {runtime::ReduceOp::kSum, runtime::ReduceOp::kAvg, runtime::ReduceOp::kMax}) {
    Tensor t = FromVector<float>(input(g.rank()), {n});
    g.AllReduce(t, op);
    std::vector<float> want(static_cast<size_t>(n), op == runtime::ReduceOp::kMax ? -1e9f : 0.0f);
    for (int r = 0; r < g.size(); ++r) {
      const std::vector<float> x = input(r);
      for (size_t i = 0; i < want.size(); ++i) want[i] = op == runtime::ReduceOp::kMax ? std::max(want[i], x[i]) : want[i] + x[i];
    }
    if (op == runtime::ReduceOp::kAvg) {
      for (float& w : want) w /= static_cast<float>(g.size());
    }
    EXPECT_EQ(t.ToVector<float>(), want) << static_cast<int>(op);
  }
  g.Barrier();
}

// all_gather, reduce_scatter (sum, avg), all_to_all with pieces of different shapes (one empty), send/recv
// around the ring (two messages each, in order) and an all_reduce on a subgroup (the even ranks): exact
// values (small integers, so any summation order gives them).
TEST(ProcessGroup, GatherScatterAllToAllSendRecvAndSubgroupsMatchEveryRanksInputs) {
  if (!HaveEngine()) GTEST_SKIP() << "built without the launch's engine";
  ProcessGroup& g = ProcessGroup::World();
  const int n = g.size(), me = g.rank();
  auto block = [](int r, int64_t k, int64_t len) {
    std::vector<float> v(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) v[static_cast<size_t>(i)] = static_cast<float>(r * 100 + k * 10 + i);
    return v;
  };
  // all_gather: [n, 2, 3], block r is rank r's.
  const Tensor gathered = g.AllGather(FromVector<float>(block(me, 0, 6), {2, 3}));
  ASSERT_EQ(gathered.shape(), Dims({n, 2, 3}));
  std::vector<float> want;
  for (int r = 0; r < n; ++r) {
    const std::vector<float> b = block(r, 0, 6);
    want.insert(want.end(), b.begin(), b.end());
  }
  EXPECT_EQ(gathered.ToVector<float>(), want);
  // reduce_scatter: rank r's input block k is block(r, k); this rank gets the sum over r of block(r, me).
  std::vector<float> in;
  for (int k = 0; k < n; ++k) {
    const std::vector<float> b = block(me, k, 5);
    in.insert(in.end(), b.begin(), b.end());
  }
  std::vector<float> sum(5, 0.0f);
  for (int r = 0; r < n; ++r) {
    const std::vector<float> b = block(r, me, 5);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += b[i];
  }
  EXPECT_EQ(g.ReduceScatter(FromVector<float>(in, {n, 5}), runtime::ReduceOp::kSum).ToVector<float>(), sum);
  std::vector<float> avg = sum;
  for (float& a : avg) a /= static_cast<float>(n);
  EXPECT_EQ(g.ReduceScatter(FromVector<float>(in, {n, 5}), runtime::ReduceOp::kAvg).ToVector<float>(), avg);
  // all_to_all: the chunk from rank i to rank j has (i + j) % 3 rows of 2 (int64).
  std::vector<Tensor> chunks;
  for (int j = 0; j < n; ++j) {
    const int64_t rows = (me + j) % 3;
    std::vector<int64_t> v(static_cast<size_t>(rows * 2));
    for (size_t i = 0; i < v.size(); ++i) v[i] = me * 1000 + j * 10 + static_cast<int64_t>(i);
    chunks.push_back(FromVector<int64_t>(v, {rows, 2}));
  }
  const std::vector<Tensor> got = g.AllToAll(chunks);
  ASSERT_EQ(static_cast<int>(got.size()), n);
  for (int i = 0; i < n; ++i) {
    const int64_t rows = (i + me) % 3;
    ASSERT_EQ(got[static_cast<size_t>(i)].shape(), Dims({rows, 2})) << "from rank " << i;
    std::vector<int64_t> v(static_cast<size_t>(rows * 2));
    for (size_t k = 0; k < v.size(); ++k) v[k] = i * 1000 + me * 10 + static_cast<int64_t>(k);
    EXPECT_EQ(got[static_cast<size_t>(i)].ToVector<int64_t>(), v) << "from rank " << i;
  }
  // send/recv around the ring: two messages (a matrix, then a scalar), received in order.
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  g.Send(FromVector<float>(block(me, 1, 6), {3, 2}), next);
  g.Send(FromVector<int32_t>({me}, {}), next);
  const Tensor first = g.Recv(prev, Device("cpu")), second = g.Recv(prev, Device("cpu"));
  g.WaitSends();
  EXPECT_EQ(first.shape(), Dims({3, 2}));
  EXPECT_EQ(first.ToVector<float>(), block(prev, 1, 6));
  EXPECT_EQ(second.dtype(), DType::kInt32);
  EXPECT_EQ(second.ToVector<int32_t>(), std::vector<int32_t>{prev});
  // A subgroup: the even ranks sum their ranks (the odd ones are not members and skip it).
  if (me % 2 == 0) {
    std::vector<int> evens;
    for (int r = 0; r < n; r += 2) evens.push_back(r);
    ProcessGroup& sub = ProcessGroup::Subgroup(evens);
    EXPECT_EQ(sub.rank(), me / 2);
    Tensor t = FromVector<int64_t>({me}, {1});
    sub.AllReduce(t, runtime::ReduceOp::kSum);
    int64_t total = 0;
    for (int r : evens) total += r;
    EXPECT_EQ(t.ToVector<int64_t>(), std::vector<int64_t>{total});
  }
  g.Barrier();
}

// A placed program run with one rank program per process (SpmdExecutor over a ForProcesses mesh): the MLP
// fc2(tanh(fc1(x))) captured on cpu, fc1 column- and fc2 row-parallel on tp, x's rows on dp, on dp=2,tp=2
// over the 4 processes; each process compiles and runs only its rank's program, whose dist.rank_reshard
// ops are the process group's collectives (one all_reduce over tp, one all_gather over dp). The output
// equals the one-device forward within 1e-5. (Before the store test: under Gloo a store get that times out
// leaves the launch's TCP store refusing further use, and new subgroups need it.)
TEST(ProcessGroup, PlacedProgramRunsOneRankProgramPerProcess) {
  if (!HaveEngine()) GTEST_SKIP() << "built without the launch's engine";
  ProcessGroup& g = ProcessGroup::World();
  if (g.size() != 4) GTEST_SKIP() << "needs 4 processes";
  const Device cpu("cpu:0");
  Generator gen(7);
  nn::Linear fc1(8, 16, true, gen, nn::Options{cpu, DType::kFloat32});
  nn::Linear fc2(16, 8, true, gen, nn::Options{cpu, DType::kFloat32});
  const Tensor x = randn({6, 8}, gen, 0, 1, DType::kFloat32, cpu);
  auto forward = [&](const Tensor& in) { return fc2.Forward(tanh(fc1.Forward(in))); };
  ir::IrContext ctx;
  jit::CaptureOptions o;
  o.state = {{"fc1.weight", &fc1.weight}, {"fc1.bias", fc1.bias}, {"fc2.weight", &fc2.weight}, {"fc2.bias", fc2.bias}};
  NoGradGuard no_grad;
  const std::vector<jit::InputSpec> specs = {
      {"x", DType::kFloat32, {jit::DimSpec::Static(6), jit::DimSpec::Static(8)}}};
  jit::Captured c = jit::Capture(
      ctx, [&](std::span<const Tensor> in) { return std::vector<Tensor>{forward(in[0])}; }, specs,
      std::vector<Tensor>{x}, cpu, o);
  ir::Program& p = *c.program;
  SetProgramMesh(p, ProcessMesh::Parse("dp=2,tp=2", "cpu"));
  const Placement R = Placement::Replicate();
  AnnotatePlacements(p, "fc1.weight", {R, Placement::Shard(0)});
  AnnotatePlacements(p, "fc1.bias", {R, Placement::Shard(0)});
  AnnotatePlacements(p, "fc2.weight", {R, Placement::Shard(1)});
  AnnotatePlacements(p, "x", {Placement::Shard(0), R});
  const PropagationReport report = PropagatePlacements(p);
  EXPECT_EQ(report.count("dist.all_reduce"), 1);
  EXPECT_EQ(report.count("dist.all_gather"), 1);
  const ProcessMesh mesh = ProcessMesh::ForProcesses("dp=2,tp=2", cpu, g.rank(), g.size());
  SpmdExecutor run(p, mesh);
  EXPECT_THROW(run.rank_executor((g.rank() + 1) % 4), Error);  // another process's rank
  const std::vector<DistTensor> out = run.Run(std::vector<Tensor>{x});
  ASSERT_EQ(out.size(), 1u);
  const std::vector<float> got = out[0].local(g.rank()).ToVector<float>(), want = forward(x).ToVector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << i;
  g.Barrier();
}

// The group's store (MPI's, or a view of the TCP store under Gloo): every rank sets a value and reads every other's;
// rank 0 sets its key last, after the others are already waiting for it (they must be answered while rank 0 is in no
// MPI call of theirs).
TEST(ProcessGroup, StoreExchangesEveryRanksValueAndTimesOutNamingTheKey) {
  if (!HaveEngine()) GTEST_SKIP() << "built without the launch's engine";
  ProcessGroup& g = ProcessGroup::World();
  {
    const std::unique_ptr<Store> store = g.NewStore(std::chrono::milliseconds(20000));
    auto value = [](int r) { return std::string(static_cast<size_t>(3000 * r + 1), static_cast<char>('a' + r)); };
    if (g.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    store->Set("value/" + std::to_string(g.rank()), value(g.rank()));
    for (int p = 0; p < g.size(); ++p) {
      EXPECT_EQ(store->Get("value/" + std::to_string(p), std::chrono::milliseconds(20000)), value(p)) << p;
    }
    try {
      store->Get("never/set", std::chrono::milliseconds(200));
      ADD_FAILURE() << "a key no rank sets was found";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded);
      // Under Gloo the key carries the store's prefix ("get 'pg/world/store0/never/set'").
      EXPECT_NE(std::string(e.what()).find("never/set'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(g.rank())), std::string::npos) << e.what();
    }
  }
  g.Barrier();
}

}  // namespace
}  // namespace oar::distributed
