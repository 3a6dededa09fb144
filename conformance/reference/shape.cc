#include "conformance/reference/shape.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "conformance/reference/internal.h"
#include "core/base/error.h"

namespace oar::reference {
namespace {

using internal::CheckArray;
using internal::NormalizeAxis;
using internal::Ravel;
using internal::Unravel;

// Copies the part of x selected along `axis` by `positions` (x's coordinates along axis) into a new array.
Array TakeAlong(const Array& x, int64_t axis, const std::vector<int64_t>& positions) {
  std::vector<int64_t> shape = x.shape;
  shape[axis] = static_cast<int64_t>(positions.size());
  Array out{shape, std::vector<double>(static_cast<size_t>(NumElements(shape)))};
  for (int64_t i = 0; i < out.numel(); ++i) {
    std::vector<int64_t> index = Unravel(i, shape);
    index[axis] = positions[index[axis]];
    out.data[i] = x.data[Ravel(index, x.shape)];
  }
  return out;
}

std::vector<int64_t> Range(int64_t begin, int64_t end) {
  std::vector<int64_t> r;
  for (int64_t i = begin; i < end; ++i) r.push_back(i);
  return r;
}

// The index values of a gather-like op, checked to lie in [0, extent).
int64_t CheckedIndex(double v, int64_t extent, std::string_view op, int64_t position) {
  const int64_t i = internal::ToInt(v, op, "index");
  OAR_CHECK(i >= 0 && i < extent, kOutOfRange, "{}: index {} at position {} is outside [0, {})", op, i, position,
            extent);
  return i;
}

// index has x's rank and, along every axis but `axis`, extents <= `bound`'s.
void CheckGatherIndex(const Array& index, const std::vector<int64_t>& bound, int64_t axis, std::string_view op,
                      std::string_view bound_name) {
  CheckArray(index, op, "index");
  OAR_CHECK_ARG(index.rank() == static_cast<int64_t>(bound.size()), "{}: index {} must have the rank of {} {}", op,
                ShapeString(index.shape), bound_name, ShapeString(bound));
  for (int64_t d = 0; d < index.rank(); ++d) {
    OAR_CHECK_ARG(d == axis || index.shape[d] <= bound[d], "{}: index {} exceeds {} {} in dimension {}", op,
                  ShapeString(index.shape), bound_name, ShapeString(bound), d);
  }
}

// Shared by the two triangle ops: keep(row, col) decides.
template <typename Keep>
Array Triangle(const Array& x, std::string_view op, Keep keep) {
  CheckArray(x, op, "x");
  OAR_CHECK_ARG(x.rank() >= 2, "{}: needs rank >= 2, got shape {}", op, ShapeString(x.shape));
  Array out = x;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const std::vector<int64_t> index = Unravel(i, x.shape);
    if (!keep(index[x.rank() - 2], index[x.rank() - 1])) out.data[i] = 0.0;
  }
  return out;
}

}  // namespace

Array reshape(const Array& x, const std::vector<int64_t>& shape) {
  CheckArray(x, "reshape", "x");
  std::vector<int64_t> out_shape = shape;
  int64_t inferred = -1;
  int64_t known = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1) {
      OAR_CHECK_ARG(inferred < 0, "reshape: shape {} has more than one -1", ShapeString(shape));
      inferred = static_cast<int64_t>(d);
    } else {
      OAR_CHECK_ARG(shape[d] >= 0, "reshape: shape {} has a negative extent", ShapeString(shape));
      known *= shape[d];
    }
  }
  if (inferred >= 0) {
    OAR_CHECK_ARG(known > 0 && x.numel() % known == 0, "reshape: cannot infer the -1 of {} for {} elements",
                  ShapeString(shape), x.numel());
    out_shape[inferred] = x.numel() / known;
  }
  OAR_CHECK_ARG(NumElements(out_shape) == x.numel(), "reshape: shape {} has {} elements, x {} has {}",
                ShapeString(shape), NumElements(out_shape), ShapeString(x.shape), x.numel());
  return Array{out_shape, x.data};
}

Array permute(const Array& x, const std::vector<int64_t>& dims) {
  CheckArray(x, "permute", "x");
  OAR_CHECK_ARG(static_cast<int64_t>(dims.size()) == x.rank(), "permute: dims {} must list all {} axes of {}",
                ShapeString(dims), x.rank(), ShapeString(x.shape));
  std::vector<int64_t> perm;
  for (int64_t d : dims) perm.push_back(NormalizeAxis(d, x.rank(), "permute"));
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  OAR_CHECK_ARG(sorted == Range(0, x.rank()), "permute: dims {} is not a permutation", ShapeString(dims));
  std::vector<int64_t> shape;
  for (int64_t d : perm) shape.push_back(x.shape[d]);
  Array out{shape, std::vector<double>(x.data.size())};
  std::vector<int64_t> src(x.shape.size());
  for (int64_t i = 0; i < out.numel(); ++i) {
    const std::vector<int64_t> index = Unravel(i, shape);
    for (size_t d = 0; d < perm.size(); ++d) src[perm[d]] = index[d];
    out.data[i] = x.data[Ravel(src, x.shape)];
  }
  return out;
}

Array transpose(const Array& x, int64_t dim0, int64_t dim1) {
  CheckArray(x, "transpose", "x");
  std::vector<int64_t> perm = Range(0, x.rank());
  std::swap(perm[NormalizeAxis(dim0, x.rank(), "transpose")], perm[NormalizeAxis(dim1, x.rank(), "transpose")]);
  return permute(x, perm);
}

Array squeeze(const Array& x, const std::vector<int64_t>& axes) {
  CheckArray(x, "squeeze", "x");
  const std::vector<int64_t> listed = internal::NormalizeAxes(axes, x.rank(), "squeeze");
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < x.rank(); ++d) {
    const bool named = std::find(listed.begin(), listed.end(), d) != listed.end();
    if (!(named && x.shape[d] == 1)) shape.push_back(x.shape[d]);
  }
  return Array{shape, x.data};
}

Array unsqueeze(const Array& x, int64_t axis) {
  CheckArray(x, "unsqueeze", "x");
  const int64_t a = NormalizeAxis(axis, x.rank() + 1, "unsqueeze");
  std::vector<int64_t> shape = x.shape;
  shape.insert(shape.begin() + a, 1);
  return Array{shape, x.data};
}

Array flatten(const Array& x, int64_t start, int64_t end) {
  CheckArray(x, "flatten", "x");
  if (x.rank() == 0) {
    OAR_CHECK_ARG((start == 0 || start == -1) && (end == 0 || end == -1),
                  "flatten: a scalar accepts only start, end in {{0, -1}}, got {}, {}", start, end);
    return Array{{1}, x.data};
  }
  const int64_t s = NormalizeAxis(start, x.rank(), "flatten");
  const int64_t e = NormalizeAxis(end, x.rank(), "flatten");
  OAR_CHECK_ARG(s <= e, "flatten: start {} comes after end {} (rank {})", start, end, x.rank());
  std::vector<int64_t> shape(x.shape.begin(), x.shape.begin() + s);
  shape.push_back(NumElements(std::vector<int64_t>(x.shape.begin() + s, x.shape.begin() + e + 1)));
  shape.insert(shape.end(), x.shape.begin() + e + 1, x.shape.end());
  return Array{shape, x.data};
}

Array expand(const Array& x, const std::vector<int64_t>& shape) {
  CheckArray(x, "expand", "x");
  OAR_CHECK_ARG(shape.size() >= x.shape.size(), "expand: shape {} has fewer dimensions than x {}", ShapeString(shape),
                ShapeString(x.shape));
  const size_t lead = shape.size() - x.shape.size();
  std::vector<int64_t> target = shape;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != -1) {
      OAR_CHECK_ARG(shape[d] >= 0, "expand: shape {} has a negative extent", ShapeString(shape));
      continue;
    }
    OAR_CHECK_ARG(d >= lead, "expand: -1 in shape {} names a new leading dimension", ShapeString(shape));
    target[d] = x.shape[d - lead];
  }
  return internal::BroadcastTo(x, target, "expand");
}

Array concat(const std::vector<Array>& xs, int64_t axis) {
  OAR_CHECK_ARG(!xs.empty(), "concat: needs at least one array");
  for (const Array& x : xs) CheckArray(x, "concat", "xs");
  const int64_t rank = xs[0].rank();
  OAR_CHECK_ARG(rank >= 1, "concat: arrays must have rank >= 1");
  const int64_t a = NormalizeAxis(axis, rank, "concat");
  std::vector<int64_t> shape = xs[0].shape;
  shape[a] = 0;
  for (const Array& x : xs) {
    bool compatible = x.rank() == rank;
    for (int64_t d = 0; compatible && d < rank; ++d) compatible = d == a || x.shape[d] == xs[0].shape[d];
    OAR_CHECK_ARG(compatible, "concat: shapes {} and {} differ outside axis {}", ShapeString(xs[0].shape),
                  ShapeString(x.shape), axis);
    shape[a] += x.shape[a];
  }
  Array out{shape, std::vector<double>(static_cast<size_t>(NumElements(shape)))};
  int64_t offset = 0;
  for (const Array& x : xs) {
    for (int64_t i = 0; i < x.numel(); ++i) {
      std::vector<int64_t> index = Unravel(i, x.shape);
      index[a] += offset;
      out.data[Ravel(index, shape)] = x.data[i];
    }
    offset += x.shape[a];
  }
  return out;
}

Array stack(const std::vector<Array>& xs, int64_t axis) {
  OAR_CHECK_ARG(!xs.empty(), "stack: needs at least one array");
  const int64_t a = NormalizeAxis(axis, xs[0].rank() + 1, "stack");
  std::vector<Array> expanded;
  for (const Array& x : xs) {
    CheckArray(x, "stack", "xs");
    OAR_CHECK_ARG(x.shape == xs[0].shape, "stack: shapes {} and {} differ", ShapeString(xs[0].shape),
                  ShapeString(x.shape));
    expanded.push_back(unsqueeze(x, a));
  }
  return concat(expanded, a);
}

std::vector<Array> split(const Array& x, const std::vector<int64_t>& sizes, int64_t axis) {
  CheckArray(x, "split", "x");
  OAR_CHECK_ARG(x.rank() >= 1, "split: needs rank >= 1");
  const int64_t a = NormalizeAxis(axis, x.rank(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    OAR_CHECK_ARG(s >= 0, "split: sizes {} has a negative entry", ShapeString(sizes));
    total += s;
  }
  OAR_CHECK_ARG(total == x.shape[a], "split: sizes {} sum to {}, axis {} of {} has {}", ShapeString(sizes), total, axis,
                ShapeString(x.shape), x.shape[a]);
  std::vector<Array> pieces;
  int64_t begin = 0;
  for (int64_t s : sizes) {
    pieces.push_back(TakeAlong(x, a, Range(begin, begin + s)));
    begin += s;
  }
  return pieces;
}

std::vector<Array> chunk(const Array& x, int64_t chunks, int64_t axis) {
  CheckArray(x, "chunk", "x");
  OAR_CHECK_ARG(chunks >= 1, "chunk: chunks must be >= 1, got {}", chunks);
  OAR_CHECK_ARG(x.rank() >= 1, "chunk: needs rank >= 1");
  const int64_t a = NormalizeAxis(axis, x.rank(), "chunk");
  const int64_t n = x.shape[a];
  if (n == 0) return split(x, std::vector<int64_t>(static_cast<size_t>(chunks), 0), a);
  const int64_t size = (n + chunks - 1) / chunks;
  std::vector<int64_t> sizes;
  for (int64_t begin = 0; begin < n; begin += size) sizes.push_back(std::min(size, n - begin));
  return split(x, sizes, a);
}

Array slice(const Array& x, int64_t axis, int64_t start, int64_t end, int64_t step) {
  CheckArray(x, "slice", "x");
  OAR_CHECK_ARG(x.rank() >= 1, "slice: needs rank >= 1");
  OAR_CHECK_ARG(step >= 1, "slice: step must be >= 1, got {}", step);
  const int64_t a = NormalizeAxis(axis, x.rank(), "slice");
  const int64_t n = x.shape[a];
  auto clamp = [n](int64_t i) { return std::clamp(i < 0 ? std::max(i, -n) + n : i, int64_t{0}, n); };
  const int64_t s = clamp(start);
  const int64_t e = clamp(end);
  std::vector<int64_t> positions;
  for (int64_t i = s; i < e; i += step) positions.push_back(i);
  return TakeAlong(x, a, positions);
}

Array gather(const Array& x, int64_t axis, const Array& index) {
  CheckArray(x, "gather", "x");
  OAR_CHECK_ARG(x.rank() >= 1, "gather: needs rank >= 1");
  const int64_t a = NormalizeAxis(axis, x.rank(), "gather");
  CheckGatherIndex(index, x.shape, a, "gather", "x");
  Array out{index.shape, std::vector<double>(index.data.size())};
  for (int64_t i = 0; i < index.numel(); ++i) {
    std::vector<int64_t> pos = Unravel(i, index.shape);
    pos[a] = CheckedIndex(index.data[i], x.shape[a], "gather", i);
    out.data[i] = x.data[Ravel(pos, x.shape)];
  }
  return out;
}

Array index_select(const Array& x, int64_t axis, const Array& index) {
  CheckArray(x, "index_select", "x");
  OAR_CHECK_ARG(x.rank() >= 1, "index_select: needs rank >= 1");
  const int64_t a = NormalizeAxis(axis, x.rank(), "index_select");
  internal::CheckRank(index, 1, "index_select", "index");
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < index.numel(); ++i) {
    positions.push_back(CheckedIndex(index.data[i], x.shape[a], "index_select", i));
  }
  return TakeAlong(x, a, positions);
}

Array scatter_add(const Array& x, int64_t axis, const Array& index, const Array& src) {
  CheckArray(x, "scatter_add", "x");
  CheckArray(src, "scatter_add", "src");
  OAR_CHECK_ARG(x.rank() >= 1, "scatter_add: needs rank >= 1");
  const int64_t a = NormalizeAxis(axis, x.rank(), "scatter_add");
  CheckGatherIndex(index, x.shape, a, "scatter_add", "x");
  CheckGatherIndex(index, src.shape, -1, "scatter_add", "src");
  std::vector<internal::Accumulator> acc(x.data.size());
  for (size_t i = 0; i < x.data.size(); ++i) acc[i].Add(x.data[i]);
  for (int64_t i = 0; i < index.numel(); ++i) {
    std::vector<int64_t> pos = Unravel(i, index.shape);
    const double value = src.data[Ravel(pos, src.shape)];
    pos[a] = CheckedIndex(index.data[i], x.shape[a], "scatter_add", i);
    acc[Ravel(pos, x.shape)].Add(value);
  }
  Array out = x;
  for (size_t i = 0; i < acc.size(); ++i) out.data[i] = acc[i].Value();
  return out;
}

Array one_hot(const Array& x, int64_t classes) {
  CheckArray(x, "one_hot", "x");
  OAR_CHECK_ARG(classes >= 1 || classes == -1, "one_hot: classes must be >= 1 or -1, got {}", classes);
  if (classes == -1) {
    OAR_CHECK_ARG(x.numel() > 0, "one_hot: cannot infer the class count (classes = -1) of an empty array");
    classes = 0;
    for (double v : x.data) classes = std::max(classes, internal::ToInt(v, "one_hot", "x") + 1);
  }
  std::vector<int64_t> shape = x.shape;
  shape.push_back(classes);
  Array out = Array::Full(shape, 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = internal::ToInt(x.data[i], "one_hot", "x");
    OAR_CHECK(c >= 0 && c < classes, kOutOfRange, "one_hot: value {} at position {} is outside [0, {})", c, i, classes);
    out.data[i * classes + c] = 1.0;
  }
  return out;
}

Array pad(const Array& x, const std::vector<int64_t>& pads, double value) {
  CheckArray(x, "pad", "x");
  OAR_CHECK_ARG(static_cast<int64_t>(pads.size()) == 2 * x.rank(),
                "pad: pads {} must hold (before, after) for each of the {} dimensions", ShapeString(pads), x.rank());
  std::vector<int64_t> shape = x.shape;
  for (int64_t d = 0; d < x.rank(); ++d) {
    OAR_CHECK_ARG(pads[2 * d] >= 0 && pads[2 * d + 1] >= 0, "pad: pads {} has a negative entry", ShapeString(pads));
    shape[d] += pads[2 * d] + pads[2 * d + 1];
  }
  Array out = Array::Full(shape, value);
  for (int64_t i = 0; i < x.numel(); ++i) {
    std::vector<int64_t> index = Unravel(i, x.shape);
    for (int64_t d = 0; d < x.rank(); ++d) index[d] += pads[2 * d];
    out.data[Ravel(index, shape)] = x.data[i];
  }
  return out;
}

Array tril(const Array& x, int64_t k) {
  return Triangle(x, "tril", [k](int64_t row, int64_t col) { return col - row <= k; });
}

Array triu(const Array& x, int64_t k) {
  return Triangle(x, "triu", [k](int64_t row, int64_t col) { return col - row >= k; });
}

TopKResult topk(const Array& x, int64_t k, int64_t axis, bool largest) {
  CheckArray(x, "topk", "x");
  OAR_CHECK_ARG(x.rank() >= 1, "topk: needs rank >= 1");
  const int64_t a = NormalizeAxis(axis, x.rank(), "topk");
  OAR_CHECK_ARG(k >= 0 && k <= x.shape[a], "topk: k = {} must be in [0, {}] (axis {} of {})", k, x.shape[a], axis,
                ShapeString(x.shape));
  // "p comes before q": NaN is above every number; equal values keep index order (stable sort).
  auto above = [](double p, double q) { return (std::isnan(p) && !std::isnan(q)) || p > q; };
  auto before = [&](double p, double q) { return largest ? above(p, q) : above(q, p); };
  std::vector<int64_t> shape = x.shape;
  shape[a] = k;
  TopKResult r{Array::Full(shape, 0.0), Array::Full(shape, 0.0)};
  const internal::ReducePlan lanes = internal::PlanReduce(x, {a}, true, "topk");
  for (size_t lane = 0; lane < lanes.groups.size(); ++lane) {
    const std::vector<int64_t>& members = lanes.groups[lane];  // flat indices along the axis, in order
    std::vector<int64_t> order = Range(0, static_cast<int64_t>(members.size()));
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t p, int64_t q) { return before(x.data[members[p]], x.data[members[q]]); });
    std::vector<int64_t> out_index = Unravel(static_cast<int64_t>(lane), lanes.keep_shape);
    for (int64_t j = 0; j < k; ++j) {
      out_index[a] = j;
      r.values.data[Ravel(out_index, shape)] = x.data[members[order[j]]];
      r.indices.data[Ravel(out_index, shape)] = static_cast<double>(order[j]);
    }
  }
  return r;
}

Array arange(double start, double end, double step) {
  OAR_CHECK_ARG(std::isfinite(start) && std::isfinite(end) && std::isfinite(step) && step != 0,
                "arange: start, end and step must be finite and step nonzero, got {}, {}, {}", start, end, step);
  const double count = std::ceil((end - start) / step);
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  Array out{{n}, std::vector<double>(static_cast<size_t>(n))};
  for (int64_t i = 0; i < n; ++i) out.data[i] = start + static_cast<double>(i) * step;
  return out;
}

Array full(const std::vector<int64_t>& shape, double value) {
  for (int64_t d : shape) OAR_CHECK_ARG(d >= 0, "full: shape {} has a negative extent", ShapeString(shape));
  return Array::Full(shape, value);
}

Array gather_grad(const Array& x, const Array& index, const Array& grad_y, int64_t axis) {
  CheckArray(x, "gather_grad", "x");
  CheckArray(grad_y, "gather_grad", "grad_y");
  OAR_CHECK_ARG(grad_y.shape == index.shape, "gather_grad: grad_y {} must have index's shape {}",
                ShapeString(grad_y.shape), ShapeString(index.shape));
  return scatter_add(Array::Full(x.shape, 0.0), axis, index, grad_y);
}

Array index_select_grad(const Array& x, const Array& index, const Array& grad_y, int64_t axis) {
  const Array y = index_select(x, axis, index);  // validates x, axis and index
  CheckArray(grad_y, "index_select_grad", "grad_y");
  OAR_CHECK_ARG(grad_y.shape == y.shape, "index_select_grad: grad_y {} must have the output shape {}",
                ShapeString(grad_y.shape), ShapeString(y.shape));
  const int64_t a = NormalizeAxis(axis, x.rank(), "index_select_grad");
  Array dx = Array::Full(x.shape, 0.0);
  for (int64_t i = 0; i < grad_y.numel(); ++i) {
    std::vector<int64_t> pos = Unravel(i, grad_y.shape);
    pos[a] = static_cast<int64_t>(index.data[pos[a]]);
    dx.data[Ravel(pos, x.shape)] += grad_y.data[i];
  }
  return dx;
}

}  // namespace oar::reference
