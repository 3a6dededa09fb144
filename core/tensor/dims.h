// Dims: a shape or stride list with inline storage (rank <= OAR_MAX_RANK), so tensor metadata never
// touches the heap on the dispatch path.
#ifndef OAR_CORE_TENSOR_DIMS_H_
#define OAR_CORE_TENSOR_DIMS_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "core/base/error.h"
#include "oar/plugin/kernel.h"

namespace oar {

class Dims {
 public:
  static constexpr int kMaxRank = OAR_MAX_RANK;

  Dims() = default;
  Dims(std::initializer_list<int64_t> values) { Assign(values.begin(), values.size()); }
  explicit Dims(std::span<const int64_t> values) { Assign(values.data(), values.size()); }
  /// `rank` copies of `value`.
  static Dims Filled(int rank, int64_t value) {
    Dims d;
    d.resize(rank, value);
    return d;
  }

  int size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return v_.data(); }
  const int64_t* data() const { return v_.data(); }
  int64_t& operator[](int i) { return v_[i]; }
  int64_t operator[](int i) const { return v_[i]; }
  int64_t back() const { return v_[size_ - 1]; }
  const int64_t* begin() const { return v_.data(); }
  const int64_t* end() const { return v_.data() + size_; }
  int64_t* begin() { return v_.data(); }
  int64_t* end() { return v_.data() + size_; }
  operator std::span<const int64_t>() const { return {v_.data(), static_cast<size_t>(size_)}; }  // NOLINT

  void push_back(int64_t value) {
    OAR_CHECK_ARG(size_ < kMaxRank, "rank {} exceeds the maximum rank {}", size_ + 1, kMaxRank);
    v_[size_++] = value;
  }
  void resize(int rank, int64_t value = 0) {
    OAR_CHECK_ARG(rank >= 0 && rank <= kMaxRank, "rank {} exceeds the maximum rank {}", rank, kMaxRank);
    for (int i = size_; i < rank; ++i) v_[i] = value;
    size_ = rank;
  }
  void erase(int i) {
    std::copy(v_.begin() + i + 1, v_.begin() + size_, v_.begin() + i);
    --size_;
  }
  void insert(int i, int64_t value) {
    OAR_CHECK_ARG(size_ < kMaxRank, "rank {} exceeds the maximum rank {}", size_ + 1, kMaxRank);
    std::copy_backward(v_.begin() + i, v_.begin() + size_, v_.begin() + size_ + 1);
    v_[i] = value;
    ++size_;
  }

  /// Product of the entries (1 for rank 0).
  int64_t Product() const {
    int64_t p = 1;
    for (int i = 0; i < size_; ++i) p *= v_[i];
    return p;
  }
  /// "[2, 3]".
  std::string ToString() const {
    std::string s = "[";
    for (int i = 0; i < size_; ++i) s += (i ? ", " : "") + std::to_string(v_[i]);
    return s + "]";
  }

  friend bool operator==(const Dims& a, const Dims& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  void Assign(const int64_t* p, size_t n) {
    OAR_CHECK_ARG(n <= static_cast<size_t>(kMaxRank), "rank {} exceeds the maximum rank {}", n, kMaxRank);
    std::copy(p, p + n, v_.begin());
    size_ = static_cast<int>(n);
  }

  std::array<int64_t, kMaxRank> v_{};
  int size_ = 0;
};

/// Row-major strides of a dense tensor of `shape`.
inline Dims ContiguousStrides(const Dims& shape) {
  Dims strides = Dims::Filled(shape.size(), 1);
  int64_t s = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

/// Normalise a possibly negative axis against `rank`; throws naming `what` when out of range.
inline int NormalizeAxis(int64_t axis, int rank, const char* what) {
  const int64_t r = std::max(rank, 0);
  OAR_CHECK(axis >= -r && axis < std::max<int64_t>(r, 1), kOutOfRange,
            "{}: axis {} is out of range for a tensor of rank {} (expected {} <= axis < {})", what, axis,
            rank, -r, std::max<int64_t>(r, 1));
  return static_cast<int>(axis < 0 ? axis + r : axis);
}

}  // namespace oar

#endif  // OAR_CORE_TENSOR_DIMS_H_
