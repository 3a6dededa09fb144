// Shape host kernels that only move elements: concat (1..15 inputs) and pad (constant mode)
// (docs/ops.md). Both copy bits, so one instantiation per element size would do; they are templated on
// the dtype only to check the key.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "plugins/common/kernel_util.h"
#include "plugins/common/strided.h"

namespace oar::host {
namespace {

/// The most inputs a concat kernel is registered for (with its output: the longest key).
constexpr int kMaxConcatInputs = kMaxHostKeyDTypes - 1;

/// Copy `src` (any strides) into the same-shaped view of the output at `dst` with element strides
/// `dst_strides`.
template <typename T>
void CopyInto(const TensorRef& src, char* dst, std::span<const int64_t> dst_strides) {
  using U = BitsOf<sizeof(T)>;
  constexpr int64_t kSize = sizeof(T);
  const auto layout = Collapse<2>(src.shape(), {dst_strides, src.strides()}, {kSize, kSize});
  ForEach<2>(layout, {dst, src.data<char>()},
             [](const std::array<char*, 2>& p, int64_t n, const std::array<int64_t, 2>& s) {
               if (s[0] == kSize && s[1] == kSize) {
                 std::memcpy(p[0], p[1], n * kSize);
                 return;
               }
               U* o = reinterpret_cast<U*>(p[0]);
               const U* v = reinterpret_cast<const U*>(p[1]);
               const int64_t so = s[0] / kSize, sv = s[1] / kSize;
               for (int64_t i = 0; i < n; ++i) o[i * so] = v[i * sv];
             });
}

template <typename T>
void Concat(const KernelCall& call) {
  constexpr int64_t kSize = sizeof(T);
  const int inputs = call.num_inputs();
  if (inputs < 1 || inputs > kMaxConcatInputs) {
    Invalid(call, "concat takes 1 to " + std::to_string(kMaxConcatInputs) + " inputs, got " + std::to_string(inputs));
  }
  CheckArity(call, inputs, 1);
  for (int i = 0; i <= inputs; ++i) {
    const int32_t got = i < inputs ? call.input(i).dtype() : call.output(0).dtype();
    if (got != kDTypeOf<T>) {
      Invalid(call, (i < inputs ? "input " + std::to_string(i) : std::string("the output")) + " has dtype " +
                        std::string(sdk::DTypeName(got)) + ", the kernel expects " +
                        std::string(sdk::DTypeName(kDTypeOf<T>)));
    }
  }
  const TensorRef out = call.output(0);
  const int rank = out.rank();
  if (rank == 0) Invalid(call, "cannot concatenate rank-0 tensors");
  const int axis = RequireAxis(call, "axis", rank);
  int64_t total = 0;
  for (int i = 0; i < inputs; ++i) {
    const TensorRef t = call.input(i);
    bool ok = t.rank() == rank;
    for (int d = 0; ok && d < rank; ++d) ok = d == axis || t.dim(d) == out.dim(d);
    if (!ok) {
      Invalid(call,
              "input " + std::to_string(i) + " must have the output's shape except along axis " + std::to_string(axis));
    }
    total += t.dim(axis);
  }
  if (total != out.dim(axis)) {
    Invalid(call, "the inputs' extents along axis " + std::to_string(axis) + " add up to " + std::to_string(total) +
                      ", the output has " + std::to_string(out.dim(axis)));
  }
  if (out.numel() == 0) return;
  CheckContiguous(call, out, "the output");
  std::vector<int64_t> strides(rank);
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) strides[d] = s, s *= out.dim(d);
  int64_t offset = 0;
  for (int i = 0; i < inputs; ++i) {
    const TensorRef t = call.input(i);
    CopyInto<T>(t, out.data<char>() + offset * strides[axis] * kSize, strides);
    offset += t.dim(axis);
  }
}

template <typename T>
void Pad(const KernelCall& call) {
  using U = BitsOf<sizeof(T)>;
  CheckArity(call, 1, 1);
  CheckDTypes(call, {kDTypeOf<T>, kDTypeOf<T>});
  const TensorRef x = call.input(0);
  const TensorRef out = call.output(0);
  const int rank = x.rank();
  const std::span<const int64_t> pads = RequireInts(call, "pads", 2 * static_cast<size_t>(rank));
  // The value converts with the cast rules whichever numeric attribute type carries it (as `fill`).
  const T value = NumberAttr<T>(call, "value");
  bool ok = out.rank() == rank;
  for (int d = 0; ok && d < rank; ++d) {
    if (pads[2 * d] < 0 || pads[2 * d + 1] < 0) Invalid(call, "attribute 'pads' must be >= 0");
    ok = out.dim(d) == x.dim(d) + pads[2 * d] + pads[2 * d + 1];
  }
  if (!ok) Invalid(call, "the output must be x's shape grown by 'pads'");
  const int64_t numel = out.numel();
  if (numel == 0) return;
  CheckContiguous(call, out, "the output");
  U fill;
  std::memcpy(&fill, &value, sizeof(U));
  U* dst = out.data<U>();
  if (rank == 0) {
    std::memcpy(dst, x.data(), sizeof(U));
    return;
  }
  // One output row (the last dimension) at a time: rows outside x are all padding; the others are
  // padding, x's row, padding.
  const int last = rank - 1;
  const int64_t width = out.dim(last), before = pads[2 * last], inner = x.dim(last);
  const int64_t sx = x.stride(last);
  const int64_t rows = numel / width;
  ParallelFor(
      rows,
      [&](int64_t begin, int64_t end) {
        std::vector<int64_t> idx(last);
        int64_t rest = begin;
        for (int d = last - 1; d >= 0; --d) idx[d] = rest % out.dim(d), rest /= out.dim(d);
        for (int64_t r = begin; r < end; ++r) {
          U* row = dst + r * width;
          bool inside = inner > 0;
          int64_t src = 0;
          for (int d = 0; d < last && inside; ++d) {
            const int64_t i = idx[d] - pads[2 * d];
            inside = i >= 0 && i < x.dim(d);
            src += i * x.stride(d);
          }
          if (!inside) {
            std::fill(row, row + width, fill);
          } else {
            const U* from = x.data<const U>() + src;
            std::fill(row, row + before, fill);
            if (sx == 1) {
              std::copy(from, from + inner, row + before);
            } else {
              for (int64_t i = 0; i < inner; ++i) row[before + i] = from[i * sx];
            }
            std::fill(row + before + inner, row + width, fill);
          }
          for (int d = last - 1; d >= 0; --d) {  // next row
            if (++idx[d] < out.dim(d)) break;
            idx[d] = 0;
          }
        }
      },
      numel);
}

template <typename T>
void AddConcats(std::vector<HostKernel>* kernels) {
  for (int n = 1; n <= kMaxConcatInputs; ++n) {
    HostKernel k{"concat", {}, n + 1, &GuardedKernel<&Concat<T>>};
    std::fill(k.dtypes.begin(), k.dtypes.begin() + n + 1, kDTypeOf<T>);
    kernels->push_back(k);
  }
}

template <typename... Ts>
void AddAll(std::vector<HostKernel>* kernels, TypeList<Ts...>) {
  (AddConcats<Ts>(kernels), ...);
  (AddKernel(kernels, "pad", {kDTypeOf<Ts>, kDTypeOf<Ts>}, &GuardedKernel<&Pad<Ts>>), ...);
}

}  // namespace

void AppendConcatPadKernels(std::vector<HostKernel>* kernels) { AddAll(kernels, AllTypes{}); }

}  // namespace oar::host
