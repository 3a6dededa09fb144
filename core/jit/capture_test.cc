// Capture, autodiff on programs, the saved-program format and the Predictor, each checked against eager.
#include "core/jit/capture.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/autograd.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/jit/grad.h"
#include "core/jit/interpreter.h"
#include "core/jit/static_function.h"
#include "core/jit/net_testing.h"
#include "core/nn/layers.h"
#include "core/ops/nn.h"

namespace oar::jit {
namespace {

const Device kCpu("cpu:0");
using testing_net::BatchSpec;
using testing_net::Net;

TEST(CaptureTest, StaticCaptureRunsLikeEagerBitwise) {
  ir::IrContext ctx;
  Net net(1);
  Generator g(2);
  const Tensor x = randn({5, 4}, g);
  CaptureOptions o;
  o.state = net.Slots();
  o.output_names = {"probs"};
  const std::vector<InputSpec> specs = {InputSpec::Of("x", x)};
  Captured c = Capture(ctx, net.Fn(), specs, std::vector<Tensor>{x}, kCpu, o);
  ir::Verify(*c.program->module());
  const std::string text = ir::Print(*c.program);
  EXPECT_NE(text.find("op.matmul"), std::string::npos) << text;
  EXPECT_NE(text.find("builtin.parameter() {name = \"fc1.weight\"}"), std::string::npos) << text;
  EXPECT_EQ(c.program->parameters.size(), 4u);
  EXPECT_TRUE(c.state_updates.empty());
  const std::vector<Tensor> got = Interpret(*c.program, std::vector<Tensor>{x}, kCpu);
  EXPECT_EQ(got[0].ToVector<float>(), net.Forward(x).ToVector<float>());
  EXPECT_EQ(got[0].ToVector<float>(), c.outputs[0].ToVector<float>());
}

TEST(CaptureTest, SymbolicBatchRunsAnyBatchBitwise) {
  ir::IrContext ctx;
  Net net(3);
  CaptureOptions o;
  o.state = net.Slots();
  const std::vector<InputSpec> specs = BatchSpec();
  Captured c = Capture(ctx, net.Fn(), specs, {}, kCpu, o);
  const std::string text = ir::Print(*c.program);
  EXPECT_NE(text.find("tensor<[B, 4], f32>"), std::string::npos) << text;
  EXPECT_NE(text.find("shape = [-1, 8]"), std::string::npos) << text;  // the batch extent generalised
  Generator g(4);
  for (int64_t batch : {1, 2, 7, 16}) {
    const Tensor x = randn({batch, 4}, g);
    const std::vector<Tensor> got = Interpret(*c.program, std::vector<Tensor>{x}, kCpu);
    EXPECT_EQ(got[0].shape(), (Dims{batch, 3}));
    EXPECT_EQ(got[0].ToVector<float>(), net.Forward(x).ToVector<float>()) << batch;
  }
}

TEST(CaptureTest, HostReadOfAComputedValueIsAnErrorNamingTheOp) {
  ir::IrContext ctx;
  auto fn = [](std::span<const Tensor> in) {
    const Tensor m = amax(in[0], {}, false);
    if (m.item<float>() > 0) return std::vector<Tensor>{in[0] * 2.0};  // a C++ branch on a device value
    return std::vector<Tensor>{in[0]};
  };
  const Tensor x = ones({3});
  const std::vector<InputSpec> specs = {InputSpec::Of("x", x)};
  try {
    Capture(ctx, fn, specs, std::vector<Tensor>{x}, kCpu);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("op.max"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("host"), std::string::npos) << e.what();
  }
}

TEST(CaptureTest, InPlaceStateWritesBecomeOutputs) {
  ir::IrContext ctx;
  Tensor counter = zeros({2});
  Tensor scale = full({2}, 3.0);
  auto fn = [&](std::span<const Tensor> in) {
    NoGradGuard no_grad;
    counter.copy_(counter + in[0]);  // written in place
    scale = scale * 2.0;             // replaced
    return std::vector<Tensor>{counter * scale};
  };
  const Tensor x = full({2}, 1.0);
  CaptureOptions o;
  o.state = {{"counter", &counter}, {"scale", &scale}};
  const std::vector<InputSpec> specs = {InputSpec::Of("x", x)};
  Captured c = Capture(ctx, fn, specs, std::vector<Tensor>{x}, kCpu, o);
  EXPECT_EQ(c.state_updates, (std::vector<std::string>{"counter", "scale"}));
  EXPECT_EQ(StateUpdates(*c.program), c.state_updates);
  // Replay from the state the capture run left behind: counter 1 -> 2, scale 6 -> 12, output 24.
  c.program->parameters["counter"] = counter;
  c.program->parameters["scale"] = scale;
  const std::vector<Tensor> out = Interpret(*c.program, std::vector<Tensor>{x}, kCpu);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].ToVector<float>(), (std::vector<float>{24, 24}));
  EXPECT_EQ(out[1].ToVector<float>(), (std::vector<float>{2, 2}));
  EXPECT_EQ(out[2].ToVector<float>(), (std::vector<float>{12, 12}));
}

TEST(CaptureTest, PartialInPlaceWriteIsRefused) {
  ir::IrContext ctx;
  auto fn = [](std::span<const Tensor> in) {
    Tensor y = in[0] * 1.0;
    y.slice(0, 0, 1).copy_(zeros({1}));
    return std::vector<Tensor>{y};
  };
  const Tensor x = ones({3});
  const std::vector<InputSpec> specs = {InputSpec::Of("x", x)};
  EXPECT_THROW(Capture(ctx, fn, specs, std::vector<Tensor>{x}, kCpu), Error);
}

TEST(CaptureTest, SymbolicExtentInAFillIsRefusedWithTheOp) {
  ir::IrContext ctx;
  auto fn = [](std::span<const Tensor> in) { return std::vector<Tensor>{in[0] + zeros({in[0].dim(0), 4})}; };
  const std::vector<InputSpec> specs = BatchSpec();
  try {
    Capture(ctx, fn, specs, {}, kCpu);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("op.fill"), std::string::npos) << e.what();
  }
}

TEST(CaptureTest, HostMadeValuesThatFollowASymbolicExtentAreRefused) {
  ir::IrContext ctx;
  // The same shape at every batch, but values computed on the host from the batch extent.
  auto fn = [](std::span<const Tensor> in) {
    const float n = static_cast<float>(in[0].dim(0));
    return std::vector<Tensor>{in[0] * FromVector<float>({n, n, n, n}, {4})};
  };
  const std::vector<InputSpec> specs = BatchSpec();
  try {
    Capture(ctx, fn, specs, {}, kCpu);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds different values"), std::string::npos) << e.what();
  }
}

// f(x) = sum(tanh(x) * x): program gradients of first and second order equal eager autograd's.
TEST(CaptureTest, GradOfACapturedProgramMatchesEagerToSecondOrder) {
  ir::IrContext ctx;
  auto fn = [](std::span<const Tensor> in) { return std::vector<Tensor>{sum(tanh(in[0]) * in[0])}; };
  Generator g(9);
  const Tensor x = randn({6}, g, 0, 1, DType::kFloat64);
  const std::vector<InputSpec> specs = {InputSpec::Of("x", x)};
  Captured f = Capture(ctx, fn, specs, std::vector<Tensor>{x}, kCpu);
  const int wrt[] = {0};
  auto g1 = Grad(ctx, *f.program, 0, wrt, std::vector<Tensor>{x}, kCpu);
  auto g2 = Grad(ctx, *g1, 1, wrt, std::vector<Tensor>{x}, kCpu);  // d(sum(df/dx))/dx
  ir::Verify(*g2->module());
  const std::vector<Tensor> got1 = Interpret(*g1, std::vector<Tensor>{x}, kCpu);
  const std::vector<Tensor> got2 = Interpret(*g2, std::vector<Tensor>{x}, kCpu);
  ASSERT_EQ(got1.size(), 2u);
  ASSERT_EQ(got2.size(), 3u);

  Tensor xe = x.detach();
  xe.set_requires_grad(true);
  const Tensor y = sum(tanh(xe) * xe);
  const Tensor d1 = grad({y}, {xe}, {}, true)[0];
  const Tensor d2 = grad({sum(d1)}, {xe})[0];
  EXPECT_EQ(got1[1].ToVector<double>(), d1.ToVector<double>());
  EXPECT_EQ(got2[2].ToVector<double>(), d2.ToVector<double>());
  // Against the closed form: d/dx (tanh x * x) = tanh x + x (1 - tanh^2 x).
  const std::vector<double> xv = x.ToVector<double>(), gv = got1[1].ToVector<double>();
  for (size_t i = 0; i < xv.size(); ++i) {
    const double t = std::tanh(xv[i]);
    EXPECT_NEAR(gv[i], t + xv[i] * (1 - t * t), 1e-12);
  }
}

TEST(StaticFunctionTest, CachesPerGuardSetAndSaysWhyItMissed) {
  Tensor total = zeros({});
  auto fn = [&](std::span<const Tensor> in) {
    NoGradGuard no_grad;
    total = total + sum(in[0]);
    return std::vector<Tensor>{in[0] * 2.0};
  };
  StaticFunction f(fn, {{"total", &total}}, kCpu, /*capacity=*/2);
  auto call = [&](Dims shape) { return f(std::vector<Tensor>{ones(shape)})[0].ToVector<float>(); };
  EXPECT_EQ(call({2}), (std::vector<float>{2, 2}));     // miss: first call (captured)
  EXPECT_EQ(call({2}), (std::vector<float>{2, 2}));     // hit
  EXPECT_EQ(call({3}), (std::vector<float>{2, 2, 2}));  // miss: shape
  EXPECT_EQ(call({2}), (std::vector<float>{2, 2}));     // hit (still cached)
  EXPECT_EQ(call({4}).size(), 4u);                      // miss: evicts [3], the least recently used
  EXPECT_EQ(call({3}).size(), 3u);                      // miss again
  EXPECT_EQ(f.stats().hits, 2);
  EXPECT_EQ(f.stats().misses, 4);
  EXPECT_EQ(f.cached(), 2u);
  EXPECT_EQ(f.stats().miss_reasons[0], "first call");
  EXPECT_EQ(f.stats().miss_reasons[1], "input 0: float32 [3] on cpu:0 (cached: float32 [2] on cpu:0)");
  // State threads through captured and replayed calls alike: 2 + 2 + 3 + 2 + 4 + 3.
  EXPECT_EQ(total.item<float>(), 16.0f);
}

}  // namespace
}  // namespace oar::jit
