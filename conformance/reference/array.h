// The reference's value type: a dense, row-major array of doubles with a shape.
//
// Part of Oar's independent numerical reference (see reference.h). Every dtype is carried as double:
// bool is 0/1, integers are their value (exact up to 2^53), 16-bit and 32-bit floats are their exact
// value. Nothing here shares code with the kernels in plugins/ or core/.
#ifndef OAR_CONFORMANCE_REFERENCE_ARRAY_H_
#define OAR_CONFORMANCE_REFERENCE_ARRAY_H_

#include <cstdint>
#include <string>
#include <vector>

namespace oar::reference {

/// A dense row-major array. `shape` may be empty (a scalar, one element) and may hold zeros (no
/// elements). The invariant `data.size() == numel()` is the caller's to keep when building an Array by
/// hand; every op checks it and throws oar::Error(INVALID_ARGUMENT) when it is broken. Plain value
/// semantics: copying copies the data. Not thread-safe for concurrent mutation (like std::vector).
struct Array {
  std::vector<int64_t> shape;
  std::vector<double> data;

  /// Product of the extents (1 for a scalar). Throws on a negative extent.
  int64_t numel() const;
  /// Number of dimensions.
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  /// The element at a full multi-index (one entry per dimension, each in [0, extent); negative indices
  /// are not accepted). Throws INVALID_ARGUMENT on a wrong length, OUT_OF_RANGE on a bad entry.
  double At(const std::vector<int64_t>& index) const;
  double& At(const std::vector<int64_t>& index);

  /// An array of `shape` holding `values` in row-major order; throws when the counts differ or an
  /// extent is negative.
  static Array Make(std::vector<int64_t> shape, std::vector<double> values);
  /// An array of `shape` with every element equal to `value`.
  static Array Full(std::vector<int64_t> shape, double value);
  /// A rank-0 array holding `value`.
  static Array Scalar(double value);
};

/// "[2, 3]" — for messages.
std::string ShapeString(const std::vector<int64_t>& shape);

/// Product of the extents; throws INVALID_ARGUMENT on a negative extent.
int64_t NumElements(const std::vector<int64_t>& shape);

}  // namespace oar::reference

#endif  // OAR_CONFORMANCE_REFERENCE_ARRAY_H_
