#include "conformance/reference/grad.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string_view>
#include <utility>

#include "conformance/reference/elementwise.h"
#include "conformance/reference/internal.h"
#include "conformance/reference/linalg.h"
#include "conformance/reference/reduce.h"
#include "conformance/reference/shape.h"
#include "core/base/error.h"

namespace oar::reference {
namespace {

using internal::CheckArray;
using internal::PlanReduce;
using internal::ReducePlan;

void CheckSameShape(const Array& x, const Array& grad_y, std::string_view op) {
  CheckArray(x, op, "x");
  CheckArray(grad_y, op, "grad_y");
  OAR_CHECK_ARG(x.shape == grad_y.shape, "{}: grad_y {} must have x's shape {}", op, ShapeString(grad_y.shape),
                ShapeString(x.shape));
}

// dx[i] = d(x[i], grad_y[i]).
template <typename F>
Array UnaryGrad(const Array& x, const Array& grad_y, std::string_view op, F d) {
  CheckSameShape(x, grad_y, op);
  Array dx = x;
  for (size_t i = 0; i < x.data.size(); ++i) dx.data[i] = d(x.data[i], grad_y.data[i]);
  return dx;
}

double Sigmoid(double v) {
  if (v >= 0) return 1.0 / (1.0 + std::exp(-v));
  const double e = std::exp(v);
  return e / (1.0 + e);
}

// Partial gradients computed elementwise at the broadcast shape, then summed back to each operand.
template <typename F>
BinaryGrads BinaryGrad(const Array& a, const Array& b, const Array& grad_y, std::string_view op, F partials) {
  CheckArray(a, op, "a");
  CheckArray(b, op, "b");
  CheckArray(grad_y, op, "grad_y");
  const std::vector<int64_t> shape = internal::BroadcastShape(a.shape, b.shape, op);
  OAR_CHECK_ARG(grad_y.shape == shape, "{}: grad_y {} must have the broadcast shape {}", op, ShapeString(grad_y.shape),
                ShapeString(shape));
  const Array ab = internal::BroadcastTo(a, shape, op);
  const Array bb = internal::BroadcastTo(b, shape, op);
  Array da_full = grad_y, db_full = grad_y;
  for (size_t i = 0; i < grad_y.data.size(); ++i) {
    const auto [pa, pb] = partials(ab.data[i], bb.data[i], grad_y.data[i]);
    da_full.data[i] = pa;
    db_full.data[i] = pb;
  }
  return {internal::SumToShape(da_full, a.shape), internal::SumToShape(db_full, b.shape)};
}

// dx[i] = d(group values, position j of i within its group, grad_y of the group), for each group.
template <typename F>
Array ReduceGrad(const Array& x, const Array& grad_y, const std::vector<int64_t>& axes, bool keepdim,
                 std::string_view op, F d) {
  const ReducePlan plan = PlanReduce(x, axes, keepdim, op);
  CheckArray(grad_y, op, "grad_y");
  OAR_CHECK_ARG(grad_y.shape == plan.out_shape, "{}: grad_y {} must have the output shape {}", op,
                ShapeString(grad_y.shape), ShapeString(plan.out_shape));
  Array dx = Array::Full(x.shape, 0.0);
  std::vector<double> values;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    values.clear();
    for (int64_t i : plan.groups[g]) values.push_back(x.data[i]);
    for (size_t j = 0; j < values.size(); ++j) dx.data[plan.groups[g][j]] = d(values, j, grad_y.data[g]);
  }
  return dx;
}

double Mean(const std::vector<double>& v) {
  internal::Accumulator s;
  for (double e : v) s.Add(e);
  return s.Value() / static_cast<double>(v.size());
}

// Equal split of g among the elements equal to the extreme (NaN-aware: NaN matches NaN).
template <typename Better>
double TiedShare(const std::vector<double>& v, size_t j, double g, Better better) {
  double best = v[0];
  for (double e : v) {
    if (std::isnan(best)) break;
    if (std::isnan(e) || better(e, best)) best = e;
  }
  auto same = [best](double e) { return e == best || (std::isnan(e) && std::isnan(best)); };
  double ties = 0.0;
  for (double e : v) ties += same(e) ? 1.0 : 0.0;
  return same(v[j]) ? g / ties : 0.0;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Unary
// ---------------------------------------------------------------------------------------------------

Array neg_grad(const Array& x, const Array& grad_y) {
  return UnaryGrad(x, grad_y, "neg_grad", [](double, double g) { return -g; });
}
Array abs_grad(const Array& x, const Array& grad_y) {
  return UnaryGrad(x, grad_y, "abs_grad", [](double v, double g) { return v > 0 ? g : (v < 0 ? -g : 0.0); });
}
Array sign_grad(const Array& x, const Array& grad_y) {
  return UnaryGrad(x, grad_y, "sign_grad", [](double, double) { return 0.0; });
}
Array exp_grad(const Array& x, const Array& grad_y) {
  return UnaryGrad(x, grad_y, "exp_grad", [](double v, double g) { return g * std::exp(v); });
}
Array log_grad(const Array& x, const Array& grad_y) {
  return UnaryGrad(x, grad_y, "log_grad", [](double v, double g) { return g / v; });
}
Array log1p_grad(const Array& x, const Array& grad_y) {
  return UnaryGrad(x, grad_y, "log1p_grad", [](double v, double g) { return g / (1.0 + v); });
}
Array sqrt_grad(const Array& x, const Array& grad_y) {
  return UnaryGrad(x, grad_y, "sqrt_grad", [](double v, double g) { return g * 0.5 / std::sqrt(v); });
}
Array rsqrt_grad(const Array& x, const Array& grad_y) {
  return UnaryGrad(x, grad_y, "rsqrt_grad", [](double v, double g) { return g * -0.5 / (v * std::sqrt(v)); });
}
Array square_grad(const Array& x, const Array& grad_y) {
  return UnaryGrad(x, grad_y, "square_grad", [](double v, double g) { return g * 2.0 * v; });
}
Array reciprocal_grad(const Array& x, const Array& grad_y) {
  return UnaryGrad(x, grad_y, "reciprocal_grad", [](double v, double g) { return -g / (v * v); });
}
Array sin_grad(const Array& x, const Array& grad_y) {
  return UnaryGrad(x, grad_y, "sin_grad", [](double v, double g) { return g * std::cos(v); });
}
Array cos_grad(const Array& x, const Array& grad_y) {
  return UnaryGrad(x, grad_y, "cos_grad", [](double v, double g) { return -g * std::sin(v); });
}
Array tanh_grad(const Array& x, const Array& grad_y) {
  return UnaryGrad(x, grad_y, "tanh_grad", [](double v, double g) {
    const double t = std::tanh(v);
    return g * (1.0 - t * t);
  });
}
Array sigmoid_grad(const Array& x, const Array& grad_y) {
  return UnaryGrad(x, grad_y, "sigmoid_grad", [](double v, double g) {
    const double s = Sigmoid(v);
    return g * s * (1.0 - s);
  });
}
Array relu_grad(const Array& x, const Array& grad_y) {
  return UnaryGrad(x, grad_y, "relu_grad", [](double v, double g) { return v > 0 ? g : 0.0; });
}
Array leaky_relu_grad(const Array& x, const Array& grad_y, double slope) {
  return UnaryGrad(x, grad_y, "leaky_relu_grad", [slope](double v, double g) { return v > 0 ? g : slope * g; });
}
Array gelu_grad(const Array& x, const Array& grad_y, bool approximate_tanh) {
  if (approximate_tanh) {
    const double c = std::sqrt(2.0 / std::numbers::pi);
    return UnaryGrad(x, grad_y, "gelu_grad", [c](double v, double g) {
      const double t = std::tanh(c * (v + 0.044715 * v * v * v));
      return g * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * v * v));
    });
  }
  return UnaryGrad(x, grad_y, "gelu_grad", [](double v, double g) {
    const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * std::numbers::pi);
    return g * (0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) + v * pdf);
  });
}
Array silu_grad(const Array& x, const Array& grad_y) {
  return UnaryGrad(x, grad_y, "silu_grad", [](double v, double g) {
    const double s = Sigmoid(v);
    return g * (s + v * s * (1.0 - s));
  });
}
Array erf_grad(const Array& x, const Array& grad_y) {
  return UnaryGrad(x, grad_y, "erf_grad",
                   [](double v, double g) { return g * 2.0 / std::sqrt(std::numbers::pi) * std::exp(-v * v); });
}
Array clip_grad(const Array& x, const Array& grad_y, double lo, double hi) {
  clip(x, lo, hi);  // validates the bounds
  return UnaryGrad(x, grad_y, "clip_grad", [lo, hi](double v, double g) { return lo <= v && v <= hi ? g : 0.0; });
}

// ---------------------------------------------------------------------------------------------------
// Binary
// ---------------------------------------------------------------------------------------------------

BinaryGrads add_grad(const Array& a, const Array& b, const Array& grad_y) {
  return BinaryGrad(a, b, grad_y, "add_grad", [](double, double, double g) { return std::pair{g, g}; });
}
BinaryGrads sub_grad(const Array& a, const Array& b, const Array& grad_y) {
  return BinaryGrad(a, b, grad_y, "sub_grad", [](double, double, double g) { return std::pair{g, -g}; });
}
BinaryGrads mul_grad(const Array& a, const Array& b, const Array& grad_y) {
  return BinaryGrad(a, b, grad_y, "mul_grad", [](double p, double q, double g) { return std::pair{g * q, g * p}; });
}
BinaryGrads div_grad(const Array& a, const Array& b, const Array& grad_y) {
  return BinaryGrad(a, b, grad_y, "div_grad", [](double p, double q, double g) {
    return std::pair{g / q, -g * p / (q * q)};
  });
}
BinaryGrads pow_grad(const Array& a, const Array& b, const Array& grad_y) {
  return BinaryGrad(a, b, grad_y, "pow_grad", [](double p, double q, double g) {
    const double da = q == 0 ? 0.0 : g * q * std::pow(p, q - 1.0);
    const double db = (p == 0 && q >= 0) ? 0.0 : g * std::pow(p, q) * std::log(p);
    return std::pair{da, db};
  });
}
BinaryGrads maximum_grad(const Array& a, const Array& b, const Array& grad_y) {
  return BinaryGrad(a, b, grad_y, "maximum_grad", [](double p, double q, double g) {
    if (p == q) return std::pair{g / 2, g / 2};
    return std::pair{p < q ? 0.0 : g, p > q ? 0.0 : g};
  });
}
BinaryGrads minimum_grad(const Array& a, const Array& b, const Array& grad_y) {
  return BinaryGrad(a, b, grad_y, "minimum_grad", [](double p, double q, double g) {
    if (p == q) return std::pair{g / 2, g / 2};
    return std::pair{p > q ? 0.0 : g, p < q ? 0.0 : g};
  });
}
BinaryGrads where_grad(const Array& cond, const Array& a, const Array& b, const Array& grad_y) {
  CheckArray(grad_y, "where_grad", "grad_y");
  const Array y = where(cond, a, b);  // validates the operands and gives the broadcast shape
  OAR_CHECK_ARG(grad_y.shape == y.shape, "where_grad: grad_y {} must have the broadcast shape {}",
                ShapeString(grad_y.shape), ShapeString(y.shape));
  const Array zeros = Array::Full(y.shape, 0.0);
  return {internal::SumToShape(where(cond, grad_y, zeros), a.shape),
          internal::SumToShape(where(cond, zeros, grad_y), b.shape)};
}

// ---------------------------------------------------------------------------------------------------
// Reductions
// ---------------------------------------------------------------------------------------------------

Array sum_grad(const Array& x, const Array& grad_y, const std::vector<int64_t>& axes, bool keepdim) {
  return ReduceGrad(x, grad_y, axes, keepdim, "sum_grad",
                    [](const std::vector<double>&, size_t, double g) { return g; });
}
Array mean_grad(const Array& x, const Array& grad_y, const std::vector<int64_t>& axes, bool keepdim) {
  return ReduceGrad(x, grad_y, axes, keepdim, "mean_grad",
                    [](const std::vector<double>& v, size_t, double g) { return g / static_cast<double>(v.size()); });
}
Array prod_grad(const Array& x, const Array& grad_y, const std::vector<int64_t>& axes, bool keepdim) {
  return ReduceGrad(x, grad_y, axes, keepdim, "prod_grad", [](const std::vector<double>& v, size_t j, double g) {
    double others = 1.0;
    for (size_t i = 0; i < v.size(); ++i) others *= i == j ? 1.0 : v[i];
    return g * others;
  });
}
Array max_grad(const Array& x, const Array& grad_y, const std::vector<int64_t>& axes, bool keepdim) {
  max(x, axes, keepdim);  // validates (an empty reduction throws)
  return ReduceGrad(x, grad_y, axes, keepdim, "max_grad", [](const std::vector<double>& v, size_t j, double g) {
    return TiedShare(v, j, g, [](double p, double q) { return p > q; });
  });
}
Array min_grad(const Array& x, const Array& grad_y, const std::vector<int64_t>& axes, bool keepdim) {
  min(x, axes, keepdim);
  return ReduceGrad(x, grad_y, axes, keepdim, "min_grad", [](const std::vector<double>& v, size_t j, double g) {
    return TiedShare(v, j, g, [](double p, double q) { return p < q; });
  });
}
Array var_grad(const Array& x, const Array& grad_y, const std::vector<int64_t>& axes, double correction, bool keepdim) {
  var(x, axes, correction, keepdim);  // validates the correction
  return ReduceGrad(x, grad_y, axes, keepdim, "var_grad",
                    [correction](const std::vector<double>& v, size_t j, double g) {
                      const double denom = std::max(0.0, static_cast<double>(v.size()) - correction);
                      return g * 2.0 * (v[j] - Mean(v)) / denom;
                    });
}
Array stddev_grad(const Array& x, const Array& grad_y, const std::vector<int64_t>& axes, double correction,
                  bool keepdim) {
  const Array y = stddev(x, axes, correction, keepdim);  // validates
  CheckArray(grad_y, "stddev_grad", "grad_y");
  OAR_CHECK_ARG(grad_y.shape == y.shape, "stddev_grad: grad_y {} must have the output shape {}",
                ShapeString(grad_y.shape), ShapeString(y.shape));
  const Array s = stddev(x, axes, correction, true);
  // d sqrt(v) = dv / (2 sqrt v), except where the std is 0: there its gradient is 0 (docs/ops.md, as torch),
  // not an infinite factor times a zero deviation (NaN). A NaN std stays NaN.
  Array g_over = reshape(grad_y, s.shape);
  for (size_t i = 0; i < g_over.data.size(); ++i) {
    g_over.data[i] = s.data[i] == 0.0 ? 0.0 : g_over.data[i] / (2.0 * s.data[i]);
  }
  return var_grad(x, reshape(g_over, grad_y.shape), axes, correction, keepdim);
}
Array logsumexp_grad(const Array& x, const Array& grad_y, const std::vector<int64_t>& axes, bool keepdim) {
  return ReduceGrad(x, grad_y, axes, keepdim, "logsumexp_grad", [](const std::vector<double>& v, size_t j, double g) {
    const double lse = logsumexp(Array{{static_cast<int64_t>(v.size())}, v}).data[0];
    return g * std::exp(v[j] - lse);
  });
}

// ---------------------------------------------------------------------------------------------------
// Linear algebra
// ---------------------------------------------------------------------------------------------------

BinaryGrads matmul_grad(const Array& a, const Array& b, const Array& grad_y) {
  const Array y = matmul(a, b);  // validates
  CheckArray(grad_y, "matmul_grad", "grad_y");
  OAR_CHECK_ARG(grad_y.shape == y.shape, "matmul_grad: grad_y {} must have the output shape {}",
                ShapeString(grad_y.shape), ShapeString(y.shape));
  // Undo 1-D promotion: work with a2 [..., M, K], b2 [..., K, N], g2 [batch..., M, N].
  const Array a2 = a.rank() == 1 ? reshape(a, {1, a.shape[0]}) : a;
  const Array b2 = b.rank() == 1 ? reshape(b, {b.shape[0], 1}) : b;
  std::vector<int64_t> g_shape =
      internal::BroadcastShape(std::vector<int64_t>(a2.shape.begin(), a2.shape.end() - 2),
                               std::vector<int64_t>(b2.shape.begin(), b2.shape.end() - 2), "matmul_grad");
  g_shape.push_back(a2.shape[a2.rank() - 2]);
  g_shape.push_back(b2.shape.back());
  const Array g2 = reshape(grad_y, g_shape);
  const Array da = internal::SumToShape(matmul(g2, transpose(b2, -1, -2)), a2.shape);
  const Array db = internal::SumToShape(matmul(transpose(a2, -1, -2), g2), b2.shape);
  return {reshape(da, a.shape), reshape(db, b.shape)};
}

LinearGrads linear_grad(const Array& x, const Array& weight, const Array& grad_y) {
  const Array y = linear(x, weight);  // validates
  CheckArray(grad_y, "linear_grad", "grad_y");
  OAR_CHECK_ARG(grad_y.shape == y.shape, "linear_grad: grad_y {} must have the output shape {}",
                ShapeString(grad_y.shape), ShapeString(y.shape));
  const int64_t out_f = weight.shape[0], in_f = weight.shape[1];
  const int64_t rows = NumElements(std::vector<int64_t>(x.shape.begin(), x.shape.end() - 1));
  std::vector<internal::Accumulator> dx(x.data.size()), dw(weight.data.size()), db(static_cast<size_t>(out_f));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out_f; ++o) {
      const double gy = grad_y.data[r * out_f + o];
      db[o].Add(gy);
      for (int64_t i = 0; i < in_f; ++i) {
        dx[r * in_f + i].Add(gy * weight.data[o * in_f + i]);
        dw[o * in_f + i].Add(gy * x.data[r * in_f + i]);
      }
    }
  }
  LinearGrads g{Array::Full(x.shape, 0.0), Array::Full(weight.shape, 0.0), Array::Full({out_f}, 0.0)};
  for (size_t i = 0; i < dx.size(); ++i) g.dx.data[i] = dx[i].Value();
  for (size_t i = 0; i < dw.size(); ++i) g.dweight.data[i] = dw[i].Value();
  for (size_t i = 0; i < db.size(); ++i) g.dbias.data[i] = db[i].Value();
  return g;
}

// ---------------------------------------------------------------------------------------------------
// Finite differences
// ---------------------------------------------------------------------------------------------------

Array NumericalGrad(const std::function<double(const Array&)>& f, const Array& x, double eps) {
  CheckArray(x, "NumericalGrad", "x");
  OAR_CHECK_ARG(eps > 0 && std::isfinite(eps), "NumericalGrad: eps must be positive, got {}", eps);
  Array grad = Array::Full(x.shape, 0.0);
  Array probe = x;
  for (size_t i = 0; i < x.data.size(); ++i) {
    probe.data[i] = x.data[i] + eps;
    const double up = f(probe);
    probe.data[i] = x.data[i] - eps;
    const double down = f(probe);
    probe.data[i] = x.data[i];
    grad.data[i] = (up - down) / (2.0 * eps);
  }
  return grad;
}

Array NumericalVjp(const std::function<Array(const Array&)>& f, const Array& x, const Array& grad_y, double eps) {
  CheckArray(grad_y, "NumericalVjp", "grad_y");
  return NumericalGrad(
      [&](const Array& p) {
        const Array y = f(p);
        OAR_CHECK_ARG(y.shape == grad_y.shape, "NumericalVjp: f returned shape {}, grad_y has {}", ShapeString(y.shape),
                      ShapeString(grad_y.shape));
        double s = 0.0;
        for (size_t i = 0; i < y.data.size(); ++i) s += y.data[i] * grad_y.data[i];
        return s;
      },
      x, eps);
}

}  // namespace oar::reference
