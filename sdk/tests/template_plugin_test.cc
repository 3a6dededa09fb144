// The vendor template (sdk/template) as the core sees it: its kernels compute what docs/ops.md says (checked
// against the cpu plugin), its streams really are asynchronous and in order, events order work across
// streams, what it declines is declined with a reason, and misuse gives clean errors instead of crashes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "core/ops/ops.h"
#include "core/runtime/runtime.h"
#include "core/runtime/status.h"
#include "core/runtime/stream.h"

namespace oar {
namespace {

using runtime::Runtime;

const bool kConfigured = [] {
  Runtime::Options o;
  o.plugin_files = {OAR_TEMPLATE_PLUGIN, OAR_CPU_PLUGIN};
  o.use_env_path = false;
  o.use_default_dir = false;
  Runtime::Configure(o);
  return true;
}();

const Device kDev("template_device:0");
const Device kCpu("cpu:0");

/// Every kernel below must run on the template itself: no silent cpu fallback.
struct Strict {
  Strict() { Runtime::Get().SetStrict(true); }
  ~Strict() { Runtime::Get().SetStrict(false); }
};

void ExpectNear(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_EQ(got.device(), kDev) << what;
  ASSERT_EQ(got.shape().ToString(), want.shape().ToString()) << what;
  const std::vector<float> g = got.ToVector<float>(), w = want.ToVector<float>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-4 * (1 + std::abs(w[i]))) << what << " at " << i;
}

oar_status_code Code(oar_status_t* s) { return static_cast<oar_status_code>(runtime::TakeStatus(s).code); }

TEST(SdkTemplate, LoadsWithItsAttributesAndKernels) {
  ASSERT_TRUE(kConfigured);
  runtime::DeviceType* type = Runtime::Get().FindType("template_device");
  ASSERT_NE(type, nullptr) << Runtime::Get().AvailableDevicesString();
  EXPECT_EQ(type->device_count(), 1);
  EXPECT_EQ(type->plugin().kernels().size(), 36u);  // the rows of kKernels in src/kernels.cc
  runtime::DeviceContext& ctx = Runtime::Get().Context(kDev);
  EXPECT_FALSE(ctx.host_accessible());
  ASSERT_NE(ctx.FindAttribute(OAR_DEVICE_ATTR_TOTAL_MEMORY), nullptr);
  EXPECT_GT(ctx.FindAttribute(OAR_DEVICE_ATTR_TOTAL_MEMORY)->i, 0);
  Tensor t = zeros({1024}, DType::kFloat32, kDev);
  const auto stats = ctx.PluginMemoryStats();
  ASSERT_TRUE(stats.bytes_in_use.has_value());
  EXPECT_GE(*stats.bytes_in_use, 4096u);
}

TEST(SdkTemplate, KernelsMatchTheCpuPlugin) {
  Strict strict;
  Generator gen(42);
  const Tensor a = rand({2, 3, 4}, gen, -1, 1, DType::kFloat32, kCpu);
  const Tensor b = rand({3, 1}, gen, -1, 1, DType::kFloat32, kCpu);  // broadcast along two dimensions
  const Tensor m = rand({4, 5}, gen, -1, 1, DType::kFloat32, kCpu);
  const Tensor da = a.to(kDev), db = b.to(kDev), dm = m.to(kDev);
  ExpectNear(da + db, a + b, "add with broadcast");
  ExpectNear(da * db, a * b, "mul with broadcast");
  ExpectNear(sum(da, {1}), sum(a, {1}), "sum over axis 1");
  ExpectNear(sum(da, {0, 2}, true), sum(a, {0, 2}, true), "sum over axes 0, 2 (keepdim)");
  ExpectNear(sum(da), sum(a), "sum of everything (rank 0 result)");
  ExpectNear(matmul(da, dm), matmul(a, m), "batched matmul, batch broadcast");
  ExpectNear(matmul(dm.transpose(0, 1), dm), matmul(m.transpose(0, 1), m), "matmul of a transposed operand");
  ExpectNear(da.transpose(0, 2).contiguous(), a.transpose(0, 2).contiguous(), "strided copy");
  ExpectNear(full({3, 2}, 2.5, DType::kFloat32, kDev), full({3, 2}, 2.5, DType::kFloat32, kCpu), "fill");
  ExpectNear(da - db, a - b, "sub with broadcast");
  ExpectNear(da / (db + 2.0), a / (b + 2.0), "div with broadcast");
  ExpectNear(sqrt(da * da), sqrt(a * a), "sqrt");
  ExpectNear(softmax(da, 1), softmax(a, 1), "softmax over a middle axis");
  ExpectNear(da.to(DType::kFloat64).to(DType::kFloat32), a, "cast float32 -> float64 -> float32");
  // Empty tensors: nothing is touched, reductions of nothing are 0.
  const Tensor empty = zeros({0, 3}, DType::kFloat32, kDev);
  EXPECT_EQ((empty + empty).numel(), 0);
  EXPECT_EQ(sum(empty, {0}).ToVector<float>(), (std::vector<float>{0, 0, 0}));
}

TEST(SdkTemplate, RankAboveFourIsDeclinedWithAReasonAndFallsBack) {
  const Tensor x = ones({1, 2, 1, 2, 2}, DType::kFloat32, kCpu).to(kDev);  // to() copies bytes: no kernel
  {
    Strict strict;
    try {
      (void)(x + x);
      ADD_FAILURE() << "rank 5 add ran under strict mode";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
      EXPECT_NE(std::string(e.what()).find("template_device handles rank <= 4"), std::string::npos) << e.what();
    }
  }
  const Tensor y = x + x;  // not strict: the cpu runs it, the result comes back to the template device
  EXPECT_EQ(y.device(), kDev);
  EXPECT_EQ(y.ToVector<float>(), std::vector<float>(8, 2.0f));
  EXPECT_GE(Runtime::Get().FindType("template_device")->FallbackCounts().at("add"), 1u);
}

TEST(SdkTemplate, StreamWorkIsAsynchronousAndInOrder) {
  runtime::Stream stream(kDev);
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::vector<int> order;
  stream.AddCallback([opened] { opened.wait(); });  // holds the stream until the test opens the gate
  for (int i = 1; i <= 3; ++i) stream.AddCallback([&order, i] { order.push_back(i); });
  EXPECT_FALSE(stream.Query()) << "work was enqueued behind a blocked callback, yet the stream is idle";
  EXPECT_TRUE(order.empty()) << "a callback ran before the work enqueued ahead of it";
  gate.set_value();
  stream.Synchronize();
  EXPECT_TRUE(stream.Query());
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(SdkTemplate, EventsOrderWorkAcrossStreams) {
  runtime::Stream producer(kDev), consumer(kDev);
  runtime::Event ready(kDev);
  EXPECT_TRUE(ready.Query()) << "a never-recorded event must be complete";
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::atomic<bool> consumer_ran{false};
  producer.AddCallback([opened] { opened.wait(); });
  ready.Record(producer);
  consumer.WaitEvent(ready);
  consumer.AddCallback([&] { consumer_ran = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(ready.Query());
  EXPECT_FALSE(consumer_ran.load()) << "the consumer did not wait for the producer's event";
  gate.set_value();
  consumer.Synchronize();
  EXPECT_TRUE(consumer_ran.load());
  EXPECT_TRUE(ready.Query());
}

TEST(SdkTemplate, MisuseGivesCleanErrors) {
  runtime::DeviceContext& ctx = Runtime::Get().Context(kDev);
  const oar_device_api_t* api = ctx.api();
  int on_the_stack = 0;
  bool idle = false;
  EXPECT_EQ(Code(api->stream_query(0, reinterpret_cast<oar_stream_t>(&on_the_stack), &idle)),
            OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(Code(api->free(0, &on_the_stack)), OAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(Code(api->memcpy_h2d(0, &on_the_stack, &idle, 1)), OAR_STATUS_INVALID_ARGUMENT);
  void* p = nullptr;
  EXPECT_EQ(Code(api->malloc(1, 64, &p)), OAR_STATUS_INVALID_ARGUMENT);  // only device 0 exists
  EXPECT_EQ(Code(api->malloc(0, size_t{1} << 50, &p)), OAR_STATUS_RESOURCE_EXHAUSTED);
  ASSERT_EQ(api->malloc(0, 100, &p), nullptr);
  EXPECT_EQ(Code(api->memcpy_h2d(0, static_cast<char*>(p) + 50, &on_the_stack, 64)), OAR_STATUS_INVALID_ARGUMENT)
      << "a copy running past the end of an allocation must be refused";
  EXPECT_EQ(api->free(0, p), nullptr);
  EXPECT_EQ(Code(api->free(0, p)), OAR_STATUS_INVALID_ARGUMENT) << "double free";
}

}  // namespace
}  // namespace oar
