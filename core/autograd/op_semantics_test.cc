// Op semantics and gradient conventions (docs/ops.md) on cpu, kunlun_sim and ascend_sim: the defects an
// external gradient oracle found (strided batched matmul, the VJP of every matmul rank combination,
// zeros in prod, pow at 0, log_softmax at large logits) and the conventions chosen for clip, std,
// layer_norm, cross-entropy, empty extents, one_hot, pooling padding, float values reaching integer
// tensors, int64 host reads, negative slice steps and BatchNorm's running variance.
//
// Gradients on a device (float32) are compared with autograd on the cpu in float64, which is itself
// checked against central differences (testing::GradCheck).
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "core/autograd/autograd.h"
#include "core/autograd/grad_check.h"
#include "core/ops/nn.h"
#include "core/runtime/runtime.h"

namespace oar {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

const bool kConfigured = [] {
  unsetenv("OAR_SIM_FAULTS");
  runtime::Runtime::Options o;
  o.plugin_files = {OAR_CPU_PLUGIN, OAR_KUNLUN_PLUGIN, OAR_ASCEND_PLUGIN};
  o.use_env_path = false;
  o.use_default_dir = false;
  runtime::Runtime::Configure(o);
  return true;
}();

const Device kCpu("cpu");

Tensor F64(const std::vector<double>& v, const Dims& shape, bool requires_grad = true) {
  Tensor t = FromVector<double>(v, shape, kCpu);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

class OpSemantics : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { ASSERT_TRUE(kConfigured); }
  Device dev() const { return Device(GetParam()); }
  // ascend_sim multiplies matrices on an fp16 "cube" unit (float32 accumulation).
  double MatmulTol() const { return std::string(GetParam()).find("ascend") == 0 ? 2e-2 : 1e-4; }
  // A float32 copy of a float64 cpu tensor on the device under test.
  Tensor OnDev(const Tensor& t) const { return cast(t.detach(), DType::kFloat32).to(dev()); }

  // d/dx sum(f(x) * w): autograd on the device in float32 against autograd on the cpu in float64,
  // which GradCheck first checks against central differences.
  void ExpectDeviceGrad(const Fn& f, const std::vector<Tensor>& cpu64, const std::string& what, double tol,
                        bool check_cpu = true) {
    SCOPED_TRACE(what + " on " + std::string(GetParam()));
    if (check_cpu) testing::GradCheck(f, cpu64, what);
    const Tensor out = f(cpu64);
    Generator g(7);
    const Tensor w = rand(out.shape(), g, 0.5, 1.5, DType::kFloat64, kCpu);
    const std::vector<Tensor> want = grad({sum(out * w)}, cpu64);
    std::vector<Tensor> xs;
    for (const Tensor& c : cpu64) {
      Tensor t = OnDev(c);
      t.set_requires_grad(true);
      xs.push_back(t);
    }
    const Tensor y = f(xs);
    ASSERT_EQ(y.device(), dev());
    const std::vector<Tensor> got = grad({sum(y * OnDev(w))}, xs);
    for (size_t k = 0; k < xs.size(); ++k) {
      ASSERT_EQ(got[k].shape(), cpu64[k].shape()) << "input " << k;
      const std::vector<double> a = got[k].to(kCpu).ToVector<double>(), b = want[k].ToVector<double>();
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_FALSE(std::isnan(a[i])) << "input " << k << "[" << i << "]";
        EXPECT_NEAR(a[i], b[i], tol * std::max(1.0, std::abs(b[i]))) << "input " << k << "[" << i << "]";
      }
    }
  }
};

// ---- issue: defects --------------------------------------------------------------------------------------

TEST_P(OpSemantics, MatmulOfRowStridedBatchedViewsWorks) {
  // x[:, ::2, :] with an odd row count: oneDNN refused its memory descriptor (batch stride < span).
  Generator g(3);
  for (int64_t t : {7, 8}) {
    SCOPED_TRACE("T = " + std::to_string(t));
    const Tensor x = rand({3, t, 5}, g, -1, 1, DType::kFloat64, kCpu);
    const Tensor w = rand({6, 5}, g, -1, 1, DType::kFloat64, kCpu);
    const Tensor want = linear(x.slice(1, 0, t, 2), w);
    const Tensor xs = OnDev(x).slice(1, 0, t, 2), wd = OnDev(w);
    for (const Tensor& got : {linear(xs, wd), matmul(xs, OnDev(x).slice(1, 1, t, 2).transpose(1, 2)),
                              matmul(xs.slice(2, 0, 5, 2), wd.slice(1, 0, 5, 2).transpose(0, 1))}) {
      ASSERT_EQ(got.device(), dev());
      ASSERT_EQ(got.rank(), 3);
    }
    const std::vector<double> a = linear(xs, wd).to(kCpu).ToVector<double>(), b = want.ToVector<double>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], MatmulTol() * 5) << i;
  }
}

TEST_P(OpSemantics, MatmulGradientForEveryRankCombination) {
  struct Case {
    Dims a, b;
  };
  const std::vector<Case> cases = {
      {{4}, {4}},          {{4}, {4, 3}},          {{4}, {2, 4, 3}},    {{3, 4}, {4}},      {{2, 3, 4}, {4}},
      {{3, 4}, {4, 5}},    {{2, 3, 4}, {2, 4, 5}}, {{2, 3, 4}, {4, 5}}, {{2, 1, 3, 4}, {3, 4, 5}},
  };
  uint64_t seed = 40;
  for (const Case& c : cases) {
    const std::string what = "matmul " + c.a.ToString() + " x " + c.b.ToString();
    ExpectDeviceGrad([](auto& v) { return matmul(v[0], v[1]); },
                     {testing::RandomF64(c.a, seed++), testing::RandomF64(c.b, seed++)}, what, MatmulTol());
  }
  // Second order through a dot product (create_graph).
  testing::GradCheck([](auto& v) { return grad({matmul(v[0], v[1]) * matmul(v[0], v[1])}, {v[0]}, {}, true)[0]; },
                     {testing::RandomF64({4}, 60), testing::RandomF64({4}, 61)}, "d/da of the dot product's gradient");
}

TEST_P(OpSemantics, ProdGradientIsExactWithZeros) {
  // One zero (row 0), two zeros (row 1), none (row 2).
  const std::vector<double> v = {1, 2, 0, 3, 0, 2, 0, 1, 1, 2, 3, 4};
  const std::vector<double> want = {0, 0, 6, 0, 0, 0, 0, 0, 24, 12, 8, 6};
  for (bool on_cpu64 : {true, false}) {
    Tensor x = on_cpu64 ? F64(v, {3, 4}) : OnDev(F64(v, {3, 4}, false));
    if (!on_cpu64) x.set_requires_grad(true);
    const Tensor gx = grad({sum(prod(x, {1}))}, {x})[0];
    EXPECT_EQ(gx.to(kCpu).ToVector<double>(), want);
  }
  // Several axes at once, keepdim, and a single zero in the whole tensor.
  ExpectDeviceGrad([](auto& x) { return prod(x[0], {0, 2}, true); },
                   {F64({1, 2, 0, 3, 0.5, 2, 1.5, 1, 1, 2, 3, 0.5}, {2, 3, 2})}, "prod over axes 0 and 2", 1e-5);
  ExpectDeviceGrad([](auto& x) { return prod(x[0]); }, {F64({1.5, 2, 0, 3, 0.5, 2}, {2, 3})}, "prod of all", 1e-5);
  ExpectDeviceGrad([](auto& x) { return prod(x[0], {1}); }, {testing::RandomF64({3, 9}, 62, 0.5, 1.5)}, "prod", 1e-5);
  // Second order: d/dx of the gradient, zeros included.
  testing::GradCheck([](auto& x) { return grad({sum(prod(x[0], {1}))}, {x[0]}, {}, true)[0]; },
                     {F64({1, 2, 0, 3, 0, 2, 0.5, 1, 1, 2, 3, 4}, {3, 4})}, "d/dx of prod's gradient");
}

TEST_P(OpSemantics, PowGradientAtZeroBaseAndZeroExponentIsZero) {
  const Tensor x = OnDev(F64({0, 0, 2, -1}, {4}, false)).set_requires_grad(true);
  const Tensor gx0 = grad({sum(pow(x, 0.0))}, {x})[0];
  EXPECT_EQ(gx0.to(kCpu).ToVector<double>(), (std::vector<double>{0, 0, 0, 0}));
  const Tensor gx2 = grad({sum(pow(x, 2.0))}, {x})[0];
  EXPECT_EQ(gx2.to(kCpu).ToVector<double>(), (std::vector<double>{0, 0, 4, -2}));
  // A tensor exponent holding 0 where the base is 0: both gradients are finite.
  const Tensor b = OnDev(F64({0, 0, 2, 3}, {4}, false)).set_requires_grad(true);
  const Tensor y = OnDev(F64({0, 1, 0, 2}, {4}, false)).set_requires_grad(true);
  const std::vector<Tensor> g = grad({sum(pow(b, y))}, {b, y});
  EXPECT_EQ(g[0].to(kCpu).ToVector<double>(), (std::vector<double>{0, 1, 0, 6}));
  EXPECT_EQ(g[1].to(kCpu).ToVector<double>()[0], 0.0);
  EXPECT_EQ(g[1].to(kCpu).ToVector<double>()[1], 0.0);
}

TEST_P(OpSemantics, LogSoftmaxIsAccurateAtLargeLogits) {
  // Logits near 1e4 are exact in float32; the answer (x - max) - log(sum(exp(x - max))) is small.
  const std::vector<double> v = {1e4, 1e4 + 1, 1e4 + 2, 1e4 - 3, -1e4, 1e4 + 0.5, 1e4 + 0.25, 1e4 - 0.125};
  auto reference = [&](size_t row0, size_t n, size_t stride) {
    double m = -INFINITY, s = 0;
    for (size_t i = 0; i < n; ++i) m = std::max(m, v[row0 + i * stride]);
    for (size_t i = 0; i < n; ++i) s += std::exp(v[row0 + i * stride] - m);
    std::vector<double> r;
    for (size_t i = 0; i < n; ++i) r.push_back(v[row0 + i * stride] - m - std::log(s));
    return r;
  };
  const Tensor x = OnDev(F64(v, {2, 4}, false));
  const std::vector<double> rows = log_softmax(x, 1).to(kCpu).ToVector<double>();
  for (size_t r = 0; r < 2; ++r) {
    const std::vector<double> want = reference(4 * r, 4, 1);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_NEAR(rows[4 * r + i], want[i], 2e-6 * std::max(1.0, std::abs(want[i]))) << "row " << r << " " << i;
    }
  }
  // Along axis 0 (the column path of the kernel).
  const std::vector<double> cols = log_softmax(x, 0).to(kCpu).ToVector<double>();
  for (size_t c = 0; c < 4; ++c) {
    const std::vector<double> want = reference(c, 2, 4);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_NEAR(cols[4 * i + c], want[i], 2e-6 * std::max(1.0, std::abs(want[i]))) << "column " << c << " " << i;
    }
  }
  // cross_entropy: row 0 with target 2 is -(2 - 2 - log(1 + e^-1 + e^-2 + e^-5)).
  const Tensor target = FromVector<int64_t>({2, 0}, {2}, kCpu).to(dev());
  const double ce = cross_entropy(x, target).to(kCpu).item<double>();
  EXPECT_NEAR(ce, -(reference(0, 4, 1)[2] + reference(4, 4, 1)[0]) / 2, 2e-3);  // row 1 is ~2e4: float32 ulps
  EXPECT_NEAR(cross_entropy(x.slice(0, 0, 1), target.slice(0, 0, 1)).to(kCpu).item<double>(), -reference(0, 4, 1)[2],
              2e-6);
}

// ---- issue: conventions ----------------------------------------------------------------------------------

TEST_P(OpSemantics, ClipPassesTheWholeGradientAtABound) {
  // As torch.clamp: elements at a bound count as inside.
  const Tensor x = OnDev(F64({0.5, 0.8, 1.0, 1.6, 2.0}, {5}, false)).set_requires_grad(true);
  const Tensor y = clip(x, 0.8, 1.6);
  const double lo = 0.8f, hi = 1.6f;  // the bounds in float32
  EXPECT_EQ(y.to(kCpu).ToVector<double>(), (std::vector<double>{lo, lo, 1.0, hi, hi}));
  EXPECT_EQ(grad({sum(y)}, {x})[0].to(kCpu).ToVector<double>(), (std::vector<double>{0, 1, 1, 1, 0}));
  const Tensor n = clip(OnDev(F64({NAN, 3}, {2}, false)), 0, 1);
  EXPECT_TRUE(std::isnan(n.to(kCpu).ToVector<double>()[0]));  // NaN stays NaN
}

TEST_P(OpSemantics, StdOfAConstantRowHasAZeroGradient) {
  const Tensor x = OnDev(F64({2, 2, 2, 1, 2, 4}, {2, 3}, false)).set_requires_grad(true);
  const Tensor s = stddev(x, {1});
  const std::vector<double> sv = s.to(kCpu).ToVector<double>();
  EXPECT_EQ(sv[0], 0.0);
  EXPECT_NEAR(sv[1], std::sqrt(7.0 / 3.0), 1e-6);
  const std::vector<double> g = grad({sum(s)}, {x})[0].to(kCpu).ToVector<double>();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(g[i], 0.0) << i;  // not NaN
  for (int i = 3; i < 6; ++i) EXPECT_FALSE(std::isnan(g[i])) << i;
  ExpectDeviceGrad([](auto& v) { return stddev(v[0], {0}); }, {testing::RandomF64({4, 3}, 63)}, "std", 1e-4);
  EXPECT_TRUE(std::isnan(stddev(OnDev(F64({1, NAN, 2}, {3}, false))).to(kCpu).item<double>()));  // NaN stays
  // var has no sqrt: its gradient at zero variance is 0 already.
  const Tensor v = OnDev(F64({3, 3}, {2}, false)).set_requires_grad(true);
  EXPECT_EQ(grad({var(v)}, {v})[0].to(kCpu).ToVector<double>(), (std::vector<double>{0, 0}));
}

TEST_P(OpSemantics, LayerNormIsAccurateOnOffsetFloat32Data) {
  // mean ~1000, std ~1: a float32 mean is off by many of its ulps; the statistics must not be.
  Generator g(64);
  const int64_t rows = 8, n = 1000;
  const Tensor x64 = randn({rows, n}, g, 1000, 1, DType::kFloat64, kCpu);
  const Tensor x32 = cast(x64, DType::kFloat32);
  const std::vector<double> xv = cast(x32, DType::kFloat64).ToVector<double>();  // what float32 holds
  const std::vector<double> got = layer_norm(x32.to(dev()), 1).to(kCpu).ToVector<double>();
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, s = 0;
    for (int64_t i = 0; i < n; ++i) m += xv[r * n + i];
    m /= n;
    for (int64_t i = 0; i < n; ++i) s += (xv[r * n + i] - m) * (xv[r * n + i] - m);
    const double rstd = 1 / std::sqrt(s / n + 1e-5);
    for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(got[r * n + i] - (xv[r * n + i] - m) * rstd));
  }
  EXPECT_LT(worst, 1e-6) << "largest error of a normalised value";
}

TEST_P(OpSemantics, CrossEntropyWithEveryTargetIgnoredIsZero) {
  const Tensor logits = OnDev(testing::RandomF64({3, 4}, 65)).set_requires_grad(true);
  const Tensor target = FromVector<int64_t>({-100, -100, -100}, {3}, kCpu).to(dev());
  const Tensor loss = cross_entropy(logits, target);
  EXPECT_EQ(loss.to(kCpu).item<double>(), 0.0);
  for (double d : grad({loss}, {logits})[0].to(kCpu).ToVector<double>()) EXPECT_EQ(d, 0.0);
}

// ---- op semantics ----------------------------------------------------------------------------------------

TEST_P(OpSemantics, ZeroExtentsAfterTheFirstDimensionWork) {
  const Tensor x = zeros({3, 4, 5}, DType::kFloat32, dev());
  const Tensor e = x.slice(1, 0, 0);
  EXPECT_EQ(e.shape(), (Dims{3, 0, 5}));
  EXPECT_TRUE(e.is_contiguous());
  EXPECT_EQ(e.contiguous().numel(), 0);
  EXPECT_NE(e.ToString().find("[3, 0, 5]"), std::string::npos);
  EXPECT_TRUE(e.ToVector<float>().empty());
  const auto [values, indices] = topk(x.slice(0, 0, 2).view({2, 20}), 0, 1);
  EXPECT_EQ(values.shape(), (Dims{2, 0}));
  EXPECT_EQ(indices.shape(), (Dims{2, 0}));
  EXPECT_EQ(tril(zeros({2, 0, 3}, DType::kFloat32, dev())).shape(), (Dims{2, 0, 3}));
  EXPECT_EQ(triu(e.transpose(1, 2)).shape(), (Dims{3, 5, 0}));
  const Tensor up = FromVector<float>(std::vector<float>{}, {2, 0, 4}, dev());
  EXPECT_EQ((up + 1.0).shape(), (Dims{2, 0, 4}));
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("oar_empty_extent_" + std::to_string(getpid()) + ".safetensors");
  SaveTensors(path, {{"e", e}});
  EXPECT_EQ(LoadTensors(path, dev()).at("e").shape(), (Dims{3, 0, 5}));
  std::filesystem::remove(path);
}

TEST_P(OpSemantics, HostTensorsWithAnEmptyInnerExtentCopyToTheDevice) {
  // [3, 0] from the host, and an empty transposed view, to the device and back: this used to fail with
  // INTERNAL "CopyFromHost needs a contiguous tensor".
  const Tensor empty_rows = zeros({3, 0}, DType::kFloat32, kCpu);
  for (const Tensor& host : {empty_rows, zeros({0, 3}, DType::kFloat32, kCpu).transpose(0, 1)}) {
    const Tensor moved = host.to(dev());
    EXPECT_EQ(moved.device(), dev());
    EXPECT_EQ(moved.shape(), (Dims{3, 0}));
    EXPECT_EQ(moved.to(kCpu).shape(), (Dims{3, 0}));
    EXPECT_TRUE(moved.ToVector<float>().empty());
  }
}

TEST_P(OpSemantics, OneHotRefusesAnOutOfRangeIndex) {
  const Tensor ok = one_hot(FromVector<int64_t>({2, 0}, {2}, kCpu).to(dev()), 3);
  EXPECT_EQ(ok.to(kCpu).ToVector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 1, 0, 0}));
  for (int64_t bad : {-1, 3}) {
    try {
      one_hot(FromVector<int64_t>({0, 1, 2, bad}, {2, 2}, kCpu).to(dev()), 3);
      ADD_FAILURE() << "no error for index " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
      EXPECT_NE(std::string(e.what()).find("index " + std::to_string(bad) + " at position [1, 1]"), std::string::npos)
          << e.what();
    }
  }
}

TEST_P(OpSemantics, PoolingAcceptsPaddingAboveHalfTheKernel) {
  // kernel 3, padding 2 (> 3 / 2): every window still holds an input position.
  Generator g(66);
  const Tensor x64 = rand({1, 2, 4, 5}, g, -1, 1, DType::kFloat64, kCpu);
  const std::vector<double> xv = x64.ToVector<double>();
  const Tensor x = OnDev(x64);
  const Tensor mp = max_pool2d(x, {3, 3}, {2, 2}, {2, 2});
  const Tensor ap = avg_pool2d(x, {3, 3}, {2, 2}, {2, 2}, /*count_include_pad=*/false);
  const Tensor api = avg_pool2d(x, {3, 3}, {2, 2}, {2, 2}, /*count_include_pad=*/true);
  ASSERT_EQ(mp.shape(), (Dims{1, 2, 3, 4}));
  const std::vector<double> m = mp.to(kCpu).ToVector<double>(), a = ap.to(kCpu).ToVector<double>(),
                            ai = api.to(kCpu).ToVector<double>();
  for (int64_t c = 0; c < 2; ++c) {
    for (int64_t oh = 0; oh < 3; ++oh) {
      for (int64_t ow = 0; ow < 4; ++ow) {
        double best = -INFINITY, s = 0;
        int count = 0;
        for (int64_t h = oh * 2 - 2; h < oh * 2 + 1; ++h) {
          for (int64_t w = ow * 2 - 2; w < ow * 2 + 1; ++w) {
            if (h < 0 || h >= 4 || w < 0 || w >= 5) continue;
            best = std::max(best, xv[(c * 4 + h) * 5 + w]);
            s += xv[(c * 4 + h) * 5 + w];
            ++count;
          }
        }
        const size_t o = (c * 3 + oh) * 4 + ow;
        EXPECT_NEAR(m[o], best, 1e-6) << o;
        EXPECT_NEAR(a[o], s / count, 1e-6) << o;
        EXPECT_NEAR(ai[o], s / 9, 1e-6) << o;  // windows stay inside the padded input here
      }
    }
  }
  ExpectDeviceGrad([](auto& v) { return max_pool2d(v[0], {3, 3}, {2, 2}, {2, 2}); }, {x64.detach().set_requires_grad(true)},
                   "max_pool2d padding 2", 1e-5);
  ExpectDeviceGrad([](auto& v) { return avg_pool2d(v[0], {3, 3}, {1, 2}, {2, 1}, false); },
                   {testing::RandomF64({1, 2, 4, 5}, 67)}, "avg_pool2d padding 2", 1e-5);
  // A window of only padding (padding >= kernel) is refused with a message saying so.
  try {
    max_pool2d(x, {2, 2}, {1, 1}, {2, 0});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("covers only padding"), std::string::npos) << e.what();
  }
}

TEST_P(OpSemantics, FloatValuesSaturateInIntegerTensors) {
  auto fill = [&](double v, DType t) { return full({}, v, t, dev()).to(kCpu).item<int64_t>(); };
  EXPECT_EQ(fill(300.0, DType::kInt8), 127);
  EXPECT_EQ(fill(-300.0, DType::kInt8), -128);
  EXPECT_EQ(fill(300.0, DType::kUInt8), 255);
  EXPECT_EQ(fill(-1.5, DType::kUInt8), 0);
  EXPECT_EQ(fill(2.9, DType::kInt8), 2);  // truncates toward zero
  EXPECT_EQ(fill(-1e10, DType::kInt32), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(fill(INFINITY, DType::kInt64), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(fill(-INFINITY, DType::kInt64), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(fill(9.3e18, DType::kInt64), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(fill(NAN, DType::kInt32), 0);
  EXPECT_EQ(fill(0.5, DType::kBool), 1);  // nonzero -> true
  const Tensor i8 = FromVector<int8_t>({-128, -5, 0, 7, 127}, {5}, kCpu).to(dev());
  EXPECT_EQ(clip(i8, -1000, 1000).to(kCpu).ToVector<int64_t>(), (std::vector<int64_t>{-128, -5, 0, 7, 127}));
  EXPECT_EQ(clip(i8, -1000, 3).to(kCpu).ToVector<int64_t>(), (std::vector<int64_t>{-128, -5, 0, 3, 3}));
}

TEST_P(OpSemantics, Int64HostReadsAreExact) {
  const std::vector<int64_t> v = {(int64_t{1} << 53) + 1, std::numeric_limits<int64_t>::max(),
                                  std::numeric_limits<int64_t>::min() + 1};
  const Tensor t = FromVector<int64_t>(v, {3}, kCpu);
  EXPECT_EQ(t.ToVector<int64_t>(), v);
  EXPECT_EQ(t.slice(0, 1, 2).item<int64_t>(), std::numeric_limits<int64_t>::max());
  EXPECT_NE(t.ToString().find("9007199254740993"), std::string::npos) << t.ToString();
  // Float to integer reads follow the cast rules (saturate, NaN -> 0), with no undefined behaviour.
  const Tensor f = FromVector<float>({1e10f, -1e10f, NAN, 2.75f}, {4}, dev());
  EXPECT_EQ(f.ToVector<int32_t>(), (std::vector<int32_t>{std::numeric_limits<int32_t>::max(),
                                                          std::numeric_limits<int32_t>::min(), 0, 2}));
}

TEST_P(OpSemantics, NegativeSliceStepsFollowPython) {
  const Tensor x = arange(0, 6, 1, DType::kFloat32, kCpu).to(dev());
  auto values = [](const Tensor& t) { return t.to(kCpu).ToVector<int64_t>(); };
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(values(x.slice(0, -1, kMin, -1)), (std::vector<int64_t>{5, 4, 3, 2, 1, 0}));  // x[::-1]
  EXPECT_EQ(values(x.slice(0, 4, 0, -2)), (std::vector<int64_t>{4, 2}));                  // x[4:0:-2]
  EXPECT_EQ(values(x.slice(0, 100, -100, -3)), (std::vector<int64_t>{5, 2}));             // clamped
  EXPECT_EQ(values(x.slice(0, -2, -5, -1)), (std::vector<int64_t>{4, 3, 2}));             // x[-2:-5:-1]
  EXPECT_TRUE(values(x.slice(0, 1, 3, -1)).empty());
  EXPECT_THROW(x.slice(0, 0, 6, 0), Error);
  const Tensor m = arange(0, 6, 1, DType::kFloat32, kCpu).view({2, 3}).to(dev());
  EXPECT_EQ(values(m.slice(1, -1, kMin, -1)), (std::vector<int64_t>{2, 1, 0, 5, 4, 3}));
  ExpectDeviceGrad([](auto& v) { return v[0].slice(1, 3, kMin, -2); }, {testing::RandomF64({2, 5}, 68)},
                   "reversed strided slice", 1e-6);
}

TEST_P(OpSemantics, GatherAndIndexSelectTakeNegativeIndices) {
  const Tensor x = arange(0, 12, 1, DType::kFloat32, kCpu).view({3, 4}).to(dev());
  auto values = [](const Tensor& t) { return t.to(kCpu).ToVector<int64_t>(); };
  const Tensor sel = FromVector<int64_t>({-1, 0, -4}, {3}, kCpu).to(dev());
  EXPECT_EQ(values(index_select(x, 1, sel)), (std::vector<int64_t>{3, 0, 0, 7, 4, 4, 11, 8, 8}));
  EXPECT_EQ(values(index_select(x, 0, sel.slice(0, 0, 2))), (std::vector<int64_t>{8, 9, 10, 11, 0, 1, 2, 3}));
  const Tensor idx = FromVector<int64_t>({-1, 0, 2, -2}, {1, 4}, kCpu).to(dev());
  EXPECT_EQ(values(gather(x, 0, idx)), (std::vector<int64_t>{8, 1, 10, 7}));
  try {
    index_select(x, 1, FromVector<int64_t>({0, -5}, {2}, kCpu).to(dev())).to(kCpu);  // simulators report at sync
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index -5 at position [1]"), std::string::npos) << e.what();
    if (dev() == kCpu) {  // a synchronous failure also gets the range of the index as given
      EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
      EXPECT_NE(std::string(e.what()).find("[-4, 4)"), std::string::npos) << e.what();
    }
  }
  ExpectDeviceGrad([](auto& v) { return index_select(v[0], 1, FromVector<int64_t>({-1, 1, -1}, {3}, v[0].device())); },
                   {testing::RandomF64({2, 4}, 69)}, "index_select with negative indices", 1e-6);
}

TEST_P(OpSemantics, BatchNormRunningVarianceIsUnbiased) {
  // As torch: the batch is normalised with the biased variance; running_var gets the unbiased one.
  const Tensor x = OnDev(F64({1, 2, 3, 5, 10, 20, 30, 50}, {4, 2}, false));
  Tensor rm = zeros({2}, DType::kFloat32, dev()), rv = ones({2}, DType::kFloat32, dev());
  const Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), /*training=*/true, /*momentum=*/0.5, /*eps=*/0);
  const std::vector<double> v = rv.to(kCpu).ToVector<double>(), mean = rm.to(kCpu).ToVector<double>();
  // Channel 0: 1, 3, 10, 30 (mean 11, squared deviations 100 + 64 + 1 + 361 = 526).
  EXPECT_NEAR(mean[0], 0.5 * 11, 1e-5);
  EXPECT_NEAR(v[0], 0.5 * 1 + 0.5 * 526.0 / 3, 1e-3);
  EXPECT_NEAR(y.to(kCpu).ToVector<double>()[0], (1 - 11) / std::sqrt(526.0 / 4), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Devices, OpSemantics, ::testing::Values("cpu", "kunlun_sim:0", "ascend_sim:0"),
                         [](const auto& info) {
                           std::string name = info.param;
                           return name.substr(0, name.find(':'));
                         });

}  // namespace
}  // namespace oar
