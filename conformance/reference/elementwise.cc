#include "conformance/reference/elementwise.h"

#include <cmath>
#include <limits>
#include <numbers>

#include "conformance/reference/internal.h"
#include "core/base/error.h"

namespace oar::reference {

using internal::CheckArray;
using internal::Map;
using internal::Map2;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename F>
Array Unary(const Array& x, std::string_view op, F f) {
  CheckArray(x, op, "x");
  return Map(x, f);
}

double Sigmoid(double v) {
  if (v >= 0) return 1.0 / (1.0 + std::exp(-v));
  const double e = std::exp(v);
  return e / (1.0 + e);
}

double Bool(bool b) { return b ? 1.0 : 0.0; }

}  // namespace

Array neg(const Array& x) {
  return Unary(x, "neg", [](double v) { return -v; });
}
Array abs(const Array& x) {
  return Unary(x, "abs", [](double v) { return std::fabs(v); });
}
Array sign(const Array& x) {
  return Unary(x, "sign", [](double v) { return std::isnan(v) ? kNaN : Bool(v > 0) - Bool(v < 0); });
}
Array exp(const Array& x) {
  return Unary(x, "exp", [](double v) { return std::exp(v); });
}
Array log(const Array& x) {
  return Unary(x, "log", [](double v) { return std::log(v); });
}
Array log1p(const Array& x) {
  return Unary(x, "log1p", [](double v) { return std::log1p(v); });
}
Array expm1(const Array& x) {
  return Unary(x, "expm1", [](double v) { return std::expm1(v); });
}
Array sqrt(const Array& x) {
  return Unary(x, "sqrt", [](double v) { return std::sqrt(v); });
}
Array rsqrt(const Array& x) {
  return Unary(x, "rsqrt", [](double v) { return 1.0 / std::sqrt(v); });
}
Array square(const Array& x) {
  return Unary(x, "square", [](double v) { return v * v; });
}
Array reciprocal(const Array& x) {
  return Unary(x, "reciprocal", [](double v) { return 1.0 / v; });
}
Array sin(const Array& x) {
  return Unary(x, "sin", [](double v) { return std::sin(v); });
}
Array cos(const Array& x) {
  return Unary(x, "cos", [](double v) { return std::cos(v); });
}
Array tanh(const Array& x) {
  return Unary(x, "tanh", [](double v) { return std::tanh(v); });
}
Array sigmoid(const Array& x) { return Unary(x, "sigmoid", Sigmoid); }
Array relu(const Array& x) {
  return Unary(x, "relu", [](double v) { return v < 0 ? 0.0 : v; });
}
Array leaky_relu(const Array& x, double slope) {
  return Unary(x, "leaky_relu", [slope](double v) { return v < 0 ? slope * v : v; });
}
Array gelu(const Array& x, bool approximate_tanh) {
  if (approximate_tanh) {
    const double c = std::sqrt(2.0 / std::numbers::pi);
    return Unary(x, "gelu", [c](double v) { return 0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v))); });
  }
  return Unary(x, "gelu", [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); });
}
Array silu(const Array& x) {
  return Unary(x, "silu", [](double v) { return v * Sigmoid(v); });
}
Array erf(const Array& x) {
  return Unary(x, "erf", [](double v) { return std::erf(v); });
}
Array clip(const Array& x, double lo, double hi) {
  OAR_CHECK_ARG(!std::isnan(lo) && !std::isnan(hi), "clip: bounds must not be NaN, got lo={} hi={}", lo, hi);
  return Unary(x, "clip", [lo, hi](double v) {
    if (std::isnan(v)) return v;
    const double low_clipped = v < lo ? lo : v;
    return low_clipped > hi ? hi : low_clipped;
  });
}
Array isnan(const Array& x) {
  return Unary(x, "isnan", [](double v) { return Bool(std::isnan(v)); });
}
Array isinf(const Array& x) {
  return Unary(x, "isinf", [](double v) { return Bool(std::isinf(v)); });
}
Array logical_not(const Array& x) {
  return Unary(x, "logical_not", [](double v) { return Bool(v == 0); });
}

Array add(const Array& a, const Array& b) {
  return Map2(a, b, "add", [](double p, double q) { return p + q; });
}
Array sub(const Array& a, const Array& b) {
  return Map2(a, b, "sub", [](double p, double q) { return p - q; });
}
Array mul(const Array& a, const Array& b) {
  return Map2(a, b, "mul", [](double p, double q) { return p * q; });
}
Array div(const Array& a, const Array& b) {
  return Map2(a, b, "div", [](double p, double q) { return p / q; });
}
Array pow(const Array& a, const Array& b) {
  return Map2(a, b, "pow", [](double p, double q) { return std::pow(p, q); });
}
Array maximum(const Array& a, const Array& b) {
  return Map2(a, b, "maximum", [](double p, double q) {
    if (std::isnan(p) || std::isnan(q)) return kNaN;
    return p < q ? q : p;
  });
}
Array minimum(const Array& a, const Array& b) {
  return Map2(a, b, "minimum", [](double p, double q) {
    if (std::isnan(p) || std::isnan(q)) return kNaN;
    return q < p ? q : p;
  });
}

Array eq(const Array& a, const Array& b) {
  return Map2(a, b, "eq", [](double p, double q) { return Bool(p == q); });
}
Array ne(const Array& a, const Array& b) {
  return Map2(a, b, "ne", [](double p, double q) { return Bool(p != q); });
}
Array lt(const Array& a, const Array& b) {
  return Map2(a, b, "lt", [](double p, double q) { return Bool(p < q); });
}
Array le(const Array& a, const Array& b) {
  return Map2(a, b, "le", [](double p, double q) { return Bool(p <= q); });
}
Array gt(const Array& a, const Array& b) {
  return Map2(a, b, "gt", [](double p, double q) { return Bool(p > q); });
}
Array ge(const Array& a, const Array& b) {
  return Map2(a, b, "ge", [](double p, double q) { return Bool(p >= q); });
}
Array logical_and(const Array& a, const Array& b) {
  return Map2(a, b, "logical_and", [](double p, double q) { return Bool(p != 0 && q != 0); });
}
Array logical_or(const Array& a, const Array& b) {
  return Map2(a, b, "logical_or", [](double p, double q) { return Bool(p != 0 || q != 0); });
}

Array where(const Array& cond, const Array& a, const Array& b) {
  CheckArray(cond, "where", "cond");
  CheckArray(a, "where", "a");
  CheckArray(b, "where", "b");
  const std::vector<int64_t> shape =
      internal::BroadcastShape(internal::BroadcastShape(cond.shape, a.shape, "where"), b.shape, "where");
  const Array c = internal::BroadcastTo(cond, shape, "where");
  const Array ab = internal::BroadcastTo(a, shape, "where");
  const Array bb = internal::BroadcastTo(b, shape, "where");
  Array out{shape, std::vector<double>(c.data.size())};
  for (size_t i = 0; i < out.data.size(); ++i) out.data[i] = c.data[i] != 0 ? ab.data[i] : bb.data[i];
  return out;
}

}  // namespace oar::reference
