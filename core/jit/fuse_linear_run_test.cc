// fused_linear's numbers: programs fused by fuse-linear (core/passes) against the unfused programs on cpu and
// both simulators (run by the reference interpreter after kernel selection), and the eager op, forward and
// backward, against the composed ops it replaces. The rewrite itself is tested in core/passes
// (fuse_linear_test.cc, test/fuse_linear.oir).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/base/error.h"
#include "core/ir/text.h"
#include "core/jit/interpreter.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"
#include "core/passes/pass.h"

namespace oar::passes {
namespace {

const Device kCpu("cpu:0");

void ExpectClose(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = cast(got.to(kCpu), DType::kFloat64).contiguous().ToVector<double>();
  const std::vector<double> w = cast(want.to(kCpu), DType::kFloat64).contiguous().ToVector<double>();
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << what << " element " << i;
}

// x [6, 16] @ w [16, n] + b [n], then `act` (empty: none); its output and the plain product's sum.
std::string MlpLayer(const std::string& act, int n) {
  const std::string w = "tensor<[16, " + std::to_string(n) + "], f32>";
  const std::string b = "tensor<[" + std::to_string(n) + "], f32>";
  const std::string t = "tensor<[6, " + std::to_string(n) + "], f32>";
  std::string s = "builtin.module() ({\n";
  s += "  %x = builtin.data() {index = 0, name = \"x\"} : () -> tensor<[6, 16], f32>\n";
  s += "  %w = builtin.data() {index = 1, name = \"w\"} : () -> " + w + "\n";
  s += "  %b = builtin.data() {index = 2, name = \"b\"} : () -> " + b + "\n";
  s += "  %mm = op.matmul(%x, %w) : (tensor<[6, 16], f32>, " + w + ") -> " + t + "\n";
  s += "  %z = op.add(%mm, %b) : (" + t + ", " + b + ") -> " + t + "\n";
  const std::string out = act.empty() ? "%z" : "%a";
  if (!act.empty()) s += "  %a = op." + act + "(%z) : (" + t + ") -> " + t + "\n";
  return s + "  builtin.output(" + out + ") : (" + t + ") -> ()\n}) : () -> ()\n";
}

// The fused program gives the unfused program's numbers bitwise on every device with host kernels: the same
// matmul primitive, the bias added in float as the add kernel does, relu and tanh as their kernels compute
// them (the Predictor fuses by default, and its results must stay eager's, examples/export_test.cc).
// n = 40 runs the epilogue's vector loop (AddRows: 16 or 32 floats a step) and its scalar tail; the bias holds
// -0.0 (+0.0 + -0.0 is +0.0 in both), a NaN and an infinity.
TEST(FuseLinearRun, FusedProgramsMatchUnfusedOnCpuAndBothSimulators) {
  for (const int n : {12, 40}) {
    Generator g(5);
    std::vector<float> bias = randn({n}, g, 0, 0.5, DType::kFloat32, kCpu).ToVector<float>();
    bias[1] = -0.0f;
    bias[2] = std::nanf("");
    bias[3] = -std::numeric_limits<float>::infinity();
    const std::vector<Tensor> in = {randn({6, 16}, g, 0, 1, DType::kFloat32, kCpu),
                                    randn({16, n}, g, 0, 0.5, DType::kFloat32, kCpu),
                                    FromVector<float>(bias, {n}, kCpu)};
    for (const char* device : {"cpu:0", "kunlun_sim:0", "ascend_sim:0"}) {
      for (const std::string act : {"", "relu", "tanh"}) {
        SCOPED_TRACE(std::string(device) + " " + (act.empty() ? "none" : act) + " n " + std::to_string(n));
        ir::IrContext ctx;
        auto plain = ir::ParseProgram(ctx, MlpLayer(act, n), "mlp.oir");
        auto fused = ir::ParseProgram(ctx, MlpLayer(act, n), "mlp.oir");
        PassManager pm;
        pm.AddPipeline(std::string("fuse-linear{device=") + device + "},dce,kernel-select{device=" + device + "}");
        pm.Run(*fused);
        const std::string text = ir::Print(*fused);
        ASSERT_NE(text.find("kernel.fused_linear("), std::string::npos) << text;
        ASSERT_EQ(text.find("kernel.matmul("), std::string::npos) << text;
        ASSERT_EQ(text.find("kernel.transfer"), std::string::npos) << "fused_linear fell back to the cpu: " << text;
        const std::vector<Tensor> want = jit::Interpret(*plain, in, Device(device));
        const std::vector<Tensor> got = jit::Interpret(*fused, in, Device(device));
        ASSERT_EQ(got.size(), 1u);
        EXPECT_EQ(got[0].device(), Device(device));
        const std::vector<float> gv = got[0].to(kCpu).ToVector<float>(), wv = want[0].to(kCpu).ToVector<float>();
        ASSERT_EQ(gv.size(), wv.size());
        EXPECT_EQ(std::memcmp(gv.data(), wv.data(), gv.size() * sizeof(float)), 0) << "fused against unfused, bitwise";
      }
    }
  }
}

Tensor Composed(const Tensor& x, const Tensor& w, const Tensor& b, FusedActivation act) {
  const Tensor z = matmul(x, w) + b;
  switch (act) {
    case FusedActivation::kRelu: return relu(z);
    case FusedActivation::kGelu: return gelu(z);
    case FusedActivation::kTanh: return tanh(z);
    case FusedActivation::kNone: break;
  }
  return z;
}

// Eager fused_linear, forward and backward, equals matmul + add + activation: every activation, float32
// (oneDNN's fused primitive) and float64 (matmul loop, then the epilogue), a 3-D x, a transposed weight
// view, and a strided x and broadcast bias (the path after the plain matmul).
TEST(FuseLinearRun, EagerForwardAndBackwardEqualTheComposedOps) {
  Generator g(9);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    const double tol = dt == DType::kFloat32 ? 2e-5 : 1e-12;
    for (int layout = 0; layout < 3; ++layout) {
      Tensor x = randn({2, 3, 7}, g, 0, 1, dt, kCpu), w = randn({7, 5}, g, 0, 0.5, dt, kCpu);
      Tensor b = randn({5}, g, 0, 0.5, dt, kCpu);
      if (layout == 1) w = randn({5, 7}, g, 0, 0.5, dt, kCpu).transpose(0, 1);  // column-major w
      if (layout == 2) {
        x = randn({2, 6, 7}, g, 0, 1, dt, kCpu).slice(1, 0, 6, 2);  // rows of stride 14: not one matrix
        b = randn({1}, g, 0, 0.5, dt, kCpu).expand({5});            // stride-0 bias
      }
      for (FusedActivation act :
           {FusedActivation::kNone, FusedActivation::kRelu, FusedActivation::kGelu, FusedActivation::kTanh}) {
        const std::string what = fmt::format("{} layout {} activation {}", DTypeName(dt), layout, static_cast<int>(act));
        std::vector<Tensor> a, c;
        for (const Tensor& t : {x, w, b}) {
          a.push_back(t.detach().set_requires_grad(true));
          c.push_back(t.detach().set_requires_grad(true));
        }
        const Tensor y = fused_linear(a[0], a[1], a[2], act);
        const Tensor want = Composed(c[0], c[1], c[2], act);
        ExpectClose(y, want, tol, what + " forward");
        const Tensor r = randn(y.shape(), g, 0, 1, dt, kCpu);
        sum(y * r).backward();
        sum(want * r).backward();
        for (size_t i = 0; i < a.size(); ++i) ExpectClose(a[i].grad(), c[i].grad(), tol, what + " grad " + std::to_string(i));
      }
    }
  }
}

TEST(FuseLinearRun, BadArgumentsSayWhatWasExpected) {
  const Tensor x = zeros({4, 8}), w = zeros({8, 3}), b = zeros({3});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { fused_linear(x, zeros({7, 3}), b); }).find("do not chain"), std::string::npos);
  EXPECT_NE(message([&] { fused_linear(x, w, zeros({4})); }).find("one bias per output column"), std::string::npos);
  EXPECT_NE(message([&] { fused_linear(zeros({8}), w, b); }).find("rank >= 2"), std::string::npos);
  EXPECT_NE(message([&] { fused_linear(x, w, b, static_cast<FusedActivation>(7)); }).find("activation 7"),
            std::string::npos);
  EXPECT_NE(message([&] { fused_linear(x, w, zeros({3}, DType::kFloat64)); }).find("different dtypes"),
            std::string::npos);
  EXPECT_NE(message([&] { fused_linear(zeros({4, 8}, DType::kFloat16), zeros({8, 3}, DType::kFloat16),
                                       zeros({3}, DType::kFloat16)); })
                .find("expected one of float32, float64"),
            std::string::npos);
}

}  // namespace
}  // namespace oar::passes
