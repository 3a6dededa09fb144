// Fault injection (OAR_SIM_FAULTS) and configuration errors of both simulators, through the ABI only.
// The environment is read at initialize, so every scenario runs in a forked child that sets it, loads
// the plugin fresh and reports what it saw; this (parent) process never loads a plugin itself.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "plugins/common/sim/sim_test_util.h"

namespace oar::simtest {
namespace {

const std::vector<int32_t> kAddF32 = {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32};

struct SimParam {
  const char* name;
  const char* path;
  const char* env_prefix;
};

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// A scenario's view of one loaded plugin.
struct Scenario {
  Plugin p;
  Checker check;
  std::string name;

  const oar_device_api_t* D() const { return p.dev(); }
  std::string Dev(int i) const { return name + ":" + std::to_string(i); }
  void* Malloc(int32_t device, size_t size) {
    void* ptr = nullptr;
    const Result r = Take(D()->malloc(device, size, &ptr));
    check(r.ok(), "malloc failed: " + r.message);
    return ptr;
  }
  oar_stream_t NewStream(int32_t device) {
    oar_stream_t s = nullptr;
    check(Take(D()->stream_create(device, &s)).ok(), "stream_create failed");
    return s;
  }
  Result Add(int32_t device, oar_stream_t stream, void* a, void* b, void* out, int64_t n) {
    const auto k = p.Find("add", kAddF32);
    Desc da(a, OAR_DTYPE_FLOAT32, {n}), db(b, OAR_DTYPE_FLOAT32, {n}), dout(out, OAR_DTYPE_FLOAT32, {n});
    Call call("add", device, stream, {&da, &db}, {&dout}, {}, k.kernel_data);
    return Take(k.fn(&call.c));
  }
  void Write(int32_t device, void* dst, const std::vector<float>& v) {
    const Result r = Take(D()->memcpy_h2d(device, dst, v.data(), v.size() * 4));
    check(r.ok(), "memcpy_h2d failed: " + r.message);
  }
  std::vector<float> Read(int32_t device, const void* src, size_t n) {
    std::vector<float> v(n);
    const Result r = Take(D()->memcpy_d2h(device, v.data(), src, n * 4));
    check(r.ok(), "memcpy_d2h failed: " + r.message);
    return v;
  }
  /// `r` failed with `code` and its message mentions every part.
  void Expect(const Result& r, int32_t code, const std::vector<std::string>& parts, const std::string& what) {
    check(r.code == code, what + ": expected code " + std::to_string(code) + ", got " + std::to_string(r.code) + " (" +
                              r.message + ")");
    for (const std::string& part : parts)
      check(Contains(r.message, part), what + ": message lacks '" + part + "': " + r.message);
  }
};

class SimFaults : public ::testing::TestWithParam<SimParam> {
 protected:
  /// Run `body` in a child with OAR_SIM_FAULTS=faults (plus `extra` variables) and a fresh plugin.
  std::string InChild(const std::string& faults, const std::function<void(Scenario&)>& body,
                      const std::vector<std::pair<std::string, std::string>>& extra = {}) {
    const SimParam param = GetParam();
    return RunInChild([&]() -> std::string {
      setenv("OAR_SIM_FAULTS", faults.c_str(), 1);
      unsetenv("OAR_SIM_JITTER");
      for (const auto& [k, v] : extra) setenv(k.c_str(), v.c_str(), 1);
      Scenario s;
      s.name = param.name;
      s.p = Load(param.path);
      if (!s.p.error.empty()) return "load failed: " + s.p.error;
      body(s);
      return s.check.failures();
    });
  }
  std::string Var(const char* suffix) const { return std::string(GetParam().env_prefix) + suffix; }
};

TEST_P(SimFaults, AllocFailsTheNthAllocationOnceWithResourceExhausted) {
  EXPECT_EQ(InChild("alloc:after=2,device=0",
                    [](Scenario& s) {
                      void* a = s.Malloc(0, 100);
                      void* b = s.Malloc(0, 100);
                      void* c = s.Malloc(1, 100);  // another device: not counted
                      void* x = nullptr;
                      s.Expect(Take(s.D()->malloc(0, 100, &x)), OAR_STATUS_RESOURCE_EXHAUSTED,
                               {s.Dev(0), "requested 100 bytes", "alloc:after=2", "OAR_SIM_FAULTS"}, "third malloc");
                      s.check(x == nullptr, "a failed malloc returned a pointer");
                      oar_memory_stats_t st{};
                      st.struct_size = OAR_MEMORY_STATS_STRUCT_SIZE;
                      s.check(Take(s.D()->memory_stats(0, &st)).ok() && st.num_allocs == 2 && st.bytes_in_use == 200,
                              "the failed allocation changed the statistics");
                      void* d = s.Malloc(0, 100);  // count=1: the next one works (the core's retry path)
                      for (void* p : {a, b, d}) s.check(Take(s.D()->free(0, p)).ok(), "free failed");
                      s.check(Take(s.D()->free(1, c)).ok(), "free failed");
                    }),
            "");
}

TEST_P(SimFaults, AsyncLaunchFaultIsStickyUntilTheNextStreamSynchronize) {
  EXPECT_EQ(InChild("launch:op=add,after=1",
                    [](Scenario& s) {
                      const int64_t n = 100;
                      void* a = s.Malloc(0, n * 4);
                      void* out1 = s.Malloc(0, n * 4);
                      void* out2 = s.Malloc(0, n * 4);
                      void* out3 = s.Malloc(0, n * 4);
                      void* other = s.Malloc(0, n * 4);
                      s.Write(0, a, std::vector<float>(n, 2.0f));
                      s.Write(0, out2, std::vector<float>(n, -1.0f));
                      oar_stream_t st = s.NewStream(0);
                      oar_event_t ev = nullptr;
                      s.check(Take(s.D()->event_create(0, &ev)).ok(), "event_create");
                      s.check(s.Add(0, st, a, a, out1, n).ok(), "first add");
                      s.check(s.Add(0, st, a, a, out2, n).ok(),
                              "the faulty launch must return OK (it fails on the stream)");
                      s.check(Take(s.D()->event_record(0, ev, st)).ok(), "event_record");
                      s.check(Take(s.D()->memset_async(0, st, other, 0x3f, n * 4)).ok(), "memset_async");
                      s.Expect(Take(s.D()->stream_synchronize(0, st)), OAR_STATUS_INTERNAL,
                               {s.Dev(0), "'add'", "launch:op=add,after=1", "asynchronously"}, "stream_synchronize");
                      s.Expect(Take(s.D()->event_synchronize(0, ev)), OAR_STATUS_INTERNAL, {"launch:op=add,after=1"},
                               "event recorded after the failure");
                      s.check(Take(s.D()->stream_synchronize(0, st)).ok(), "the error must be reported once");
                      s.check(s.Add(0, st, a, a, out3, n).ok(), "third add");
                      s.check(Take(s.D()->stream_synchronize(0, st)).ok(), "sync after third add");
                      s.check(s.Read(0, out1, n) == std::vector<float>(n, 4.0f), "first result corrupted");
                      s.check(s.Read(0, out3, n) == std::vector<float>(n, 4.0f), "third result wrong");
                      s.check(s.Read(0, out2, n) == std::vector<float>(n, -1.0f), "the failed kernel wrote its output");
                      std::vector<uint8_t> bytes(n * 4);
                      s.check(Take(s.D()->memcpy_d2h(0, bytes.data(), other, n * 4)).ok(), "d2h");
                      s.check(bytes == std::vector<uint8_t>(n * 4, 0x3f), "work after the failure did not run");
                      s.check(Take(s.D()->event_destroy(0, ev)).ok(), "event_destroy");
                      s.check(Take(s.D()->stream_destroy(0, st)).ok(), "stream_destroy");
                      for (void* p : {a, out1, out2, out3, other}) s.check(Take(s.D()->free(0, p)).ok(), "free");
                    }),
            "");
}

TEST_P(SimFaults, AsyncLaunchFaultSurfacesAtTheNextSynchronousCopy) {
  EXPECT_EQ(InChild("launch",
                    [](Scenario& s) {
                      void* a = s.Malloc(1, 64);
                      oar_stream_t st = s.NewStream(1);
                      s.check(s.Add(1, st, a, a, a, 0).ok(), "launch");  // empty: still a launch
                      std::vector<float> host(16);
                      s.Expect(Take(s.D()->memcpy_d2h(1, host.data(), a, 64)), OAR_STATUS_INTERNAL, {s.Dev(1), "'add'"},
                               "sync copy after the failure");
                      s.check(Take(s.D()->memcpy_d2h(1, host.data(), a, 64)).ok(), "the next copy works");
                      s.check(Take(s.D()->stream_destroy(1, st)).ok(), "stream_destroy");
                      s.check(Take(s.D()->free(1, a)).ok(), "free");
                    }),
            "");
}

TEST_P(SimFaults, SyncLaunchFaultFailsTheLaunchItself) {
  EXPECT_EQ(
      InChild(
          "launch:op=add,mode=sync",
          [](Scenario& s) {
            void* a = s.Malloc(0, 64);
            oar_stream_t st = s.NewStream(0);
            s.Expect(s.Add(0, st, a, a, a, 16), OAR_STATUS_INTERNAL, {s.Dev(0), "kernel 'add'", "mode=sync"}, "launch");
            s.check(Take(s.D()->stream_synchronize(0, st)).ok(), "nothing left on the stream");
            s.check(Take(s.D()->stream_destroy(0, st)).ok(), "stream_destroy");
            s.check(Take(s.D()->free(0, a)).ok(), "free");
          }),
      "");
}

TEST_P(SimFaults, CopyFaultsFailWithDataLossOrInternal) {
  EXPECT_EQ(
      InChild(
          "copy:dir=h2d,after=1;copy:dir=d2h,code=internal",
          [](Scenario& s) {
            void* a = s.Malloc(0, 64);
            std::vector<float> v(16, 1.0f);
            s.check(Take(s.D()->memcpy_h2d(0, a, v.data(), 64)).ok(), "first h2d");
            s.Expect(Take(s.D()->memcpy_h2d(0, a, v.data(), 64)), OAR_STATUS_DATA_LOSS,
                     {s.Dev(0), "h2d copy of 64 bytes"}, "second h2d");
            s.check(Take(s.D()->memcpy_h2d(0, a, v.data(), 64)).ok(), "third h2d");
            s.Expect(Take(s.D()->memcpy_d2h(0, v.data(), a, 64)), OAR_STATUS_INTERNAL, {"d2h", "code=internal"}, "d2h");
            s.check(Take(s.D()->free(0, a)).ok(), "free");
          }),
      "");
  EXPECT_EQ(InChild("copy:dir=h2d",
                    [](Scenario& s) {
                      void* a = s.Malloc(0, 64);
                      oar_stream_t st = s.NewStream(0);
                      std::vector<float> v(16, 1.0f);
                      s.check(Take(s.D()->memcpy_h2d_async(0, st, a, v.data(), 64)).ok(), "async h2d is enqueued");
                      s.Expect(Take(s.D()->stream_synchronize(0, st)), OAR_STATUS_DATA_LOSS, {"'h2d'", "copy:dir=h2d"},
                               "stream_synchronize");
                      s.check(Take(s.D()->stream_destroy(0, st)).ok(), "stream_destroy");
                      s.check(Take(s.D()->free(0, a)).ok(), "free");
                    }),
            "");
}

TEST_P(SimFaults, CopyFaultRatesAreDeterministicBySeed) {
  auto pattern = [&](const char* spec) {
    return InChild(spec, [](Scenario& s) {
      void* a = s.Malloc(0, 64);
      std::vector<float> v(16, 1.0f);
      std::string p = "pattern ";
      for (int i = 0; i < 60; ++i) p += Take(s.D()->memcpy_h2d(0, a, v.data(), 64)).ok() ? '.' : 'x';
      s.check(false, p);  // report it
    });
  };
  const std::string a = pattern("copy:rate=0.3,seed=11");
  EXPECT_TRUE(Contains(a, "pattern ")) << a;
  EXPECT_TRUE(Contains(a, "x")) << a;
  EXPECT_TRUE(Contains(a, ".")) << a;
  EXPECT_EQ(a, pattern("copy:rate=0.3,seed=11"));
  EXPECT_NE(a, pattern("copy:rate=0.3,seed=12"));
}

std::atomic<bool> g_gate{false};

TEST_P(SimFaults, LostDeviceFailsEveryLaterCallWithoutLeaksOrHangs) {
  EXPECT_EQ(
      InChild("device_lost:after=5,device=0",
              [](Scenario& s) {
                void* a = s.Malloc(0, 64);  // 1
                void* b = s.Malloc(0, 64);  // 2
                oar_stream_t st = s.NewStream(0);
                std::vector<float> v(16, 1.0f);
                s.Write(0, a, v);  // 3
                g_gate = false;
                s.check(Take(s.D()->stream_add_callback(
                                 0, st,
                                 [](void*) {
                                   while (!g_gate) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                                 },
                                 nullptr))
                            .ok(),
                        "callback");
                s.check(s.Add(0, st, a, a, b, 16).ok(), "launch before the loss");  // 4
                bool ran = false;
                s.check(Take(s.D()->stream_add_callback(
                                 0, st, [](void* r) { *static_cast<bool*>(r) = true; }, &ran))
                            .ok(),
                        "callback before the loss");
                s.check(Take(s.D()->memset_async(0, st, a, 0, 4)).ok(), "memset_async before the loss");  // 5
                void* x = nullptr;
                const std::vector<std::string> lost = {s.Dev(0), "device lost", "device_lost:after=5"};
                s.Expect(Take(s.D()->malloc(0, 64, &x)), OAR_STATUS_UNAVAILABLE, {s.Dev(0), "device lost", "'malloc'"},
                         "malloc");
                g_gate = true;  // the queued kernel and memset now run on a lost device: they fail, nothing hangs
                s.Expect(Take(s.D()->memcpy_d2h(0, v.data(), a, 64)), OAR_STATUS_UNAVAILABLE, lost, "d2h");
                s.Expect(Take(s.D()->memcpy_h2d_async(0, st, a, v.data(), 64)), OAR_STATUS_UNAVAILABLE, lost,
                         "h2d async");
                s.Expect(s.Add(0, st, a, a, b, 16), OAR_STATUS_UNAVAILABLE, lost, "launch");
                s.Expect(Take(s.D()->stream_synchronize(0, st)), OAR_STATUS_UNAVAILABLE, lost, "stream_synchronize");
                s.Expect(Take(s.D()->device_synchronize(0)), OAR_STATUS_UNAVAILABLE, lost, "device_synchronize");
                oar_event_t ev = nullptr;
                s.Expect(Take(s.D()->event_create(0, &ev)), OAR_STATUS_UNAVAILABLE, lost, "event_create");
                // Releasing still releases: nothing leaks, nothing hangs.
                s.Expect(Take(s.D()->stream_destroy(0, st)), OAR_STATUS_UNAVAILABLE, lost, "stream_destroy");
                s.check(ran, "a callback queued before the loss did not run");
                s.Expect(Take(s.D()->free(0, a)), OAR_STATUS_UNAVAILABLE, lost, "free");
                s.Expect(Take(s.D()->free(0, b)), OAR_STATUS_UNAVAILABLE, lost, "free");
                oar_memory_stats_t stats{};
                stats.struct_size = OAR_MEMORY_STATS_STRUCT_SIZE;
                s.check(Take(s.D()->memory_stats(0, &stats)).ok() && stats.num_allocs == 0 && stats.bytes_in_use == 0,
                        "memory of the lost device was not released");
                // The other device is unaffected.
                void* c = s.Malloc(1, 64);
                s.Write(1, c, v);
                s.check(s.Read(1, c, 16) == v, "device 1 round trip");
                s.check(Take(s.D()->free(1, c)).ok(), "free on device 1");
              }),
      "");
}

// device_synchronize on a lost device used to return at once, while work queued before the loss still
// ran on a stream worker: exit() then raced that worker (a segfault in about half the runs of a process
// that lost its device). Every call must wait for the queues before it reports the loss.
TEST_P(SimFaults, ALostDeviceStillDrainsItsQueuesBeforeReporting) {
  EXPECT_EQ(InChild("device_lost:after=0,device=0",
                    [](Scenario& s) {
                      static std::atomic<int> done{0};
                      done = 0;
                      auto slow = [](void*) {
                        std::this_thread::sleep_for(std::chrono::milliseconds(300));
                        done.fetch_add(1);
                      };
                      oar_stream_t a = s.NewStream(0), b = s.NewStream(0);
                      s.check(Take(s.D()->stream_add_callback(0, a, slow, nullptr)).ok(), "add_callback a");
                      s.check(Take(s.D()->stream_add_callback(0, b, slow, nullptr)).ok(), "add_callback b");
                      void* x = nullptr;
                      s.Expect(Take(s.D()->malloc(0, 64, &x)), OAR_STATUS_UNAVAILABLE, {"device lost"}, "malloc");
                      s.Expect(Take(s.D()->device_synchronize(0)), OAR_STATUS_UNAVAILABLE, {"device lost"},
                               "device_synchronize");
                      s.check(done.load() == 2, "device_synchronize returned before the queued work finished (" +
                                                    std::to_string(done.load()) + " of 2 done)");
                      s.check(Take(s.D()->stream_add_callback(0, a, slow, nullptr)).code == OAR_STATUS_UNAVAILABLE,
                              "a lost device accepted new work");
                      (void)Take(s.D()->stream_destroy(0, a));  // UNAVAILABLE, released anyway
                      (void)Take(s.D()->stream_destroy(0, b));
                    }),
            "");
}

TEST_P(SimFaults, ScenariosForAnotherPluginDoNotApply) {
  const std::string other = std::string(GetParam().name) == "kunlun_sim" ? "ascend_sim" : "kunlun_sim";
  EXPECT_EQ(InChild("alloc:plugin=" + other,
                    [](Scenario& s) {
                      void* a = s.Malloc(0, 64);
                      s.check(Take(s.D()->free(0, a)).ok(), "free");
                    }),
            "");
}

TEST_P(SimFaults, MalformedConfigurationFailsInitializeQuotingIt) {
  const SimParam param = GetParam();
  const struct {
    std::string var, value, mentions;
  } cases[] = {
      {"OAR_SIM_FAULTS", "launch:op=add,after=soon", "OAR_SIM_FAULTS='launch:op=add,after=soon'"},
      {"OAR_SIM_FAULTS", "meltdown:after=1", "unknown fault kind 'meltdown'"},
      {"OAR_SIM_FAULTS", "launch:op=nosuchop", "op='nosuchop' is not the name of an op"},
      {"OAR_SIM_FAULTS", "alloc:plugin=kunlun", "plugin='kunlun' is not a simulator name"},
      {Var("_MEMORY"), "lots", Var("_MEMORY") + "='lots'"},
      {Var("_MEMORY"), "0", Var("_MEMORY") + "='0'"},
      {Var("_DEVICES"), "two", Var("_DEVICES") + "='two'"},
      {"OAR_SIM_JITTER", "-3", "OAR_SIM_JITTER='-3'"},
      {"OAR_SIM_KERNEL_THREADS", "0", "OAR_SIM_KERNEL_THREADS='0'"},
      {"OAR_SIM_CCL_TIMEOUT_MS", "soon", "OAR_SIM_CCL_TIMEOUT_MS='soon'"},
  };
  for (const auto& c : cases) {
    const std::string out = RunInChild([&]() -> std::string {
      unsetenv("OAR_SIM_FAULTS");
      setenv(c.var.c_str(), c.value.c_str(), 1);
      const Plugin p = Load(param.path);
      if (p.error.empty()) return "initialize accepted " + c.var + "=" + c.value;
      if (!Contains(p.error, "initialize") || !Contains(p.error, c.mentions) || !Contains(p.error, param.name)) {
        return "unexpected error: " + p.error;
      }
      return "";
    });
    EXPECT_EQ(out, "") << c.var << "=" << c.value;
  }
}

TEST_P(SimFaults, DeviceCountAndMemoryComeFromTheEnvironment) {
  EXPECT_EQ(InChild("",
                    [this](Scenario& s) {
                      int32_t count = 0;
                      s.check(Take(s.D()->device_count(&count)).ok() && count == 3, "expected 3 devices");
                      const oar_attr_t* mem = FindDeviceAttr(s.p, 2, OAR_DEVICE_ATTR_TOTAL_MEMORY);
                      s.check(mem != nullptr && mem->v.i == (16 << 20), "expected 16 MiB");
                      void* p = nullptr;
                      s.check(Take(s.D()->malloc(2, 17 << 20, &p)).code == OAR_STATUS_RESOURCE_EXHAUSTED, "capacity");
                    },
                    {{Var("_DEVICES"), "3"}, {Var("_MEMORY"), "16M"}}),
            "");
  EXPECT_EQ(InChild("",
                    [](Scenario& s) {
                      int32_t count = -1;
                      s.check(Take(s.D()->device_count(&count)).ok() && count == 0, "expected no devices");
                    },
                    {{Var("_DEVICES"), "0"}}),
            "");
}

INSTANTIATE_TEST_SUITE_P(Simulators, SimFaults,
                         ::testing::Values(SimParam{"kunlun_sim", OAR_KUNLUN_PLUGIN, "OAR_KUNLUN_SIM"},
                                           SimParam{"ascend_sim", OAR_ASCEND_PLUGIN, "OAR_ASCEND_SIM"}),
                         [](const ::testing::TestParamInfo<SimParam>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace oar::simtest
