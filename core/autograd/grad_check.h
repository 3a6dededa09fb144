// Test helper: central finite differences against autograd, in float64.
#ifndef OAR_CORE_AUTOGRAD_GRAD_CHECK_H_
#define OAR_CORE_AUTOGRAD_GRAD_CHECK_H_

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/autograd/autograd.h"

namespace oar::testing {

/// A float64 cpu tensor uniform in [lo, hi) that requires grad.
inline Tensor RandomF64(const Dims& shape, uint64_t seed, double lo = -1, double hi = 1) {
  Generator g(seed);
  Tensor t = rand(shape, g, lo, hi, DType::kFloat64, Device("cpu"));
  t.set_requires_grad(true);
  return t;
}

/// Compare autograd's gradient of sum(f(inputs) * w) (w random) with central differences, for every
/// element of every input.
inline void GradCheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                      const std::string& what, double tol = 1e-6) {
  const Tensor out = f(inputs);
  Generator g(99);
  const Tensor w = rand(out.shape(), g, 0.5, 1.5, DType::kFloat64, Device("cpu"));
  const std::vector<Tensor> analytic = grad({sum(out * w)}, inputs);
  for (size_t k = 0; k < inputs.size(); ++k) {
    const std::vector<double> x = inputs[k].ToVector<double>();
    const std::vector<double> a = analytic[k].ToVector<double>();
    ASSERT_EQ(a.size(), x.size()) << what;
    for (size_t i = 0; i < x.size(); ++i) {
      auto eval = [&](double v) {
        std::vector<double> xp = x;
        xp[i] = v;
        std::vector<Tensor> args = inputs;
        args[k] = FromVector<double>(xp, inputs[k].shape(), Device("cpu"));
        if (inputs[k].requires_grad()) args[k].set_requires_grad(true);  // f may differentiate internally
        return sum(f(args) * w).item<double>();
      };
      const double h = 1e-6 * std::max(1.0, std::abs(x[i]));
      const double numeric = (eval(x[i] + h) - eval(x[i] - h)) / (2 * h);
      EXPECT_NEAR(a[i], numeric, tol * std::max(1.0, std::abs(numeric))) << what << ": d/d input " << k << "[" << i << "]";
    }
  }
}

}  // namespace oar::testing

#endif  // OAR_CORE_AUTOGRAD_GRAD_CHECK_H_
