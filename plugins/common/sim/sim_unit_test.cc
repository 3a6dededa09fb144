// Unit tests of the simulator pieces that need no plugin: configuration parsing, the fault grammar and
// injector, and the device memory (address space, allocator, translation).
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include "oar/plugin/cpp/status.hpp"
#include "plugins/common/sim/config.h"
#include "plugins/common/sim/faults.h"
#include "plugins/common/sim/memory.h"

namespace oar::sim {
namespace {

/// The StatusError `fn` throws (code OK when it does not throw).
template <typename Fn>
sdk::StatusError Caught(Fn&& fn) {
  try {
    fn();
  } catch (const sdk::StatusError& e) {
    return e;
  }
  return sdk::StatusError(OAR_STATUS_OK, "");
}

TEST(SimConfig, ParsesMemorySizesWithSuffixes) {
  EXPECT_EQ(ParseBytes("4096"), 4096u);
  EXPECT_EQ(ParseBytes("64K"), 64u << 10);
  EXPECT_EQ(ParseBytes("512M"), 512u << 20);
  EXPECT_EQ(ParseBytes("1G"), uint64_t{1} << 30);
  EXPECT_EQ(ParseBytes(" 2gib "), uint64_t{2} << 30);
  EXPECT_EQ(ParseBytes("3mb"), 3u << 20);
  for (const char* bad : {"", "M", "12Q", "-1M", "1.5G", "0", "0M", "99999999999999999999", "1G2"}) {
    EXPECT_FALSE(ParseBytes(bad).has_value()) << bad;
  }
}

TEST(SimConfig, MalformedEnvironmentIsAnErrorQuotingIt) {
  setenv("OAR_TESTSIM_MEMORY", "lots", 1);
  const sdk::StatusError e = Caught([] { SimOptions::FromEnv("OAR_TESTSIM"); });
  EXPECT_EQ(e.code(), OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.what()).find("OAR_TESTSIM_MEMORY='lots'"), std::string::npos) << e.what();
  setenv("OAR_TESTSIM_MEMORY", "256M", 1);
  setenv("OAR_TESTSIM_DEVICES", "65", 1);
  EXPECT_EQ(Caught([] { SimOptions::FromEnv("OAR_TESTSIM"); }).code(), OAR_STATUS_INVALID_ARGUMENT);
  setenv("OAR_TESTSIM_DEVICES", "3", 1);
  const SimOptions o = SimOptions::FromEnv("OAR_TESTSIM");
  EXPECT_EQ(o.memory_bytes, 256u << 20);
  EXPECT_EQ(o.device_count, 3);
  unsetenv("OAR_TESTSIM_MEMORY");
  unsetenv("OAR_TESTSIM_DEVICES");
}

TEST(SimFaults, GrammarSeparatesScenariosByKindAndSemicolon) {
  const auto s = ParseFaults(
      "alloc:after=100, launch:op=matmul,after=3;copy:rate=0.01,seed=7,dir=h2d,code=internal;"
      "device_lost:after=50,device=1,plugin=kunlun_sim");
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].kind, FaultKind::kAlloc);
  EXPECT_EQ(s[0].after, 100u);
  EXPECT_EQ(s[0].code, OAR_STATUS_RESOURCE_EXHAUSTED);
  EXPECT_EQ(s[1].kind, FaultKind::kLaunch);
  EXPECT_EQ(s[1].op, "matmul");
  EXPECT_EQ(s[1].after, 3u);
  EXPECT_EQ(s[1].text, "launch:op=matmul,after=3");
  EXPECT_FALSE(s[1].sync);
  EXPECT_EQ(s[2].kind, FaultKind::kCopy);
  EXPECT_DOUBLE_EQ(*s[2].rate, 0.01);
  EXPECT_EQ(s[2].seed, 7u);
  EXPECT_EQ(s[2].dir, "h2d");
  EXPECT_EQ(s[2].code, OAR_STATUS_INTERNAL);
  EXPECT_EQ(s[3].kind, FaultKind::kDeviceLost);
  EXPECT_EQ(*s[3].device, 1);
  EXPECT_EQ(s[3].plugin, "kunlun_sim");
  EXPECT_EQ(ParseFaults("alloc").size(), 1u);
  EXPECT_TRUE(ParseFaults("").empty());
}

// A typo in a name used to be accepted and never fire; the spec is refused naming the value.
TEST(SimFaults, UnknownOpAndPluginNamesAreRefusedByName) {
  const struct {
    const char* spec;
    const char* mentions;
  } cases[] = {
      {"launch:op=nosuchop", "op='nosuchop' is not the name of an op the simulators run kernels for (abs, "},
      {"alloc:plugin=kunlun", "plugin='kunlun' is not a simulator name (kunlun_sim, ascend_sim)"},
      {"device_lost:after=3,plugin=", "plugin='' is not a simulator name"},
      {"launch:op=", "op='' is not the name of an op"},
  };
  for (const auto& c : cases) {
    try {
      ParseFaults(c.spec, &LaunchableOps());
      ADD_FAILURE() << "accepted " << c.spec;
    } catch (const sdk::StatusError& e) {
      EXPECT_EQ(e.code(), OAR_STATUS_INVALID_ARGUMENT);
      EXPECT_NE(std::string(e.what()).find(c.mentions), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("OAR_SIM_FAULTS='") + c.spec + "'"), std::string::npos);
    }
  }
  EXPECT_EQ(ParseFaults("launch:op=format_cast;launch:op=matmul,plugin=ascend_sim", &LaunchableOps()).size(), 2u);
}

TEST(SimFaults, MalformedSpecsQuoteTheSpecAndThePart) {
  const struct {
    const char* spec;
    const char* mentions;
  } cases[] = {
      {"explode:after=1", "unknown fault kind 'explode'"},
      {"alloc:after=x", "after='x'"},
      {"alloc:rate=2", "rate='2'"},
      {"alloc:op=add", "only applies to launch"},
      {"copy:dir=sideways", "dir='sideways'"},
      {"launch:mode=later", "mode='later'"},
      {"after=3", "does not follow a scenario kind"},
      {"alloc:frequency=3", "unknown key 'frequency'"},
      {"alloc:after", "is not key=value"},
      {"alloc:count=0", "count='0'"},
  };
  for (const auto& c : cases) {
    const sdk::StatusError e = Caught([&] { ParseFaults(c.spec); });
    EXPECT_EQ(e.code(), OAR_STATUS_INVALID_ARGUMENT) << c.spec;
    const std::string m = e.what();
    EXPECT_NE(m.find("OAR_SIM_FAULTS='" + std::string(c.spec) + "'"), std::string::npos) << m;
    EXPECT_NE(m.find(c.mentions), std::string::npos) << m;
  }
}

TEST(SimFaults, AfterCountRateAndFilters) {
  FaultInjector inj(ParseFaults("launch:op=matmul,after=2,count=2;alloc:device=1;copy:plugin=ascend_sim"), "kunlun_sim");
  std::vector<bool> fired;
  for (int i = 0; i < 6; ++i) fired.push_back(inj.Check(FaultKind::kLaunch, 0, "matmul") != nullptr);
  EXPECT_EQ(fired, (std::vector<bool>{false, false, true, true, false, false}));
  EXPECT_EQ(inj.Check(FaultKind::kLaunch, 0, "add"), nullptr);
  EXPECT_EQ(inj.Check(FaultKind::kAlloc, 0, "malloc"), nullptr);
  EXPECT_NE(inj.Check(FaultKind::kAlloc, 1, "malloc"), nullptr);
  EXPECT_EQ(inj.Check(FaultKind::kAlloc, 1, "malloc"), nullptr);  // count 1 by default
  EXPECT_EQ(inj.Check(FaultKind::kCopy, 0, "h2d"), nullptr);      // another plugin's scenario

  // A rate is deterministic given the seed: the same events fail in two injectors.
  auto pattern = [](const char* spec) {
    FaultInjector r(ParseFaults(spec), "x");
    std::string p;
    for (int i = 0; i < 400; ++i) p += r.Check(FaultKind::kCopy, 0, "h2d") ? '1' : '0';
    return p;
  };
  const std::string a = pattern("copy:rate=0.1,seed=7");
  EXPECT_EQ(a, pattern("copy:rate=0.1,seed=7"));
  EXPECT_NE(a, pattern("copy:rate=0.1,seed=8"));
  const auto ones = std::count(a.begin(), a.end(), '1');
  EXPECT_GT(ones, 15);
  EXPECT_LT(ones, 70);
}

TEST(SimMemory, AlignsSeparatesAndCoalesces) {
  DeviceMemory m("testsim:0", 1 << 20, 32);
  void* a = m.Allocate(100);
  void* b = m.Allocate(0);
  void* c = m.Allocate(1000);
  std::set<void*> distinct = {a, b, c};
  EXPECT_EQ(distinct.size(), 3u);
  for (void* p : {a, b, c}) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 32, 0u);
    EXPECT_TRUE(m.InRange(p));
  }
  EXPECT_EQ(m.stats().bytes_in_use, 1100u);
  EXPECT_EQ(m.stats().num_allocs, 3u);
  char* shadow = m.Translate(a, 100, "test");
  ASSERT_NE(shadow, nullptr);
  EXPECT_NE(static_cast<void*>(shadow), a);  // the host view lives elsewhere
  std::memset(shadow, 7, 100);
  EXPECT_EQ(m.Translate(static_cast<char*>(a) + 10, 90, "test"), shadow + 10);
  EXPECT_EQ(Caught([&] { m.Translate(a, 101, "test"); }).code(), OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(Caught([&] { m.Translate(b, 1, "test"); }).code(), OAR_STATUS_INVALID_ARGUMENT);
  int host = 0;
  const std::string msg = Caught([&] { m.Translate(&host, 4, "kernel input 0"); }).what();
  EXPECT_NE(msg.find("kernel input 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is not a device address"), std::string::npos) << msg;

  EXPECT_EQ(Caught([&] { m.Free(&host); }).code(), OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(Caught([&] { m.Free(static_cast<char*>(a) + 32); }).code(), OAR_STATUS_INVALID_ARGUMENT);
  m.Free(a);
  EXPECT_EQ(Caught([&] { m.Free(a); }).code(), OAR_STATUS_INVALID_ARGUMENT);  // double free
  m.Free(b);
  m.Free(c);
  m.Free(nullptr);
  const DeviceMemory::Stats st = m.stats();
  EXPECT_EQ(st.bytes_in_use, 0u);
  EXPECT_EQ(st.peak_bytes_in_use, 1100u);
  EXPECT_EQ(st.largest_free_block, st.capacity);  // every block coalesced back
}

TEST(SimMemory, ExhaustionNamesDeviceRequestAndFreeBytes) {
  DeviceMemory m("testsim:1", 64 << 10, 64);
  void* a = m.Allocate(40 << 10);
  const sdk::StatusError e = Caught([&] { m.Allocate(30 << 10); });
  EXPECT_EQ(e.code(), OAR_STATUS_RESOURCE_EXHAUSTED);
  const std::string msg = e.what();
  EXPECT_NE(msg.find("testsim:1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("requested 30720 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("24576 bytes free"), std::string::npos) << msg;
  EXPECT_EQ(Caught([&] { m.Allocate(SIZE_MAX); }).code(), OAR_STATUS_RESOURCE_EXHAUSTED);
  m.Free(a);
  void* all = m.Allocate(64 << 10);  // the whole capacity fits again once freed
  m.Free(all);
}

}  // namespace
}  // namespace oar::sim
