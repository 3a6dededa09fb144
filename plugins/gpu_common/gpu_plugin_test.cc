// A GPU plugin (cuda, hip or the host-CPU gpu_emu, chosen at build time) as the host sees it: loaded
// with dlopen and driven only through its ABI tables. Without a device the tests that need one are
// SKIPPED with the vendor runtime's own reason; everything else (loading, handshake, the zero-device
// answer, the kernel table, supports, runtime compilation) is really tested. gpu_emu always has devices,
// so these device tests run the shared kernels on every machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "oar/plugin/cpp/dtype.hpp"
#include "oar/plugin/cpp/test_host_gtest.hpp"
#include "oar/plugin/plugin.h"

namespace {

constexpr int32_t F32 = OAR_DTYPE_FLOAT32, F16 = OAR_DTYPE_FLOAT16, BF16 = OAR_DTYPE_BFLOAT16, I64 = OAR_DTYPE_INT64,
                  BOOL = OAR_DTYPE_BOOL;

using oar::sdk::testing::Result;
using oar::sdk::testing::Take;

/// The plugin, loaded once through its ABI: the one this program was built with, or OAR_TEST_PLUGIN when
/// the program runs away from its build tree (ci/gpu-bundle.sh carries it to a GPU machine).
const oar::sdk::testing::LoadedPlugin& P() {
  static const std::string path = [] {
    const char* override_path = std::getenv("OAR_TEST_PLUGIN");
    return std::string(override_path != nullptr && *override_path != '\0' ? override_path : OAR_GPU_PLUGIN_PATH);
  }();
  return oar::sdk::testing::LoadOnce(path);
}

const oar_plugin_api_t* Api() { return P().api; }

/// The emulator has no runtime compiler (it runs kernels compiled into the plugin only).
constexpr bool kHasCompiler = true;  // NVRTC (cuda), hiprtc (hip), the host compiler (gpu_emu: CUDA dialect)
const oar_device_api_t* Dev() { return Api()->device; }

/// Device count and, when zero, the plugin's reason.
struct Devices {
  int32_t count = 0;
  Result status;
};
const Devices& Count() {
  static const Devices d = [] {
    Devices r;
    r.count = -1;
    r.status = Take(Dev()->device_count(&r.count));
    return r;
  }();
  return d;
}

#define SKIP_WITHOUT_DEVICE()                                                                                \
  do {                                                                                                       \
    if (Count().count == 0) GTEST_SKIP() << "no " OAR_GPU_PLUGIN_NAME " device: " << Count().status.message; \
  } while (0)

/// What register_kernels registered (LoadPlugin called it once; the test host refuses duplicate keys).
const oar_kernel_registrar_t& Kernels() {
  EXPECT_TRUE(P().ok()) << P().error;
  return P().kernels;
}

// ===================================================================================================
// Without a device
// ===================================================================================================

TEST(GpuPlugin, LoadsAndShakesHands) {
  ASSERT_NE(Api(), nullptr);
  EXPECT_STREQ(Api()->name, OAR_GPU_PLUGIN_NAME);
  EXPECT_STREQ(Api()->version, OAR_VERSION_STRING);
  EXPECT_EQ(Api()->abi_major, static_cast<uint32_t>(OAR_PLUGIN_ABI_MAJOR));
  EXPECT_GE(Api()->struct_size, OAR_PLUGIN_API_MIN_SIZE);
  EXPECT_GE(Dev()->struct_size, OAR_DEVICE_API_MIN_SIZE);
  EXPECT_GE(Api()->kernel->struct_size, OAR_KERNEL_API_MIN_SIZE);
  if (kHasCompiler) {
    ASSERT_NE(Api()->compiler, nullptr);
    EXPECT_EQ(Api()->compiler->struct_size, OAR_COMPILER_API_STRUCT_SIZE);
  } else {
    EXPECT_EQ(Api()->compiler, nullptr);
  }
  if (Api()->ccl != nullptr) {
    EXPECT_EQ(Api()->ccl->struct_size, OAR_CCL_API_STRUCT_SIZE);
  }

  const oar_host_api_t future = oar::sdk::testing::MakeTestHost(OAR_PLUGIN_ABI_MAJOR + 1);
  const oar_plugin_api_t* refused = nullptr;
  const Result r = Take(P().entry(&future, &refused));
  EXPECT_EQ(r.code, OAR_STATUS_FAILED_PRECONDITION);
  EXPECT_NE(r.message.find(std::to_string(OAR_PLUGIN_ABI_MAJOR + 1) + "."), std::string::npos) << r.message;
  const oar_plugin_api_t* again = nullptr;
  OAR_ASSERT_OK(P().entry(oar::sdk::testing::TestHost(), &again));  // the plugin keeps the compatible host table
}

TEST(GpuPlugin, DeviceCountIsZeroWithTheVendorsReasonOrOkWithDevices) {
  const Devices& d = Count();
  if (d.count > 0) {
    EXPECT_EQ(d.status.code, 0) << d.status.message;
    return;
  }
  EXPECT_EQ(d.count, 0);
  EXPECT_EQ(d.status.code, OAR_STATUS_UNAVAILABLE);
  // "cuda: cudaGetDeviceCount failed: <cudaGetErrorString> (<cudaGetErrorName>)" or "... reports no device".
  EXPECT_EQ(d.status.message.rfind(OAR_GPU_PLUGIN_NAME ": " OAR_GPU_COUNT_API, 0), 0u) << d.status.message;
  std::cout << "[ reason   ] " << d.status.message << "\n";
}

TEST(GpuPlugin, CallsOnAMissingDeviceAreRefusedByName) {
  void* p = nullptr;
  const int32_t beyond = Count().count;
  const Result r = Take(Dev()->malloc(beyond, 16, &p));
  EXPECT_EQ(r.code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(r.message.find("device " + std::to_string(beyond) + " does not exist"), std::string::npos) << r.message;
  oar_stream_t stream = nullptr;
  EXPECT_EQ(Take(Dev()->stream_create(-1, &stream)).code, OAR_STATUS_INVALID_ARGUMENT);
}

TEST(GpuPlugin, RegistersTheDocumentedDeviceKernels) {
  const oar_kernel_registrar_t& k = Kernels();
  auto has = [&](const char* op, std::vector<int32_t> dtypes) { return k.Find(op, dtypes).fn != nullptr; };
  EXPECT_TRUE(has("add", {F32, F32, F32}));
  EXPECT_TRUE(has("add", {BF16, BF16, BF16}));
  EXPECT_TRUE(has("matmul", {F16, F16, F16}));
  EXPECT_TRUE(has("matmul", {BF16, BF16, BF16}));
  EXPECT_TRUE(has("softmax", {F32, F32}));
  EXPECT_TRUE(has("layer_norm", {BF16, BF16, BF16, BF16, F32, F32}));
  EXPECT_TRUE(has("cast", {F32, BF16}));
  EXPECT_TRUE(has("where", {BOOL, F16, F16, F16}));
  EXPECT_TRUE(has("index_select", {F32, I64, F32}));
  EXPECT_TRUE(has("concat", std::vector<int32_t>(16, F32)));
  EXPECT_TRUE(has("eq", {BOOL, BOOL, BOOL}));
  EXPECT_TRUE(has("pad", {I64, I64}));
  EXPECT_TRUE(has("scatter_add", {BF16, I64, BF16, BF16}));
  EXPECT_TRUE(has("topk", {F16, F16, I64}));
  EXPECT_TRUE(has("conv2d_grad_weight", {F32, F32, F32}));
  EXPECT_TRUE(has("max_pool2d", {BF16, BF16, I64}));
  EXPECT_FALSE(has("div", {I64, I64, I64}));  // the contract has no integer div
  EXPECT_TRUE(has("avg_pool2d", {F16, F16}));
  EXPECT_TRUE(has("avg_pool2d_grad", {F32, F32}));
  EXPECT_TRUE(has("adaptive_avg_pool2d", {BF16, BF16}));
  EXPECT_TRUE(has("adaptive_avg_pool2d_grad", {F32, F32}));
  EXPECT_GT(k.entries.size(), 560u);
  for (const auto& e : k.entries) {
    EXPECT_NE(e.fn, nullptr) << e.op;
    EXPECT_NE(e.kernel_data, nullptr) << e.op << ": every kernel carries its op description";
  }
}

oar_tensor_desc_t Desc(int32_t dtype, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                       void* data = nullptr) {
  oar_tensor_desc_t d{};
  d.struct_size = OAR_TENSOR_DESC_STRUCT_SIZE;
  d.data = data;
  d.dtype = dtype;
  d.format = OAR_FORMAT_PLAIN;
  d.rank = static_cast<int32_t>(shape.size());
  d.shape = shape.data();
  d.strides = strides.data();
  return d;
}

TEST(GpuPlugin, SupportsAnswersHonestly) {
  ASSERT_NE(Api()->kernel->supports, nullptr);
  const std::vector<int64_t> shape = {2, 3}, strides = {3, 1}, broadcast = {0, 1};
  oar_tensor_desc_t in[2] = {Desc(F32, shape, strides), Desc(F32, shape, broadcast)};
  oar_tensor_desc_t out[1] = {Desc(F32, shape, strides)};
  oar_kernel_call_t q{};
  q.struct_size = OAR_KERNEL_CALL_STRUCT_SIZE;
  q.op = "add";
  q.num_inputs = 2;
  q.num_outputs = 1;
  q.inputs = in;
  q.outputs = out;
  EXPECT_EQ(Take(Api()->kernel->supports(&q)).code, 0);

  q.op = "no_such_op";  // no device kernel: the core would run it on cpu
  Result r = Take(Api()->kernel->supports(&q));
  EXPECT_EQ(r.code, OAR_STATUS_UNIMPLEMENTED);
  EXPECT_NE(r.message.find("no device kernel"), std::string::npos) << r.message;

  q.op = "add";
  in[0].format = OAR_FORMAT_NC1HWC0;
  r = Take(Api()->kernel->supports(&q));
  EXPECT_EQ(r.code, OAR_STATUS_UNIMPLEMENTED);
  EXPECT_NE(r.message.find("PLAIN"), std::string::npos) << r.message;
}

int32_t OwnLanguage() { return std::string_view(OAR_GPU_PLUGIN_NAME) == "hip" ? OAR_LANGUAGE_HIP : OAR_LANGUAGE_CUDA; }

Result CompileKernel(const std::string& source, oar_module_t* module) {
  oar_compile_options_t o{};
  o.struct_size = OAR_COMPILE_OPTIONS_STRUCT_SIZE;
  o.language = OwnLanguage();
  o.source = source.data();
  o.source_size = source.size();
  o.name = "scale";
  return Take(Api()->compiler->compile(0, &o, module));
}

const char* kScaleSource =
    "extern \"C\" __global__ void scale(float* x, float a, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) x[i] *= a;\n"
    "}\n";

TEST(GpuPlugin, RuntimeCompilerBuildsKernelsWithoutADevice) {
  if (!kHasCompiler) GTEST_SKIP() << OAR_GPU_PLUGIN_NAME " has no runtime compiler (NVRTC/hiprtc are cuda/hip only)";
  const int32_t* languages = nullptr;
  int32_t n = 0;
  OAR_ASSERT_OK(Api()->compiler->languages(0, &languages, &n));
  ASSERT_EQ(n, 1);
  EXPECT_EQ(languages[0], OwnLanguage());

  oar_module_t module = nullptr;
  const Result bad = CompileKernel("extern \"C\" __global__ void broken( { }", &module);
  EXPECT_EQ(bad.code, OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(bad.message.find("error"), std::string::npos) << bad.message;  // the compiler's log

  const Result good = CompileKernel(kScaleSource, &module);
  if (Count().count == 0) {
    // Compiled (the message gives the binary's size), then refused to load for want of a device.
    EXPECT_EQ(good.code, OAR_STATUS_UNAVAILABLE) << good.message;
    EXPECT_NE(good.message.find(" bytes of "), std::string::npos) << good.message;
    std::cout << "[ compiled ] " << good.message << "\n";
    return;
  }
  ASSERT_EQ(good.code, 0) << good.message;
  oar_function_t fn = nullptr;
  OAR_ASSERT_OK(Api()->compiler->get_function(0, module, "scale", &fn));
  EXPECT_EQ(Take(Api()->compiler->get_function(0, module, "missing", &fn)).code, OAR_STATUS_NOT_FOUND);
  OAR_ASSERT_OK(Api()->compiler->module_destroy(0, module));
}

TEST(GpuPlugin, CollectivesCheckTheirArguments) {
  if (Api()->ccl == nullptr) GTEST_SKIP() << "built without NCCL/RCCL: no CCL table";
  EXPECT_EQ(Take(Api()->ccl->get_unique_id(nullptr)).code, OAR_STATUS_INVALID_ARGUMENT);
  oar_ccl_unique_id_t id{};
  oar_ccl_comm_t comm = nullptr;
  EXPECT_EQ(Take(Api()->ccl->comm_init_rank(0, 2, &id, 5, nullptr, &comm)).code, OAR_STATUS_INVALID_ARGUMENT);
}

// ===================================================================================================
// With a device
// ===================================================================================================

/// A device buffer filled from / read back to host vectors.
class Buffer {
 public:
  explicit Buffer(size_t bytes) : bytes_(bytes) { EXPECT_EQ(Take(Dev()->malloc(0, bytes, &ptr_)).code, 0); }
  template <typename T>
  explicit Buffer(const std::vector<T>& host) : Buffer(host.size() * sizeof(T)) {
    EXPECT_EQ(Take(Dev()->memcpy_h2d(0, ptr_, host.data(), bytes_)).code, 0);
  }
  ~Buffer() { Take(Dev()->free(0, ptr_)); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  template <typename T>
  std::vector<T> Read() const {
    std::vector<T> host(bytes_ / sizeof(T));
    EXPECT_EQ(Take(Dev()->memcpy_d2h(0, host.data(), ptr_, bytes_)).code, 0);
    return host;
  }
  void* get() const { return ptr_; }

 private:
  size_t bytes_;
  void* ptr_ = nullptr;
};

struct Stream {
  oar_stream_t s = nullptr;
  Stream() { EXPECT_EQ(Take(Dev()->stream_create(0, &s)).code, 0); }
  ~Stream() { Take(Dev()->stream_destroy(0, s)); }
};

#define ASSERT_KERNEL_OK(call)           \
  do {                                   \
    const Result r_ = (call);            \
    ASSERT_EQ(r_.code, 0) << r_.message; \
  } while (0)

/// Run the registered kernel for (op, dtypes) on a fresh stream and wait for it.
Result RunKernel(const char* op, const std::vector<oar_tensor_desc_t>& inputs,
                 const std::vector<oar_tensor_desc_t>& outputs, const std::vector<oar_attr_t>& attrs = {}) {
  std::vector<int32_t> dtypes;
  for (const auto& d : inputs) dtypes.push_back(d.dtype);
  for (const auto& d : outputs) dtypes.push_back(d.dtype);
  const oar::sdk::testing::Registration kernel = Kernels().Find(op, dtypes);
  if (kernel.fn == nullptr) return {OAR_STATUS_NOT_FOUND, std::string("no kernel for ") + op};
  Stream stream;
  oar_kernel_call_t c{};
  c.struct_size = OAR_KERNEL_CALL_STRUCT_SIZE;
  c.op = op;
  c.device = 0;
  c.num_inputs = static_cast<int32_t>(inputs.size());
  c.num_outputs = static_cast<int32_t>(outputs.size());
  c.num_attrs = static_cast<int32_t>(attrs.size());
  c.stream = stream.s;
  c.inputs = inputs.data();
  c.outputs = outputs.data();
  c.attrs = attrs.data();
  c.kernel_data = kernel.kernel_data;
  Result r = Take(kernel.fn(&c));
  if (r.code == 0) r = Take(Dev()->stream_synchronize(0, stream.s));
  return r;
}

oar_attr_t IntAttr(const char* name, int64_t v) {
  oar_attr_t a{};
  a.struct_size = OAR_ATTR_STRUCT_SIZE;
  a.name = name;
  a.type = OAR_ATTR_INT;
  a.v.i = v;
  return a;
}

TEST(GpuDevice, MemoryCopiesAndStatistics) {
  SKIP_WITHOUT_DEVICE();
  std::vector<uint8_t> host(1 << 20);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 7);
  Buffer a(host), b(host.size());
  OAR_ASSERT_OK(Dev()->memcpy_d2d(0, b.get(), a.get(), host.size()));
  EXPECT_EQ(b.Read<uint8_t>(), host);
  OAR_ASSERT_OK(Dev()->memset(0, b.get(), 3, 100));
  EXPECT_EQ(b.Read<uint8_t>()[99], 3);
  oar_memory_stats_t stats{};
  stats.struct_size = OAR_MEMORY_STATS_STRUCT_SIZE;
  OAR_ASSERT_OK(Dev()->memory_stats(0, &stats));
  EXPECT_GE(stats.bytes_in_use, 2u * host.size());
  EXPECT_GT(stats.bytes_limit, stats.bytes_in_use);
  void* huge = nullptr;
  EXPECT_EQ(Take(Dev()->malloc(0, size_t{1} << 60, &huge)).code, OAR_STATUS_RESOURCE_EXHAUSTED);
}

TEST(GpuDevice, StreamsEventsAndCallbacksRunInOrder) {
  SKIP_WITHOUT_DEVICE();
  Stream s1, s2;
  std::vector<float> host(1 << 22, 1.5f), back(host.size());
  void* pinned = nullptr;
  OAR_ASSERT_OK(Dev()->host_malloc(0, host.size() * 4, &pinned));
  std::memcpy(pinned, host.data(), host.size() * 4);
  Buffer dev(host.size() * 4), copy(host.size() * 4);
  oar_event_t event = nullptr;
  OAR_ASSERT_OK(Dev()->event_create(0, &event));
  OAR_ASSERT_OK(Dev()->memcpy_h2d_async(0, s1.s, dev.get(), pinned, host.size() * 4));
  OAR_ASSERT_OK(Dev()->event_record(0, event, s1.s));
  OAR_ASSERT_OK(Dev()->stream_wait_event(0, s2.s, event));
  OAR_ASSERT_OK(Dev()->memcpy_d2d_async(0, s2.s, copy.get(), dev.get(), host.size() * 4));
  std::atomic<int> called{0};
  OAR_ASSERT_OK(Dev()->stream_add_callback(
      0, s2.s, [](void* p) { static_cast<std::atomic<int>*>(p)->fetch_add(1); }, &called));
  OAR_ASSERT_OK(Dev()->stream_synchronize(0, s2.s));
  EXPECT_EQ(called.load(), 1);
  bool done = false;
  OAR_ASSERT_OK(Dev()->event_query(0, event, &done));
  EXPECT_TRUE(done);
  EXPECT_EQ(copy.Read<float>(), host);
  OAR_ASSERT_OK(Dev()->event_destroy(0, event));
  OAR_ASSERT_OK(Dev()->host_free(0, pinned));
}

TEST(GpuDevice, AddBroadcastsThroughZeroStridesAndReadsPermutedInputs) {
  SKIP_WITHOUT_DEVICE();
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};  // [2, 3] read transposed from a [3, 2] buffer
  const std::vector<float> b = {10, 20, 30};        // [3] broadcast over rows
  Buffer da(a), db(b), out(6 * 4);
  const std::vector<int64_t> shape = {2, 3}, a_strides = {1, 2}, b_strides = {0, 1}, out_strides = {3, 1};
  const Result r = RunKernel("add", {Desc(F32, shape, a_strides, da.get()), Desc(F32, shape, b_strides, db.get())},
                             {Desc(F32, shape, out_strides, out.get())});
  ASSERT_EQ(r.code, 0) << r.message;
  const std::vector<float> expected = {11, 23, 35, 12, 24, 36};
  EXPECT_EQ(out.Read<float>(), expected);
}

TEST(GpuDevice, MatmulMatchesAPlainLoopForEveryLayoutAndDtype) {
  SKIP_WITHOUT_DEVICE();
  const int64_t batch = 3, m = 37, k = 70, n = 29;
  std::vector<float> a(batch * m * k), b(k * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 37) % 17) / 8.0f - 1.0f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 11) % 13) / 6.0f - 1.0f;
  std::vector<float> expected(batch * m * n, 0.0f);
  for (int64_t z = 0; z < batch; ++z)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += a[(z * m + i) * k + p] * b[p * n + j];
        expected[(z * m + i) * n + j] = static_cast<float>(s);
      }
  const std::vector<int64_t> sa = {m * k, k, 1}, sa_t = {m * k, 1, m};                  // row-major / column-major a
  const std::vector<int64_t> sb = {0, n, 1}, sb_t = {0, 1, k}, sb_odd = {0, 2 * n, 2};  // broadcast batch
  const std::vector<int64_t> as = {batch, m, k}, bs = {batch, k, n}, os = {batch, m, n}, so = {m * n, n, 1};
  // Column-major copies of a and b, and b with every other element (not BLAS-readable).
  std::vector<float> a_t(a.size()), b_t(b.size()), b_odd(2 * b.size());
  for (int64_t z = 0; z < batch; ++z)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) a_t[z * m * k + p * m + i] = a[(z * m + i) * k + p];
  for (int64_t p = 0; p < k; ++p)
    for (int64_t j = 0; j < n; ++j) {
      b_t[j * k + p] = b[p * n + j];
      b_odd[2 * (p * n + j)] = b[p * n + j];
    }
  struct Case {
    const std::vector<float>* a;
    const std::vector<int64_t>* sa;
    const std::vector<float>* b;
    const std::vector<int64_t>* sb;
  };
  for (const Case& c : {Case{&a, &sa, &b, &sb}, Case{&a_t, &sa_t, &b_t, &sb_t}, Case{&a, &sa, &b_odd, &sb_odd}}) {
    for (int32_t dtype : {F32, F16, BF16}) {
      auto convert = [&](const std::vector<float>& v) {
        std::vector<uint8_t> bytes(v.size() * oar::sdk::DTypeSize(dtype));
        for (size_t i = 0; i < v.size(); ++i) {
          if (dtype == F32) std::memcpy(&bytes[i * 4], &v[i], 4);
          if (dtype == F16) {
            const uint16_t h = oar::sdk::Half::FromFloat(v[i]);
            std::memcpy(&bytes[i * 2], &h, 2);
          }
          if (dtype == BF16) {
            const uint16_t h = oar::sdk::BFloat16::FromFloat(v[i]);
            std::memcpy(&bytes[i * 2], &h, 2);
          }
        }
        return bytes;
      };
      Buffer da(convert(*c.a)), db(convert(*c.b)), out(expected.size() * oar::sdk::DTypeSize(dtype));
      const Result r = RunKernel("matmul", {Desc(dtype, as, *c.sa, da.get()), Desc(dtype, bs, *c.sb, db.get())},
                                 {Desc(dtype, os, so, out.get())});
      ASSERT_EQ(r.code, 0) << r.message;
      const std::vector<uint8_t> got = out.Read<uint8_t>();
      const double tolerance = dtype == F32 ? 1e-4 : dtype == F16 ? 0.05 : 0.3;
      for (size_t i = 0; i < expected.size(); ++i) {
        float v = 0;
        if (dtype == F32) std::memcpy(&v, &got[i * 4], 4);
        uint16_t h = 0;
        if (dtype != F32) std::memcpy(&h, &got[i * 2], 2);
        if (dtype == F16) v = oar::sdk::Half::ToFloat(h);
        if (dtype == BF16) v = oar::sdk::BitsFloat(static_cast<uint32_t>(h) << 16);
        ASSERT_NEAR(v, expected[i], tolerance * (1 + std::fabs(expected[i]))) << "dtype " << dtype << " element " << i;
      }
    }
  }
}

TEST(GpuDevice, ReductionsSoftmaxAndLayerNormMatchPlainLoops) {
  SKIP_WITHOUT_DEVICE();
  const int64_t rows = 5, cols = 1000;
  std::vector<float> x(rows * cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * 3.0f;
  Buffer dx(x), sum(rows * 4), soft(x.size() * 4);
  const std::vector<int64_t> shape = {rows, cols}, strides = {cols, 1}, kept = {rows, 1}, kept_strides = {1, 1};
  const int64_t axes[] = {1};
  oar_attr_t axes_attr{};
  axes_attr.struct_size = OAR_ATTR_STRUCT_SIZE;
  axes_attr.name = "axes";
  axes_attr.type = OAR_ATTR_INTS;
  axes_attr.v.ints.data = axes;
  axes_attr.v.ints.size = 1;
  ASSERT_EQ(
      RunKernel("sum", {Desc(F32, shape, strides, dx.get())}, {Desc(F32, kept, kept_strides, sum.get())}, {axes_attr})
          .code,
      0);
  ASSERT_KERNEL_OK(RunKernel("softmax", {Desc(F32, shape, strides, dx.get())}, {Desc(F32, shape, strides, soft.get())},
                             {IntAttr("axis", 1)}));
  const std::vector<float> s = sum.Read<float>(), p = soft.Read<float>();
  for (int64_t r = 0; r < rows; ++r) {
    double expected = 0, total = 0, mx = -1e30;
    for (int64_t c = 0; c < cols; ++c) {
      expected += x[r * cols + c];
      mx = std::max<double>(mx, x[r * cols + c]);
    }
    for (int64_t c = 0; c < cols; ++c) total += std::exp(x[r * cols + c] - mx);
    EXPECT_NEAR(s[r], expected, 1e-3);
    for (int64_t c = 0; c < cols; c += 97) EXPECT_NEAR(p[r * cols + c], std::exp(x[r * cols + c] - mx) / total, 1e-6);
  }
  // layer_norm over the last axis, weight broadcast from one element (stride 0), bias zeros.
  const std::vector<float> one = {2.0f}, zeros(cols, 0.0f);
  Buffer dw(one), db(zeros), y(x.size() * 4), mean(rows * 4), rstd(rows * 4);
  const std::vector<int64_t> ws = {cols}, w_strides = {0}, b_strides = {1};
  oar_attr_t eps{};
  eps.struct_size = OAR_ATTR_STRUCT_SIZE;
  eps.name = "eps";
  eps.type = OAR_ATTR_FLOAT;
  eps.v.f = 1e-5;
  const Result r = RunKernel(
      "layer_norm",
      {Desc(F32, shape, strides, dx.get()), Desc(F32, ws, w_strides, dw.get()), Desc(F32, ws, b_strides, db.get())},
      {Desc(F32, shape, strides, y.get()), Desc(F32, kept, kept_strides, mean.get()),
       Desc(F32, kept, kept_strides, rstd.get())},
      {IntAttr("axis", 1), eps});
  ASSERT_EQ(r.code, 0) << r.message;
  const std::vector<float> yv = y.Read<float>(), mv = mean.Read<float>(), rv = rstd.Read<float>();
  for (int64_t row = 0; row < rows; ++row) {
    double m = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) m += x[row * cols + c];
    m /= cols;
    for (int64_t c = 0; c < cols; ++c) var += (x[row * cols + c] - m) * (x[row * cols + c] - m);
    const double inv = 1.0 / std::sqrt(var / cols + 1e-5);
    EXPECT_NEAR(mv[row], m, 1e-5);
    EXPECT_NEAR(rv[row], inv, 1e-4 * inv);
    for (int64_t c = 0; c < cols; c += 101) EXPECT_NEAR(yv[row * cols + c], 2.0 * (x[row * cols + c] - m) * inv, 1e-4);
  }
}

TEST(GpuDevice, GatherNamesTheFirstBadIndex) {
  SKIP_WITHOUT_DEVICE();
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};  // [3, 2]
  const std::vector<int64_t> index = {2, 0, 7};
  Buffer dx(x), di(index), out(6 * 4);
  const std::vector<int64_t> xs = {3, 2}, xst = {2, 1}, is = {3}, ist = {1};
  Result r = RunKernel("index_select", {Desc(F32, xs, xst, dx.get()), Desc(I64, is, ist, di.get())},
                       {Desc(F32, xs, xst, out.get())}, {IntAttr("axis", 0)});
  EXPECT_EQ(r.code, OAR_STATUS_OUT_OF_RANGE);
  EXPECT_NE(r.message.find("index 7 at position [2]"), std::string::npos) << r.message;
  const std::vector<int64_t> good = {2, 0, 1};
  Buffer dg(good);
  r = RunKernel("index_select", {Desc(F32, xs, xst, dx.get()), Desc(I64, is, ist, dg.get())},
                {Desc(F32, xs, xst, out.get())}, {IntAttr("axis", 0)});
  ASSERT_EQ(r.code, 0) << r.message;
  EXPECT_EQ(out.Read<float>(), (std::vector<float>{5, 6, 1, 2, 3, 4}));
}

}  // namespace

namespace {

TEST(GpuDevice, PadFillsAroundAStridedInput) {
  SKIP_WITHOUT_DEVICE();
  const std::vector<int64_t> x = {1, 2, 3, 4};  // [2, 2], read transposed
  Buffer dx(x), out(3 * 3 * 8);
  const std::vector<int64_t> xs = {2, 2}, xst = {1, 2}, os = {3, 3}, ost = {3, 1}, pads = {1, 0, 0, 1};
  oar_attr_t pads_attr{};
  pads_attr.struct_size = OAR_ATTR_STRUCT_SIZE;
  pads_attr.name = "pads";
  pads_attr.type = OAR_ATTR_INTS;
  pads_attr.v.ints.data = pads.data();
  pads_attr.v.ints.size = pads.size();
  const Result r = RunKernel("pad", {Desc(I64, xs, xst, dx.get())}, {Desc(I64, os, ost, out.get())},
                             {pads_attr, IntAttr("value", 9)});
  ASSERT_EQ(r.code, 0) << r.message;
  EXPECT_EQ(out.Read<int64_t>(), (std::vector<int64_t>{9, 9, 9, 1, 3, 9, 2, 4, 9}));
}

}  // namespace

namespace {

TEST(GpuDevice, ScatterAddAccumulatesDuplicatesInOrder) {
  SKIP_WITHOUT_DEVICE();
  const std::vector<float> x = {1, 1, 1, 1, 1, 1};  // [3, 2]
  const std::vector<int64_t> index = {2, 0, 2, 2};  // [2, 2] along axis 0
  const std::vector<float> src = {10, 20, 30, 40};
  Buffer dx(x), di(index), ds(src), out(6 * 4);
  const std::vector<int64_t> xs = {3, 2}, xst = {2, 1}, is = {2, 2}, ist = {2, 1};
  const Result r = RunKernel("scatter_add",
                             {Desc(F32, xs, xst, dx.get()), Desc(I64, is, ist, di.get()), Desc(F32, is, ist, ds.get())},
                             {Desc(F32, xs, xst, out.get())}, {IntAttr("axis", 0)});
  ASSERT_EQ(r.code, 0) << r.message;
  EXPECT_EQ(out.Read<float>(), (std::vector<float>{1, 21, 1, 1, 41, 41}));
}

}  // namespace

namespace {

TEST(GpuDevice, TopkOrdersNanFirstAndTiesByIndex) {
  SKIP_WITHOUT_DEVICE();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {3, nan, 5, 3, -0.0f, 0.0f};
  Buffer dx(x), values(3 * 4), indices(3 * 8);
  const std::vector<int64_t> xs = {6}, st = {1}, ks = {3};
  oar_attr_t largest{};
  largest.struct_size = OAR_ATTR_STRUCT_SIZE;
  largest.name = "largest";
  largest.type = OAR_ATTR_BOOL;
  largest.v.b = true;
  Result r = RunKernel("topk", {Desc(F32, xs, st, dx.get())},
                       {Desc(F32, ks, st, values.get()), Desc(I64, ks, st, indices.get())},
                       {IntAttr("k", 3), IntAttr("axis", 0), largest});
  ASSERT_EQ(r.code, 0) << r.message;
  EXPECT_EQ(indices.Read<int64_t>(), (std::vector<int64_t>{1, 2, 0}));
  largest.v.b = false;
  r = RunKernel("topk", {Desc(F32, xs, st, dx.get())},
                {Desc(F32, ks, st, values.get()), Desc(I64, ks, st, indices.get())},
                {IntAttr("k", 3), IntAttr("axis", 0), largest});
  ASSERT_EQ(r.code, 0) << r.message;
  EXPECT_EQ(indices.Read<int64_t>(), (std::vector<int64_t>{4, 5, 0}));
}

}  // namespace

namespace {

oar_attr_t IntsAttr(const char* name, const std::vector<int64_t>& v) {
  oar_attr_t a{};
  a.struct_size = OAR_ATTR_STRUCT_SIZE;
  a.name = name;
  a.type = OAR_ATTR_INTS;
  a.v.ints.data = v.data();
  a.v.ints.size = v.size();
  return a;
}

TEST(GpuDevice, Conv2dAndItsGradientsMatchPlainLoops) {
  SKIP_WITHOUT_DEVICE();
  // x [1, 2, 4, 4], w [2, 1, 3, 3] with groups 2, stride 1, padding 1: y [1, 2, 4, 4].
  const int64_t H = 4, K = 3;
  std::vector<float> x(2 * H * H), w(2 * K * K), gy(2 * H * H);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 5) * 0.5f - 1.0f;
  for (size_t i = 0; i < gy.size(); ++i) gy[i] = static_cast<float>(i % 3) - 1.0f;
  auto X = [&](int c, int h, int v) { return h < 0 || h >= H || v < 0 || v >= H ? 0.0f : x[(c * H + h) * H + v]; };
  std::vector<float> y(2 * H * H, 0), gx(x.size(), 0), gw(w.size(), 0);
  for (int o = 0; o < 2; ++o)
    for (int h = 0; h < H; ++h)
      for (int v = 0; v < H; ++v)
        for (int kh = 0; kh < K; ++kh)
          for (int kw = 0; kw < K; ++kw) {
            const float wv = w[(o * K + kh) * K + kw], xv = X(o, h - 1 + kh, v - 1 + kw);
            y[(o * H + h) * H + v] += xv * wv;
            gw[(o * K + kh) * K + kw] += gy[(o * H + h) * H + v] * xv;
            const int ih = h - 1 + kh, iv = v - 1 + kw;
            if (ih >= 0 && ih < H && iv >= 0 && iv < H) gx[(o * H + ih) * H + iv] += gy[(o * H + h) * H + v] * wv;
          }
  Buffer dx(x), dw(w), dgy(gy), out_y(y.size() * 4), out_gx(gx.size() * 4), out_gw(gw.size() * 4);
  const std::vector<int64_t> xs = {1, 2, H, H}, xst = {2 * H * H, H * H, H, 1}, ws = {2, 1, K, K},
                             wst = {K * K, K * K, K, 1};
  // The attributes point into these vectors, which must outlive every launch.
  const std::vector<int64_t> stride = {1, 1}, padding = {1, 1}, dilation = {1, 1};
  const std::vector<oar_attr_t> attrs = {IntsAttr("stride", stride), IntsAttr("padding", padding),
                                         IntsAttr("dilation", dilation), IntAttr("groups", 2)};
  ASSERT_KERNEL_OK(RunKernel("conv2d", {Desc(F32, xs, xst, dx.get()), Desc(F32, ws, wst, dw.get())},
                             {Desc(F32, xs, xst, out_y.get())}, attrs));
  ASSERT_KERNEL_OK(RunKernel("conv2d_grad_input", {Desc(F32, xs, xst, dgy.get()), Desc(F32, ws, wst, dw.get())},
                             {Desc(F32, xs, xst, out_gx.get())}, attrs));
  ASSERT_KERNEL_OK(RunKernel("conv2d_grad_weight", {Desc(F32, xs, xst, dgy.get()), Desc(F32, xs, xst, dx.get())},
                             {Desc(F32, ws, wst, out_gw.get())}, attrs));
  const std::vector<float> ry = out_y.Read<float>(), rgx = out_gx.Read<float>(), rgw = out_gw.Read<float>();
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(ry[i], y[i], 1e-5) << i;
  for (size_t i = 0; i < gx.size(); ++i) EXPECT_NEAR(rgx[i], gx[i], 1e-5) << i;
  for (size_t i = 0; i < gw.size(); ++i) EXPECT_NEAR(rgw[i], gw[i], 1e-5) << i;
}

}  // namespace

namespace {

TEST(GpuDevice, MaxPoolKeepsTheFirstMaximumAndNeverPicksPadding) {
  SKIP_WITHOUT_DEVICE();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // x [1, 1, 2, 3]; kernel 2x2, stride 1, padding 0: two windows per row... y [1, 1, 1, 2].
  const std::vector<float> x = {-5, 7, 7, -6, 7, nan};
  Buffer dx(x), y(2 * 4), idx(2 * 8);
  const std::vector<int64_t> xs = {1, 1, 2, 3}, xst = {6, 6, 3, 1}, ys = {1, 1, 1, 2}, yst = {2, 2, 2, 1};
  const Result r = RunKernel("max_pool2d", {Desc(F32, xs, xst, dx.get())},
                             {Desc(F32, ys, yst, y.get()), Desc(I64, ys, yst, idx.get())},
                             {IntsAttr("kernel", {2, 2}), IntsAttr("stride", {1, 1}), IntsAttr("padding", {0, 0}),
                              IntsAttr("dilation", {1, 1})});
  ASSERT_EQ(r.code, 0) << r.message;
  EXPECT_EQ(idx.Read<int64_t>(), (std::vector<int64_t>{1, 5}));  // first 7 of window 0; the NaN of window 1
  EXPECT_EQ(y.Read<float>()[0], 7.0f);
}

}  // namespace

namespace {

// Average pooling (docs/ops.md) against plain loops: padding that counts or not, a window clipped by the
// padded input's end, overlapping adaptive windows, and the gradients of both.
TEST(GpuDevice, AveragePoolingAndItsGradientsMatchPlainLoops) {
  SKIP_WITHOUT_DEVICE();
  const int64_t H = 5, W = 4, KH = 3, KW = 2, SH = 2, SW = 1, PH = 1, PW = 1;
  const int64_t HO = (H + 2 * PH - KH) / SH + 1, WO = (W + 2 * PW - KW) / SW + 1;  // 3 x 5
  std::vector<float> x(2 * H * W), gy(2 * HO * WO);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7) % 11) - 5.0f;
  for (size_t i = 0; i < gy.size(); ++i) gy[i] = static_cast<float>((i * 5) % 9) - 4.0f;
  Buffer dx(x), dgy(gy);
  const std::vector<int64_t> xs = {1, 2, H, W}, xst = {2 * H * W, H * W, W, 1}, ys = {1, 2, HO, WO},
                             yst = {2 * HO * WO, HO * WO, WO, 1};
  const std::vector<int64_t> kernel = {KH, KW}, stride = {SH, SW}, padding = {PH, PW};
  for (const bool include_pad : {false, true}) {
    SCOPED_TRACE(include_pad ? "count_include_pad" : "padding does not count");
    std::vector<float> y(gy.size(), 0), gx(x.size(), 0);
    for (int64_t c = 0; c < 2; ++c) {
      for (int64_t i = 0; i < HO; ++i) {
        for (int64_t j = 0; j < WO; ++j) {
          const int64_t h0 = i * SH - PH, w0 = j * SW - PW;
          double sum = 0;
          int64_t inside = 0;
          for (int64_t h = h0; h < h0 + KH; ++h) {
            for (int64_t w = w0; w < w0 + KW; ++w) {
              if (h < 0 || h >= H || w < 0 || w >= W) continue;
              sum += x[(c * H + h) * W + w];
              ++inside;
            }
          }
          const int64_t clipped = (std::min(h0 + KH, H + PH) - h0) * (std::min(w0 + KW, W + PW) - w0);
          const double divisor = static_cast<double>(include_pad ? clipped : inside);
          y[(c * HO + i) * WO + j] = static_cast<float>(sum / divisor);
          for (int64_t h = std::max<int64_t>(h0, 0); h < std::min(h0 + KH, H); ++h) {
            for (int64_t w = std::max<int64_t>(w0, 0); w < std::min(w0 + KW, W); ++w) {
              gx[(c * H + h) * W + w] += static_cast<float>(gy[(c * HO + i) * WO + j] / divisor);
            }
          }
        }
      }
    }
    const std::vector<oar_attr_t> attrs = {IntsAttr("kernel", kernel), IntsAttr("stride", stride),
                                           IntsAttr("padding", padding), IntAttr("count_include_pad", include_pad)};
    Buffer out_y(y.size() * 4), out_gx(gx.size() * 4);
    ASSERT_KERNEL_OK(RunKernel("avg_pool2d", {Desc(F32, xs, xst, dx.get())}, {Desc(F32, ys, yst, out_y.get())}, attrs));
    ASSERT_KERNEL_OK(
        RunKernel("avg_pool2d_grad", {Desc(F32, ys, yst, dgy.get())}, {Desc(F32, xs, xst, out_gx.get())}, attrs));
    const std::vector<float> ry = out_y.Read<float>(), rgx = out_gx.Read<float>();
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(ry[i], y[i], 1e-5) << i;
    for (size_t i = 0; i < gx.size(); ++i) EXPECT_NEAR(rgx[i], gx[i], 1e-5) << i;
  }

  // Adaptive 5 x 4 -> 3 x 3: rows [0,2) [1,4) [3,5), columns [0,2) [1,3) [2,4).
  const int64_t AO = 3;
  std::vector<float> ay(2 * AO * AO, 0), agx(x.size(), 0), agy(2 * AO * AO);
  for (size_t i = 0; i < agy.size(); ++i) agy[i] = static_cast<float>(i % 4) - 1.5f;
  for (int64_t c = 0; c < 2; ++c) {
    for (int64_t i = 0; i < AO; ++i) {
      for (int64_t j = 0; j < AO; ++j) {
        const int64_t h0 = i * H / AO, h1 = ((i + 1) * H + AO - 1) / AO, w0 = j * W / AO,
                      w1 = ((j + 1) * W + AO - 1) / AO;
        const double n = static_cast<double>((h1 - h0) * (w1 - w0));
        double sum = 0;
        for (int64_t h = h0; h < h1; ++h) {
          for (int64_t w = w0; w < w1; ++w) {
            sum += x[(c * H + h) * W + w];
            agx[(c * H + h) * W + w] += static_cast<float>(agy[(c * AO + i) * AO + j] / n);
          }
        }
        ay[(c * AO + i) * AO + j] = static_cast<float>(sum / n);
      }
    }
  }
  Buffer out_ay(ay.size() * 4), out_agx(agx.size() * 4), dagy(agy);
  const std::vector<int64_t> as = {1, 2, AO, AO}, ast = {2 * AO * AO, AO * AO, AO, 1}, size = {AO, AO};
  ASSERT_KERNEL_OK(RunKernel("adaptive_avg_pool2d", {Desc(F32, xs, xst, dx.get())}, {Desc(F32, as, ast, out_ay.get())},
                             {IntsAttr("output_size", size)}));
  ASSERT_KERNEL_OK(
      RunKernel("adaptive_avg_pool2d_grad", {Desc(F32, as, ast, dagy.get())}, {Desc(F32, xs, xst, out_agx.get())}));
  const std::vector<float> ray = out_ay.Read<float>(), ragx = out_agx.Read<float>();
  for (size_t i = 0; i < ay.size(); ++i) EXPECT_NEAR(ray[i], ay[i], 1e-5) << i;
  for (size_t i = 0; i < agx.size(); ++i) EXPECT_NEAR(ragx[i], agx[i], 1e-5) << i;
}

}  // namespace

namespace {

// Calls the contract refuses get INVALID_ARGUMENT naming what is wrong, and nothing is launched.
TEST(GpuDevice, PoolingRefusesBadCallsByName) {
  SKIP_WITHOUT_DEVICE();
  Buffer x(4 * 4 * 4), y(4 * 5 * 5);
  const std::vector<int64_t> xs = {1, 1, 4, 4}, xst = {16, 16, 4, 1};
  const std::vector<int64_t> k2 = {2, 2}, s2 = {2, 2}, p0 = {0, 0}, p3 = {3, 3};
  const std::vector<int64_t> good = {1, 1, 2, 2}, good_st = {4, 4, 2, 1}, wrong = {1, 1, 3, 3}, wrong_st = {9, 9, 3, 1},
                             strided_st = {8, 8, 4, 2};
  auto attrs = [&](const std::vector<int64_t>& padding, bool with_flag) {
    std::vector<oar_attr_t> a = {IntsAttr("kernel", k2), IntsAttr("stride", s2), IntsAttr("padding", padding)};
    if (with_flag) a.push_back(IntAttr("count_include_pad", 1));
    return a;
  };
  auto refused = [&](const Result& r, const char* what) {
    EXPECT_EQ(r.code, OAR_STATUS_INVALID_ARGUMENT) << r.message;
    EXPECT_NE(r.message.find(what), std::string::npos) << r.message;
  };
  refused(
      RunKernel("avg_pool2d", {Desc(F32, xs, xst, x.get())}, {Desc(F32, wrong, wrong_st, y.get())}, attrs(p0, true)),
      "expected the output [1, 1, 2, 2]");
  refused(RunKernel("avg_pool2d", {Desc(F32, xs, xst, x.get())}, {Desc(F32, good, good_st, y.get())}, attrs(p0, false)),
          "'count_include_pad' is missing");
  refused(
      RunKernel("avg_pool2d", {Desc(F32, xs, xst, x.get())}, {Desc(F32, good, strided_st, y.get())}, attrs(p0, true)),
      "must be contiguous");
  // Padding 3 with a 2x2 window, stride 2: output 5x5, whose first and last windows hold only padding.
  const std::vector<int64_t> padded = {1, 1, 5, 5}, padded_st = {25, 25, 5, 1};
  refused(RunKernel("avg_pool2d", {Desc(F32, xs, xst, x.get())}, {Desc(F32, padded, padded_st, y.get())}, attrs(p3, true)),
          "covers only padding");
  const std::vector<int64_t> size = {2, 2};
  refused(RunKernel("adaptive_avg_pool2d", {Desc(F32, xs, xst, x.get())}, {Desc(F32, wrong, wrong_st, y.get())},
                    {IntsAttr("output_size", size)}),
          "expected the output [1, 1, 2, 2]");
}

}  // namespace
