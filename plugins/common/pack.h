// Dense copies of strided tensors, converted with the cast rules: for kernels that hand operands to a
// library wanting plain layouts (oneDNN) or that compute 16-bit floats in float32 buffers.
#ifndef OAR_PLUGINS_COMMON_PACK_H_
#define OAR_PLUGINS_COMMON_PACK_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "plugins/common/kernel_util.h"
#include "plugins/common/strided.h"

namespace oar::host {

/// Row-major element strides of `shape`.
inline std::vector<int64_t> DenseStrides(std::span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    strides[d] = s;
    s *= shape[d];
  }
  return strides;
}

/// Copy the elements of `t` (dtype From, any strides) into `dst` in row-major order, converted to To.
template <typename From, typename To>
void PackDense(const TensorRef& t, To* dst) {
  if (t.numel() == 0) return;
  const std::vector<int64_t> dense = DenseStrides(t.shape());
  const auto l = Collapse<2>(t.shape(), {std::span<const int64_t>(dense), t.strides()}, {sizeof(To), sizeof(From)});
  ForEach<2>(l, {reinterpret_cast<char*>(dst), t.data<char>()},
             [](const std::array<char*, 2>& p, int64_t n, const std::array<int64_t, 2>& s) {
               To* o = reinterpret_cast<To*>(p[0]);
               const From* v = reinterpret_cast<const From*>(p[1]);
               const int64_t sv = s[1] / static_cast<int64_t>(sizeof(From));
               if (sv == 1) {
#pragma omp simd
                 for (int64_t i = 0; i < n; ++i) o[i] = Convert<To>(v[i]);
               } else if (sv == 0) {  // a broadcast element (scatter_add's zeros): a fill
                 std::fill_n(o, n, Convert<To>(v[0]));
               } else {
                 for (int64_t i = 0; i < n; ++i) o[i] = Convert<To>(v[i * sv]);
               }
             });
}

/// A dense vector of t's elements, converted to To.
template <typename From, typename To>
std::vector<To> DenseCopy(const TensorRef& t) {
  std::vector<To> v(t.numel());
  PackDense<From, To>(t, v.data());
  return v;
}

/// Convert n dense elements of From into To (in parallel above the threshold).
template <typename From, typename To>
void ConvertDense(const From* src, To* dst, int64_t n) {
  ParallelFor(n, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) dst[i] = Convert<To>(src[i]);
  });
}

}  // namespace oar::host

#endif  // OAR_PLUGINS_COMMON_PACK_H_
