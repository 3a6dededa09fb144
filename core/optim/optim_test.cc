// Optimisers against steps computed by hand, schedules, clipping, and a small model that learns.
#include <cmath>

#include <gtest/gtest.h>

#include "core/nn/layers.h"
#include "core/optim/optim.h"

namespace oar::optim {
namespace {

Tensor Param(std::vector<double> v) {
  Tensor t = FromVector<double>(v, {static_cast<int64_t>(v.size())}, Device("cpu"));
  t.set_requires_grad(true);
  return t;
}
// loss = sum(p * c): the gradient is c.
void Backward(Tensor& p, std::vector<double> c) {
  sum(p * FromVector<double>(c, {static_cast<int64_t>(c.size())}, Device("cpu"))).backward();
}

TEST(SGD, PlainMomentumNesterovAndWeightDecayByHand) {
  Tensor p = Param({1.0, -2.0});
  SGD sgd({&p}, 0.1, {.momentum = 0.9, .weight_decay = 0.5});
  Backward(p, {1, 1});
  sgd.Step();  // g = 1 + 0.5 p = (1.5, 0); v = g; p -= 0.1 v
  EXPECT_NEAR(p.ToVector<double>()[0], 1.0 - 0.15, 1e-12);
  EXPECT_NEAR(p.ToVector<double>()[1], -2.0, 1e-12);
  sgd.ZeroGrad();
  Backward(p, {1, 1});
  sgd.Step();  // g = 1 + 0.5 * 0.85 = 1.425; v = 0.9 * 1.5 + 1.425 = 2.775; p = 0.85 - 0.2775
  EXPECT_NEAR(p.ToVector<double>()[0], 0.85 - 0.2775, 1e-12);

  Tensor q = Param({1.0});
  SGD nesterov({&q}, 0.1, {.momentum = 0.5, .nesterov = true});
  Backward(q, {2});
  nesterov.Step();  // v = 2; step = g + 0.5 v = 3
  EXPECT_NEAR(q.ToVector<double>()[0], 1.0 - 0.3, 1e-12);
}

TEST(Adam, FirstTwoStepsByHand) {
  Tensor p = Param({0.5});
  Adam adam({&p}, 0.01);
  Backward(p, {2});
  adam.Step();  // m̂ = 2, v̂ = 4 -> step = lr * 2 / (2 + eps)
  EXPECT_NEAR(p.ToVector<double>()[0], 0.5 - 0.01 * 2 / (2 + 1e-8), 1e-12);
  adam.ZeroGrad();
  Backward(p, {-1});
  adam.Step();
  const double m = (0.9 * 0.2 + 0.1 * -1) / (1 - 0.81), v = (0.999 * 0.004 + 0.001 * 1) / (1 - 0.998001);
  EXPECT_NEAR(p.ToVector<double>()[0], 0.5 - 0.01 * 2 / (2 + 1e-8) - 0.01 * m / (std::sqrt(v) + 1e-8), 1e-12);
}

TEST(AdamW, DecaysWeightsDecoupled) {
  Tensor p = Param({1.0});
  AdamW adamw({&p}, 0.1, {.weight_decay = 0.5, .decoupled = true});
  Backward(p, {0});  // zero gradient: only the decay moves p
  adamw.Step();
  EXPECT_NEAR(p.ToVector<double>()[0], 1.0 * (1 - 0.1 * 0.5), 1e-12);
}

TEST(Schedule, WarmupThenCosine) {
  EXPECT_NEAR(WarmupCosine(0, 1.0, 10, 110), 0.1, 1e-12);
  EXPECT_NEAR(WarmupCosine(9, 1.0, 10, 110), 1.0, 1e-12);
  EXPECT_NEAR(WarmupCosine(60, 1.0, 10, 110, 0.0), 0.5, 1e-12);
  EXPECT_NEAR(WarmupCosine(200, 1.0, 10, 110, 0.01), 0.01, 1e-12);
}

TEST(Clip, ScalesToTheGlobalNorm) {
  Tensor a = Param({0, 0}), b = Param({0});
  Backward(a, {3, 0});
  Backward(b, {4});
  EXPECT_NEAR(ClipGradNorm({&a, &b}, 1.0).item<double>(), 5.0, 1e-12);
  EXPECT_NEAR(a.grad().ToVector<double>()[0], 0.6, 1e-6);
  EXPECT_NEAR(b.grad().ToVector<double>()[0], 0.8, 1e-6);
}

TEST(Training, ASmallNetworkFitsXor) {
  Generator gen(7);
  nn::Sequential net;
  net.Add(std::make_shared<nn::Linear>(2, 16, true, gen)).Add([](const Tensor& x) { return tanh(x); });
  net.Add(std::make_shared<nn::Linear>(16, 1, true, gen));
  const Tensor x = FromVector<float>({0, 0, 0, 1, 1, 0, 1, 1}, {4, 2}, Device("cpu"));
  const Tensor y = FromVector<float>({0, 1, 1, 0}, {4, 1}, Device("cpu"));
  Adam opt(net.Parameters(), 0.05);
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    opt.ZeroGrad();
    const Tensor loss = mse_loss(net.Forward(x), y);
    loss.backward();
    opt.Step();
    (step == 0 ? first : last) = loss.item<float>();
  }
  EXPECT_LT(last, 0.01 * first) << "first " << first << " last " << last;
}

}  // namespace
}  // namespace oar::optim
