#include "conformance/reference/array.h"

#include <fmt/format.h>

#include <utility>

#include "core/base/error.h"

namespace oar::reference {

std::string ShapeString(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    OAR_CHECK_ARG(d >= 0, "reference: shape {} has a negative extent", ShapeString(shape));
    n *= d;
  }
  return n;
}

int64_t Array::numel() const { return NumElements(shape); }

namespace {

int64_t FlatIndex(const Array& a, const std::vector<int64_t>& index) {
  OAR_CHECK_ARG(static_cast<int64_t>(index.size()) == a.rank(), "Array::At: index {} has {} entries, shape {} has {}",
                ShapeString(index), index.size(), ShapeString(a.shape), a.rank());
  OAR_CHECK_ARG(static_cast<int64_t>(a.data.size()) == a.numel(), "Array::At: shape {} needs {} values, data has {}",
                ShapeString(a.shape), a.numel(), a.data.size());
  int64_t flat = 0;
  for (size_t d = 0; d < index.size(); ++d) {
    OAR_CHECK(index[d] >= 0 && index[d] < a.shape[d], kOutOfRange, "Array::At: index {} is outside shape {}",
              ShapeString(index), ShapeString(a.shape));
    flat = flat * a.shape[d] + index[d];
  }
  return flat;
}

}  // namespace

double Array::At(const std::vector<int64_t>& index) const { return data[FlatIndex(*this, index)]; }

double& Array::At(const std::vector<int64_t>& index) { return data[FlatIndex(*this, index)]; }

Array Array::Make(std::vector<int64_t> shape, std::vector<double> values) {
  const int64_t n = NumElements(shape);
  OAR_CHECK_ARG(n == static_cast<int64_t>(values.size()), "Array::Make: shape {} needs {} values, got {}",
                ShapeString(shape), n, values.size());
  return Array{std::move(shape), std::move(values)};
}

Array Array::Full(std::vector<int64_t> shape, double value) {
  const int64_t n = NumElements(shape);
  return Array{std::move(shape), std::vector<double>(static_cast<size_t>(n), value)};
}

Array Array::Scalar(double value) { return Array{{}, {value}}; }

}  // namespace oar::reference
