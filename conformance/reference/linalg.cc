#include "conformance/reference/linalg.h"

#include "conformance/reference/internal.h"
#include "core/base/error.h"

namespace oar::reference {

using internal::CheckArray;

Array matmul(const Array& a, const Array& b) {
  CheckArray(a, "matmul", "a");
  CheckArray(b, "matmul", "b");
  OAR_CHECK_ARG(a.rank() >= 1 && b.rank() >= 1, "matmul: operands must have rank >= 1, got shapes {} and {}",
                ShapeString(a.shape), ShapeString(b.shape));
  std::vector<int64_t> a_shape = a.shape;
  std::vector<int64_t> b_shape = b.shape;
  const bool a_vector = a.rank() == 1;
  const bool b_vector = b.rank() == 1;
  if (a_vector) a_shape.insert(a_shape.begin(), 1);
  if (b_vector) b_shape.push_back(1);
  const int64_t m = a_shape[a_shape.size() - 2];
  const int64_t k = a_shape.back();
  const int64_t n = b_shape.back();
  OAR_CHECK_ARG(b_shape[b_shape.size() - 2] == k, "matmul: inner dimensions differ: {} @ {} ({} vs {})",
                ShapeString(a.shape), ShapeString(b.shape), k, b_shape[b_shape.size() - 2]);

  const std::vector<int64_t> batch =
      internal::BroadcastShape(std::vector<int64_t>(a_shape.begin(), a_shape.end() - 2),
                               std::vector<int64_t>(b_shape.begin(), b_shape.end() - 2), "matmul");
  std::vector<int64_t> a_full = batch, b_full = batch, out_shape = batch;
  a_full.insert(a_full.end(), {m, k});
  b_full.insert(b_full.end(), {k, n});
  out_shape.insert(out_shape.end(), {m, n});
  const Array ab = internal::BroadcastTo(Array{a_shape, a.data}, a_full, "matmul");
  const Array bb = internal::BroadcastTo(Array{b_shape, b.data}, b_full, "matmul");

  Array out{out_shape, std::vector<double>(static_cast<size_t>(NumElements(out_shape)), 0.0)};
  const int64_t batches = NumElements(batch);
  for (int64_t p = 0; p < batches; ++p) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        internal::Accumulator s;
        for (int64_t q = 0; q < k; ++q) s.Add(ab.data[(p * m + i) * k + q] * bb.data[(p * k + q) * n + j]);
        out.data[(p * m + i) * n + j] = s.Value();
      }
    }
  }
  if (a_vector) out.shape.erase(out.shape.end() - 2);
  if (b_vector) out.shape.pop_back();
  return out;
}

Array linear(const Array& x, const Array& weight, const std::optional<Array>& bias) {
  CheckArray(x, "linear", "x");
  internal::CheckRank(weight, 2, "linear", "weight");
  OAR_CHECK_ARG(x.rank() >= 1 && x.shape.back() == weight.shape[1],
                "linear: x {} must end in the weight's in_features ({}; weight {})", ShapeString(x.shape),
                weight.shape[1], ShapeString(weight.shape));
  const int64_t out_features = weight.shape[0];
  const int64_t in_features = weight.shape[1];
  if (bias) {
    internal::CheckRank(*bias, 1, "linear", "bias");
    OAR_CHECK_ARG(bias->shape[0] == out_features, "linear: bias {} must have out_features = {} elements",
                  ShapeString(bias->shape), out_features);
  }
  std::vector<int64_t> out_shape = x.shape;
  out_shape.back() = out_features;
  const int64_t rows = NumElements(std::vector<int64_t>(x.shape.begin(), x.shape.end() - 1));
  Array out{out_shape, std::vector<double>(static_cast<size_t>(NumElements(out_shape)), 0.0)};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out_features; ++o) {
      internal::Accumulator s;
      for (int64_t i = 0; i < in_features; ++i) s.Add(x.data[r * in_features + i] * weight.data[o * in_features + i]);
      out.data[r * out_features + o] = bias ? s.Value() + bias->data[o] : s.Value();
    }
  }
  return out;
}

}  // namespace oar::reference
