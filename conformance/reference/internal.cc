#include "conformance/reference/internal.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace oar::reference::internal {

void CheckArray(const Array& x, std::string_view op, std::string_view arg) {
  for (int64_t d : x.shape) {
    OAR_CHECK_ARG(d >= 0, "{}: argument '{}' has shape {} with a negative extent", op, arg, ShapeString(x.shape));
  }
  OAR_CHECK_ARG(static_cast<int64_t>(x.data.size()) == x.numel(),
                "{}: argument '{}' has shape {} ({} elements) but {} values", op, arg, ShapeString(x.shape), x.numel(),
                x.data.size());
}

void CheckRank(const Array& x, int64_t rank, std::string_view op, std::string_view arg) {
  CheckArray(x, op, arg);
  OAR_CHECK_ARG(x.rank() == rank, "{}: argument '{}' must have rank {}, got shape {}", op, arg, rank,
                ShapeString(x.shape));
}

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

std::vector<int64_t> Unravel(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] > 0) {
      index[d] = flat % shape[d];
      flat /= shape[d];
    }
  }
  return index;
}

int64_t Ravel(const std::vector<int64_t>& index, const std::vector<int64_t>& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

std::vector<int64_t> BroadcastShape(const std::vector<int64_t>& a, const std::vector<int64_t>& b, std::string_view op) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    // Right-aligned: position i from the end.
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    OAR_CHECK_ARG(da == db || da == 1 || db == 1, "{}: shapes {} and {} cannot be broadcast together", op,
                  ShapeString(a), ShapeString(b));
    out[rank - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

Array BroadcastTo(const Array& x, const std::vector<int64_t>& shape, std::string_view op) {
  CheckArray(x, op, "x");
  OAR_CHECK_ARG(x.shape.size() <= shape.size(), "{}: shape {} cannot be broadcast to {}", op, ShapeString(x.shape),
                ShapeString(shape));
  const size_t lead = shape.size() - x.shape.size();
  for (size_t d = 0; d < x.shape.size(); ++d) {
    OAR_CHECK_ARG(x.shape[d] == shape[lead + d] || x.shape[d] == 1, "{}: shape {} cannot be broadcast to {}", op,
                  ShapeString(x.shape), ShapeString(shape));
  }
  Array out{shape, std::vector<double>(static_cast<size_t>(NumElements(shape)))};
  std::vector<int64_t> src(x.shape.size());
  for (int64_t i = 0; i < static_cast<int64_t>(out.data.size()); ++i) {
    std::vector<int64_t> index = Unravel(i, shape);
    for (size_t d = 0; d < x.shape.size(); ++d) src[d] = x.shape[d] == 1 ? 0 : index[lead + d];
    out.data[i] = x.data[Ravel(src, x.shape)];
  }
  return out;
}

Array SumToShape(const Array& g, const std::vector<int64_t>& shape) {
  const size_t lead = g.shape.size() - shape.size();
  Array out{shape, std::vector<double>(static_cast<size_t>(NumElements(shape)), 0.0)};
  std::vector<Accumulator> acc(out.data.size());
  std::vector<int64_t> dst(shape.size());
  for (int64_t i = 0; i < static_cast<int64_t>(g.data.size()); ++i) {
    std::vector<int64_t> index = Unravel(i, g.shape);
    for (size_t d = 0; d < shape.size(); ++d) dst[d] = shape[d] == 1 ? 0 : index[lead + d];
    acc[Ravel(dst, shape)].Add(g.data[i]);
  }
  for (size_t i = 0; i < acc.size(); ++i) out.data[i] = acc[i].Value();
  return out;
}

int64_t NormalizeAxis(int64_t axis, int64_t rank, std::string_view op) {
  OAR_CHECK_ARG(axis >= -rank && axis < rank, "{}: axis {} is out of range for rank {} (expected [{}, {}))", op, axis,
                rank, -rank, rank);
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> NormalizeAxes(const std::vector<int64_t>& axes, int64_t rank, std::string_view op) {
  std::vector<int64_t> out;
  if (axes.empty()) {
    for (int64_t d = 0; d < rank; ++d) out.push_back(d);
    return out;
  }
  for (int64_t a : axes) out.push_back(NormalizeAxis(a, rank, op));
  std::sort(out.begin(), out.end());
  OAR_CHECK_ARG(std::adjacent_find(out.begin(), out.end()) == out.end(), "{}: axes {} name a dimension twice", op,
                ShapeString(axes));
  return out;
}

ReducePlan PlanReduce(const Array& x, const std::vector<int64_t>& axes, bool keepdim, std::string_view op) {
  CheckArray(x, op, "x");
  ReducePlan plan;
  plan.axes = NormalizeAxes(axes, x.rank(), op);
  plan.keep_shape = x.shape;
  for (int64_t a : plan.axes) {
    plan.group_size *= x.shape[a];
    plan.keep_shape[a] = 1;
  }
  for (int64_t d = 0; d < x.rank(); ++d) {
    const bool reduced = std::find(plan.axes.begin(), plan.axes.end(), d) != plan.axes.end();
    if (!reduced || keepdim) plan.out_shape.push_back(plan.keep_shape[d]);
  }
  plan.groups.resize(static_cast<size_t>(NumElements(plan.keep_shape)));
  for (int64_t i = 0; i < x.numel(); ++i) {
    std::vector<int64_t> index = Unravel(i, x.shape);
    for (int64_t a : plan.axes) index[a] = 0;
    plan.groups[Ravel(index, plan.keep_shape)].push_back(i);
  }
  return plan;
}

bool IsIntegral(double v) { return std::isfinite(v) && std::trunc(v) == v; }

int64_t ToInt(double v, std::string_view op, std::string_view arg) {
  OAR_CHECK_ARG(IsIntegral(v) && std::fabs(v) <= 9007199254740992.0, "{}: argument '{}' must hold integers, got {}", op,
                arg, v);
  return static_cast<int64_t>(v);
}

}  // namespace oar::reference::internal
