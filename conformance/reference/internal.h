// Private helpers shared by the reference's sources: validation, index arithmetic, broadcasting and
// reduction plans. Not part of the public API (not included by reference.h).
#ifndef OAR_CONFORMANCE_REFERENCE_INTERNAL_H_
#define OAR_CONFORMANCE_REFERENCE_INTERNAL_H_

#include <cmath>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "conformance/reference/array.h"
#include "core/base/error.h"

namespace oar::reference::internal {

/// The reference's accumulator: a Neumaier-compensated sum, accurate to about one rounding of the
/// result whatever the number of terms — so float64 kernels are judged against something more accurate
/// than themselves, not against another double-precision running sum. Once the plain sum is not finite
/// it is returned as is (inf and NaN propagate as in a plain sum).
class Accumulator {
 public:
  void Add(double v) {
    const double t = sum_ + v;
    // The low-order bits lost by sum_ + v, recovered exactly (Neumaier's variant of Kahan's).
    comp_ += std::fabs(sum_) >= std::fabs(v) ? (sum_ - t) + v : (v - t) + sum_;
    sum_ = t;
  }
  double Value() const { return std::isfinite(sum_) ? sum_ + comp_ : sum_; }

 private:
  double sum_ = 0.0;
  double comp_ = 0.0;
};

/// Throws INVALID_ARGUMENT "<op>: argument '<arg>' ..." unless data.size() == numel().
void CheckArray(const Array& x, std::string_view op, std::string_view arg);
/// CheckArray plus rank == `rank`.
void CheckRank(const Array& x, int64_t rank, std::string_view op, std::string_view arg);

/// Row-major strides (in elements) of a shape.
std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& shape);
/// Multi-index of a flat row-major position.
std::vector<int64_t> Unravel(int64_t flat, const std::vector<int64_t>& shape);
/// Flat row-major position of a multi-index (no range check).
int64_t Ravel(const std::vector<int64_t>& index, const std::vector<int64_t>& shape);

/// NumPy broadcasting of two shapes (right-aligned; extents equal or one of them 1).
std::vector<int64_t> BroadcastShape(const std::vector<int64_t>& a, const std::vector<int64_t>& b, std::string_view op);
/// `x` materialised at `shape`, which x must broadcast to.
Array BroadcastTo(const Array& x, const std::vector<int64_t>& shape, std::string_view op);
/// The adjoint of BroadcastTo: sums `g` (of a broadcast shape) back down to `shape`.
Array SumToShape(const Array& g, const std::vector<int64_t>& shape);

/// `axis` in [-rank, rank) mapped to [0, rank); throws otherwise.
int64_t NormalizeAxis(int64_t axis, int64_t rank, std::string_view op);
/// Each axis normalised; empty means every axis; duplicates throw. Sorted ascending.
std::vector<int64_t> NormalizeAxes(const std::vector<int64_t>& axes, int64_t rank, std::string_view op);

/// A reduction over some axes, planned once: which input elements feed which output element.
struct ReducePlan {
  std::vector<int64_t> axes;                 // sorted, non-negative
  std::vector<int64_t> keep_shape;           // input shape with reduced extents set to 1
  std::vector<int64_t> out_shape;            // keep_shape, or with reduced dimensions dropped
  std::vector<std::vector<int64_t>> groups;  // per output element: input flat indices, row-major order
  int64_t group_size = 1;                    // elements per group (product of reduced extents)
};
ReducePlan PlanReduce(const Array& x, const std::vector<int64_t>& axes, bool keepdim, std::string_view op);

/// True when `v` is finite and has no fractional part.
bool IsIntegral(double v);
/// `v` as an index: throws INVALID_ARGUMENT naming op/arg unless it is integral.
int64_t ToInt(double v, std::string_view op, std::string_view arg);

/// Elementwise map of one array.
template <typename F>
Array Map(const Array& x, F f) {
  Array out{x.shape, std::vector<double>(x.data.size())};
  for (size_t i = 0; i < x.data.size(); ++i) out.data[i] = f(x.data[i]);
  return out;
}

/// Elementwise map of two arrays broadcast to a common shape.
template <typename F>
Array Map2(const Array& a, const Array& b, std::string_view op, F f) {
  CheckArray(a, op, "a");
  CheckArray(b, op, "b");
  std::vector<int64_t> shape = BroadcastShape(a.shape, b.shape, op);
  Array ab = BroadcastTo(a, shape, op);
  Array bb = BroadcastTo(b, shape, op);
  Array out{shape, std::vector<double>(ab.data.size())};
  for (size_t i = 0; i < out.data.size(); ++i) out.data[i] = f(ab.data[i], bb.data[i]);
  return out;
}

}  // namespace oar::reference::internal

#endif  // OAR_CONFORMANCE_REFERENCE_INTERNAL_H_
