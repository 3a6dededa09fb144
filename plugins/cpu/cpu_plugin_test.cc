// The cpu plugin as the host sees it: loaded with dlopen, driven only through its ABI tables.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "plugins/common/host_kernels.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "oar/plugin/plugin.h"

struct oar_status_t {
  int32_t code;
  std::string message;
};

struct oar_kernel_registrar_t {  // def.op and def.dtypes are only valid during the call: copy them
  std::vector<std::string> ops;
  std::vector<std::vector<int32_t>> dtypes;
  std::vector<oar_kernel_fn_t> fns;
};

namespace {

oar_host_api_t MakeHost(uint32_t abi_major) {
  oar_host_api_t h{};
  h.struct_size = OAR_HOST_API_STRUCT_SIZE;
  h.abi_major = abi_major;
  h.abi_minor = OAR_PLUGIN_ABI_MINOR;
  h.status_create = [](int32_t code, const char* m) { return new oar_status_t{code, m}; };
  h.status_code = [](const oar_status_t* s) { return s->code; };
  h.status_message = [](const oar_status_t* s) { return s->message.c_str(); };
  h.status_destroy = [](oar_status_t* s) { delete s; };
  h.log = [](int32_t, const char*, const char*) {};
  h.log_enabled = [](int32_t) { return false; };
  h.register_kernel = [](oar_kernel_registrar_t* r, const oar_kernel_def_t* def) -> oar_status_t* {
    r->ops.emplace_back(def->op);
    r->dtypes.emplace_back(def->dtypes, def->dtypes + def->num_dtypes);
    r->fns.push_back(def->fn);
    return nullptr;
  };
  return h;
}

/// Code and message of a status (0 for OK), destroying it.
struct Result {
  int32_t code = 0;
  std::string message;
};
Result Take(oar_status_t* s) {
  if (s == nullptr) return {};
  Result r{s->code, s->message};
  delete s;
  return r;
}

#define ASSERT_OK(expr)                  \
  do {                                   \
    const Result r_ = Take(expr);        \
    ASSERT_EQ(r_.code, 0) << r_.message; \
  } while (0)

oar_plugin_get_api_fn EntryPoint() {
  static void* library = dlopen(OAR_CPU_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(library, nullptr) << dlerror();
  if (library == nullptr) return nullptr;
  return reinterpret_cast<oar_plugin_get_api_fn>(dlsym(library, OAR_PLUGIN_ENTRY_SYMBOL));
}

const oar_plugin_api_t* Api() {
  static const oar_host_api_t host = MakeHost(OAR_PLUGIN_ABI_MAJOR);
  static const oar_plugin_api_t* api = [] {
    const oar_plugin_api_t* a = nullptr;
    oar_plugin_get_api_fn entry = EntryPoint();
    if (entry == nullptr) return a;
    EXPECT_EQ(Take(entry(&host, &a)).code, 0);
    EXPECT_EQ(Take(a->initialize()).code, 0);
    return a;
  }();
  return api;
}

const oar_device_api_t* Dev() { return Api()->device; }

TEST(CpuPlugin, HandshakeNamesAndVersions) {
  ASSERT_NE(Api(), nullptr);
  EXPECT_STREQ(Api()->name, "cpu");
  EXPECT_STREQ(Api()->vendor, "Oar");
  EXPECT_STREQ(Api()->version, OAR_VERSION_STRING);
  EXPECT_EQ(Api()->abi_major, static_cast<uint32_t>(OAR_PLUGIN_ABI_MAJOR));
  EXPECT_GE(Api()->struct_size, OAR_PLUGIN_API_MIN_SIZE);
  EXPECT_GE(Dev()->struct_size, OAR_DEVICE_API_MIN_SIZE);
  EXPECT_GE(Api()->kernel->struct_size, OAR_KERNEL_API_MIN_SIZE);

  const oar_host_api_t future = MakeHost(OAR_PLUGIN_ABI_MAJOR + 1);
  const oar_plugin_api_t* refused = nullptr;
  const Result r = Take(EntryPoint()(&future, &refused));
  EXPECT_EQ(r.code, OAR_STATUS_FAILED_PRECONDITION);
  EXPECT_NE(r.message.find(std::to_string(OAR_PLUGIN_ABI_MAJOR + 1) + "."), std::string::npos) << r.message;
  // Restore the host table the plugin keeps for the other tests.
  const oar_plugin_api_t* again = nullptr;
  static const oar_host_api_t host = MakeHost(OAR_PLUGIN_ABI_MAJOR);
  ASSERT_OK(EntryPoint()(&host, &again));
}

TEST(CpuPlugin, OneDeviceWithTheRequiredAttributes) {
  int32_t count = 0;
  ASSERT_OK(Dev()->device_count(&count));
  EXPECT_EQ(count, 1);
  const oar_attr_t* attrs = nullptr;
  int32_t n = 0;
  ASSERT_OK(Dev()->device_attributes(0, &attrs, &n));
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
  ASSERT_OK(Dev()->memory_stats(0, &before));
  EXPECT_TRUE(before.bytes_in_use_is_set && before.peak_bytes_in_use_is_set && before.bytes_limit_is_set &&
              before.num_allocs_is_set);
  EXPECT_GT(before.bytes_limit, 0u);

  void *zero1 = nullptr, *zero2 = nullptr, *big = nullptr;
  ASSERT_OK(Dev()->malloc(0, 0, &zero1));
  ASSERT_OK(Dev()->malloc(0, 0, &zero2));
  ASSERT_OK(Dev()->malloc(0, 1000, &big));
  EXPECT_NE(zero1, nullptr);
  EXPECT_NE(zero1, zero2);
  for (void* p : {zero1, zero2, big}) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  std::memset(big, 1, 1000);

  oar_memory_stats_t during{};
  during.struct_size = OAR_MEMORY_STATS_STRUCT_SIZE;
  ASSERT_OK(Dev()->memory_stats(0, &during));
  EXPECT_EQ(during.bytes_in_use, before.bytes_in_use + 1000);
  EXPECT_EQ(during.num_allocs, before.num_allocs + 3);
  EXPECT_GE(during.peak_bytes_in_use, during.bytes_in_use);

  for (void* p : {zero1, zero2, big}) ASSERT_OK(Dev()->free(0, p));
  ASSERT_OK(Dev()->free(0, nullptr));
  oar_memory_stats_t after{};
  after.struct_size = OAR_MEMORY_STATS_STRUCT_SIZE;
  ASSERT_OK(Dev()->memory_stats(0, &after));
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.num_allocs, before.num_allocs);
  EXPECT_GE(after.peak_bytes_in_use, before.bytes_in_use + 1000);

  // An older host's shorter struct: nothing past its struct_size is written.
  oar_memory_stats_t old{};
  std::memset(&old, 0x5a, sizeof(old));
  old.struct_size = OAR_STRUCT_SIZE(oar_memory_stats_t, peak_bytes_in_use);
  ASSERT_OK(Dev()->memory_stats(0, &old));
  EXPECT_EQ(old.bytes_in_use, after.bytes_in_use);
  EXPECT_EQ(old.bytes_limit, 0x5a5a5a5a5a5a5a5aull);

  void* huge = nullptr;
  EXPECT_EQ(Take(Dev()->malloc(0, SIZE_MAX / 2, &huge)).code, OAR_STATUS_RESOURCE_EXHAUSTED);
}

TEST(CpuPlugin, CopiesAndMemset) {
  void* dev = nullptr;
  ASSERT_OK(Dev()->malloc(0, 64, &dev));
  std::vector<uint8_t> host(64), back(64, 0);
  for (int i = 0; i < 64; ++i) host[i] = static_cast<uint8_t>(i);
  ASSERT_OK(Dev()->memcpy_h2d(0, dev, host.data(), 64));
  ASSERT_OK(Dev()->memcpy_d2h(0, back.data(), dev, 64));
  EXPECT_EQ(back, host);
  ASSERT_OK(Dev()->memset(0, dev, 7, 32));
  ASSERT_OK(Dev()->memcpy_d2h(0, back.data(), dev, 64));
  EXPECT_EQ(back[31], 7);
  EXPECT_EQ(back[32], 32);
  ASSERT_OK(Dev()->memcpy_d2h(0, nullptr, nullptr, 0));  // size 0 touches nothing
  ASSERT_OK(Dev()->free(0, dev));
}

TEST(CpuPlugin, StreamsAndEventsAreValidatedHandles) {
  oar_stream_t stream = nullptr;
  oar_event_t event = nullptr;
  ASSERT_OK(Dev()->stream_create(0, &stream));
  ASSERT_OK(Dev()->event_create(0, &event));
  bool idle = false, complete = false;
  ASSERT_OK(Dev()->stream_query(0, stream, &idle));
  EXPECT_TRUE(idle);
  ASSERT_OK(Dev()->event_query(0, event, &complete));
  EXPECT_TRUE(complete);  // never recorded: already complete
  ASSERT_OK(Dev()->event_record(0, event, stream));
  ASSERT_OK(Dev()->stream_wait_event(0, stream, event));
  ASSERT_OK(Dev()->event_synchronize(0, event));

  int calls = 0;
  ASSERT_OK(Dev()->stream_add_callback(
      0, stream, [](void* c) { ++*static_cast<int*>(c); }, &calls));
  EXPECT_EQ(calls, 1);  // ran before returning

  uint32_t src = 0xdeadbeef, dst = 0;
  ASSERT_OK(Dev()->memcpy_h2d_async(0, stream, &dst, &src, 4));
  ASSERT_OK(Dev()->stream_synchronize(0, stream));
  EXPECT_EQ(dst, src);

  ASSERT_OK(Dev()->event_destroy(0, event));
  ASSERT_OK(Dev()->stream_destroy(0, stream));
  EXPECT_EQ(Take(Dev()->stream_synchronize(0, stream)).code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(Take(Dev()->stream_destroy(0, stream)).code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(Take(Dev()->event_query(0, event, &complete)).code, OAR_STATUS_INVALID_ARGUMENT);
  int bogus = 0;
  const Result r = Take(Dev()->memcpy_h2d_async(0, reinterpret_cast<oar_stream_t>(&bogus), &dst, &src, 4));
  EXPECT_EQ(r.code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(r.message.find("stream"), std::string::npos) << r.message;
}

TEST(CpuPlugin, RegistersHostKernelsThatRunOnItsMemory) {
  oar_kernel_registrar_t registrar;
  ASSERT_OK(Api()->kernel->register_kernels(&registrar));
  // Every kernel of the host library, nothing filtered out.
  EXPECT_EQ(registrar.ops.size(), oar::host::HostKernels().size());
  EXPECT_EQ(Api()->kernel->supports, nullptr);
  oar_kernel_fn_t add = nullptr;
  const std::vector<int32_t> f32x3 = {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32};
  for (size_t i = 0; i < registrar.ops.size(); ++i) {
    if (registrar.ops[i] == "add" && registrar.dtypes[i] == f32x3) add = registrar.fns[i];
  }
  ASSERT_NE(add, nullptr);
  void* mem = nullptr;
  ASSERT_OK(Dev()->malloc(0, 3 * 4 * sizeof(float), &mem));
  float* f = static_cast<float*>(mem);
  for (int i = 0; i < 8; ++i) f[i] = static_cast<float>(i);
  const int64_t shape[] = {4}, strides[] = {1};
  oar_tensor_desc_t descs[3] = {};
  for (int i = 0; i < 3; ++i) {
    descs[i].struct_size = OAR_TENSOR_DESC_STRUCT_SIZE;
    descs[i].data = f + 4 * i;
    descs[i].dtype = OAR_DTYPE_FLOAT32;
    descs[i].rank = 1;
    descs[i].shape = shape;
    descs[i].strides = strides;
  }
  oar_kernel_call_t call{};
  call.struct_size = OAR_KERNEL_CALL_STRUCT_SIZE;
  call.op = "add";
  call.num_inputs = 2;
  call.num_outputs = 1;
  call.inputs = descs;
  call.outputs = descs + 2;
  ASSERT_OK(add(&call));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(f[8 + i], f[i] + f[4 + i]);
  ASSERT_OK(Dev()->free(0, mem));
}

}  // namespace
