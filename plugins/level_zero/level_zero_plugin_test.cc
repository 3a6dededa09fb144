// The level_zero plugin as the host sees it: loaded with dlopen and driven only through its ABI tables.
// Without an Intel GPU and driver the device tests report SKIPPED with the plugin's own reason; loading,
// the handshake, the no-driver and no-loader behaviour, the registered keys and `supports` are tested
// everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "oar/plugin/cpp/test_host_gtest.hpp"
#include "oar/plugin/plugin.h"

namespace {

using oar::sdk::testing::Result;
using oar::sdk::testing::Take;

/// The plugin, loaded once through its ABI (loading, initialize and register_kernels must succeed without a driver).
const oar::sdk::testing::LoadedPlugin& P() { return oar::sdk::testing::LoadOnce(OAR_LEVEL_ZERO_PLUGIN); }

const oar_plugin_api_t* Api() { return P().api; }
const oar_device_api_t* Dev() { return Api()->device; }

/// The number of devices and, when there are none, the plugin's reason.
Result Devices(int32_t* count) {
  *count = -1;
  return Take(Dev()->device_count(count));
}

/// Skip the calling test unless a Level Zero GPU is present, with the plugin's reason.
#define REQUIRE_DEVICE()                                                     \
  do {                                                                       \
    int32_t count_ = 0;                                                      \
    const Result r_ = Devices(&count_);                                      \
    if (count_ == 0) GTEST_SKIP() << "no Level Zero device: " << r_.message; \
  } while (0)

// ---- everywhere ---------------------------------------------------------------------------------------------

TEST(LevelZeroPlugin, HandshakeNamesAndVersions) {
  ASSERT_NE(Api(), nullptr);
  EXPECT_STREQ(Api()->name, "level_zero");
  EXPECT_STREQ(Api()->vendor, "Oar");
  EXPECT_STREQ(Api()->version, OAR_VERSION_STRING);
  EXPECT_EQ(Api()->abi_major, static_cast<uint32_t>(OAR_PLUGIN_ABI_MAJOR));
  EXPECT_GE(Api()->struct_size, OAR_PLUGIN_API_MIN_SIZE);
  EXPECT_GE(Dev()->struct_size, OAR_DEVICE_API_MIN_SIZE);
  EXPECT_GE(Api()->kernel->struct_size, OAR_KERNEL_API_MIN_SIZE);
  // The compiler table for CINN (OpenCL C -> SPIR-V at run time), with the typed launch of ABI 1.1.
  ASSERT_NE(Api()->compiler, nullptr);
  EXPECT_GE(Api()->compiler->struct_size, OAR_COMPILER_API_STRUCT_SIZE);
  EXPECT_NE(Api()->compiler->languages, nullptr);
  EXPECT_NE(Api()->compiler->compile, nullptr);
  EXPECT_NE(Api()->compiler->module_destroy, nullptr);
  EXPECT_NE(Api()->compiler->get_function, nullptr);
  EXPECT_NE(Api()->compiler->launch_kernel, nullptr);
  EXPECT_EQ(Api()->compiler->launch, nullptr) << "ABI 1.0's untyped launch cannot check buffer ranges";

  const oar_host_api_t future = oar::sdk::testing::MakeTestHost(OAR_PLUGIN_ABI_MAJOR + 1);
  const oar_plugin_api_t* refused = nullptr;
  const Result r = Take(P().entry(&future, &refused));
  EXPECT_EQ(r.code, OAR_STATUS_FAILED_PRECONDITION);
  EXPECT_NE(r.message.find(std::to_string(OAR_PLUGIN_ABI_MAJOR + 1) + "."), std::string::npos) << r.message;
  const oar_plugin_api_t* again = nullptr;
  OAR_ASSERT_OK(P().entry(oar::sdk::testing::TestHost(), &again));  // restore the host table the plugin keeps
}

TEST(LevelZeroPlugin, DeviceCountIsZeroWithLevelZerosOwnWordsOrCountsGpus) {
  int32_t count = -1;
  const Result r = Devices(&count);
  if (count > 0) {
    EXPECT_EQ(r.code, 0) << r.message;
    return;
  }
  EXPECT_EQ(count, 0);
  EXPECT_EQ(r.code, OAR_STATUS_UNAVAILABLE);
  // The reason names the Level Zero call and its ze_result_t, e.g.
  // "zeInit: ZE_RESULT_ERROR_UNINITIALIZED (0x78000001): driver is not initialized (...)".
  EXPECT_EQ(r.message.rfind("ze", 0), 0u) << r.message;
  EXPECT_NE(r.message.find("ZE_RESULT_"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("(0x"), std::string::npos) << r.message;
  std::printf("level_zero device_count: UNAVAILABLE: %s\n", r.message.c_str());
  // Asking again gives the same answer (zeInit runs once).
  int32_t again = -1;
  EXPECT_EQ(Devices(&again).message, r.message);
  EXPECT_EQ(again, 0);
}

TEST(LevelZeroPlugin, WithoutDevicesEverySlotRefusesByName) {
  int32_t count = 0;
  Devices(&count);
  if (count > 0) GTEST_SKIP() << "a Level Zero device is present; this test covers the no-device case";
  const std::string expected = "level_zero: device 0 does not exist (0 devices)";
  const oar_attr_t* attrs = nullptr;
  int32_t n = 0;
  Result r = Take(Dev()->device_attributes(0, &attrs, &n));
  EXPECT_EQ(r.code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(r.message, expected);
  void* p = nullptr;
  EXPECT_EQ(Take(Dev()->malloc(0, 64, &p)).message, expected);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(Take(Dev()->host_malloc(0, 64, &p)).code, OAR_STATUS_INVALID_ARGUMENT);
  char buf[8] = {};
  EXPECT_EQ(Take(Dev()->memcpy_h2d(0, buf, buf, 8)).code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(Take(Dev()->memset(0, buf, 0, 8)).code, OAR_STATUS_INVALID_ARGUMENT);
  oar_stream_t s = nullptr;
  EXPECT_EQ(Take(Dev()->stream_create(0, &s)).code, OAR_STATUS_INVALID_ARGUMENT);
  oar_event_t e = nullptr;
  EXPECT_EQ(Take(Dev()->event_create(0, &e)).code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(Take(Dev()->device_synchronize(-1)).code, OAR_STATUS_INVALID_ARGUMENT);
  oar_memory_stats_t stats{};
  stats.struct_size = OAR_MEMORY_STATS_STRUCT_SIZE;
  EXPECT_EQ(Take(Dev()->memory_stats(0, &stats)).code, OAR_STATUS_INVALID_ARGUMENT);
  // The compiler table refuses the device the same way (the core then runs fused groups elsewhere).
  const oar_compiler_api_t* c = Api()->compiler;
  const int32_t* langs = nullptr;
  EXPECT_EQ(Take(c->languages(0, &langs, &n)).message, expected);
  const char source[] = "__kernel void k(__global float* x) { x[0] = 1.0f; }";
  oar_compile_options_t o{};
  o.struct_size = OAR_COMPILE_OPTIONS_STRUCT_SIZE;
  o.language = OAR_LANGUAGE_OPENCL_C;
  o.source = source;
  o.source_size = sizeof(source) - 1;
  o.name = "k";
  oar_module_t m = nullptr;
  EXPECT_EQ(Take(c->compile(0, &o, &m)).message, expected);
  EXPECT_EQ(m, nullptr);
  oar_launch_info_t info{};
  info.struct_size = OAR_LAUNCH_INFO_STRUCT_SIZE;
  EXPECT_EQ(Take(c->launch_kernel(0, nullptr, &info)).message, expected);
}

// ---- without the Level Zero loader (libze1 not installed) -------------------------------------------------

/// Loads the plugin with OAR_LEVEL_ZERO_LOADER=`loader`, writes on stderr what it answered
/// ("load: ok; device_count: 0, code 14: <message>") and exits with 0. The statement of a "threadsafe" death
/// test: its child process re-executes this program and runs only the calling test, so the plugin, and the
/// environment variable with it, are read there for the first time whatever this process did before.
[[noreturn]] void ReportDeviceCountWithLoader(const char* loader) {
  setenv("OAR_LEVEL_ZERO_LOADER", loader, 1);
  const oar::sdk::testing::LoadedPlugin p = oar::sdk::testing::LoadPlugin(OAR_LEVEL_ZERO_PLUGIN);
  std::string report = "load: " + (p.ok() ? std::string("ok") : p.error);
  if (p.api != nullptr) {
    int32_t count = -1;
    const Result r = Take(p.api->device->device_count(&count));
    report += "; device_count: " + std::to_string(count) + ", code " + std::to_string(r.code) + ": " + r.message;
  }
  std::fprintf(stderr, "%s\n", report.c_str());
  std::exit(0);
}

/// A regular expression (POSIX extended, as EXPECT_EXIT reads it) that matches `text` literally.
std::string Literally(std::string_view text) {
  std::string re;
  for (const char c : text) {
    if (std::strchr(".[]()*+?{}|^$\\", c) != nullptr) re += '\\';
    re += c;
  }
  return re;
}

/// The start of the report of a plugin that loaded, initialised and answered 0 devices, UNAVAILABLE.
std::string LoadedWithNoDevice() {
  return "load: ok; device_count: 0, code " + std::to_string(OAR_STATUS_UNAVAILABLE) + ": ";
}

TEST(LevelZeroPluginWithoutLoader, LoadsWithNoDeviceAndSaysWhichLoaderIsMissing) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string missing = "/nonexistent/libze_loader.so.1";
  // e.g. "cannot load the Level Zero loader /nonexistent/libze_loader.so.1 (from OAR_LEVEL_ZERO_LOADER):
  // /nonexistent/libze_loader.so.1: cannot open shared object file: ... (install libze1, ...)"
  EXPECT_EXIT(ReportDeviceCountWithLoader(missing.c_str()), ::testing::ExitedWithCode(0),
              LoadedWithNoDevice() + "cannot load the Level Zero loader " + Literally(missing) +
                  " \\(from OAR_LEVEL_ZERO_LOADER\\): .+\\(install libze1");
}

TEST(LevelZeroPluginWithoutLoader, ALoaderWithoutAFunctionIsRefusedNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // libm opens everywhere and has no ze* function: the first one resolved, zeInit, is named.
  EXPECT_EXIT(ReportDeviceCountWithLoader("libm.so.6"), ::testing::ExitedWithCode(0),
              LoadedWithNoDevice() +
                  "the Level Zero loader libm\\.so\\.6 \\(from OAR_LEVEL_ZERO_LOADER\\) has no "
                  "zeInit, which the plugin calls \\(.+\\).*install libze1");
}

/// What register_kernels registered (LoadPlugin called it once, as the runtime does).
const oar_kernel_registrar_t& Registered() {
  EXPECT_TRUE(P().ok()) << P().error;
  return P().kernels;
}

bool HasKey(const oar_kernel_registrar_t& r, std::string_view op, const std::vector<int32_t>& dtypes) {
  return r.Find(op, dtypes).fn != nullptr;
}

TEST(LevelZeroPlugin, RegistersItsKeysWithoutADevice) {
  const oar_kernel_registrar_t& r = Registered();
  // 36 float ops (relu_grad included) x {F32, F16} + 15 integer ops x {I32, I64} + 25 casts
  // + {copy, fill, where, index_select, gather} x 9 dtypes.
  EXPECT_EQ(r.entries.size(), 2u * 36 + 2 * 15 + 25 + 5 * 9);
  for (const auto& e : r.entries) EXPECT_NE(e.fn, nullptr) << e.op;
  constexpr int32_t F32 = OAR_DTYPE_FLOAT32, F16 = OAR_DTYPE_FLOAT16, F64 = OAR_DTYPE_FLOAT64,
                    BF16 = OAR_DTYPE_BFLOAT16, I64 = OAR_DTYPE_INT64, I8 = OAR_DTYPE_INT8, B = OAR_DTYPE_BOOL;
  EXPECT_TRUE(HasKey(r, "add", {F32, F32, F32}));
  EXPECT_TRUE(HasKey(r, "relu_grad", {F16, F16, F16}));  // relu's VJP runs it here (vjp::ReluGradKernelOn)
  EXPECT_TRUE(HasKey(r, "matmul", {F16, F16, F16}));
  EXPECT_TRUE(HasKey(r, "softmax", {F32, F32}));
  EXPECT_TRUE(HasKey(r, "lt", {F16, F16, B}));
  EXPECT_TRUE(HasKey(r, "cast", {I64, F16}));
  EXPECT_TRUE(HasKey(r, "where", {B, BF16, BF16, BF16}));
  EXPECT_TRUE(HasKey(r, "index_select", {F64, I64, F64}));
  EXPECT_TRUE(HasKey(r, "fill", {I8}));
  EXPECT_TRUE(HasKey(r, "gather", {F32, I64, F32}));
  EXPECT_FALSE(HasKey(r, "add", {F64, F64, F64})) << "no float64 arithmetic: falls back to cpu";
  EXPECT_FALSE(HasKey(r, "add", {BF16, BF16, BF16}));
  EXPECT_TRUE(HasKey(r, "mul", {I64, I64, I64}));
  EXPECT_TRUE(HasKey(r, "ge", {I64, I64, B}));
  EXPECT_FALSE(HasKey(r, "div", {I64, I64, I64})) << "no integer div in docs/ops.md";
  EXPECT_FALSE(HasKey(r, "add", {I8, I8, I8}));
  EXPECT_FALSE(HasKey(r, "conv2d", {F32, F32, F32}));
}

/// A support query for `op` with the given descriptors (NULL data, NULL stream).
struct Query {
  std::vector<std::vector<int64_t>> shapes, strides;
  std::vector<oar_tensor_desc_t> inputs, outputs;
  std::vector<oar_attr_t> attrs;
  oar_kernel_call_t call{};

  Query(const char* op, std::vector<int32_t> in_dtypes, std::vector<int32_t> out_dtypes, std::vector<int64_t> shape) {
    const size_t n = in_dtypes.size() + out_dtypes.size();
    shapes.assign(n, shape);
    strides.assign(n, std::vector<int64_t>(shape.size(), 1));
    for (size_t i = 0; i < n; ++i) {
      oar_tensor_desc_t d{};
      d.struct_size = OAR_TENSOR_DESC_STRUCT_SIZE;
      d.dtype = i < in_dtypes.size() ? in_dtypes[i] : out_dtypes[i - in_dtypes.size()];
      d.rank = static_cast<int32_t>(shape.size());
      d.shape = shapes[i].data();
      d.strides = strides[i].data();
      (i < in_dtypes.size() ? inputs : outputs).push_back(d);
    }
    call.struct_size = OAR_KERNEL_CALL_STRUCT_SIZE;
    call.op = op;
    call.num_inputs = static_cast<int32_t>(inputs.size());
    call.num_outputs = static_cast<int32_t>(outputs.size());
    call.inputs = inputs.data();
    call.outputs = outputs.data();
  }
  Result Ask() { return Take(Api()->kernel->supports(&call)); }
};

TEST(LevelZeroPlugin, SupportsAnswersWithoutADevice) {
  ASSERT_NE(Api()->kernel->supports, nullptr);
  constexpr int32_t F32 = OAR_DTYPE_FLOAT32, F16 = OAR_DTYPE_FLOAT16, F64 = OAR_DTYPE_FLOAT64, I64 = OAR_DTYPE_INT64;
  EXPECT_EQ(Query("add", {F32, F32}, {F32}, {2, 3}).Ask().code, 0);
  EXPECT_EQ(Query("matmul", {F16, F16}, {F16}, {4, 4}).Ask().code, 0);
  const Result f64 = Query("add", {F64, F64}, {F64}, {2}).Ask();
  EXPECT_EQ(f64.code, OAR_STATUS_UNIMPLEMENTED);
  EXPECT_NE(f64.message.find("level_zero has no kernel for op 'add'"), std::string::npos) << f64.message;
  Query scalar_select("index_select", {F32, I64}, {F32}, {});
  const Result rank0 = scalar_select.Ask();
  EXPECT_EQ(rank0.code, OAR_STATUS_UNIMPLEMENTED);
  EXPECT_NE(rank0.message.find("rank >= 1"), std::string::npos) << rank0.message;
  Query nc1hwc0("relu", {F32}, {F32}, {1, 1, 1, 1});
  nc1hwc0.inputs[0].format = OAR_FORMAT_NC1HWC0;
  EXPECT_EQ(nc1hwc0.Ask().code, OAR_STATUS_UNIMPLEMENTED);
}

// ---- with a Level Zero GPU (build-verified only on machines without one) ----------------------------------

TEST(LevelZeroPlugin, DeviceAttributes) {
  REQUIRE_DEVICE();
  const oar_attr_t* attrs = nullptr;
  int32_t n = 0;
  OAR_ASSERT_OK(Dev()->device_attributes(0, &attrs, &n));
  bool has_name = false, has_memory = false;
  for (int32_t i = 0; i < n; ++i) {
    if (std::string_view(attrs[i].name) == OAR_DEVICE_ATTR_NAME) has_name = attrs[i].v.s.size > 0;
    if (std::string_view(attrs[i].name) == OAR_DEVICE_ATTR_TOTAL_MEMORY) has_memory = attrs[i].v.i > 0;
  }
  EXPECT_TRUE(has_name);
  EXPECT_TRUE(has_memory);
}

TEST(LevelZeroPlugin, MemoryRoundTripMemsetAndStats) {
  REQUIRE_DEVICE();
  void* d = nullptr;
  OAR_ASSERT_OK(Dev()->malloc(0, 4096, &d));
  oar_memory_stats_t stats{};
  stats.struct_size = OAR_MEMORY_STATS_STRUCT_SIZE;
  OAR_ASSERT_OK(Dev()->memory_stats(0, &stats));
  EXPECT_TRUE(stats.bytes_in_use_is_set);
  EXPECT_GE(stats.bytes_in_use, 4096u);
  std::vector<uint8_t> in(4096), out(4096, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7);
  OAR_ASSERT_OK(Dev()->memcpy_h2d(0, d, in.data(), in.size()));
  OAR_ASSERT_OK(Dev()->memcpy_d2h(0, out.data(), d, out.size()));
  EXPECT_EQ(in, out);
  OAR_ASSERT_OK(Dev()->memset(0, d, 0xab, 100));
  OAR_ASSERT_OK(Dev()->memcpy_d2h(0, out.data(), d, out.size()));
  EXPECT_EQ(out[99], 0xab);
  EXPECT_EQ(out[100], in[100]);
  OAR_ASSERT_OK(Dev()->free(0, d));
}

TEST(LevelZeroPlugin, AsyncCopiesEventsAndCallbacksRunInOrder) {
  REQUIRE_DEVICE();
  oar_stream_t a = nullptr, b = nullptr;
  OAR_ASSERT_OK(Dev()->stream_create(0, &a));
  OAR_ASSERT_OK(Dev()->stream_create(0, &b));
  oar_event_t e = nullptr;
  OAR_ASSERT_OK(Dev()->event_create(0, &e));
  bool done = false;
  OAR_ASSERT_OK(Dev()->event_query(0, e, &done));
  EXPECT_TRUE(done) << "an event never recorded is complete";
  const size_t n = 1 << 20;
  std::vector<float> in(n), out(n, 0.0f);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i);
  void *x = nullptr, *y = nullptr;
  OAR_ASSERT_OK(Dev()->malloc(0, n * 4, &x));
  OAR_ASSERT_OK(Dev()->malloc(0, n * 4, &y));
  OAR_ASSERT_OK(Dev()->memcpy_h2d_async(0, a, x, in.data(), n * 4));
  OAR_ASSERT_OK(Dev()->event_record(0, e, a));
  OAR_ASSERT_OK(Dev()->stream_wait_event(0, b, e));
  OAR_ASSERT_OK(Dev()->memcpy_d2d_async(0, b, y, x, n * 4));
  OAR_ASSERT_OK(Dev()->memcpy_d2h_async(0, b, out.data(), y, n * 4));
  static std::atomic<int> order{0};
  static int first = -1, second = -1;
  order = 0;
  OAR_ASSERT_OK(Dev()->stream_add_callback(
      0, b, [](void*) { first = order++; }, nullptr));
  OAR_ASSERT_OK(Dev()->stream_add_callback(
      0, b, [](void*) { second = order++; }, nullptr));
  OAR_ASSERT_OK(Dev()->stream_synchronize(0, b));
  EXPECT_EQ(first, 0);
  EXPECT_EQ(second, 1);
  EXPECT_EQ(in, out);
  bool idle = false;
  OAR_ASSERT_OK(Dev()->stream_query(0, b, &idle));
  EXPECT_TRUE(idle);
  OAR_ASSERT_OK(Dev()->event_synchronize(0, e));
  OAR_ASSERT_OK(Dev()->event_destroy(0, e));
  OAR_ASSERT_OK(Dev()->stream_destroy(0, a));
  OAR_ASSERT_OK(Dev()->stream_destroy(0, b));
  OAR_ASSERT_OK(Dev()->free(0, x));
  OAR_ASSERT_OK(Dev()->free(0, y));
  EXPECT_EQ(Take(Dev()->stream_synchronize(0, a)).code, OAR_STATUS_INVALID_ARGUMENT) << "destroyed handle";
}

TEST(LevelZeroPlugin, AddKernelOnTheDevice) {
  REQUIRE_DEVICE();
  const oar_kernel_registrar_t& r = Registered();
  oar_kernel_fn_t add = nullptr;
  for (const auto& e : r.entries) {
    if (e.op == "add" && e.dtypes[0] == OAR_DTYPE_FLOAT32) add = e.fn;
  }
  ASSERT_NE(add, nullptr);
  oar_stream_t s = nullptr;
  OAR_ASSERT_OK(Dev()->stream_create(0, &s));
  const int64_t rows = 3, cols = 5;
  std::vector<float> a(rows * cols), b(cols), out(rows * cols);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 100.0f * static_cast<float>(i);
  void *da = nullptr, *db = nullptr, *dout = nullptr;
  OAR_ASSERT_OK(Dev()->malloc(0, a.size() * 4, &da));
  OAR_ASSERT_OK(Dev()->malloc(0, b.size() * 4, &db));
  OAR_ASSERT_OK(Dev()->malloc(0, out.size() * 4, &dout));
  OAR_ASSERT_OK(Dev()->memcpy_h2d(0, da, a.data(), a.size() * 4));
  OAR_ASSERT_OK(Dev()->memcpy_h2d(0, db, b.data(), b.size() * 4));
  Query q("add", {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32}, {OAR_DTYPE_FLOAT32}, {rows, cols});
  q.strides[0] = {cols, 1};
  q.strides[1] = {0, 1};  // b broadcast along rows
  q.strides[2] = {cols, 1};
  q.inputs[0].data = da;
  q.inputs[1].data = db;
  q.outputs[0].data = dout;
  q.call.stream = s;
  OAR_ASSERT_OK(add(&q.call));
  OAR_ASSERT_OK(Dev()->memcpy_d2h_async(0, s, out.data(), dout, out.size() * 4));
  OAR_ASSERT_OK(Dev()->stream_synchronize(0, s));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) EXPECT_EQ(out[i * cols + j], a[i * cols + j] + b[j]);
  }
  OAR_ASSERT_OK(Dev()->stream_destroy(0, s));
  OAR_ASSERT_OK(Dev()->free(0, da));
  OAR_ASSERT_OK(Dev()->free(0, db));
  OAR_ASSERT_OK(Dev()->free(0, dout));
}

}  // namespace
