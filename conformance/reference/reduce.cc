#include "conformance/reference/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include "conformance/reference/internal.h"
#include "core/base/error.h"

namespace oar::reference {
namespace {

using internal::PlanReduce;
using internal::ReducePlan;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Applies `f` to the values of each reduction group.
template <typename F>
Array Reduce(const Array& x, const std::vector<int64_t>& axes, bool keepdim, std::string_view op, F f) {
  const ReducePlan plan = PlanReduce(x, axes, keepdim, op);
  Array out{plan.out_shape, std::vector<double>(plan.groups.size())};
  std::vector<double> values;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    values.clear();
    for (int64_t i : plan.groups[g]) values.push_back(x.data[i]);
    out.data[g] = f(values);
  }
  return out;
}

double Sum(const std::vector<double>& v) {
  internal::Accumulator s;
  for (double e : v) s.Add(e);
  return s.Value();
}

double Variance(const std::vector<double>& v, double correction) {
  const double n = static_cast<double>(v.size());
  const double m = Sum(v) / n;
  internal::Accumulator ss;
  for (double e : v) ss.Add((e - m) * (e - m));
  return ss.Value() / std::max(0.0, n - correction);
}

// The extreme of `v` under "a is better than b": NaN beats everything (propagates).
template <typename Better>
double Extreme(const std::vector<double>& v, std::string_view op, Better better) {
  OAR_CHECK_ARG(!v.empty(), "{}: cannot reduce an empty set (no identity)", op);
  double best = v[0];
  for (double e : v) {
    if (std::isnan(best)) break;
    if (std::isnan(e) || better(e, best)) best = e;
  }
  return best;
}

template <typename Better>
Array ArgExtreme(const Array& x, int64_t axis, bool keepdim, std::string_view op, Better better) {
  internal::CheckArray(x, op, "x");
  OAR_CHECK_ARG(x.rank() >= 1, "{}: needs an input of rank >= 1, got a scalar", op);
  const int64_t a = internal::NormalizeAxis(axis, x.rank(), op);
  OAR_CHECK_ARG(x.shape[a] > 0, "{}: axis {} of shape {} is empty", op, axis, ShapeString(x.shape));
  return Reduce(x, {a}, keepdim, op, [&](const std::vector<double>& v) {
    size_t best = 0;
    for (size_t i = 1; i < v.size(); ++i) {
      if (std::isnan(v[best])) break;
      if (std::isnan(v[i]) || better(v[i], v[best])) best = i;
    }
    return static_cast<double>(best);
  });
}

}  // namespace

Array sum(const Array& x, const std::vector<int64_t>& axes, bool keepdim) {
  return Reduce(x, axes, keepdim, "sum", Sum);
}

Array mean(const Array& x, const std::vector<int64_t>& axes, bool keepdim) {
  return Reduce(x, axes, keepdim, "mean",
                [](const std::vector<double>& v) { return v.empty() ? kNaN : Sum(v) / static_cast<double>(v.size()); });
}

Array prod(const Array& x, const std::vector<int64_t>& axes, bool keepdim) {
  return Reduce(x, axes, keepdim, "prod", [](const std::vector<double>& v) {
    double p = 1.0;
    for (double e : v) p *= e;
    return p;
  });
}

Array max(const Array& x, const std::vector<int64_t>& axes, bool keepdim) {
  return Reduce(x, axes, keepdim, "max", [](const std::vector<double>& v) {
    return Extreme(v, "max", [](double a, double b) { return a > b; });
  });
}

Array min(const Array& x, const std::vector<int64_t>& axes, bool keepdim) {
  return Reduce(x, axes, keepdim, "min", [](const std::vector<double>& v) {
    return Extreme(v, "min", [](double a, double b) { return a < b; });
  });
}

Array argmax(const Array& x, int64_t axis, bool keepdim) {
  return ArgExtreme(x, axis, keepdim, "argmax", [](double a, double b) { return a > b; });
}

Array argmin(const Array& x, int64_t axis, bool keepdim) {
  return ArgExtreme(x, axis, keepdim, "argmin", [](double a, double b) { return a < b; });
}

Array var(const Array& x, const std::vector<int64_t>& axes, double correction, bool keepdim) {
  OAR_CHECK_ARG(std::isfinite(correction) && correction >= 0, "var: correction must be >= 0, got {}", correction);
  return Reduce(x, axes, keepdim, "var",
                [correction](const std::vector<double>& v) { return v.empty() ? kNaN : Variance(v, correction); });
}

Array stddev(const Array& x, const std::vector<int64_t>& axes, double correction, bool keepdim) {
  OAR_CHECK_ARG(std::isfinite(correction) && correction >= 0, "stddev: correction must be >= 0, got {}", correction);
  return Reduce(x, axes, keepdim, "stddev", [correction](const std::vector<double>& v) {
    return v.empty() ? kNaN : std::sqrt(Variance(v, correction));
  });
}

Array logsumexp(const Array& x, const std::vector<int64_t>& axes, bool keepdim) {
  return Reduce(x, axes, keepdim, "logsumexp", [](const std::vector<double>& v) {
    double m = -kInf;
    for (double e : v) {
      if (std::isnan(e)) return kNaN;
      m = std::max(m, e);
    }
    if (std::isinf(m)) return m;  // all -inf (or empty) -> -inf; any +inf -> +inf
    internal::Accumulator s;
    for (double e : v) s.Add(std::exp(e - m));
    return m + std::log(s.Value());
  });
}

}  // namespace oar::reference
