// Both simulators end to end through the core (oar::core): eager ops on kunlun_sim:0 and ascend_sim:1
// give the cpu's results (under scheduling jitter, so a missing synchronisation in the core shows up as
// a wrong value), tensors move between devices, kunlun's unsupported dtypes fall back to cpu and are
// counted, and strict mode turns that into an error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/ops/nn.h"
#include "core/optim/optim.h"
#include "core/ops/ops.h"
#include "core/runtime/runtime.h"

namespace oar {
namespace {

const bool kConfigured = [] {
  setenv("OAR_SIM_JITTER", "2024", 0);
  unsetenv("OAR_SIM_FAULTS");
  runtime::Runtime::Options o;
  o.plugin_files = {OAR_CPU_PLUGIN, OAR_KUNLUN_PLUGIN, OAR_ASCEND_PLUGIN};
  o.use_env_path = false;
  o.use_default_dir = false;
  runtime::Runtime::Configure(o);
  return true;
}();

void ExpectClose(const Tensor& got, const Tensor& want, double rtol, const std::string& what) {
  ASSERT_EQ(got.shape().ToString(), want.shape().ToString()) << what;
  const std::vector<float> g = got.to(DType::kFloat32).ToVector<float>();
  const std::vector<float> w = want.to(DType::kFloat32).ToVector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      ASSERT_TRUE(std::isnan(g[i])) << what << " element " << i;
      continue;
    }
    ASSERT_NEAR(g[i], w[i], rtol * std::max(1.0f, std::abs(w[i]))) << what << " element " << i;
  }
}

class SimCore : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { ASSERT_TRUE(kConfigured); }
  Device dev() const { return Device(GetParam()); }
};

TEST_P(SimCore, EagerOpsMatchTheCpu) {
  const Device cpu("cpu");
  Generator gen(42);
  const Tensor x = randn({64, 33}, gen, 0, 1, DType::kFloat32, cpu);
  const Tensor y = randn({33, 17}, gen, 0, 1, DType::kFloat32, cpu);
  const Tensor b = randn({33}, gen, 0, 1, DType::kFloat32, cpu);
  const Tensor dx = x.to(dev()), dy = y.to(dev()), db = b.to(dev());
  EXPECT_EQ(dx.device(), dev());
  auto check = [&](const Tensor& on_dev, const Tensor& on_cpu, const char* what, double rtol = 1e-6) {
    EXPECT_EQ(on_dev.device(), dev()) << what;
    ExpectClose(on_dev, on_cpu, rtol, what);
  };
  check(dx + db, x + b, "add with broadcast");
  check(dx * 0.5 - dx / 3.0, x * 0.5 - x / 3.0, "scalar arithmetic");
  check(exp(dx), exp(x), "exp");
  check(relu(dx), relu(x), "relu");
  check(tanh(dx), tanh(x), "tanh");
  check(where(gt(dx, 0.0), dx, neg(dx)), where(gt(x, 0.0), x, neg(x)), "where");
  check(matmul(dx, dy), matmul(x, dy.to(cpu)), "matmul", 1e-5);
  check(matmul(dx.transpose(0, 1).contiguous().transpose(0, 1), dy), matmul(x, y), "matmul of a transposed view", 1e-5);
  check(sum(dx, {0}), sum(x, {0}), "sum over rows", 1e-5);
  check(mean(dx, {1}, true), mean(x, {1}, true), "mean keepdim", 1e-5);
  check(sum(dx), sum(x), "sum of all", 1e-5);
  check(softmax(dx, 1), softmax(x, 1), "softmax", 1e-5);
  check(cast(cast(dx, DType::kFloat16), DType::kFloat32), cast(cast(x, DType::kFloat16), DType::kFloat32), "cast f16");
  check(dx.transpose(0, 1).contiguous(), x.transpose(0, 1).contiguous(), "contiguous of a transpose");
}

// A long dependent chain of small ops: every op reads the previous one's output on the device stream,
// and each step's value is read back at the end; jitter delays every queued item.
TEST_P(SimCore, LongDependentChainsUnderJitter) {
  const Device cpu("cpu");
  Tensor d = arange(0, 1000, 1, DType::kFloat32, dev());
  Tensor c = arange(0, 1000, 1, DType::kFloat32, cpu);
  std::vector<Tensor> snapshots;
  for (int i = 0; i < 60; ++i) {
    d = d * 0.5 + 1.0;
    c = c * 0.5 + 1.0;
    if (i % 10 == 0) snapshots.push_back(sum(d));
  }
  ExpectClose(d, c, 1e-6, "chain");
  EXPECT_NEAR(snapshots.back().item<float>(), sum(c).item<float>(), 1e-2);
}

TEST_P(SimCore, TensorsMoveBetweenDevicesIntact) {
  std::vector<float> v(5000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.25f;
  const Tensor t = FromVector<float>(v, {50, 100}, dev());
  const Device other(std::string(GetParam()).find("kunlun") == 0 ? "kunlun_sim:1" : "ascend_sim:0");
  const Tensor peer = t.to(other);  // same plugin: peer copy
  EXPECT_EQ(peer.device(), other);
  const Tensor foreign = peer.to(Device(std::string(GetParam()).find("kunlun") == 0 ? "ascend_sim:1" : "kunlun_sim:0"));
  EXPECT_EQ(foreign.to(Device("cpu")).ToVector<float>(), v);
  EXPECT_EQ(t.slice(1, 10, 20).to(other).ToVector<float>(), t.slice(1, 10, 20).ToVector<float>());
}

TEST_P(SimCore, MemoryStatisticsReachTheCore) {
  runtime::DeviceContext& ctx = runtime::Runtime::Get().Context(dev());
  EXPECT_FALSE(ctx.host_accessible());
  const auto stats = ctx.PluginMemoryStats();
  ASSERT_TRUE(stats.bytes_limit.has_value());
  EXPECT_EQ(*stats.bytes_limit, uint64_t{1} << 30);
  const Tensor big = zeros({1 << 20}, DType::kFloat32, dev());
  EXPECT_GE(*ctx.PluginMemoryStats().bytes_in_use, uint64_t{4} << 20);
  EXPECT_EQ(sum(big).item<float>(), 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Devices, SimCore, ::testing::Values("kunlun_sim:0", "ascend_sim:1"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string s = info.param;
                           for (char& ch : s) ch = ch == ':' ? '_' : ch;
                           return s;
                         });

uint64_t Fallbacks(const char* type, const std::string& op) {
  const auto counts = runtime::Runtime::Get().FindType(type)->FallbackCounts();
  const auto it = counts.find(op);
  return it == counts.end() ? 0 : it->second;
}

TEST(SimCoreFallback, KunlunFloat64AndInt64ArithmeticFallBackToCpuAndAreCounted) {
  ASSERT_TRUE(kConfigured);
  const Device kunlun("kunlun_sim:0");
  const uint64_t add_before = Fallbacks("kunlun_sim", "add");
  const uint64_t sum_before = Fallbacks("kunlun_sim", "sum");
  const Tensor a = FromVector<double>({1.5, 2.25, -3.0, 4.0}, {2, 2}, kunlun);
  const Tensor s = sum(a + a, {1});
  EXPECT_EQ(s.device(), kunlun);  // results come back on the device asked for
  EXPECT_EQ(s.ToVector<double>(), (std::vector<double>{7.5, 2.0}));
  EXPECT_EQ(Fallbacks("kunlun_sim", "add"), add_before + 1);
  EXPECT_EQ(Fallbacks("kunlun_sim", "sum"), sum_before + 1);
  // int64: arithmetic falls back, a cast does not.
  const uint64_t mul_before = Fallbacks("kunlun_sim", "mul");
  const uint64_t cast_before = Fallbacks("kunlun_sim", "cast");
  const Tensor i = FromVector<int64_t>({1, 2, 3}, {3}, kunlun);
  EXPECT_EQ((i * i).ToVector<int64_t>(), (std::vector<int64_t>{1, 4, 9}));
  EXPECT_EQ(cast(i, DType::kFloat32).ToVector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(Fallbacks("kunlun_sim", "mul"), mul_before + 1);
  EXPECT_EQ(Fallbacks("kunlun_sim", "cast"), cast_before);
  // float32 stays on the device.
  const uint64_t f32_before = Fallbacks("kunlun_sim", "add");
  const Tensor f = FromVector<float>({1, 2}, {2}, kunlun);
  EXPECT_EQ((f + f).ToVector<float>(), (std::vector<float>{2, 4}));
  EXPECT_EQ(Fallbacks("kunlun_sim", "add"), f32_before);
}

TEST(SimCoreFallback, StrictModeMakesAnUnsupportedDtypeAnError) {
  ASSERT_TRUE(kConfigured);
  const Tensor a = FromVector<double>({1, 2}, {2}, Device("kunlun_sim:1"));
  runtime::Runtime::Get().SetStrict(true);
  try {
    exp(a);
    ADD_FAILURE() << "no error in strict mode";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    const std::string m = e.what();
    EXPECT_NE(m.find("kunlun_sim:1"), std::string::npos) << m;
    EXPECT_NE(m.find("float64"), std::string::npos) << m;
    EXPECT_NE(m.find("OAR_STRICT_DEVICE=1"), std::string::npos) << m;
  }
  runtime::Runtime::Get().SetStrict(false);
  EXPECT_NEAR(exp(a).ToVector<double>()[1], 7.38905609893065, 1e-12);
}

// The rotary embedding's cos/sin tables used to be cast from float64 on the device: on a device without
// float64 that needed a CPU fallback, so in strict mode (certification) the Llama example could not run.
TEST(SimCoreFallback, RotaryEmbeddingNeedsNoFloat64OnTheDevice) {
  ASSERT_TRUE(kConfigured);
  const std::vector<float> v = {0.5f, -1.0f, 2.0f, 0.25f, 1.5f, -0.75f, 0.125f, 3.0f};
  const std::vector<float> want = rotary_embedding(FromVector<float>(v, {2, 4}, Device("cpu")), 3).ToVector<float>();
  runtime::Runtime::Get().SetStrict(true);
  std::vector<float> got;
  EXPECT_NO_THROW(got = rotary_embedding(FromVector<float>(v, {2, 4}, Device("kunlun_sim:0")), 3).ToVector<float>());
  runtime::Runtime::Get().SetStrict(false);
  EXPECT_EQ(got, want);
}

// arange, rand and randn draw in float64 on the host; they used to cast on the device (see above).
TEST(SimCoreFallback, FactoriesNeedNoFloat64OnTheDevice) {
  ASSERT_TRUE(kConfigured);
  const Device dev("kunlun_sim:0");
  runtime::Runtime::Get().SetStrict(true);
  std::vector<int64_t> range;
  std::vector<float> drawn;
  EXPECT_NO_THROW(range = arange(0, 4, 1, DType::kInt64, dev).ToVector<int64_t>());
  EXPECT_NO_THROW({
    Generator g(7);
    drawn = rand({3}, g, 0, 1, DType::kFloat32, dev).ToVector<float>();
  });
  runtime::Runtime::Get().SetStrict(false);
  EXPECT_EQ(range, (std::vector<int64_t>{0, 1, 2, 3}));
  Generator g(7);
  EXPECT_EQ(drawn, rand({3}, g, 0, 1, DType::kFloat32, Device("cpu")).ToVector<float>());
}

// ClipGradNorm used to cast every gradient to float64 on its device.
TEST(SimCoreFallback, ClipGradNormNeedsNoFloat64OnTheDevice) {
  ASSERT_TRUE(kConfigured);
  Tensor p = FromVector<float>({3, 4}, {2}, Device("kunlun_sim:0"));
  p.set_requires_grad(true);
  sum(p * p).backward();  // grad = 2p = (6, 8): norm 10
  runtime::Runtime::Get().SetStrict(true);
  double norm = 0;
  EXPECT_NO_THROW(norm = optim::ClipGradNorm({&p}, 5.0).item<double>());
  runtime::Runtime::Get().SetStrict(false);
  EXPECT_NEAR(norm, 10.0, 1e-6);
  const std::vector<float> g = p.grad().ToVector<float>();
  EXPECT_NEAR(g[0], 3.0, 1e-5);
  EXPECT_NEAR(g[1], 4.0, 1e-5);
}

TEST(SimCoreFallback, AscendHasNoFloat64Either) {
  ASSERT_TRUE(kConfigured);
  const uint64_t before = Fallbacks("ascend_sim", "matmul");
  const Tensor a = FromVector<double>({1, 2, 3, 4}, {2, 2}, Device("ascend_sim:0"));
  EXPECT_EQ(matmul(a, a).ToVector<double>(), (std::vector<double>{7, 10, 15, 22}));
  EXPECT_EQ(Fallbacks("ascend_sim", "matmul"), before + 1);
}

}  // namespace
}  // namespace oar
