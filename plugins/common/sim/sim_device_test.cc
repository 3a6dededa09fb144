// The device contract of both simulators, through the ABI only (dlopen), run once per plugin:
// separate memory space, capacity, alignment and stats, asynchronous streams with events and callbacks
// under seeded jitter, peer copies, the profiler, and collectives against host-computed results.
// The binary sets OAR_SIM_JITTER (unless already set) so that missing synchronisation shows up as wrong
// results, and 64 MiB per device so that exhaustion is cheap to reach.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "oar/plugin/cpp/dtype.hpp"
#include "plugins/common/sim/sim_test_util.h"

namespace oar::simtest {
namespace {

const bool kEnvironment = [] {
  setenv("OAR_SIM_JITTER", "1234", 0);
  setenv("OAR_KUNLUN_SIM_MEMORY", "64M", 1);
  setenv("OAR_ASCEND_SIM_MEMORY", "64M", 1);
  unsetenv("OAR_SIM_FAULTS");
  unsetenv("OAR_KUNLUN_SIM_DEVICES");
  unsetenv("OAR_ASCEND_SIM_DEVICES");
  return true;
}();

constexpr uint64_t kCapacity = 64ull << 20;
const std::vector<int32_t> kAddF32 = {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32};

struct SimParam {
  const char* name;
  const char* path;
  int64_t alignment;
};

class SimDevice : public ::testing::TestWithParam<SimParam> {
 protected:
  static const Plugin& P() {
    static std::map<std::string, Plugin> plugins;
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    auto it = plugins.find(GetParam().path);
    if (it == plugins.end()) it = plugins.emplace(GetParam().path, Load(GetParam().path)).first;
    return it->second;
  }
  void SetUp() override {
    ASSERT_TRUE(kEnvironment);
    ASSERT_EQ(P().error, "") << GetParam().path;
  }
  const oar_device_api_t* D() const { return P().dev(); }
  std::string Dev(int i) const { return std::string(GetParam().name) + ":" + std::to_string(i); }

  void* Malloc(int32_t device, size_t size) {
    void* p = nullptr;
    const Result r = Take(D()->malloc(device, size, &p));
    EXPECT_TRUE(r.ok()) << r.message;
    return p;
  }
  oar_stream_t NewStream(int32_t device) {
    oar_stream_t s = nullptr;
    EXPECT_TRUE(Take(D()->stream_create(device, &s)).ok());
    return s;
  }
  oar_event_t NewEvent(int32_t device) {
    oar_event_t e = nullptr;
    EXPECT_TRUE(Take(D()->event_create(device, &e)).ok());
    return e;
  }
  /// out = a + b (float32, n elements) on `stream`.
  Result Add(int32_t device, oar_stream_t stream, void* a, void* b, void* out, int64_t n) {
    const auto k = P().Find("add", kAddF32);
    EXPECT_NE(k.fn, nullptr);
    Desc da(a, OAR_DTYPE_FLOAT32, {n}), db(b, OAR_DTYPE_FLOAT32, {n}), dout(out, OAR_DTYPE_FLOAT32, {n});
    Call call("add", device, stream, {&da, &db}, {&dout}, {}, k.kernel_data);
    return Take(k.fn(&call.c));
  }
  std::vector<float> Read(int32_t device, const void* src, size_t n) {
    std::vector<float> v(n);
    const Result r = Take(D()->memcpy_d2h(device, v.data(), src, n * sizeof(float)));
    EXPECT_TRUE(r.ok()) << r.message;
    return v;
  }
  void Write(int32_t device, void* dst, const std::vector<float>& v) {
    OAR_EXPECT_OK(D()->memcpy_h2d(device, dst, v.data(), v.size() * sizeof(float)));
  }
};

TEST_P(SimDevice, PublishesItsDeviceModel) {
  int32_t count = 0;
  OAR_ASSERT_OK(D()->device_count(&count));
  EXPECT_EQ(count, 2);
  for (int32_t d = 0; d < count; ++d) {
    const oar_attr_t* name = FindDeviceAttr(P(), d, OAR_DEVICE_ATTR_NAME);
    ASSERT_NE(name, nullptr);
    EXPECT_GT(name->v.s.size, 0u);
    ASSERT_NE(FindDeviceAttr(P(), d, OAR_DEVICE_ATTR_VENDOR), nullptr);
    EXPECT_EQ(FindDeviceAttr(P(), d, OAR_DEVICE_ATTR_TOTAL_MEMORY)->v.i, static_cast<int64_t>(kCapacity));
    EXPECT_GT(FindDeviceAttr(P(), d, OAR_DEVICE_ATTR_COMPUTE_UNITS)->v.i, 1);
    EXPECT_EQ(FindDeviceAttr(P(), d, OAR_DEVICE_ATTR_ALIGNMENT)->v.i, GetParam().alignment);
    EXPECT_FALSE(FindDeviceAttr(P(), d, OAR_DEVICE_ATTR_HOST_ACCESSIBLE)->v.b);
    EXPECT_GT(FindDeviceAttr(P(), d, "local_memory_per_unit")->v.i, 0);
    for (const char* key :
         {OAR_DEVICE_ATTR_PEAK_FLOPS_F32, "peak_flops_f16", "peak_flops_bf16", OAR_DEVICE_ATTR_MEMORY_BANDWIDTH}) {
      const oar_attr_t* a = FindDeviceAttr(P(), d, key);
      ASSERT_NE(a, nullptr) << key;
      EXPECT_EQ(a->type, OAR_ATTR_FLOAT) << key;
      EXPECT_GT(a->v.f, 1e9) << key;
    }
    const oar_attr_t* dtypes = FindDeviceAttr(P(), d, OAR_DEVICE_ATTR_DTYPES);
    ASSERT_EQ(dtypes->type, OAR_ATTR_INTS);
    const std::vector<int64_t> list(dtypes->v.ints.data, dtypes->v.ints.data + dtypes->v.ints.size);
    EXPECT_EQ(std::count(list.begin(), list.end(), OAR_DTYPE_FLOAT64), 0);
    EXPECT_EQ(std::count(list.begin(), list.end(), OAR_DTYPE_FLOAT32), 1);
  }
  const oar_attr_t* attrs = nullptr;
  int32_t n = 0;
  const Result r = Take(D()->device_attributes(2, &attrs, &n));
  EXPECT_EQ(r.code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(r.message.find("device 2 does not exist"), std::string::npos) << r.message;
}

// A device pointer is not a host address: reading it faults at once, at that very address.
TEST_P(SimDevice, HostDereferenceOfADevicePointerFaults) {
  void* p = Malloc(0, 4096);
  OAR_ASSERT_OK(D()->memset(0, p, 1, 4096));
  static void* expected = nullptr;
  expected = static_cast<char*>(p) + 100;
  const std::string outcome = RunInChild([]() -> std::string {
    struct sigaction sa {};
    sa.sa_flags = SA_SIGINFO;
    sa.sa_sigaction = [](int, siginfo_t* info, void*) { _exit(info->si_addr == expected ? 42 : 43); };
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    const volatile char* q = static_cast<const volatile char*>(expected);
    const char c = *q;
    return "reading the device pointer did not fault (read " + std::to_string(static_cast<int>(c)) + ")";
  });
  EXPECT_EQ(outcome, "child exited with 42");
  OAR_EXPECT_OK(D()->free(0, p));
}

TEST_P(SimDevice, CapacityAlignmentAndStatistics) {
  oar_memory_stats_t before{};
  before.struct_size = OAR_MEMORY_STATS_STRUCT_SIZE;
  OAR_ASSERT_OK(D()->memory_stats(1, &before));
  EXPECT_TRUE(before.bytes_limit_is_set && before.bytes_in_use_is_set && before.num_allocs_is_set &&
              before.peak_bytes_in_use_is_set);
  EXPECT_EQ(before.bytes_limit, kCapacity);

  std::vector<void*> blocks;
  for (size_t size : {size_t{0}, size_t{0}, size_t{1}, size_t{33}, size_t{1000}, size_t{4096}}) {
    blocks.push_back(Malloc(1, size));
    EXPECT_NE(blocks.back(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(blocks.back()) % static_cast<uintptr_t>(GetParam().alignment), 0u);
  }
  EXPECT_NE(blocks[0], blocks[1]);  // size 0: unique pointers
  oar_memory_stats_t during{};
  during.struct_size = OAR_MEMORY_STATS_STRUCT_SIZE;
  OAR_ASSERT_OK(D()->memory_stats(1, &during));
  EXPECT_EQ(during.bytes_in_use, before.bytes_in_use + 1 + 33 + 1000 + 4096);
  EXPECT_EQ(during.num_allocs, before.num_allocs + 6);

  // Exhaustion names the device, the request and what is free.
  void* huge = nullptr;
  const Result r = Take(D()->malloc(1, kCapacity + 1, &huge));
  EXPECT_EQ(r.code, OAR_STATUS_RESOURCE_EXHAUSTED);
  EXPECT_NE(r.message.find(Dev(1)), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("requested " + std::to_string(kCapacity + 1) + " bytes"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("bytes free"), std::string::npos) << r.message;
  // The capacity is really finite: 8 MiB blocks run out after at most 8.
  std::vector<void*> big;
  for (int i = 0; i < 20; ++i) {
    void* q = nullptr;
    const Result rr = Take(D()->malloc(1, 8 << 20, &q));
    if (!rr.ok()) {
      EXPECT_EQ(rr.code, OAR_STATUS_RESOURCE_EXHAUSTED);
      break;
    }
    big.push_back(q);
  }
  EXPECT_GE(big.size(), 6u);
  EXPECT_LE(big.size(), 8u);
  for (void* q : big) OAR_EXPECT_OK(D()->free(1, q));
  for (void* q : blocks) OAR_EXPECT_OK(D()->free(1, q));
  oar_memory_stats_t after{};
  after.struct_size = OAR_MEMORY_STATS_STRUCT_SIZE;
  OAR_ASSERT_OK(D()->memory_stats(1, &after));
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.num_allocs, before.num_allocs);
  EXPECT_GE(after.peak_bytes_in_use, 6u * (8u << 20));
}

TEST_P(SimDevice, InvalidPointersAreRefusedNotDereferenced) {
  void* a = Malloc(0, 256);
  void* b = Malloc(1, 256);
  std::vector<char> host(512);
  auto code = [](oar_status_t* s) { return Take(s).code; };
  EXPECT_EQ(code(D()->free(0, host.data())), OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(code(D()->free(0, static_cast<char*>(a) + 64)), OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(code(D()->free(1, a)), OAR_STATUS_INVALID_ARGUMENT);  // another device's pointer
  EXPECT_EQ(code(D()->memcpy_d2h(0, host.data(), host.data() + 256, 16)), OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(code(D()->memcpy_h2d(0, a, host.data(), 257)), OAR_STATUS_INVALID_ARGUMENT);  // past the block
  EXPECT_EQ(code(D()->memcpy_h2d(0, a, b, 16)), OAR_STATUS_INVALID_ARGUMENT);  // device pointer as host source
  EXPECT_EQ(code(D()->memcpy_d2h(0, host.data(), b, 16)), OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(code(D()->memset(1, a, 0, 16)), OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(code(D()->memcpy_p2p(0, b, 1, a, 16)), OAR_STATUS_INVALID_ARGUMENT);  // swapped devices
  const Result r = Take(D()->memcpy_d2h(0, host.data(), host.data(), 16));
  EXPECT_NE(r.message.find("is not a device address"), std::string::npos) << r.message;
  // A kernel whose operand is not device memory is refused at launch.
  oar_stream_t s = NewStream(0);
  const Result k = Add(0, s, a, host.data(), a, 16);
  EXPECT_EQ(k.code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(k.message.find("input 1"), std::string::npos) << k.message;
  OAR_EXPECT_OK(D()->stream_destroy(0, s));
  OAR_EXPECT_OK(D()->free(0, a));
  EXPECT_EQ(code(D()->free(0, a)), OAR_STATUS_INVALID_ARGUMENT);  // double free
  OAR_EXPECT_OK(D()->free(1, b));
  OAR_EXPECT_OK(D()->free(0, nullptr));
  int bogus = 0;
  EXPECT_EQ(code(D()->stream_synchronize(0, reinterpret_cast<oar_stream_t>(&bogus))), OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(code(D()->event_query(0, reinterpret_cast<oar_event_t>(&bogus), reinterpret_cast<bool*>(&bogus))),
            OAR_STATUS_INVALID_ARGUMENT);
}

TEST_P(SimDevice, SyncAndAsyncCopiesAndMemset) {
  const size_t n = 1000;
  void* a = Malloc(0, n * 4);
  void* b = Malloc(0, n * 4);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.5f;
  Write(0, a, v);
  OAR_ASSERT_OK(D()->memcpy_d2d(0, b, a, n * 4));
  EXPECT_EQ(Read(0, b, n), v);
  oar_stream_t s = NewStream(0);
  std::vector<float> back(n, -1);
  OAR_ASSERT_OK(D()->memset_async(0, s, b, 0, n * 4));
  OAR_ASSERT_OK(D()->memcpy_d2d_async(0, s, b, a, n * 2));
  OAR_ASSERT_OK(D()->memcpy_d2h_async(0, s, back.data(), b, n * 4));
  OAR_ASSERT_OK(D()->stream_synchronize(0, s));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], i < n / 2 ? v[i] : 0.0f) << i;
  OAR_EXPECT_OK(D()->memcpy_d2h(0, nullptr, nullptr, 0));  // size 0 touches nothing
  OAR_EXPECT_OK(D()->stream_destroy(0, s));
  OAR_EXPECT_OK(D()->free(0, a));
  OAR_EXPECT_OK(D()->free(0, b));
}

// Many small kernels and copies ping-pong between two streams, ordered only by events; with jitter a
// missing or broken wait would let a kernel read a stale buffer.
TEST_P(SimDevice, EventsOrderWorkAcrossStreamsUnderJitter) {
  const int64_t n = 257;
  const int steps = 60;
  void* one = Malloc(0, n * 4);
  void* x = Malloc(0, n * 4);
  void* y = Malloc(0, n * 4);
  Write(0, one, std::vector<float>(n, 1.0f));
  oar_stream_t s[2] = {NewStream(0), NewStream(0)};
  oar_event_t e[2] = {NewEvent(0), NewEvent(0)};
  std::vector<float> start(n);
  for (int64_t i = 0; i < n; ++i) start[i] = static_cast<float>(i);
  OAR_ASSERT_OK(D()->memcpy_h2d_async(0, s[0], x, start.data(), n * 4));
  OAR_ASSERT_OK(D()->event_record(0, e[0], s[0]));
  std::vector<std::vector<float>> snapshots(steps, std::vector<float>(n));
  for (int i = 0; i < steps; ++i) {
    const int cur = (i + 1) % 2, prev = i % 2;
    OAR_ASSERT_OK(D()->stream_wait_event(0, s[cur], e[prev]));
    void* src = i % 2 == 0 ? x : y;
    void* dst = i % 2 == 0 ? y : x;
    const Result r = Add(0, s[cur], src, one, dst, n);
    ASSERT_TRUE(r.ok()) << r.message;
    OAR_ASSERT_OK(D()->memcpy_d2h_async(0, s[cur], snapshots[i].data(), dst, n * 4));
    OAR_ASSERT_OK(D()->event_record(0, e[cur], s[cur]));
  }
  OAR_ASSERT_OK(D()->event_synchronize(0, e[(steps) % 2]));
  OAR_ASSERT_OK(D()->stream_synchronize(0, s[0]));
  OAR_ASSERT_OK(D()->stream_synchronize(0, s[1]));
  for (int i = 0; i < steps; ++i) {
    for (int64_t k = 0; k < n; k += 64) {
      ASSERT_EQ(snapshots[i][k], static_cast<float>(k + i + 1)) << "step " << i << " element " << k;
    }
  }
  for (int i = 0; i < 2; ++i) {
    OAR_EXPECT_OK(D()->event_destroy(0, e[i]));
    OAR_EXPECT_OK(D()->stream_destroy(0, s[i]));
  }
  for (void* p : {one, x, y}) OAR_EXPECT_OK(D()->free(0, p));
}

std::atomic<bool> g_gate{false};
void WaitForGate(void*) {
  while (!g_gate.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST_P(SimDevice, EventSemanticsNeverRecordedAndReRecorded) {
  oar_stream_t blocked = NewStream(0);
  oar_stream_t free_stream = NewStream(0);
  oar_event_t e = NewEvent(0);
  bool done = false, idle = true;
  OAR_ASSERT_OK(D()->event_query(0, e, &done));
  EXPECT_TRUE(done);  // never recorded: complete
  OAR_ASSERT_OK(D()->event_synchronize(0, e));
  OAR_ASSERT_OK(D()->stream_wait_event(0, free_stream, e));  // no-op

  g_gate = false;
  OAR_ASSERT_OK(D()->stream_add_callback(0, blocked, WaitForGate, nullptr));
  OAR_ASSERT_OK(D()->event_record(0, e, blocked));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  OAR_ASSERT_OK(D()->event_query(0, e, &done));
  EXPECT_FALSE(done);
  OAR_ASSERT_OK(D()->stream_query(0, blocked, &idle));
  EXPECT_FALSE(idle);
  // Re-recording on an idle stream replaces the capture: the event completes without the blocked one.
  OAR_ASSERT_OK(D()->event_record(0, e, free_stream));
  OAR_ASSERT_OK(D()->event_synchronize(0, e));
  OAR_ASSERT_OK(D()->event_query(0, e, &done));
  EXPECT_TRUE(done);
  OAR_ASSERT_OK(D()->stream_query(0, blocked, &idle));
  EXPECT_FALSE(idle);
  // A stream waiting on a capture of the blocked stream stays blocked until it is released.
  oar_event_t f = NewEvent(0);
  OAR_ASSERT_OK(D()->event_record(0, f, blocked));
  OAR_ASSERT_OK(D()->stream_wait_event(0, free_stream, f));
  int marker = 0;
  OAR_ASSERT_OK(D()->stream_add_callback(
      0, free_stream, [](void* m) { *static_cast<int*>(m) = 1; }, &marker));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  OAR_ASSERT_OK(D()->stream_query(0, free_stream, &idle));
  EXPECT_FALSE(idle);
  g_gate = true;
  OAR_ASSERT_OK(D()->stream_synchronize(0, free_stream));
  EXPECT_EQ(marker, 1);
  OAR_ASSERT_OK(D()->stream_query(0, blocked, &idle));
  OAR_ASSERT_OK(D()->stream_synchronize(0, blocked));
  for (oar_event_t ev : {e, f}) OAR_EXPECT_OK(D()->event_destroy(0, ev));
  OAR_EXPECT_OK(D()->stream_destroy(0, blocked));
  OAR_EXPECT_OK(D()->stream_destroy(0, free_stream));
}

TEST_P(SimDevice, CallbacksRunInStreamOrderOnAWorkerThread) {
  oar_stream_t s = NewStream(1);
  void* buf = Malloc(1, 64 * 4);
  struct Log {
    std::mutex mu;
    std::vector<int> order;
    std::thread::id thread;
  } log;
  struct Item {
    Log* log;
    int index;
  };
  std::vector<Item> items;
  for (int i = 0; i < 100; ++i) items.push_back({&log, i});
  std::vector<float> value(64, 3.0f);
  for (int i = 0; i < 100; ++i) {
    if (i % 10 == 0) OAR_ASSERT_OK(D()->memcpy_h2d_async(1, s, buf, value.data(), 64 * 4));
    OAR_ASSERT_OK(D()->stream_add_callback(
        1, s,
        [](void* p) {
          auto* item = static_cast<Item*>(p);
          std::lock_guard<std::mutex> lock(item->log->mu);
          item->log->order.push_back(item->index);
          item->log->thread = std::this_thread::get_id();
        },
        &items[static_cast<size_t>(i)]));
  }
  OAR_ASSERT_OK(D()->stream_synchronize(1, s));
  std::vector<int> expected(100);
  for (int i = 0; i < 100; ++i) expected[static_cast<size_t>(i)] = i;
  EXPECT_EQ(log.order, expected);
  EXPECT_NE(log.thread, std::this_thread::get_id());
  EXPECT_EQ(Take(D()->stream_add_callback(1, s, nullptr, nullptr)).code, OAR_STATUS_INVALID_ARGUMENT);
  OAR_EXPECT_OK(D()->stream_destroy(1, s));
  OAR_EXPECT_OK(D()->free(1, buf));
}

// A synchronous copy is ordered after everything queued on every stream of the device.
TEST_P(SimDevice, SynchronousCopiesWaitForEveryStream) {
  const size_t n = 4096;
  void* buf = Malloc(0, n);
  OAR_ASSERT_OK(D()->memset(0, buf, 0, n));
  oar_stream_t s = NewStream(0);
  g_gate = false;
  OAR_ASSERT_OK(D()->stream_add_callback(0, s, WaitForGate, nullptr));
  OAR_ASSERT_OK(D()->memset_async(0, s, buf, 7, n));
  std::thread release([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    g_gate = true;
  });
  std::vector<uint8_t> host(n, 0);
  OAR_ASSERT_OK(D()->memcpy_d2h(0, host.data(), buf, n));
  release.join();
  EXPECT_EQ(std::count(host.begin(), host.end(), 7), static_cast<long>(n));
  OAR_EXPECT_OK(D()->stream_destroy(0, s));
  OAR_EXPECT_OK(D()->free(0, buf));
}

TEST_P(SimDevice, PeerCopiesBetweenDevices) {
  const size_t n = 3000;
  void* a = Malloc(0, n * 4);
  void* b = Malloc(1, n * 4);
  void* c = Malloc(0, n * 4);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<float>(i));
  Write(0, a, v);
  OAR_ASSERT_OK(D()->memcpy_p2p(1, b, 0, a, n * 4));
  EXPECT_EQ(Read(1, b, n), v);
  oar_stream_t s = NewStream(1);
  OAR_ASSERT_OK(D()->memcpy_p2p_async(0, c, 1, b, n * 4, s));  // enqueued on the source device's stream
  OAR_ASSERT_OK(D()->stream_synchronize(1, s));
  EXPECT_EQ(Read(0, c, n), v);
  OAR_EXPECT_OK(D()->stream_destroy(1, s));
  OAR_EXPECT_OK(D()->free(0, a));
  OAR_EXPECT_OK(D()->free(1, b));
  OAR_EXPECT_OK(D()->free(0, c));
}

struct Activity {
  std::string name;
  int32_t kind;
  int32_t device;
  uint64_t start, end, bytes;
  double flops;
  bool simulated;
};
void Collect(void* context, const oar_activity_t* a) {
  static_cast<std::vector<Activity>*>(context)->push_back(
      {a->name, a->kind, a->device, a->start_ns, a->end_ns, a->bytes, a->flops, a->simulated});
}

TEST_P(SimDevice, ProfilerReportsSimulatedRooflineTimes) {
  const oar_profiler_api_t* prof = P().api->profiler;
  ASSERT_NE(prof, nullptr);
  const int64_t small = 1024, large = 1 << 20;
  void* a = Malloc(0, large * 4);
  void* b = Malloc(0, large * 4);
  void* c = Malloc(0, large * 4);
  oar_stream_t s = NewStream(0);
  std::vector<float> host(large, 1.0f);
  OAR_ASSERT_OK(prof->start(0));
  OAR_ASSERT_OK(D()->memcpy_h2d(0, a, host.data(), large * 4));
  ASSERT_TRUE(Add(0, s, a, a, b, small).ok());
  ASSERT_TRUE(Add(0, s, a, a, c, large).ok());
  OAR_ASSERT_OK(D()->stream_synchronize(0, s));
  OAR_ASSERT_OK(prof->stop(0));
  ASSERT_TRUE(Add(0, s, a, a, b, small).ok());  // not recorded: stopped
  OAR_ASSERT_OK(D()->stream_synchronize(0, s));
  std::vector<Activity> records;
  OAR_ASSERT_OK(prof->flush(0, Collect, &records));
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].name, "h2d");
  EXPECT_EQ(records[0].kind, OAR_ACTIVITY_COPY);
  EXPECT_EQ(records[0].bytes, static_cast<uint64_t>(large * 4));
  for (const Activity& r : records) {
    EXPECT_TRUE(r.simulated);
    EXPECT_EQ(r.device, 0);
    EXPECT_GT(r.end, r.start);
  }
  EXPECT_EQ(records[1].name, "add");
  EXPECT_EQ(records[1].kind, OAR_ACTIVITY_KERNEL);
  EXPECT_DOUBLE_EQ(records[2].flops, static_cast<double>(large));
  EXPECT_EQ(records[2].bytes, static_cast<uint64_t>(3 * large * 4));
  // A 1024x larger add takes longer on the model (launch overhead dominates the small one), but less
  // than the data ratio.
  const double t_small = static_cast<double>(records[1].end - records[1].start);
  const double t_large = static_cast<double>(records[2].end - records[2].start);
  EXPECT_GT(t_large, 2 * t_small);
  EXPECT_LT(t_large, 1024 * t_small);
  // The large add moves 12 MiB: at the published bandwidth that is the floor of its duration.
  const double bandwidth = FindDeviceAttr(P(), 0, OAR_DEVICE_ATTR_MEMORY_BANDWIDTH)->v.f;
  EXPECT_GE(t_large, 3.0 * large * 4 / bandwidth * 1e9 * 0.99);
  // Stream order: the kernels start after the copy ended on the simulated clock.
  EXPECT_GE(records[1].start, records[0].end);
  records.clear();
  OAR_ASSERT_OK(prof->flush(0, Collect, &records));
  EXPECT_TRUE(records.empty());
  OAR_EXPECT_OK(D()->stream_destroy(0, s));
  for (void* p : {a, b, c}) OAR_EXPECT_OK(D()->free(0, p));
}

// ---- collectives ---------------------------------------------------------------------------------------

/// Values of rank r, element i, for a dtype (small integers so every dtype represents them exactly).
double Value(int r, size_t i, int32_t dtype) {
  const double v = static_cast<double>((static_cast<int>(i) * 7 + r * 3) % 11) - 4;
  return dtype == OAR_DTYPE_INT32 || dtype == OAR_DTYPE_INT64 ? v : v * 0.5;
}

void Store(int32_t dtype, double v, std::vector<char>* buf, size_t i) {
  sdk::VisitDType(dtype, [&](auto t) {
    using T = decltype(t);
    const T x = static_cast<T>(static_cast<float>(v));
    std::memcpy(buf->data() + i * sizeof(T), &x, sizeof(T));
  });
}
double LoadValue(int32_t dtype, const std::vector<char>& buf, size_t i) {
  double out = 0;
  sdk::VisitDType(dtype, [&](auto t) {
    using T = decltype(t);
    T x;
    std::memcpy(&x, buf.data() + i * sizeof(T), sizeof(T));
    out = static_cast<double>(static_cast<float>(x));
  });
  return out;
}

double Reduce(double a, double b, int32_t op) {
  switch (op) {
    case OAR_REDUCE_PROD:
      return a * b;
    case OAR_REDUCE_MAX:
      return std::max(a, b);
    case OAR_REDUCE_MIN:
      return std::min(a, b);
    default:
      return a + b;
  }
}

TEST_P(SimDevice, CollectivesMatchHostComputedResults) {
  const oar_ccl_api_t* ccl = P().api->ccl;
  ASSERT_NE(ccl, nullptr);
  const int nranks = 2;
  oar_ccl_unique_id_t id;
  OAR_ASSERT_OK(ccl->get_unique_id(&id));
  oar_ccl_comm_t comms[2] = {};
  OAR_ASSERT_OK(ccl->group_start());  // one thread initialises every rank
  for (int r = 0; r < nranks; ++r) OAR_ASSERT_OK(ccl->comm_init_rank(r, nranks, &id, r, nullptr, &comms[r]));
  OAR_ASSERT_OK(ccl->group_end());
  oar_stream_t streams[2] = {NewStream(0), NewStream(1)};
  const size_t count = 37;
  for (int32_t dtype : {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT16, OAR_DTYPE_BFLOAT16, OAR_DTYPE_INT32, OAR_DTYPE_INT64}) {
    const size_t es = sdk::DTypeSize(dtype);
    void* send[2];
    void* recv[2];
    std::vector<char> host[2];
    for (int r = 0; r < nranks; ++r) {
      send[r] = Malloc(r, count * nranks * es);
      recv[r] = Malloc(r, count * nranks * es);
      host[r].resize(count * nranks * es);
      for (size_t i = 0; i < count * nranks; ++i) Store(dtype, Value(r, i, dtype), &host[r], i);
      OAR_ASSERT_OK(D()->memcpy_h2d(r, send[r], host[r].data(), host[r].size()));
    }
    auto read = [&](int r, size_t n) {
      std::vector<char> out(n * es);
      EXPECT_TRUE(Take(D()->memcpy_d2h(r, out.data(), recv[r], out.size())).ok());
      return out;
    };
    auto sync = [&] {
      for (int r = 0; r < nranks; ++r) OAR_EXPECT_OK(D()->stream_synchronize(r, streams[r]));
    };
    for (int32_t op : {OAR_REDUCE_SUM, OAR_REDUCE_PROD, OAR_REDUCE_MAX, OAR_REDUCE_MIN, OAR_REDUCE_AVG}) {
      OAR_ASSERT_OK(ccl->group_start());
      for (int r = 0; r < nranks; ++r) {
        OAR_ASSERT_OK(ccl->all_reduce(send[r], recv[r], count, dtype, op, comms[r], streams[r]));
      }
      OAR_ASSERT_OK(ccl->group_end());
      sync();
      for (int r = 0; r < nranks; ++r) {
        const std::vector<char> got = read(r, count);
        for (size_t i = 0; i < count; ++i) {
          double want = Reduce(Value(0, i, dtype), Value(1, i, dtype), op);
          if (op == OAR_REDUCE_AVG)
            want = dtype == OAR_DTYPE_INT32 || dtype == OAR_DTYPE_INT64 ? std::trunc(want / 2) : want / 2;
          ASSERT_EQ(LoadValue(dtype, got, i), want) << "dtype " << dtype << " op " << op << " rank " << r << " i " << i;
        }
      }
    }
    // broadcast from rank 1, reduce (max) to rank 0, all_gather, reduce_scatter (sum), all_to_all.
    OAR_ASSERT_OK(ccl->group_start());
    for (int r = 0; r < nranks; ++r)
      OAR_ASSERT_OK(ccl->broadcast(send[r], recv[r], count, dtype, 1, comms[r], streams[r]));
    OAR_ASSERT_OK(ccl->group_end());
    sync();
    for (int r = 0; r < nranks; ++r) {
      const auto got = read(r, count);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(LoadValue(dtype, got, i), Value(1, i, dtype));
    }
    OAR_ASSERT_OK(ccl->group_start());
    for (int r = 0; r < nranks; ++r) {
      OAR_ASSERT_OK(ccl->reduce(send[r], recv[r], count, dtype, OAR_REDUCE_MAX, 0, comms[r], streams[r]));
    }
    OAR_ASSERT_OK(ccl->group_end());
    sync();
    {
      const auto got = read(0, count);
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(LoadValue(dtype, got, i), std::max(Value(0, i, dtype), Value(1, i, dtype)));
    }
    OAR_ASSERT_OK(ccl->group_start());
    for (int r = 0; r < nranks; ++r)
      OAR_ASSERT_OK(ccl->all_gather(send[r], recv[r], count, dtype, comms[r], streams[r]));
    OAR_ASSERT_OK(ccl->group_end());
    sync();
    for (int r = 0; r < nranks; ++r) {
      const auto got = read(r, count * nranks);
      for (size_t i = 0; i < count * nranks; ++i)
        ASSERT_EQ(LoadValue(dtype, got, i), Value(static_cast<int>(i / count), i % count, dtype));
    }
    OAR_ASSERT_OK(ccl->group_start());
    for (int r = 0; r < nranks; ++r) {
      OAR_ASSERT_OK(ccl->reduce_scatter(send[r], recv[r], count, dtype, OAR_REDUCE_SUM, comms[r], streams[r]));
    }
    OAR_ASSERT_OK(ccl->group_end());
    sync();
    for (int r = 0; r < nranks; ++r) {
      const auto got = read(r, count);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(LoadValue(dtype, got, i), Value(0, r * count + i, dtype) + Value(1, r * count + i, dtype));
      }
    }
    OAR_ASSERT_OK(ccl->group_start());
    for (int r = 0; r < nranks; ++r)
      OAR_ASSERT_OK(ccl->all_to_all(send[r], recv[r], count, dtype, comms[r], streams[r]));
    OAR_ASSERT_OK(ccl->group_end());
    sync();
    for (int r = 0; r < nranks; ++r) {
      const auto got = read(r, count * nranks);
      for (size_t s = 0; s < static_cast<size_t>(nranks); ++s) {
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(LoadValue(dtype, got, s * count + i), Value(static_cast<int>(s), r * count + i, dtype));
        }
      }
    }
    // send/recv both ways in one group (each rank sends before it receives: no deadlock).
    OAR_ASSERT_OK(ccl->group_start());
    for (int r = 0; r < nranks; ++r) {
      OAR_ASSERT_OK(ccl->recv(recv[r], count, dtype, 1 - r, comms[r], streams[r]));
      OAR_ASSERT_OK(ccl->send(send[r], count, dtype, 1 - r, comms[r], streams[r]));
    }
    OAR_ASSERT_OK(ccl->group_end());
    sync();
    for (int r = 0; r < nranks; ++r) {
      const auto got = read(r, count);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(LoadValue(dtype, got, i), Value(1 - r, i, dtype));
    }
    // In place: send == recv.
    OAR_ASSERT_OK(ccl->group_start());
    for (int r = 0; r < nranks; ++r) {
      OAR_ASSERT_OK(ccl->all_reduce(send[r], send[r], count, dtype, OAR_REDUCE_SUM, comms[r], streams[r]));
    }
    OAR_ASSERT_OK(ccl->group_end());
    sync();
    for (int r = 0; r < nranks; ++r) {
      std::vector<char> got(count * es);
      OAR_ASSERT_OK(D()->memcpy_d2h(r, got.data(), send[r], got.size()));
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(LoadValue(dtype, got, i), Value(0, i, dtype) + Value(1, i, dtype));
    }
    for (int r = 0; r < nranks; ++r) {
      OAR_EXPECT_OK(D()->free(r, send[r]));
      OAR_EXPECT_OK(D()->free(r, recv[r]));
    }
  }
  void* f64 = Malloc(0, 64);
  EXPECT_EQ(Take(ccl->all_reduce(f64, f64, 4, OAR_DTYPE_FLOAT64, OAR_REDUCE_SUM, comms[0], streams[0])).code,
            OAR_STATUS_UNIMPLEMENTED);
  OAR_EXPECT_OK(D()->free(0, f64));
  for (int r = 0; r < nranks; ++r) {
    OAR_EXPECT_OK(ccl->comm_destroy(comms[r]));
    OAR_EXPECT_OK(D()->stream_destroy(r, streams[r]));
  }
  EXPECT_EQ(Take(ccl->comm_destroy(comms[0])).code, OAR_STATUS_INVALID_ARGUMENT);
}

// Ranks initialised from their own threads (no group): comm_init_rank blocks until all have joined.
TEST_P(SimDevice, CommInitFromOneThreadPerRank) {
  const oar_ccl_api_t* ccl = P().api->ccl;
  oar_ccl_unique_id_t id;
  OAR_ASSERT_OK(ccl->get_unique_id(&id));
  oar_ccl_comm_t comms[2] = {};
  Result results[2];
  std::thread t([&] { results[1] = Take(ccl->comm_init_rank(1, 2, &id, 1, nullptr, &comms[1])); });
  results[0] = Take(ccl->comm_init_rank(0, 2, &id, 0, nullptr, &comms[0]));
  t.join();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(results[r].ok()) << results[r].message;
  oar_stream_t streams[2] = {NewStream(0), NewStream(1)};
  void* buf[2] = {Malloc(0, 16), Malloc(1, 16)};
  const std::vector<float> v0 = {1, 2, 3, 4}, v1 = {10, 20, 30, 40};
  Write(0, buf[0], v0);
  Write(1, buf[1], v1);
  std::thread t2([&] {
    results[1] = Take(ccl->all_reduce(buf[1], buf[1], 4, OAR_DTYPE_FLOAT32, OAR_REDUCE_SUM, comms[1], streams[1]));
  });
  results[0] = Take(ccl->all_reduce(buf[0], buf[0], 4, OAR_DTYPE_FLOAT32, OAR_REDUCE_SUM, comms[0], streams[0]));
  t2.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].message;
    OAR_ASSERT_OK(D()->stream_synchronize(r, streams[r]));
    EXPECT_EQ(Read(r, buf[r], 4), (std::vector<float>{11, 22, 33, 44}));
  }
  for (int r = 0; r < 2; ++r) {
    OAR_EXPECT_OK(ccl->comm_destroy(comms[r]));
    OAR_EXPECT_OK(D()->stream_destroy(r, streams[r]));
    OAR_EXPECT_OK(D()->free(r, buf[r]));
  }
}

INSTANTIATE_TEST_SUITE_P(Simulators, SimDevice,
                         ::testing::Values(SimParam{"kunlun_sim", OAR_KUNLUN_PLUGIN, 64},
                                           SimParam{"ascend_sim", OAR_ASCEND_PLUGIN, 32}),
                         [](const ::testing::TestParamInfo<SimParam>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace oar::simtest
