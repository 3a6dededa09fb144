// The MPI process group under `mpirun -np 4` (ctest runs it so): collectives against values computed
// from every rank's known input, the launcher environment, and — with OAR_TEST_HANG_RANK=r — a rank that
// never arrives (or, with OAR_TEST_DIE_RANK=r, dies), which must fail the whole job within OAR_DIST_TIMEOUT_S naming rank r and the collective.
#include "core/distributed/process_group.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "core/base/error.h"
#include "core/ops/ops.h"
#include "core/runtime/runtime.h"
#include "core/runtime/testing.h"

namespace oar::distributed {
namespace {

const bool kConfigured = runtime::testing::UseOnlyPlugins(OAR_PLUGIN_DIR, {"cpu"});

TEST(ProcessGroup, LaunchEnvironmentMatchesMpi) {
  ASSERT_TRUE(kConfigured);
  if (!HaveMpi()) GTEST_SKIP() << "built without MPI";
  const LaunchInfo l = LaunchInfo::FromEnv();
  ProcessGroup& g = ProcessGroup::World();
  EXPECT_EQ(l.launcher, "mpirun");
  EXPECT_EQ(l.rank, g.rank());
  EXPECT_EQ(l.world_size, g.size());
  EXPECT_GE(g.size(), 2) << "run under mpirun -np 4";
}

TEST(ProcessGroup, AllReduceSumAvgMaxMatchEveryRanksInputs) {
  if (!HaveMpi()) GTEST_SKIP() << "built without MPI";
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

// The MPI store: every rank sets a value and reads every other's; rank 0 sets its key last, after the
// others are already waiting for it (they must be answered while rank 0 is in no MPI call of theirs).
TEST(ProcessGroup, MpiStoreExchangesEveryRanksValueAndTimesOutNamingTheKey) {
  if (!HaveMpi()) GTEST_SKIP() << "built without MPI";
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
      EXPECT_NE(std::string(e.what()).find("get 'never/set'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(g.rank())), std::string::npos) << e.what();
    }
  }
  g.Barrier();
}

}  // namespace
}  // namespace oar::distributed
