// Indexing host kernels: gather, index_select, scatter_add and topk (docs/ops.md).
//
// Every index is checked before anything is read through it: a value outside [0, extent) is an
// OUT_OF_RANGE status naming the first bad index (row-major), its position and the bound, never an
// out-of-bounds access. gather and index_select share one loop: index_select is a gather whose index
// is broadcast (stride 0) along every dimension but `axis`. scatter_add is parallel over the positions
// of the index without its axis: two index elements that differ outside the axis never hit the same
// output element, so each output element accumulates its contributions in index order (deterministic,
// the same result as a serial loop).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "plugins/common/elementwise.h"
#include "plugins/common/kernel_util.h"
#include "plugins/common/pack.h"
#include "plugins/common/strided.h"

namespace oar::host {
namespace {

/// Require every element of the I64 tensor `index` to lie in [0, bound); otherwise OUT_OF_RANGE naming
/// the first bad one in row-major order.
void CheckIndices(const KernelCall& call, const TensorRef& index, int64_t bound, const std::string& bound_what) {
  const int64_t n = index.numel();
  if (n == 0) return;
  const auto layout = Collapse<1>(index.shape(), {index.strides()}, {8});
  std::atomic<int64_t> first_bad{n};
  ParallelFor(n, [&](int64_t begin, int64_t end) {
    int64_t pos = begin;
    ForRange<1>(layout, {index.data<char>()}, begin, end,
                [&](const std::array<char*, 1>& p, int64_t m, const std::array<int64_t, 1>& s) {
                  const int64_t* v = reinterpret_cast<const int64_t*>(p[0]);
                  const int64_t sv = s[0] / 8;
                  bool bad = false;
                  // Unsigned: a negative index is as bad as a large one.
                  for (int64_t i = 0; i < m; ++i) {
                    bad |= static_cast<uint64_t>(v[i * sv]) >= static_cast<uint64_t>(bound);
                  }
                  if (bad) {
                    int64_t i = 0;
                    while (static_cast<uint64_t>(v[i * sv]) < static_cast<uint64_t>(bound)) ++i;
                    int64_t seen = first_bad.load();
                    while (pos + i < seen && !first_bad.compare_exchange_weak(seen, pos + i)) {
                      // `seen` was reloaded: retry while this one is still the first.
                    }
                  }
                  pos += m;
                });
  });
  const int64_t bad = first_bad.load();
  if (bad == n) return;
  std::vector<int64_t> at(index.rank());
  int64_t rest = bad;
  for (int d = index.rank() - 1; d >= 0; --d) {
    at[d] = rest % index.dim(d);
    rest /= index.dim(d);
  }
  int64_t offset = 0;
  for (int d = 0; d < index.rank(); ++d) offset += at[d] * index.stride(d);
  OutOfRange(call, "index " + std::to_string(index.data<const int64_t>()[offset]) + " at position " + IndexString(at) +
                       " is out of range for " + bound_what + " (valid: [0, " + std::to_string(bound) + "))");
}

/// out[i] = x[i with i[axis] replaced by index[i]], for the index values at `index` with element
/// strides `index_strides` over out's shape. Indices are already checked.
template <typename T>
void GatherInto(const TensorRef& out, const TensorRef& x, const int64_t* index, std::span<const int64_t> index_strides,
                int axis) {
  using U = BitsOf<sizeof(T)>;
  constexpr int64_t kSize = sizeof(T);
  const int rank = x.rank();
  int64_t x_strides[OAR_MAX_RANK] = {};
  for (int d = 0; d < rank; ++d) x_strides[d] = d == axis ? 0 : x.stride(d);
  const int64_t axis_stride = rank == 0 ? 0 : x.stride(axis);
  const auto layout = Collapse<3>(
      out.shape(), {out.strides(), index_strides, std::span<const int64_t>(x_strides, rank)}, {kSize, 8, kSize});
  ForEach<3>(layout, {out.data<char>(), reinterpret_cast<char*>(const_cast<int64_t*>(index)), x.data<char>()},
             [axis_stride](const std::array<char*, 3>& p, int64_t n, const std::array<int64_t, 3>& s) {
               U* o = reinterpret_cast<U*>(p[0]);
               const int64_t* idx = reinterpret_cast<const int64_t*>(p[1]);
               const U* src = reinterpret_cast<const U*>(p[2]);
               const int64_t so = s[0] / kSize, si = s[1] / 8, sx = s[2] / kSize;
               if (si == 0) {  // one index for the whole run (index_select's inner runs): a strided copy
                 const U* from = src + idx[0] * axis_stride;
                 if (so == 1 && sx == 1) {
                   std::copy(from, from + n, o);
                 } else {
                   for (int64_t i = 0; i < n; ++i) o[i * so] = from[i * sx];
                 }
                 return;
               }
               for (int64_t i = 0; i < n; ++i) o[i * so] = src[i * sx + idx[i * si] * axis_stride];
             });
}

/// index_select of whole rows: with x contiguous, the elements after `axis` form one run per index value
/// (embedding's table lookups: a row of the table). Each run is one memcpy into the contiguous output,
/// rows split over threads, with no layout walk per row: the same bytes GatherInto writes. False (nothing
/// done) for other layouts and for runs too short for a call per run to pay.
template <typename T>
bool SelectRows(const TensorRef& out, const TensorRef& x, const TensorRef& index, int axis) {
  if (x.rank() == 0 || !x.is_contiguous()) return false;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
  if (inner < 16) return false;
  const int64_t rows = index.dim(0), extent = x.dim(axis), index_stride = index.stride(0);
  const int64_t* idx = index.data<const int64_t>();
  const char* src = x.data<const char>();
  char* dst = out.data<char>();
  const int64_t row_bytes = inner * static_cast<int64_t>(sizeof(T));
  ParallelFor(
      outer * rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const int64_t o = outer == 1 ? 0 : r / rows, i = outer == 1 ? r : r % rows;
          std::memcpy(dst + r * row_bytes, src + (o * extent + idx[i * index_stride]) * row_bytes,
                      static_cast<size_t>(row_bytes));
        }
      },
      outer * rows * inner);
  return true;
}

std::string AxisWhat(int axis) { return "dimension " + std::to_string(axis) + " of input 0 (x)"; }

template <typename T>
void Gather(const KernelCall& call) {
  CheckArity(call, 2, 1);
  CheckDTypes(call, {kDTypeOf<T>, OAR_DTYPE_INT64, kDTypeOf<T>});
  const TensorRef x = call.input(0);
  const TensorRef index = call.input(1);
  const TensorRef out = call.output(0);
  const int rank = x.rank();
  const int axis = RequireAxis(call, "axis", rank);
  if (index.rank() != rank) Invalid(call, "the index must have the rank of x");
  CheckSameShape(call, out, index, "the output");
  for (int d = 0; d < rank; ++d) {
    if (d != axis && index.dim(d) > x.dim(d)) {
      Invalid(call, "the index's dimension " + std::to_string(d) + " exceeds x's (" + std::to_string(x.dim(d)) + ")");
    }
  }
  if (out.numel() == 0) return;
  CheckContiguous(call, out, "the output");
  CheckIndices(call, index, rank == 0 ? 1 : x.dim(axis), AxisWhat(axis));
  GatherInto<T>(out, x, index.data<const int64_t>(), index.strides(), axis);
}

template <typename T>
void IndexSelect(const KernelCall& call) {
  CheckArity(call, 2, 1);
  CheckDTypes(call, {kDTypeOf<T>, OAR_DTYPE_INT64, kDTypeOf<T>});
  const TensorRef x = call.input(0);
  const TensorRef index = call.input(1);
  const TensorRef out = call.output(0);
  const int rank = x.rank();
  const int axis = RequireAxis(call, "axis", rank);
  if (index.rank() != 1) Invalid(call, "the index must have rank 1");
  bool ok = out.rank() == rank;
  for (int d = 0; ok && d < rank; ++d) ok = out.dim(d) == (d == axis ? index.dim(0) : x.dim(d));
  if (rank == 0) ok = ok && index.dim(0) == 1;
  if (!ok) Invalid(call, "the output must have x's shape with dimension " + std::to_string(axis) + " = len(index)");
  if (out.numel() == 0) return;
  CheckContiguous(call, out, "the output");
  CheckIndices(call, index, rank == 0 ? 1 : x.dim(axis), AxisWhat(axis));
  if (SelectRows<T>(out, x, index, axis)) return;
  int64_t strides[OAR_MAX_RANK] = {};
  if (rank > 0) strides[axis] = index.stride(0);
  GatherInto<T>(out, x, index.data<const int64_t>(), std::span<const int64_t>(strides, rank), axis);
}

// ---- scatter_add --------------------------------------------------------------------------------

template <typename T>
void ScatterAdd(const KernelCall& call) {
  // 16-bit floats accumulate in a float copy of the output and round once; integers wrap.
  using Acc = std::conditional_t<kIsHalfLike<T>, float, T>;
  constexpr int64_t kAcc = sizeof(Acc);
  CheckArity(call, 3, 1);
  CheckDTypes(call, {kDTypeOf<T>, OAR_DTYPE_INT64, kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef x = call.input(0);
  const TensorRef index = call.input(1);
  const TensorRef src = call.input(2);
  const TensorRef out = call.output(0);
  const int rank = x.rank();
  const int axis = RequireAxis(call, "axis", rank);
  CheckSameShape(call, out, x, "the output");
  if (index.rank() != rank) Invalid(call, "the index must have the rank of x");
  CheckSameShape(call, src, index, "input 2 (src)");
  for (int d = 0; d < rank; ++d) {
    if (d != axis && index.dim(d) > x.dim(d)) {
      Invalid(call, "the index's dimension " + std::to_string(d) + " exceeds x's (" + std::to_string(x.dim(d)) + ")");
    }
  }
  const int64_t numel = out.numel();
  if (numel == 0) return;
  CheckContiguous(call, out, "the output");
  CheckIndices(call, index, rank == 0 ? 1 : x.dim(axis), AxisWhat(axis));
  std::vector<Acc> scratch;
  Acc* acc;
  if constexpr (std::is_same_v<Acc, T>) {
    acc = out.data<T>();
  } else {
    scratch.resize(numel);
    acc = scratch.data();
  }
  PackDense<T, Acc>(x, acc);
  if (index.numel() > 0) {
    // Walk the index without its axis; each position adds its whole axis in order.
    const std::vector<int64_t> dense = DenseStrides(out.shape());
    int64_t shape[OAR_MAX_RANK], is[OAR_MAX_RANK], ss[OAR_MAX_RANK], os[OAR_MAX_RANK];
    int kept = 0;
    for (int d = 0; d < rank; ++d) {
      if (d == axis) continue;
      shape[kept] = index.dim(d), is[kept] = index.stride(d), ss[kept] = src.stride(d), os[kept] = dense[d];
      ++kept;
    }
    const int64_t len = rank == 0 ? 1 : index.dim(axis);
    const int64_t ia = rank == 0 ? 0 : index.stride(axis), sa = rank == 0 ? 0 : src.stride(axis);
    const int64_t oa = rank == 0 ? 0 : dense[axis];
    const auto layout = Collapse<3>(
        std::span<const int64_t>(shape, kept),
        {std::span<const int64_t>(is, kept), std::span<const int64_t>(ss, kept), std::span<const int64_t>(os, kept)},
        {8, sizeof(T), kAcc});
    ParallelFor(
        layout.numel,
        [&](int64_t begin, int64_t end) {
          ForRange<3>(layout, {index.data<char>(), src.data<char>(), reinterpret_cast<char*>(acc)}, begin, end,
                      [&](const std::array<char*, 3>& p, int64_t n, const std::array<int64_t, 3>& s) {
                        for (int64_t i = 0; i < n; ++i) {
                          const int64_t* idx = reinterpret_cast<const int64_t*>(p[0] + i * s[0]);
                          const T* from = reinterpret_cast<const T*>(p[1] + i * s[1]);
                          Acc* to = reinterpret_cast<Acc*>(p[2] + i * s[2]);
                          for (int64_t j = 0; j < len; ++j) {
                            Acc& dst = to[idx[j * ia] * oa];
                            const Acc v = Acc(ComputeT<T>(from[j * sa]));
                            if constexpr (std::is_integral_v<Acc>) {
                              using UA = std::make_unsigned_t<Acc>;
                              dst = static_cast<Acc>(static_cast<UA>(static_cast<UA>(dst) + static_cast<UA>(v)));
                            } else {
                              dst += v;
                            }
                          }
                        }
                      });
        },
        layout.numel * len);
  }
  if constexpr (!std::is_same_v<Acc, T>) ConvertDense<Acc, T>(acc, out.data<T>(), numel);
}

// ---- topk ---------------------------------------------------------------------------------------

/// a > b in the order where NaN is above every number (and equal to itself).
template <typename C>
bool Above(C a, C b) {
  return IsNan(a) ? !IsNan(b) : a > b;
}

template <typename T>
void TopK(const KernelCall& call) {
  using C = ComputeT<T>;
  CheckArity(call, 1, 2);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>, OAR_DTYPE_INT64});
  const TensorRef x = call.input(0);
  const TensorRef values = call.output(0);
  const TensorRef indices = call.output(1);
  const int rank = x.rank();
  const int axis = RequireAxis(call, "axis", rank);
  const int64_t k = RequireInt(call, "k");
  const bool largest = RequireBool(call, "largest");
  const int64_t extent = rank == 0 ? 1 : x.dim(axis);
  if (k < 0 || k > extent) {
    Invalid(call, "k = " + std::to_string(k) + " is outside [0, " + std::to_string(extent) + "] (the axis extent)");
  }
  bool ok = values.rank() == rank;
  for (int d = 0; ok && d < rank; ++d) ok = values.dim(d) == (d == axis ? k : x.dim(d));
  if (!ok) Invalid(call, "the outputs must have x's shape with dimension " + std::to_string(axis) + " = k");
  CheckSameShape(call, indices, values, "output 1 (indices)");
  if (values.numel() == 0) return;
  CheckContiguous(call, values, "output 0 (values)");
  CheckContiguous(call, indices, "output 1 (indices)");
  int64_t shape[OAR_MAX_RANK], strides[OAR_MAX_RANK];
  int kept = 0;
  int64_t inner = 1;
  for (int d = 0; d < rank; ++d) {
    if (d == axis) continue;
    shape[kept] = x.dim(d), strides[kept++] = x.stride(d);
    if (d > axis) inner *= x.dim(d);
  }
  const int64_t axis_stride = rank == 0 ? 0 : x.stride(axis);
  const auto layout =
      Collapse<1>(std::span<const int64_t>(shape, kept), {std::span<const int64_t>(strides, kept)}, {sizeof(T)});
  ParallelFor(
      layout.numel,
      [&](int64_t begin, int64_t end) {
        std::vector<C> v(extent);
        std::vector<int64_t> order(extent);
        int64_t row = begin;
        ForRange<1>(layout, {x.data<char>()}, begin, end,
                    [&](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>& s) {
                      for (int64_t r = 0; r < n; ++r, ++row) {
                        const T* src = reinterpret_cast<const T*>(p[0] + r * s[0]);
                        for (int64_t i = 0; i < extent; ++i) v[i] = C(src[i * axis_stride]);
                        std::iota(order.begin(), order.end(), int64_t{0});
                        // A strict total order: by value (NaN above everything), then by index.
                        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
                          if (largest ? Above(v[a], v[b]) : Above(v[b], v[a])) return true;
                          if (largest ? Above(v[b], v[a]) : Above(v[a], v[b])) return false;
                          return a < b;
                        });
                        const int64_t base = (row / inner) * k * inner + row % inner;
                        for (int64_t j = 0; j < k; ++j) {
                          values.data<T>()[base + j * inner] = src[order[j] * axis_stride];
                          indices.data<int64_t>()[base + j * inner] = order[j];
                        }
                      }
                    });
      },
      layout.numel * extent * 4);
}

template <typename... Ts>
void AddMovers(std::vector<HostKernel>* kernels, TypeList<Ts...>) {
  (AddKernel(kernels, "gather", {kDTypeOf<Ts>, OAR_DTYPE_INT64, kDTypeOf<Ts>}, &GuardedKernel<&Gather<Ts>>), ...);
  (AddKernel(kernels, "index_select", {kDTypeOf<Ts>, OAR_DTYPE_INT64, kDTypeOf<Ts>}, &GuardedKernel<&IndexSelect<Ts>>),
   ...);
}

template <typename... Ts>
void AddNumeric(std::vector<HostKernel>* kernels, TypeList<Ts...>) {
  (AddKernel(kernels, "scatter_add", {kDTypeOf<Ts>, OAR_DTYPE_INT64, kDTypeOf<Ts>, kDTypeOf<Ts>},
             &GuardedKernel<&ScatterAdd<Ts>>),
   ...);
  (AddKernel(kernels, "topk", {kDTypeOf<Ts>, kDTypeOf<Ts>, OAR_DTYPE_INT64}, &GuardedKernel<&TopK<Ts>>), ...);
}

}  // namespace

void AppendIndexingKernels(std::vector<HostKernel>* kernels) {
  AddMovers(kernels, AllTypes{});
  AddNumeric(kernels, NumericTypes{});
}

}  // namespace oar::host
