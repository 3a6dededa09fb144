// The cpu plugin as the host sees it: loaded with dlopen, driven only through its ABI tables.
#include <gtest/gtest.h>

#include "plugins/common/host_kernels.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "oar/plugin/cpp/test_host_gtest.hpp"
#include "oar/plugin/plugin.h"

namespace {

using oar::sdk::testing::Result;
using oar::sdk::testing::Take;

/// The plugin, loaded once through its ABI.
const oar::sdk::testing::LoadedPlugin& P() { return oar::sdk::testing::LoadOnce(OAR_CPU_PLUGIN_PATH); }

const oar_plugin_api_t* Api() { return P().api; }
const oar_device_api_t* Dev() { return Api()->device; }

// The float32 add kernel as registered, or null.
oar_kernel_fn_t AddF32() {
  const std::vector<int32_t> f32x3 = {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32};
  for (const auto& e : P().kernels.entries) {
    if (e.op == "add" && e.dtypes == f32x3) return e.fn;
  }
  return nullptr;
}

// A 1-D float32 `add` call through the ABI over 12 floats at `f`: f[0:4] + f[4:8] -> f[8:12]. Reset()
// restores every field after a test has broken one.
struct AddCall {
  explicit AddCall(float* data) : f(data) { Reset(); }
  void Reset() {
    for (int i = 0; i < 3; ++i) {
      descs[i] = {};
      descs[i].struct_size = OAR_TENSOR_DESC_STRUCT_SIZE;
      descs[i].data = f + 4 * i;
      descs[i].dtype = OAR_DTYPE_FLOAT32;
      descs[i].rank = 1;
      shape[i][0] = 4;
      strides[i][0] = 1;
      descs[i].shape = shape[i];
      descs[i].strides = strides[i];
    }
    call = {};
    call.struct_size = OAR_KERNEL_CALL_STRUCT_SIZE;
    call.op = "add";
    call.num_inputs = 2;
    call.num_outputs = 1;
    call.inputs = descs;
    call.outputs = descs + 2;
  }
  float* f;
  int64_t shape[3][1] = {}, strides[3][1] = {};
  oar_tensor_desc_t descs[3] = {};
  oar_kernel_call_t call{};
};

TEST(CpuPlugin, HandshakeNamesAndVersions) {
  ASSERT_NE(Api(), nullptr);
  EXPECT_STREQ(Api()->name, "cpu");
  EXPECT_STREQ(Api()->vendor, "Oar");
  EXPECT_STREQ(Api()->version, OAR_VERSION_STRING);
  EXPECT_EQ(Api()->abi_major, static_cast<uint32_t>(OAR_PLUGIN_ABI_MAJOR));
  EXPECT_GE(Api()->struct_size, OAR_PLUGIN_API_MIN_SIZE);
  EXPECT_GE(Dev()->struct_size, OAR_DEVICE_API_MIN_SIZE);
  EXPECT_GE(Api()->kernel->struct_size, OAR_KERNEL_API_MIN_SIZE);

  const oar_host_api_t future = oar::sdk::testing::MakeTestHost(OAR_PLUGIN_ABI_MAJOR + 1);
  const oar_plugin_api_t* refused = nullptr;
  const Result r = Take(P().entry(&future, &refused));
  EXPECT_EQ(r.code, OAR_STATUS_FAILED_PRECONDITION);
  EXPECT_NE(r.message.find(std::to_string(OAR_PLUGIN_ABI_MAJOR + 1) + "."), std::string::npos) << r.message;
  // Restore the host table the plugin keeps for the other tests.
  const oar_plugin_api_t* again = nullptr;
  OAR_ASSERT_OK(P().entry(oar::sdk::testing::TestHost(), &again));
}

TEST(CpuPlugin, OneDeviceWithTheRequiredAttributes) {
  int32_t count = 0;
  OAR_ASSERT_OK(Dev()->device_count(&count));
  EXPECT_EQ(count, 1);
  const oar_attr_t* attrs = nullptr;
  int32_t n = 0;
  OAR_ASSERT_OK(Dev()->device_attributes(0, &attrs, &n));
  auto find = [&](std::string_view name) -> const oar_attr_t* {
    for (int32_t i = 0; i < n; ++i) {
      if (name == attrs[i].name) return &attrs[i];
    }
    ADD_FAILURE() << "missing attribute " << name;
    return nullptr;
  };
  const oar_attr_t* name = find(OAR_DEVICE_ATTR_NAME);
  ASSERT_NE(name, nullptr);
  EXPECT_EQ(name->type, OAR_ATTR_STRING);
  EXPECT_GT(name->v.s.size, 0u);
  EXPECT_EQ(find(OAR_DEVICE_ATTR_VENDOR)->type, OAR_ATTR_STRING);
  EXPECT_GT(find(OAR_DEVICE_ATTR_TOTAL_MEMORY)->v.i, 0);
  EXPECT_GE(find(OAR_DEVICE_ATTR_COMPUTE_UNITS)->v.i, 1);
  EXPECT_EQ(find(OAR_DEVICE_ATTR_ALIGNMENT)->v.i, 64);
  EXPECT_TRUE(find(OAR_DEVICE_ATTR_HOST_ACCESSIBLE)->v.b);
  const oar_attr_t* dtypes = find(OAR_DEVICE_ATTR_DTYPES);
  ASSERT_EQ(dtypes->type, OAR_ATTR_INTS);
  EXPECT_EQ(dtypes->v.ints.size, 9u);
}

TEST(CpuPlugin, InvalidOrdinalsAreRefusedByName) {
  const oar_attr_t* attrs = nullptr;
  int32_t n = 0;
  const Result r = Take(Dev()->device_attributes(3, &attrs, &n));
  EXPECT_EQ(r.code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(r.message, "cpu: device 3 does not exist (1 device)");
  void* p = nullptr;
  EXPECT_EQ(Take(Dev()->malloc(-1, 16, &p)).code, OAR_STATUS_INVALID_ARGUMENT);
  char a[4] = {}, b[4] = {};
  const Result p2p = Take(Dev()->memcpy_p2p(0, a, 1, b, 4));
  EXPECT_EQ(p2p.code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(p2p.message.find("device 1"), std::string::npos) << p2p.message;
}

TEST(CpuPlugin, MallocAlignsAndStatsTrackBytes) {
  oar_memory_stats_t before{};
  before.struct_size = OAR_MEMORY_STATS_STRUCT_SIZE;
  OAR_ASSERT_OK(Dev()->memory_stats(0, &before));
  EXPECT_TRUE(before.bytes_in_use_is_set && before.peak_bytes_in_use_is_set && before.bytes_limit_is_set &&
              before.num_allocs_is_set);
  EXPECT_GT(before.bytes_limit, 0u);

  void *zero1 = nullptr, *zero2 = nullptr, *big = nullptr;
  OAR_ASSERT_OK(Dev()->malloc(0, 0, &zero1));
  OAR_ASSERT_OK(Dev()->malloc(0, 0, &zero2));
  OAR_ASSERT_OK(Dev()->malloc(0, 1000, &big));
  EXPECT_NE(zero1, nullptr);
  EXPECT_NE(zero1, zero2);
  for (void* p : {zero1, zero2, big}) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  std::memset(big, 1, 1000);

  oar_memory_stats_t during{};
  during.struct_size = OAR_MEMORY_STATS_STRUCT_SIZE;
  OAR_ASSERT_OK(Dev()->memory_stats(0, &during));
  EXPECT_EQ(during.bytes_in_use, before.bytes_in_use + 1000);
  EXPECT_EQ(during.num_allocs, before.num_allocs + 3);
  EXPECT_GE(during.peak_bytes_in_use, during.bytes_in_use);

  for (void* p : {zero1, zero2, big}) OAR_ASSERT_OK(Dev()->free(0, p));
  OAR_ASSERT_OK(Dev()->free(0, nullptr));
  oar_memory_stats_t after{};
  after.struct_size = OAR_MEMORY_STATS_STRUCT_SIZE;
  OAR_ASSERT_OK(Dev()->memory_stats(0, &after));
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.num_allocs, before.num_allocs);
  EXPECT_GE(after.peak_bytes_in_use, before.bytes_in_use + 1000);

  // An older host's shorter struct: nothing past its struct_size is written.
  oar_memory_stats_t old{};
  std::memset(&old, 0x5a, sizeof(old));
  old.struct_size = OAR_STRUCT_SIZE(oar_memory_stats_t, peak_bytes_in_use);
  OAR_ASSERT_OK(Dev()->memory_stats(0, &old));
  EXPECT_EQ(old.bytes_in_use, after.bytes_in_use);
  EXPECT_EQ(old.bytes_limit, 0x5a5a5a5a5a5a5a5aull);

  void* huge = nullptr;
  EXPECT_EQ(Take(Dev()->malloc(0, SIZE_MAX / 2, &huge)).code, OAR_STATUS_RESOURCE_EXHAUSTED);
}

TEST(CpuPlugin, CopiesAndMemset) {
  void* dev = nullptr;
  OAR_ASSERT_OK(Dev()->malloc(0, 64, &dev));
  std::vector<uint8_t> host(64), back(64, 0);
  for (int i = 0; i < 64; ++i) host[i] = static_cast<uint8_t>(i);
  OAR_ASSERT_OK(Dev()->memcpy_h2d(0, dev, host.data(), 64));
  OAR_ASSERT_OK(Dev()->memcpy_d2h(0, back.data(), dev, 64));
  EXPECT_EQ(back, host);
  OAR_ASSERT_OK(Dev()->memset(0, dev, 7, 32));
  OAR_ASSERT_OK(Dev()->memcpy_d2h(0, back.data(), dev, 64));
  EXPECT_EQ(back[31], 7);
  EXPECT_EQ(back[32], 32);
  OAR_ASSERT_OK(Dev()->memcpy_d2h(0, nullptr, nullptr, 0));  // size 0 touches nothing
  OAR_ASSERT_OK(Dev()->free(0, dev));
}

TEST(CpuPlugin, StreamsAndEventsAreValidatedHandles) {
  oar_stream_t stream = nullptr;
  oar_event_t event = nullptr;
  OAR_ASSERT_OK(Dev()->stream_create(0, &stream));
  OAR_ASSERT_OK(Dev()->event_create(0, &event));
  bool idle = false, complete = false;
  OAR_ASSERT_OK(Dev()->stream_query(0, stream, &idle));
  EXPECT_TRUE(idle);
  OAR_ASSERT_OK(Dev()->event_query(0, event, &complete));
  EXPECT_TRUE(complete);  // never recorded: already complete
  OAR_ASSERT_OK(Dev()->event_record(0, event, stream));
  OAR_ASSERT_OK(Dev()->stream_wait_event(0, stream, event));
  OAR_ASSERT_OK(Dev()->event_synchronize(0, event));

  int calls = 0;
  OAR_ASSERT_OK(Dev()->stream_add_callback(
      0, stream, [](void* c) { ++*static_cast<int*>(c); }, &calls));
  EXPECT_EQ(calls, 1);  // ran before returning

  uint32_t src = 0xdeadbeef, dst = 0;
  OAR_ASSERT_OK(Dev()->memcpy_h2d_async(0, stream, &dst, &src, 4));
  OAR_ASSERT_OK(Dev()->stream_synchronize(0, stream));
  EXPECT_EQ(dst, src);

  OAR_ASSERT_OK(Dev()->event_destroy(0, event));
  OAR_ASSERT_OK(Dev()->stream_destroy(0, stream));
  EXPECT_EQ(Take(Dev()->stream_synchronize(0, stream)).code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(Take(Dev()->stream_destroy(0, stream)).code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(Take(Dev()->event_query(0, event, &complete)).code, OAR_STATUS_INVALID_ARGUMENT);
  int bogus = 0;
  const Result r = Take(Dev()->memcpy_h2d_async(0, reinterpret_cast<oar_stream_t>(&bogus), &dst, &src, 4));
  EXPECT_EQ(r.code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(r.message.find("stream"), std::string::npos) << r.message;
}

TEST(CpuPlugin, RegistersHostKernelsThatRunOnItsMemory) {
  ASSERT_TRUE(P().ok()) << P().error;  // register_kernels succeeded (LoadPlugin called it once)
  const oar_kernel_registrar_t& registrar = P().kernels;
  // Every kernel of the host library, nothing filtered out.
  EXPECT_EQ(registrar.entries.size(), oar::host::HostKernels().size());
  EXPECT_EQ(Api()->kernel->supports, nullptr);
  const oar_kernel_fn_t add = AddF32();
  ASSERT_NE(add, nullptr);
  void* mem = nullptr;
  OAR_ASSERT_OK(Dev()->malloc(0, 3 * 4 * sizeof(float), &mem));
  float* f = static_cast<float*>(mem);
  for (int i = 0; i < 8; ++i) f[i] = static_cast<float>(i);
  AddCall a(f);
  OAR_ASSERT_OK(add(&a.call));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(f[8 + i], f[i] + f[4 + i]);
  OAR_ASSERT_OK(Dev()->free(0, mem));
}

// A bad call straight through the ABI (no dispatcher in front to have checked it) is refused with a
// message naming what was expected and what was got. The checks are inline in the kernels
// (plugins/common/kernel_util.h); the messages come from the out-of-line functions they call on failure.
TEST(CpuPlugin, HostKernelsRefuseBadCallsThroughTheAbiWithTheirMessages) {
  ASSERT_TRUE(P().ok()) << P().error;
  const oar_kernel_fn_t add = AddF32();
  ASSERT_NE(add, nullptr);
  float f[12] = {};
  AddCall a(f);
  const auto refused = [&](const std::string& want) {
    const Result r = Take(add(&a.call));
    EXPECT_EQ(r.code, OAR_STATUS_INVALID_ARGUMENT) << want;
    EXPECT_EQ(r.message, want);
  };
  OAR_EXPECT_OK(add(&a.call));
  a.call.num_inputs = 1;
  a.call.outputs = a.descs + 1;
  refused("op 'add' on device 0: expected 2 input(s) and 1 output(s), got 1 and 1");
  a.Reset();
  a.descs[1].rank = OAR_MAX_RANK + 1;
  refused("op 'add' on device 0: rank " + std::to_string(OAR_MAX_RANK + 1) + " is outside 0.." +
          std::to_string(OAR_MAX_RANK));
  a.Reset();
  a.strides[2][0] = -1;
  refused("op 'add' on device 0 ([4], [4] -> [4]): negative extent or stride in dimension 0 of output 0");
  a.Reset();
  a.shape[0][0] = -4;
  refused("op 'add' on device 0 ([-4], [4] -> [4]): negative extent or stride in dimension 0 of input 0");
  a.Reset();
  a.descs[1].dtype = OAR_DTYPE_FLOAT64;
  refused("op 'add' on device 0 ([4], [4] -> [4]): input 1 has dtype float64, the kernel expects float32");
  a.Reset();
  a.descs[2].dtype = OAR_DTYPE_INT32;
  refused("op 'add' on device 0 ([4], [4] -> [4]): output 0 has dtype int32, the kernel expects float32");
  a.Reset();
  a.shape[1][0] = 3;
  refused("op 'add' on device 0 ([4], [3] -> [4]): input 1 has shape [3], expected [4]");
  a.Reset();
  a.descs[0].rank = 0;
  refused("op 'add' on device 0 ([], [4] -> [4]): input 0 has shape [], expected [4]");
}

}  // namespace
