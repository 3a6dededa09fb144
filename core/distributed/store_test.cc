// The TCP store: four ranks as four threads of this process on 127.0.0.1 (a free port), every rank's keys
// seen by every other, through the C++ API and the ABI view; and the failures a user meets: a key no
// rank sets and a rank 0 that never starts time out with the address, the key and the rank in the message.
#include "core/distributed/store.h"
#include "core/distributed/testing_port.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "core/base/error.h"
#include "core/distributed/process_group.h"
#include "core/runtime/status.h"

namespace oar::distributed {
namespace {

using std::chrono::milliseconds;

using testing::FreePort;

std::string ValueOf(int rank) {
  return std::string(static_cast<size_t>(1000 * rank + 1), static_cast<char>('a' + rank));
}

TEST(TcpStore, FourRanksSeeEveryRanksKeys) {
  const int port = FreePort(), n = 4;
  std::vector<std::vector<std::string>> seen(n);
  std::vector<std::thread> ranks;
  std::vector<std::string> errors(n);
  for (int r = n - 1; r >= 0; --r) {  // rank 0 starts last: the others retry their connection
    ranks.emplace_back([&, r] {
      try {
        TcpStore store("127.0.0.1", port, r, n, milliseconds(20000));
        store.Set("value/" + std::to_string(r), ValueOf(r));
        for (int p = 0; p < n; ++p) seen[r].push_back(store.Get("value/" + std::to_string(p), milliseconds(20000)));
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
    if (r == n - 1) std::this_thread::sleep_for(milliseconds(100));
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    ASSERT_EQ(seen[r].size(), static_cast<size_t>(n)) << "rank " << r;
    for (int p = 0; p < n; ++p) EXPECT_EQ(seen[r][p], ValueOf(p)) << "rank " << r << " reading rank " << p;
  }
}

TEST(TcpStore, AbiViewSetsAndGetsAndRefusesASmallBuffer) {
  const int port = FreePort();
  TcpStore store("127.0.0.1", port, 0, 1, milliseconds(5000));
  const oar_ccl_kv_store_t* kv = store.ccl();
  ASSERT_EQ(kv->struct_size, OAR_CCL_KV_STORE_STRUCT_SIZE);
  const char blob[5] = {'x', '\0', 'y', '\0', 'z'};  // values are bytes, not strings
  ASSERT_EQ(kv->set(kv->context, "blob", blob, sizeof(blob)), nullptr);
  char out[8] = {};
  size_t size = 0;
  ASSERT_EQ(kv->get(kv->context, "blob", out, sizeof(out), &size, 1000), nullptr);
  EXPECT_EQ(std::string(out, size), std::string(blob, sizeof(blob)));
  const runtime::StatusInfo small = runtime::TakeStatus(kv->get(kv->context, "blob", out, 2, &size, 1000));
  EXPECT_EQ(small.code, ErrorCode::kResourceExhausted) << small.message;
  EXPECT_EQ(size, sizeof(blob));
}

TEST(TcpStore, KeyNoRankSetsTimesOutNamingTheKeyRankAndAddress) {
  const int port = FreePort();
  std::string message;
  std::thread rank0([&] {
    TcpStore store("127.0.0.1", port, 0, 2, milliseconds(5000));
    store.Set("here", "1");
  });
  {
    TcpStore store("127.0.0.1", port, 1, 2, milliseconds(5000));
    EXPECT_EQ(store.Get("here", milliseconds(5000)), "1");
    const auto start = std::chrono::steady_clock::now();
    try {
      store.Get("from/rank/3", milliseconds(300));
      ADD_FAILURE() << "a key no rank sets was found";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded);
      message = e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
    // The timed-out get was cancelled: the store stays usable (a new subgroup's rendezvous after a failed one).
    EXPECT_EQ(store.Get("here", milliseconds(5000)), "1");
  }
  rank0.join();
  EXPECT_NE(message.find("'from/rank/3'"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
  EXPECT_NE(message.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << message;
}

// Regression: a get that timed out left the store refusing every later request (its late answer could not
// be told from the next one), so no new Gloo subgroup could be created in that process. Now the client
// cancels the wait: the server forgets it and answers 'c' after any answer already sent, which the client
// drops. A key set after the timeout is then read by a later get, not mistaken for another request's answer.
TEST(TcpStore, AGetThatTimedOutIsCancelledAndTheStoreStaysUsable) {
  const int port = FreePort();
  std::string error0;
  std::thread rank0([&] {
    try {
      TcpStore store("127.0.0.1", port, 0, 2, milliseconds(5000));
      store.Set("here", "1");
      (void)store.Get("timed_out", milliseconds(5000));  // rank 1's get of 'late' has timed out
      store.Set("late", "value of late");
      store.Set("after", "value of after");
    } catch (const Error& e) {
      error0 = e.what();
    }
  });
  {
    TcpStore store("127.0.0.1", port, 1, 2, milliseconds(5000));
    EXPECT_EQ(store.Get("here", milliseconds(5000)), "1");
    EXPECT_THROW(store.Get("late", milliseconds(200)), Error);
    store.Set("timed_out", "1");
    EXPECT_EQ(store.Get("after", milliseconds(5000)), "value of after");
    EXPECT_EQ(store.Get("late", milliseconds(5000)), "value of late");
    EXPECT_EQ(store.Get("here", milliseconds(5000)), "1");
  }
  rank0.join();
  EXPECT_EQ(error0, "");
}

// The server side of a cancel: the client's wait is forgotten (a later set answers only the setter), 'c' is
// sent after any answer already on its way, and another client's wait for the same key stays.
TEST(StoreTable, CancelForgetsOnlyThisClientsWaitAndIsAnsweredInOrder) {
  StoreTable table;
  std::string out[3];
  const StoreTable::Send send = [&](int c, std::string_view bytes) { return out[c].append(bytes), true; };
  auto consume = [&](int client, std::string request) {
    ASSERT_TRUE(table.Consume(client, request, send));
    EXPECT_TRUE(request.empty());
  };
  consume(1, StoreRequest('G', "k", {}));
  consume(2, StoreRequest('G', "k", {}));
  consume(1, StoreRequest('C', "k", {}));
  EXPECT_EQ(out[1], "c");
  EXPECT_EQ(table.waiting(), 1u);
  consume(0, StoreRequest('S', "k", "v"));
  EXPECT_EQ(out[0], "k");
  EXPECT_EQ(out[1], "c") << "the cancelled wait got an answer";
  EXPECT_EQ(out[2], std::string("v\x01\0\0\0v", 6));
  // A late answer already sent comes before the 'c'.
  consume(1, StoreRequest('G', "k", {}));
  consume(1, StoreRequest('C', "k", {}));
  EXPECT_EQ(out[1], "c" + std::string("v\x01\0\0\0v", 6) + "c");
  std::string bad = StoreRequest('C', "k", "a value");
  EXPECT_FALSE(table.Consume(1, bad, send)) << "a cancel carries no value";
}

TEST(TcpStore, MissingRankZeroTimesOutNamingTheAddress) {
  const int port = FreePort();
  try {
    TcpStore store("127.0.0.1", port, 2, 4, milliseconds(300));
    ADD_FAILURE() << "connected to a rank 0 that does not exist";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded);
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 2 could not connect to rank 0 at 127.0.0.1:" + std::to_string(port)), std::string::npos)
        << m;
  }
}

TEST(TcpStore, FromLaunchNamesWhatIsMissing) {
  LaunchInfo l;
  l.launcher = "env";
  l.world_size = 2;
  try {
    TcpStore::FromLaunch(l, milliseconds(100));
    ADD_FAILURE() << "no MASTER_ADDR accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR and MASTER_PORT"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace oar::distributed
