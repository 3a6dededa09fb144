// Private storage formats through the core: ascend_sim prefers NC1HWC0 for 4-D elementwise operands and
// FRACTAL_NZ for float16/bfloat16 matmul operands. The core must convert with the plugin's format_cast
// kernels, reuse conversions while the data is unchanged, drop them when it changes, and give results
// equal to cpu with the logical layout everywhere.
#include <gtest/gtest.h>

#include "core/ops/ops.h"
#include "core/runtime/runtime.h"

namespace oar {
namespace {

const bool kConfigured = [] {
  runtime::Runtime::Options o;
  o.plugin_files = {std::filesystem::path(OAR_PLUGIN_DIR) / "liboar_plugin_cpu.so",
                    std::filesystem::path(OAR_PLUGIN_DIR) / "liboar_plugin_ascend_sim.so"};
  o.use_env_path = false;
  o.use_default_dir = false;
  runtime::Runtime::Configure(o);
  return true;
}();

const Device kAscend("ascend_sim:0");
const Device kCpu("cpu:0");

runtime::DeviceType::FormatStats Stats() { return runtime::Runtime::Get().FindType("ascend_sim")->format_stats(); }

/// Differences of two snapshots.
struct Delta {
  uint64_t calls, to_private, to_plain;
};
Delta Since(const runtime::DeviceType::FormatStats& before) {
  const auto now = Stats();
  return {now.kernel_calls - before.kernel_calls, now.casts_to_private - before.casts_to_private,
          now.casts_to_plain - before.casts_to_plain};
}

Tensor RandOn(const Dims& shape, uint64_t seed, DType dtype, Device device) {
  Generator g(seed);
  return randn(shape, g, 0, 1, dtype, device);
}

TEST(PrivateFormats, ElementwiseOnOddShapesRunsInNc1hwc0AndMatchesCpu) {
  ASSERT_TRUE(kConfigured);
  for (const Dims& shape : {Dims{2, 3, 5, 7}, Dims{1, 17, 4, 3}, Dims{3, 16, 2, 2}, Dims{1, 33, 1, 1}}) {
    const Tensor a = RandOn(shape, 1, DType::kFloat32, kAscend), b = RandOn(shape, 2, DType::kFloat32, kAscend);
    const auto before = Stats();
    const Tensor sum = a + b;
    const Delta d = Since(before);
    EXPECT_EQ(d.calls, 1u) << shape.ToString();
    EXPECT_EQ(d.to_private, 2u) << shape.ToString();
    EXPECT_EQ(d.to_plain, 1u) << shape.ToString();
    EXPECT_EQ(sum.shape(), shape);  // the logical shape, always
    EXPECT_EQ(sum.ToVector<float>(), (a.to(kCpu) + b.to(kCpu)).ToVector<float>()) << shape.ToString();
  }
}

TEST(PrivateFormats, AChainReusesTheConversionOfEachIntermediate) {
  const Tensor x = RandOn({2, 20, 3, 3}, 3, DType::kFloat32, kAscend);
  const Tensor w = RandOn({2, 20, 3, 3}, 4, DType::kFloat32, kAscend);
  const auto before = Stats();
  const Tensor y = relu(x * w);  // x, w converted once; x*w's private result feeds relu directly
  const Tensor z = y + w;        // y and w: both already held in NC1HWC0
  const Delta d = Since(before);
  EXPECT_EQ(d.calls, 3u);
  EXPECT_EQ(d.to_private, 2u);
  EXPECT_EQ(d.to_plain, 3u);
  const Tensor xc = x.to(kCpu), wc = w.to(kCpu);
  EXPECT_EQ(z.ToVector<float>(), (relu(xc * wc) + wc).ToVector<float>());
}

TEST(PrivateFormats, WritingATensorDropsItsConvertedCopy) {
  Tensor w = RandOn({1, 5, 2, 3}, 5, DType::kFloat32, kAscend);
  const Tensor a = RandOn({1, 5, 2, 3}, 6, DType::kFloat32, kAscend);
  const Tensor first = w + a;
  EXPECT_GT(w.storage()->num_shadows(), 0u);
  const Tensor replacement = RandOn({1, 5, 2, 3}, 7, DType::kFloat32, kAscend);
  w.copy_(replacement);  // an in-place write through a kernel
  EXPECT_EQ(w.storage()->num_shadows(), 0u);
  const Tensor second = w + a;
  EXPECT_EQ(second.ToVector<float>(), (replacement.to(kCpu) + a.to(kCpu)).ToVector<float>());
  EXPECT_NE(second.ToVector<float>(), first.ToVector<float>());
}

TEST(PrivateFormats, ViewsOfOneStorageAreConvertedSeparately) {
  const Tensor base = RandOn({2, 6, 4, 4}, 8, DType::kFloat32, kAscend);
  const Tensor t = base.transpose(2, 3);    // same storage, other strides
  const Tensor s = base.slice(1, 1, 6, 1);  // same storage, other offset and shape
  const Tensor one = ones({2, 6, 4, 4}, DType::kFloat32, kAscend);
  const Tensor r1 = base + one, r2 = t + one;
  const Tensor r3 = s + ones({2, 5, 4, 4}, DType::kFloat32, kAscend);
  const Tensor bc = base.to(kCpu), onec = ones({2, 6, 4, 4}, DType::kFloat32, kCpu);
  EXPECT_EQ(r1.ToVector<float>(), (bc + onec).ToVector<float>());
  EXPECT_EQ(r2.ToVector<float>(), (bc.transpose(2, 3) + onec).ToVector<float>());
  EXPECT_EQ(r3.ToVector<float>(), (bc.slice(1, 1, 6, 1) + ones({2, 5, 4, 4}, DType::kFloat32, kCpu)).ToVector<float>());
}

TEST(PrivateFormats, HalfMatmulRunsOnFractalNzOperandsAndReusesTheWeight) {
  for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
    const Tensor w = RandOn({20, 17}, 9, dt, kAscend);  // neither extent a multiple of 16
    const Tensor x1 = RandOn({33, 20}, 10, dt, kAscend), x2 = RandOn({33, 20}, 11, dt, kAscend);
    const auto before = Stats();
    const Tensor y1 = matmul(x1, w);
    const Tensor y2 = matmul(x2, w);  // w's FRACTAL_NZ copy is reused
    const Delta d = Since(before);
    EXPECT_EQ(d.calls, 2u);
    EXPECT_EQ(d.to_private, 3u);
    EXPECT_EQ(d.to_plain, 0u);  // the cube writes a PLAIN output
    const Tensor wc = w.to(kCpu);
    // Same products, float32 accumulation, one rounding: the cpu kernel computes exactly that too.
    EXPECT_EQ(y1.to(DType::kFloat32).ToVector<float>(), matmul(x1.to(kCpu), wc).to(DType::kFloat32).ToVector<float>());
    EXPECT_EQ(y2.to(DType::kFloat32).ToVector<float>(), matmul(x2.to(kCpu), wc).to(DType::kFloat32).ToVector<float>());
  }
}

TEST(PrivateFormats, OpsWithoutAPrivateKernelStayPlain) {
  const Tensor a = RandOn({2, 3, 4, 5}, 12, DType::kFloat32, kAscend);
  const auto before = Stats();
  const Tensor s = sum(a, {1}, /*keepdim=*/false);  // reductions have no NC1HWC0 kernel
  const Tensor m = matmul(a, a.transpose(2, 3));    // float32 matmul prefers PLAIN
  const Delta d = Since(before);
  EXPECT_EQ(d.calls, 0u);
  EXPECT_EQ(d.to_private, 0u);
  const Tensor ac = a.to(kCpu);
  EXPECT_EQ(s.ToVector<float>(), sum(ac, {1}, false).ToVector<float>());
  EXPECT_EQ(m.ToVector<float>(), matmul(ac, ac.transpose(2, 3)).ToVector<float>());
}

TEST(PrivateFormats, ABroadcastOperandIsMaterialisedByTheCast) {
  const Tensor a = RandOn({2, 3, 4, 5}, 14, DType::kFloat32, kAscend);
  const Tensor row = RandOn({5}, 15, DType::kFloat32, kAscend);
  const auto before = Stats();
  const Tensor b = a * row;  // row arrives expanded (stride 0); format_cast reads it like any view
  EXPECT_EQ(Since(before).calls, 1u);
  EXPECT_EQ(b.ToVector<float>(), (a.to(kCpu) * row.to(kCpu)).ToVector<float>());
}

}  // namespace
}  // namespace oar
