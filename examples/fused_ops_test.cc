// fused_rotary's numbers against the ops examples/models.cc's RotateWith runs, fused_rms_scale's against
// rms_norm's, fused_adam's against the
// elementwise ops Adam::ApplyStep runs (core/optim), and fused_tanh_grad's and fused_sigmoid_grad's against the ops
// their VJPs record, fused_log_softmax's against log_softmax and softmax, fused_masked_softmax's and its gradient's
// against attention's mul, where and softmax and their VJPs, on cpu and both simulators; static training steps
// (StaticFunction, whose pipeline runs fuse-adam, fuse-linear, fuse-act-grad, fuse-log-softmax and the masked
// softmax fusions) against the same steps run eagerly — bitwise, as `oar train --static` promises; where the
// rewrite must fire and where it must not. (Here rather than in core/jit or core/passes, whose tests may not use
// core/optim.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

#include "core/autograd/autograd.h"
#include "core/ir/text.h"
#include "core/jit/static_function.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"
#include "core/optim/optim.h"
#include "core/scheduler/executor.h"
#include "core/tensor/autograd_meta.h"

namespace oar::jit {
namespace {

const Device kCpu("cpu:0");
const char* const kDevices[] = {"cpu:0", "kunlun_sim:0", "ascend_sim:0"};

std::vector<uint32_t> Bits(const Tensor& t) {
  const std::vector<float> v = t.to(kCpu).contiguous().ToVector<float>();
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// `step` run eagerly once, then captured by StaticFunction and replayed three times: every output bitwise the
// eager one. Returns the captured program's text.
std::string CapturedStepsAreEagerBitwise(const Function& step, const std::vector<StateSlot>& state, Device d) {
  StaticFunction f(step, state, d);
  const std::vector<Tensor> want = step({});
  for (int run = 0; run < 3; ++run) {
    const std::vector<Tensor> got = f(std::vector<Tensor>{});
    EXPECT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
      EXPECT_EQ(Bits(got[i]), Bits(want[i])) << "output " << i << ", replay " << run;
    }
  }
  return ir::Print(*f.program());
}

// The kernel computes Adam::ApplyStep's operations (mul, add, div, sqrt, sub, each rounded to float) bit for bit,
// also on zeros (sqrt(0) + eps), signed zeros, tiny and huge values and NaN, over a tail that is not a whole
// block (37 x 5) and with a transposed (strided) gradient.
TEST(FuseAdamRun, KernelIsTheElementwiseOpsBitwiseOnCpuAndBothSimulators) {
  Generator gen(11);
  Tensor p = randn({37, 5}, gen, 0, 1, DType::kFloat32, kCpu);
  const Tensor g = randn({5, 37}, gen, 0, 1e-2, DType::kFloat32, kCpu).transpose(0, 1);
  Tensor m = randn({37, 5}, gen, 0, 1e-3, DType::kFloat32, kCpu);
  Tensor v = abs(randn({37, 5}, gen, 0, 1e-5, DType::kFloat32, kCpu));
  {
    std::vector<float> special = m.ToVector<float>();
    special[0] = 0.0f;
    special[1] = -0.0f;
    special[2] = std::numeric_limits<float>::denorm_min();
    special[3] = 3e38f;
    special[4] = std::numeric_limits<float>::quiet_NaN();
    m = FromVector<float>(special, {37, 5}, kCpu);
    std::vector<float> vs = v.ToVector<float>();
    vs[0] = vs[1] = 0.0f;
    vs[5] = 1e-30f;
    v = FromVector<float>(vs, {37, 5}, kCpu);
  }
  const double decay = 1 - 3e-3 * 0.01, b1 = 0.9, b2 = 0.999, bc1 = 1 - std::pow(0.9, 3), bc2 = 1 - std::pow(0.999, 3);
  for (const char* name : kDevices) {
    SCOPED_TRACE(name);
    const Device d(name);
    auto s = [&](double x) { return full({}, x, DType::kFloat32, d); };
    const Tensor P = p.to(d), G = g.to(d), M = m.to(d), V = v.to(d);
    // As Adam::ApplyStep with decoupled weight decay.
    const Tensor value = P * s(decay);
    const Tensor m_out = M * b1 + G * (1 - b1);
    const Tensor v_out = V * b2 + G * G * (1 - b2);
    const Tensor update = (m_out / s(bc1)) / (sqrt(v_out / s(bc2)) + 1e-8);
    const Tensor p_out = value - update * s(3e-3);
    const std::vector<Tensor> in = {P,     G,         M,      V,      s(decay), s(b1),  s(1 - b1),
                                    s(b2), s(1 - b2), s(bc1), s(bc2), s(1e-8),  s(3e-3)};
    const std::vector<Tensor> fused = ops::Run(ops::Op::kFusedAdam, in, {int64_t{1}});
    ASSERT_EQ(fused.size(), 3u);
    EXPECT_EQ(Bits(fused[0]), Bits(p_out));
    EXPECT_EQ(Bits(fused[1]), Bits(m_out));
    EXPECT_EQ(Bits(fused[2]), Bits(v_out));
    // Adam (with_decay 0): the param itself, whatever the decay operand holds.
    const Tensor adam_p = P - update * s(3e-3);
    std::vector<Tensor> no_decay = in;
    no_decay[4] = s(std::numeric_limits<double>::quiet_NaN());
    EXPECT_EQ(Bits(ops::Run(ops::Op::kFusedAdam, no_decay, {int64_t{0}})[0]), Bits(adam_p));
  }
}

// x [2, 3, 5, 8] (q or k: batch, heads, positions, head dim) with cos, sin [5, 4] broadcasting over batch and
// heads, and with x a permuted (strided) view and cos, sin [4] (one position).
TEST(FuseRotaryRun, KernelIsTheRotationsOpsBitwiseOnCpuAndBothSimulators) {
  Generator gen(7);
  const Tensor x = randn({2, 3, 5, 8}, gen, 0, 1, DType::kFloat32, kCpu);
  const Tensor xt = randn({2, 5, 3, 8}, gen, 0, 1, DType::kFloat32, kCpu).permute({0, 2, 1, 3});
  const Tensor c = randn({5, 4}, gen, 0, 1, DType::kFloat32, kCpu), s = randn({5, 4}, gen, 0, 1, DType::kFloat32, kCpu);
  const Tensor c1 = randn({4}, gen, 0, 1, DType::kFloat32, kCpu), s1 = randn({4}, gen, 0, 1, DType::kFloat32, kCpu);
  for (const char* name : kDevices) {
    SCOPED_TRACE(name);
    const Device d(name);
    for (const auto& [xx, cc, ss] : {std::tuple{x, c, s}, std::tuple{xt, c, s}, std::tuple{x, c1, s1}}) {
      const Tensor X = xx.to(d), C = cc.to(d), S = ss.to(d);
      const Tensor x1 = X.slice(-1, 0, 4), x2 = X.slice(-1, 4, 8);
      const Tensor parts[] = {x1 * C - x2 * S, x2 * C + x1 * S};
      const Tensor want = concat(parts, -1);
      const std::vector<Tensor> in = {X, C, S};
      const std::vector<Tensor> got = ops::Run(ops::Op::kFusedRotary, in);
      ASSERT_EQ(got.size(), 1u);
      EXPECT_EQ(got[0].shape(), want.shape());
      EXPECT_EQ(Bits(got[0]), Bits(want));
    }
  }
  const std::vector<Tensor> odd = {zeros({2, 5}), zeros({2}), zeros({2})};
  EXPECT_THROW(ops::Run(ops::Op::kFusedRotary, odd), Error);
}

// rms_norm's end over x [3, 5, 16] (and a transposed x) with the row means [3, 5, 1] and weight [16].
TEST(FuseRmsScaleRun, KernelIsRmsNormsOpsBitwiseOnCpuAndBothSimulators) {
  Generator gen(9);
  const Tensor x = randn({3, 5, 16}, gen, 0, 1, DType::kFloat32, kCpu);
  const Tensor xt = randn({5, 3, 16}, gen, 0, 1, DType::kFloat32, kCpu).permute({1, 0, 2});
  const Tensor w = randn({16}, gen, 1, 0.2, DType::kFloat32, kCpu);
  for (const char* name : kDevices) {
    SCOPED_TRACE(name);
    const Device d(name);
    for (const Tensor& xx : {x, xt}) {
      const Tensor X = xx.to(d), W = w.to(d);
      const Tensor ms = mean(X * X, {2}, true);
      const Tensor eps = full({}, 1e-5, DType::kFloat32, d);
      const Tensor want = X * rsqrt(ms + eps) * W;
      const std::vector<Tensor> in = {X, ms, eps, W};
      const std::vector<Tensor> got = ops::Run(ops::Op::kFusedRmsScale, in);
      ASSERT_EQ(got.size(), 1u);
      EXPECT_EQ(Bits(got[0]), Bits(want));
    }
  }
}

TEST(FuseAdamRun, BadOperandsAreRefusedNamingTheArgument) {
  const Tensor t = zeros({4, 3}), s = zeros({});
  std::vector<Tensor> in = {t, t, t, zeros({3, 4}), s, s, s, s, s, s, s, s, s};
  try {
    ops::Run(ops::Op::kFusedAdam, in);
    FAIL() << "a v of another shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("argument 'v' has shape [3, 4], expected the param's [4, 3]"),
              std::string::npos)
        << e.what();
  }
  in[3] = t;
  in[12] = zeros({1});
  try {
    ops::Run(ops::Op::kFusedAdam, in);
    FAIL() << "an lr of shape [1] was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("argument 'lr' must be a 0-d scalar, got shape [1]"), std::string::npos)
        << e.what();
  }
}

// A small model trained by Adam or AdamW: eagerly, and through StaticFunction (captured, fuse-adam, the scheduler,
// the state donated). `square_out` also returns the first parameter's grad * grad, which CSE merges with Adam's:
// that parameter's chain then keeps an intermediate alive and must stay unfused.
struct Trainer {
  Trainer(Device device, bool adamw, bool square_out) : square_out(square_out) {
    Generator gen(3);
    w = randn({6, 4}, gen, 0, 0.5, DType::kFloat32, kCpu).to(device);
    b = randn({4}, gen, 0, 0.5, DType::kFloat32, kCpu).to(device);
    k = randn({2, 3, 2, 2}, gen, 0, 0.5, DType::kFloat32, kCpu).to(device);  // rank 4: ascend's NC1HWC0 eagerly
    x = randn({5, 6}, gen, 0, 1, DType::kFloat32, kCpu).to(device);
    for (Tensor* t : {&w, &b, &k}) t->set_requires_grad(true);
    const std::vector<Tensor*> params = {&w, &b, &k};
    if (adamw) {
      opt = std::make_unique<optim::AdamW>(params, 3e-2);
    } else {
      opt = std::make_unique<optim::Adam>(params, 3e-2);
    }
  }
  std::vector<Tensor> Step(std::span<const Tensor> in) {
    const Tensor y = tanh(matmul(x, w) + b);
    const Tensor loss = sum(y * y) + sum(k * k * k);
    opt->ZeroGrad();
    loss.backward();
    std::vector<Tensor> out = {loss};
    if (square_out) out.push_back(w.grad() * w.grad());
    opt->ApplyStep([&](size_t i, DType dtype, Device) { return cast(in[i], dtype); });
    return out;
  }
  std::vector<Tensor> Inputs(Device device) {
    std::vector<Tensor> in;
    for (double v : opt->NextStepScalars()) in.push_back(full({}, v, DType::kFloat32, device));
    return in;
  }
  std::vector<StateSlot> State() {
    std::vector<StateSlot> s = {{"w", &w}, {"b", &b}, {"k", &k}};
    for (auto& [name, t] : opt->NamedState()) s.push_back({name, t});
    return s;
  }
  bool square_out;
  Tensor w, b, k, x;
  std::unique_ptr<optim::Adam> opt;
};

TEST(FuseAdamRun, StaticAdamStepsAreEagerBitwiseWithOneFusedKernelPerParameter) {
  for (const char* name : kDevices) {
    for (const bool adamw : {false, true}) {
      for (const bool square_out : {false, true}) {
        SCOPED_TRACE(std::string(name) + (adamw ? " AdamW" : " Adam") + (square_out ? ", grad^2 returned" : ""));
        const Device d(name);
        Trainer eager(d, adamw, square_out), fast(d, adamw, square_out);
        StaticFunction f([&](std::span<const Tensor> in) { return fast.Step(in); }, fast.State(), d);
        for (int step = 0; step < 5; ++step) {
          const std::vector<Tensor> want = eager.Step(eager.Inputs(d));
          const std::vector<Tensor> got = f(fast.Inputs(d));
          ASSERT_EQ(got.size(), want.size());
          for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(Bits(got[i]), Bits(want[i])) << "step " << step;
          EXPECT_EQ(Bits(fast.w), Bits(eager.w)) << "step " << step;
          EXPECT_EQ(Bits(fast.b), Bits(eager.b)) << "step " << step;
          EXPECT_EQ(Bits(fast.k), Bits(eager.k)) << "step " << step;
        }
        // Step 0 captured without moments, step 1 with them; steps 2.. replay the second program, in which every
        // parameter's update is one fused_adam (but w's with grad * grad returned), its results donated into the
        // parameter and both moments.
        const std::string text = ir::Print(*f.program());
        EXPECT_EQ(Count(text, "kernel.fused_adam("), square_out ? 2u : 3u) << text;
        ASSERT_NE(f.executor(), nullptr);
        EXPECT_EQ(f.executor()->donations().size(), 9u);
      }
    }
  }
}

// tanh's and sigmoid's backward as their VJPs record it (core/ops/schema.cc), y = tanh(x) and s = sigmoid(x):
// the fused kernels against those ops on cpu and both simulators, over a tail that is not a whole vector (37 x 5),
// a transposed (strided) gradient, and special values (signed zeros, +-1, a subnormal, huge values, infinities,
// NaN) in y and grad.
TEST(FuseActGradRun, KernelsAreTheVjpOpsBitwiseOnCpuAndBothSimulators) {
  Generator gen(13);
  const Tensor g = randn({5, 37}, gen, 0, 1, DType::kFloat32, kCpu).transpose(0, 1);
  std::vector<float> ys = tanh(randn({37, 5}, gen, 0, 1, DType::kFloat32, kCpu)).ToVector<float>();
  const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::denorm_min(), 3e38f,
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  std::copy(std::begin(special), std::end(special), ys.begin());
  const Tensor y = FromVector<float>(ys, {37, 5}, kCpu);
  std::vector<float> gs = g.contiguous().ToVector<float>();
  gs[10] = std::numeric_limits<float>::infinity();
  gs[11] = -0.0f;
  gs[12] = std::numeric_limits<float>::quiet_NaN();
  const Tensor g2 = FromVector<float>(gs, {37, 5}, kCpu);
  for (const char* name : kDevices) {
    SCOPED_TRACE(name);
    const Device d(name);
    for (const Tensor& gg : {g, g2}) {
      const Tensor G = gg.to(d), Y = y.to(d);
      const Tensor one = full({}, 1.0, DType::kFloat32, d);
      const std::vector<Tensor> in = {G, Y, one};
      // mul(grad, add(neg(mul(y, y)), one)), as G(a) * (1.0 - square(tanh(X(a)))) records it.
      const std::vector<Tensor> tanh_grad = ops::Run(ops::Op::kFusedTanhGrad, in);
      ASSERT_EQ(tanh_grad.size(), 1u);
      EXPECT_EQ(Bits(tanh_grad[0]), Bits(G * (1.0 - square(Y))));
      // mul(mul(grad, s), add(neg(s), one)), as G(a) * sigmoid(X(a)) * (1.0 - sigmoid(X(a))) records it.
      const std::vector<Tensor> sigmoid_grad = ops::Run(ops::Op::kFusedSigmoidGrad, in);
      ASSERT_EQ(sigmoid_grad.size(), 1u);
      EXPECT_EQ(Bits(sigmoid_grad[0]), Bits(G * Y * (1.0 - Y)));
    }
  }
  const Tensor t = zeros({4, 3});
  const std::vector<Tensor> bad_y = {t, zeros({3, 4}), zeros({})};
  EXPECT_THROW(ops::Run(ops::Op::kFusedTanhGrad, bad_y), Error);
  const std::vector<Tensor> bad_one = {t, t, zeros({1})};
  try {
    ops::Run(ops::Op::kFusedSigmoidGrad, bad_one);
    FAIL() << "a `one` of shape [1] was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("argument 'one' must be a 0-d scalar, got shape [1]"), std::string::npos)
        << e.what();
  }
}

// The gradients of a small network with tanh, sigmoid and silu (x * sigmoid(x), as llama's SwiGlu has it), from a
// step captured by StaticFunction (fuse-linear, fuse-act-grad, the scheduler) against the same step run eagerly:
// bitwise, with one fused kernel per activation; `square_out` also returns y * y, which CSE merges with tanh's
// backward square, so that chain keeps an intermediate alive and must stay unfused.
TEST(FuseActGradRun, StaticStepsAreEagerBitwiseWithTheActivationGradientsFused) {
  for (const char* name : kDevices) {
    for (const bool square_out : {false, true}) {
      SCOPED_TRACE(std::string(name) + (square_out ? ", y * y returned" : ""));
      const Device d(name);
      Generator gen(5);
      Tensor w = randn({4, 6}, gen, 0, 0.5, DType::kFloat32, kCpu).to(d);
      Tensor b = randn({4}, gen, 0, 0.5, DType::kFloat32, kCpu).to(d);
      Tensor v = randn({4, 4}, gen, 0, 0.5, DType::kFloat32, kCpu).to(d);
      const Tensor x = randn({5, 6}, gen, 0, 1, DType::kFloat32, kCpu).to(d);
      for (Tensor* p : {&w, &b, &v}) p->set_requires_grad(true);
      auto step = [&](std::span<const Tensor>) {
        const Tensor y = tanh(linear(x, w, b));  // matmul(x, w^T) + b, then tanh
        const Tensor z = silu(matmul(y, v));
        const Tensor loss = sum(sigmoid(z) * z);
        for (Tensor* p : {&w, &b, &v}) p->zero_grad();
        loss.backward();
        std::vector<Tensor> out = {loss, w.grad(), b.grad(), v.grad()};
        if (square_out) out.push_back(y * y);
        return out;
      };
      const std::vector<StateSlot> state = {{"w", &w}, {"b", &b}, {"v", &v}};
      const std::string text = CapturedStepsAreEagerBitwise(step, state, d);
      EXPECT_EQ(Count(text, "kernel.fused_tanh_grad("), square_out ? 0u : 1u) << text;
      EXPECT_EQ(Count(text, "kernel.fused_sigmoid_grad("), 2u) << text;  // sigmoid's and silu's
      EXPECT_EQ(Count(text, "kernel.fused_linear("), 1u) << text;
      EXPECT_EQ(Count(text, "kernel.tanh("), 0u) << text;  // fused_linear's epilogue, read by the backward
    }
  }
}

// fused_log_softmax against log_softmax and softmax along the same axis, bit for bit: rows of 2 (the mlp's
// logits) and of 256 (the shared fast path's longest), longer rows (257, the kernels' other sum), a middle axis
// (columns), a transposed x (a strided axis), special values in a row (NaN, +-inf, a row of -inf, huge values,
// signed zeros), on cpu and both simulators; float64 on the cpu.
TEST(FuseLogSoftmaxRun, KernelIsLogSoftmaxAndSoftmaxBitwiseOnCpuAndBothSimulators) {
  Generator gen(17);
  std::vector<float> sv = randn({37, 2}, gen, 0, 3, DType::kFloat32, kCpu).ToVector<float>();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float special[] = {nan, 1.0f, inf, 2.0f, -inf, -inf, 3e38f, -3e38f, 0.0f, -0.0f, -inf, 4.0f, 88.0f, -104.0f};
  std::copy(std::begin(special), std::end(special), sv.begin());
  struct Case {
    Tensor x;
    int64_t axis;
  };
  const Case cases[] = {
      {FromVector<float>(sv, {37, 2}, kCpu), 1},
      {randn({9, 256}, gen, 0, 2, DType::kFloat32, kCpu), -1},
      {randn({5, 257}, gen, 0, 2, DType::kFloat32, kCpu), 1},
      {randn({4, 7, 3}, gen, 0, 2, DType::kFloat32, kCpu), 1},
      {randn({5, 37}, gen, 0, 2, DType::kFloat32, kCpu).transpose(0, 1), 1},
      {randn({3, 5}, gen, 0, 2, DType::kFloat32, kCpu), 0},
  };
  for (const char* name : kDevices) {
    SCOPED_TRACE(name);
    const Device d(name);
    for (const Case& c : cases) {
      SCOPED_TRACE(c.x.shape().ToString() + " axis " + std::to_string(c.axis));
      const std::vector<Tensor> in = {c.x.to(d)};
      const std::vector<Tensor> got = ops::Run(ops::Op::kFusedLogSoftmax, in, {c.axis});
      ASSERT_EQ(got.size(), 2u);
      EXPECT_EQ(Bits(got[0]), Bits(log_softmax(in[0], c.axis)));
      EXPECT_EQ(Bits(got[1]), Bits(softmax(in[0], c.axis)));
    }
  }
  const Tensor x64 = randn({6, 5}, gen, 0, 2, DType::kFloat64, kCpu);
  const std::vector<Tensor> in64 = {x64};
  const std::vector<Tensor> got64 = ops::Run(ops::Op::kFusedLogSoftmax, in64, {int64_t{1}});
  auto bits64 = [](const Tensor& t) {
    const std::vector<double> v = t.contiguous().ToVector<double>();
    std::vector<uint64_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * sizeof(double));
    return b;
  };
  EXPECT_EQ(bits64(got64[0]), bits64(log_softmax(x64, 1)));
  EXPECT_EQ(bits64(got64[1]), bits64(softmax(x64, 1)));
  try {
    ops::Run(ops::Op::kFusedLogSoftmax, in64, {int64_t{2}});
    FAIL() << "axis 2 of a 2-d x was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fused_log_softmax: axis 2 is out of range for x of shape [6, 5]"),
              std::string::npos)
        << e.what();
  }
}

// A classifier's step with cross_entropy, captured (fuse-log-softmax pairs the loss's log_softmax with the softmax
// its VJP recomputes) against the same step run eagerly: bitwise, with one fused_log_softmax and no softmax or
// log_softmax kernel left. With `column_softmax` the loss also adds a softmax over the batch axis, which has no
// log_softmax to pair with and must stay a softmax kernel (its VJP's softmax merges with it).
TEST(FuseLogSoftmaxRun, StaticStepsAreEagerBitwiseWithTheLossSoftmaxFused) {
  for (const char* name : kDevices) {
    for (const bool column_softmax : {false, true}) {
      SCOPED_TRACE(std::string(name) + (column_softmax ? ", softmax over the batch too" : ""));
      const Device d(name);
      Generator gen(19);
      Tensor w = randn({3, 6}, gen, 0, 0.5, DType::kFloat32, kCpu).to(d);
      Tensor b = randn({3}, gen, 0, 0.5, DType::kFloat32, kCpu).to(d);
      const Tensor x = randn({5, 6}, gen, 0, 1, DType::kFloat32, kCpu).to(d);
      const Tensor labels = FromVector<int64_t>({0, 2, 1, 1, 2}, {5}, kCpu).to(d);
      for (Tensor* p : {&w, &b}) p->set_requires_grad(true);
      auto step = [&](std::span<const Tensor>) {
        const Tensor logits = linear(x, w, b);
        Tensor loss = cross_entropy(logits, labels);
        if (column_softmax) loss = loss + sum(softmax(logits, 0) * logits);
        for (Tensor* p : {&w, &b}) p->zero_grad();
        loss.backward();
        return std::vector<Tensor>{loss, w.grad(), b.grad()};
      };
      const std::vector<StateSlot> state = {{"w", &w}, {"b", &b}};
      const std::string text = CapturedStepsAreEagerBitwise(step, state, d);
      EXPECT_EQ(Count(text, "kernel.fused_log_softmax("), 1u) << text;
      EXPECT_EQ(Count(text, "kernel.log_softmax("), 0u) << text;
      EXPECT_EQ(Count(text, "kernel.softmax("), column_softmax ? 1u : 0u) << text;
    }
  }
}

// fused_rotary_grad against the gradient eager autograd computes through the rotation's ops (the VJPs of concat,
// sub, add and mul: slices, products, a negation, sums and slice_scatter + add), bit for bit: grad with NaN,
// +-inf, signed zeros and huge values, a permuted (strided) grad, cos and sin of one position; on cpu and both
// simulators. A static step over rotary_embedding then fuses both directions (fused_rotary and
// fused_rotary_grad) and stays eager's bitwise.
TEST(FuseRotaryRun, GradKernelIsTheVjpOpsBitwiseOnCpuAndBothSimulators) {
  Generator gen(31);
  std::vector<float> gv = randn({2, 3, 5, 8}, gen, 0, 1, DType::kFloat32, kCpu).ToVector<float>();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float special[] = {nan, 1.0f, inf, -inf, 0.0f, -0.0f, 3e38f, -3e38f, -0.0f, -0.0f, nan, nan, 2.0f, -0.0f};
  std::copy(std::begin(special), std::end(special), gv.begin());
  const Tensor g = FromVector<float>(gv, {2, 3, 5, 8}, kCpu);
  const Tensor gt = randn({2, 5, 3, 8}, gen, 0, 1, DType::kFloat32, kCpu).permute({0, 2, 1, 3});
  const Tensor x = randn({2, 3, 5, 8}, gen, 0, 1, DType::kFloat32, kCpu);
  const Tensor c = randn({5, 4}, gen, 0, 1, DType::kFloat32, kCpu), s = randn({5, 4}, gen, 0, 1, DType::kFloat32, kCpu);
  const Tensor c1 = randn({4}, gen, 0, 1, DType::kFloat32, kCpu), s1 = randn({4}, gen, 0, 1, DType::kFloat32, kCpu);
  for (const char* name : kDevices) {
    SCOPED_TRACE(name);
    const Device d(name);
    for (const auto& [gg, cc, ss] : {std::tuple{g, c, s}, std::tuple{gt, c, s}, std::tuple{g, c1, s1}}) {
      const Tensor G = gg.to(d), C = cc.to(d), S = ss.to(d);
      Tensor X = FromVector<float>(x.ToVector<float>(), x.shape(), kCpu).to(d);  // a fresh leaf per case
      X.set_requires_grad(true);
      const Tensor x1 = X.slice(-1, 0, 4), x2 = X.slice(-1, 4, 8);
      const Tensor parts[] = {x1 * C - x2 * S, x2 * C + x1 * S};
      sum(concat(parts, -1) * G).backward();
      const std::vector<Tensor> in = {G, C, S};
      const std::vector<Tensor> got = ops::Run(ops::Op::kFusedRotaryGrad, in);
      ASSERT_EQ(got.size(), 1u);
      EXPECT_EQ(Bits(got[0]), Bits(X.grad()));
    }
  }
  for (const char* name : kDevices) {
    SCOPED_TRACE(name);
    const Device d(name);
    Tensor w = randn({2, 3, 5, 8}, gen, 0, 1, DType::kFloat32, kCpu).to(d);
    w.set_requires_grad(true);
    auto step = [&](std::span<const Tensor>) {
      const Tensor loss = sum(square(rotary_embedding(w)));
      w.zero_grad();
      loss.backward();
      return std::vector<Tensor>{loss, w.grad()};
    };
    const std::vector<StateSlot> state = {{"w", &w}};
    const std::string text = CapturedStepsAreEagerBitwise(step, state, d);
    EXPECT_EQ(Count(text, "kernel.fused_rotary("), 1u) << text;
    EXPECT_EQ(Count(text, "kernel.fused_rotary_grad("), 1u) << text;
    EXPECT_EQ(Count(text, "kernel.slice_scatter("), 0u) << text;
  }
}

// fused_masked_softmax and fused_masked_softmax_grad against the ops they replace (mul by a 0-d scale, where with
// a bool mask and a 0-d fill, softmax over the last axis; and the backward mul, sum, sub, mul, where, mul), bit for
// bit: attention's [2, 3, 8, 8] scores under a causal mask broadcast from [8, 8], with a fully masked row and
// special values (NaN, +-inf, signed zeros, huge values) in x and in the gradient; a transposed (strided) x and
// gradient; rows of 300 (past the sum kernel's 256-element leaf) with a mask broadcast along the rows; two rows of
// 40000 (the sum kernel splits such rows over threads when it has several); on cpu and both simulators, and
// float64 on the cpu.
TEST(FuseMaskedSoftmaxRun, KernelsAreTheOpsBitwiseOnCpuAndBothSimulators) {
  Generator gen(23);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> xv = randn({2, 3, 8, 8}, gen, 0, 3, DType::kFloat32, kCpu).ToVector<float>();
  const float special[] = {nan, 1.0f, inf, -inf, 0.0f, -0.0f, 3e38f, -3e38f, 88.0f, -104.0f, 1e-40f, 2.0f};
  std::copy(std::begin(special), std::end(special), xv.begin() + 8);  // row 1: its first 2 entries stay visible
  std::copy(std::begin(special), std::end(special), xv.begin() + 120);
  std::vector<float> gv = randn({2, 3, 8, 8}, gen, 0, 1, DType::kFloat32, kCpu).ToVector<float>();
  std::copy(std::begin(special), std::end(special), gv.begin() + 60);
  const Tensor pos = arange(0, 8, 1, DType::kInt64, kCpu);
  Tensor causal = le(pos.unsqueeze(0), pos.unsqueeze(1));  // [query, key]
  std::vector<float> mv = randn({8, 8}, gen, 0, 1, DType::kFloat32, kCpu).ToVector<float>();
  for (int i = 0; i < 8; ++i) mv[static_cast<size_t>(3 * 8 + i)] = -1.0f;  // row 3: nothing visible
  const Tensor random_mask = gt(FromVector<float>(mv, {8, 8}, kCpu), 0.0);
  struct Case {
    Tensor x, g, mask;
    double scale, fill;
  };
  const Case cases[] = {
      {FromVector<float>(xv, {2, 3, 8, 8}, kCpu), FromVector<float>(gv, {2, 3, 8, 8}, kCpu), causal, 0.25, -inf},
      {FromVector<float>(xv, {2, 3, 8, 8}, kCpu), FromVector<float>(gv, {2, 3, 8, 8}, kCpu), random_mask, 0.5, -1e4},
      {randn({2, 3, 8, 8}, gen, 0, 2, DType::kFloat32, kCpu).transpose(-1, -2),
       randn({8, 3, 8, 2}, gen, 0, 2, DType::kFloat32, kCpu).transpose(0, 3), causal, 0.25, -inf},
      {randn({5, 300}, gen, 0, 2, DType::kFloat32, kCpu), randn({5, 300}, gen, 0, 2, DType::kFloat32, kCpu),
       gt(randn({300}, gen, 0, 1, DType::kFloat32, kCpu), -1.0), 0.125, -inf},
      {randn({2, 40000}, gen, 0, 2, DType::kFloat32, kCpu), randn({2, 40000}, gen, 0, 2, DType::kFloat32, kCpu),
       gt(randn({2, 1}, gen, 0, 1, DType::kFloat32, kCpu), -100.0), 0.5, 0.0},
  };
  for (const char* name : kDevices) {
    SCOPED_TRACE(name);
    const Device d(name);
    for (const Case& c : cases) {
      SCOPED_TRACE(c.x.shape().ToString() + " mask " + c.mask.shape().ToString());
      const Tensor x = c.x.to(d), g = c.g.to(d), mask = c.mask.to(d);
      const Tensor scale = full({}, c.scale, DType::kFloat32, d), fill = full({}, c.fill, DType::kFloat32, d);
      const Tensor zero = full({}, 0.0, DType::kFloat32, d);
      const std::vector<Tensor> in = {x, scale, mask, fill};
      const std::vector<Tensor> y = ops::Run(ops::Op::kFusedMaskedSoftmax, in);
      ASSERT_EQ(y.size(), 1u);
      EXPECT_EQ(Bits(y[0]), Bits(softmax(where(mask, x * scale, fill), -1)));
      const std::vector<Tensor> gin = {g, y[0], mask, zero, scale};
      const std::vector<Tensor> gx = ops::Run(ops::Op::kFusedMaskedSoftmaxGrad, gin);
      ASSERT_EQ(gx.size(), 1u);
      const Tensor want = where(mask, y[0] * (g - sum(g * y[0], {x.rank() - 1}, true)), zero) * scale;
      EXPECT_EQ(Bits(gx[0]), Bits(want));
    }
  }
  auto bits64 = [](const Tensor& t) {
    const std::vector<double> v = t.contiguous().ToVector<double>();
    std::vector<uint64_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * sizeof(double));
    return b;
  };
  const Tensor x64 = randn({3, 4, 6}, gen, 0, 2, DType::kFloat64, kCpu);
  const Tensor g64 = randn({3, 4, 6}, gen, 0, 2, DType::kFloat64, kCpu);
  const Tensor m64 =
      le(arange(0, 6, 1, DType::kInt64, kCpu).unsqueeze(0), arange(0, 4, 1, DType::kInt64, kCpu).unsqueeze(1));
  const Tensor s64 = full({}, 0.25, DType::kFloat64, kCpu), f64 = full({}, -1e300, DType::kFloat64, kCpu);
  const Tensor z64 = full({}, 0.0, DType::kFloat64, kCpu);
  const std::vector<Tensor> in64 = {x64, s64, m64, f64};
  const Tensor y64 = ops::Run(ops::Op::kFusedMaskedSoftmax, in64)[0];
  EXPECT_EQ(bits64(y64), bits64(softmax(where(m64, x64 * s64, f64), -1)));
  const std::vector<Tensor> gin64 = {g64, y64, m64, z64, s64};
  EXPECT_EQ(bits64(ops::Run(ops::Op::kFusedMaskedSoftmaxGrad, gin64)[0]),
            bits64(where(m64, y64 * (g64 - sum(g64 * y64, {2}, true)), z64) * s64));
  // Bad operands are refused, naming what was expected.
  const std::vector<Tensor> bad_mask = {x64, s64, full({4, 6}, 1.0, DType::kFloat64, kCpu), f64};
  try {
    ops::Run(ops::Op::kFusedMaskedSoftmax, bad_mask);
    FAIL() << "a float64 mask was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("argument 'mask' must be bool"), std::string::npos) << e.what();
  }
  const std::vector<Tensor> bad_scale = {g64, y64, m64, z64, full({1}, 0.25, DType::kFloat64, kCpu)};
  try {
    ops::Run(ops::Op::kFusedMaskedSoftmaxGrad, bad_scale);
    FAIL() << "a scale of shape [1] was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("argument 'scale' must be a 0-d scalar, got shape [1]"), std::string::npos)
        << e.what();
  }
}

// Causal attention's step (scaled_dot_product_attention: matmul, * 1/sqrt(d), where with the causal mask, softmax,
// matmul), captured (fuse-masked-softmax and fuse-masked-softmax-grad) against the same step run eagerly: bitwise,
// with one fused kernel each way and no softmax or where kernel left. With `probs_out` the step also returns the
// attention's scaled scores, so the scale's mul has a second use and the forward chain must stay unfused.
TEST(FuseMaskedSoftmaxRun, StaticStepsAreEagerBitwiseWithTheAttentionSoftmaxFused) {
  for (const char* name : kDevices) {
    for (const bool scores_out : {false, true}) {
      SCOPED_TRACE(std::string(name) + (scores_out ? ", scaled scores returned" : ""));
      const Device d(name);
      Generator gen(29);
      Tensor q = randn({2, 2, 5, 4}, gen, 0, 1, DType::kFloat32, kCpu).to(d);
      Tensor k = randn({2, 2, 5, 4}, gen, 0, 1, DType::kFloat32, kCpu).to(d);
      Tensor v = randn({2, 2, 5, 4}, gen, 0, 1, DType::kFloat32, kCpu).to(d);
      for (Tensor* p : {&q, &k, &v}) p->set_requires_grad(true);
      auto step = [&](std::span<const Tensor>) {
        const Tensor y = scaled_dot_product_attention(q, k, v, /*causal=*/true);
        Tensor loss = sum(y * y);
        for (Tensor* p : {&q, &k, &v}) p->zero_grad();
        loss.backward();
        std::vector<Tensor> out = {loss, q.grad(), k.grad(), v.grad()};
        if (scores_out) out.push_back(matmul(q, k.transpose(-1, -2)) * 0.5);
        return out;
      };
      const std::vector<StateSlot> state = {{"q", &q}, {"k", &k}, {"v", &v}};
      const std::string text = CapturedStepsAreEagerBitwise(step, state, d);
      EXPECT_EQ(Count(text, "kernel.fused_masked_softmax("), scores_out ? 0u : 1u) << text;
      EXPECT_EQ(Count(text, "kernel.fused_masked_softmax_grad("), 1u) << text;
      EXPECT_EQ(Count(text, "kernel.softmax("), scores_out ? 1u : 0u) << text;
      EXPECT_EQ(Count(text, "kernel.where("), scores_out ? 1u : 0u) << text;
    }
  }
}

}  // namespace
}  // namespace oar::jit
