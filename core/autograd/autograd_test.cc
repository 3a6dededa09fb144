// Autograd: finite-difference checks in float64 for every differentiable op, higher-order gradients
// (Hessian-vector product, the Laplacian of a small MLP), accumulation, NoGradGuard and the error paths.
#include <cmath>
#include <functional>

#include <gtest/gtest.h>

#include "core/autograd/autograd.h"
#include "core/autograd/grad_check.h"

namespace oar {
namespace {

const Device kCpu("cpu");

Tensor F64(std::vector<double> v, const Dims& shape, bool requires_grad = true) {
  Tensor t = FromVector<double>(v, shape, kCpu);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

using testing::GradCheck;
using testing::RandomF64;

TEST(GradCheck, ArithmeticWithBroadcasting) {
  const Tensor a = RandomF64({2, 3}, 1), b = RandomF64({3}, 2), c = RandomF64({2, 1}, 3, 0.5, 2);
  GradCheck([](auto& v) { return v[0] + v[1]; }, {a, b}, "add");
  GradCheck([](auto& v) { return v[0] - v[1]; }, {a, b}, "sub");
  GradCheck([](auto& v) { return v[0] * v[1]; }, {a, b}, "mul");
  GradCheck([](auto& v) { return v[0] / v[1]; }, {a, c}, "div");
  GradCheck([](auto& v) { return neg(v[0]); }, {a}, "neg");
  GradCheck([](auto& v) { return exp(v[0]); }, {a}, "exp");
}

TEST(GradCheck, MatmulBatchedAndVectors) {
  GradCheck([](auto& v) { return matmul(v[0], v[1]); }, {RandomF64({2, 3, 4}, 4), RandomF64({4, 5}, 5)}, "matmul batch");
  GradCheck([](auto& v) { return matmul(v[0], v[1]); }, {RandomF64({3}, 6), RandomF64({3, 2}, 7)}, "matmul vec-mat");
  GradCheck([](auto& v) { return matmul(v[0], v[1].transpose(0, 1)); }, {RandomF64({2, 3}, 8), RandomF64({4, 3}, 9)},
            "matmul with a transposed view");
}

TEST(GradCheck, ReductionsAndViews) {
  const Tensor x = RandomF64({2, 3, 4}, 10);
  GradCheck([](auto& v) { return sum(v[0], {1}); }, {x}, "sum axis 1");
  GradCheck([](auto& v) { return sum(v[0], {0, 2}, true); }, {x}, "sum keepdim");
  GradCheck([](auto& v) { return mean(v[0], {-1}); }, {x}, "mean");
  GradCheck([](auto& v) { return v[0].permute({2, 0, 1}).reshape({4, 6}); }, {x}, "permute + reshape");
  GradCheck([](auto& v) { return v[0].slice(2, 1, 4, 2) * 3.0; }, {x}, "strided slice");
  GradCheck([](auto& v) { return v[0].unsqueeze(1).expand({2, 5, 3, 4}); }, {x}, "unsqueeze + expand");
  GradCheck([](auto& v) { return v[0].transpose(0, 2).contiguous(); }, {x}, "contiguous of a transpose");
}

TEST(Autograd, BackwardAccumulatesIntoLeaves) {
  Tensor w = F64({1, 2, 3}, {3});
  Tensor y = sum(w * w);
  y.backward();
  EXPECT_EQ(w.grad().ToVector<double>(), (std::vector<double>{2, 4, 6}));
  sum(w * 3.0).backward();  // accumulates
  EXPECT_EQ(w.grad().ToVector<double>(), (std::vector<double>{5, 7, 9}));
  w.zero_grad();
  EXPECT_FALSE(w.grad().defined());
}

TEST(Autograd, HessianVectorProduct) {
  // f(x) = sum(x^3) -> H = diag(6x); H v = 6 x * v.
  Tensor x = F64({1, -2, 0.5}, {3});
  const Tensor v = F64({1, 1, 2}, {3}, false);
  const Tensor gx = grad({sum(x * x * x)}, {x}, {}, /*create_graph=*/true)[0];
  const Tensor hv = grad({sum(gx * v)}, {x})[0];
  const std::vector<double> got = hv.ToVector<double>();
  EXPECT_NEAR(got[0], 6.0, 1e-12);
  EXPECT_NEAR(got[1], -12.0, 1e-12);
  EXPECT_NEAR(got[2], 6.0, 1e-12);
}

TEST(Autograd, LaplacianOfASmallNetworkMatchesFiniteDifferences) {
  // u(x) = w2 . exp(-(W1 x + b1)^2) for x in R^2 — a smooth "network"; Laplacian = trace of the Hessian.
  const Tensor w1 = F64({0.7, -0.3, 0.2, 0.9, -0.5, 0.4}, {3, 2}, false);
  const Tensor b1 = F64({0.1, -0.2, 0.3}, {3}, false);
  const Tensor w2 = F64({1.0, -0.5, 0.8}, {3}, false);
  auto u = [&](const Tensor& x) {
    const Tensor h = matmul(w1, x) + b1;
    return sum(w2 * exp(neg(h * h)));
  };
  Tensor x = F64({0.3, -0.6}, {2});
  const Tensor g = grad({u(x)}, {x}, {}, /*create_graph=*/true)[0];
  double laplacian = 0;
  for (int i = 0; i < 2; ++i) {
    const Tensor gi = g.slice(0, i, i + 1);
    const Tensor hi = grad({sum(gi)}, {x}, {}, /*create_graph=*/false, /*retain_graph=*/true)[0];
    laplacian += hi.ToVector<double>()[i];
  }
  // Finite differences of u itself.
  const double h = 1e-4;
  auto at = [&](double a, double b) { return u(F64({a, b}, {2}, false)).item<double>(); };
  const double u0 = at(0.3, -0.6);
  const double fd = (at(0.3 + h, -0.6) - 2 * u0 + at(0.3 - h, -0.6)) / (h * h) +
                    (at(0.3, -0.6 + h) - 2 * u0 + at(0.3, -0.6 - h)) / (h * h);
  EXPECT_NEAR(laplacian, fd, 1e-5);
}

TEST(Autograd, NoGradGuardStopsRecording) {
  Tensor w = F64({1, 2}, {2});
  Tensor y;
  {
    NoGradGuard guard;
    y = w * 2.0;
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_THROW(y.backward(), Error);
}

TEST(Autograd, ClearErrors) {
  Tensor w = F64({1, 2}, {2});
  Tensor y = sum(w * w);
  y.backward();
  try {
    y.backward();  // the graph was freed
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
  }
  Tensor z = w * 2.0;
  EXPECT_THROW(z.backward(), Error);  // not a scalar and no gradient given
  EXPECT_THROW(FromVector<int64_t>({1}, {1}, kCpu).set_requires_grad(true), Error);
  Tensor unused = F64({3}, {1});
  EXPECT_THROW(grad({sum(w)}, {unused}), Error);
  EXPECT_FALSE(grad({sum(w)}, {unused}, {}, false, false, /*allow_unused=*/true)[0].defined());
  Tensor v = F64({1, 2}, {2});
  EXPECT_THROW(v.copy_(w), Error);  // in-place into a tensor that requires grad
}

TEST(Autograd, RetainGraphAllowsASecondBackward) {
  Tensor w = F64({1, 2}, {2});
  Tensor y = sum(exp(w));
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  EXPECT_NEAR(w.grad().ToVector<double>()[1], 2 * std::exp(2.0), 1e-12);
}

}  // namespace
}  // namespace oar
