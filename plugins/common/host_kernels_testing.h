// Test support shared by the host kernel tests: the SDK's test host (oar/plugin/cpp/test_host.hpp) with
// every host kernel registered, tensors over their own storage with any strides, element access as long double, and a
// call helper. Reference loops live in the tests themselves.
#ifndef OAR_PLUGINS_COMMON_HOST_KERNELS_TESTING_H_
#define OAR_PLUGINS_COMMON_HOST_KERNELS_TESTING_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "oar/plugin/cpp/dtype.hpp"
#include "oar/plugin/cpp/kernel.hpp"
#include "oar/plugin/cpp/test_host.hpp"
#include "plugins/common/host_kernels.h"

namespace oar::host::testing {

using oar::sdk::BFloat16;
using oar::sdk::DTypeName;
using oar::sdk::DTypeSize;
using oar::sdk::Half;
using oar::sdk::testing::Result;
using oar::sdk::testing::Take;
using oar::sdk::testing::TestHost;
using Shape = std::vector<int64_t>;

constexpr int32_t F32 = OAR_DTYPE_FLOAT32, F64 = OAR_DTYPE_FLOAT64, F16 = OAR_DTYPE_FLOAT16, BF16 = OAR_DTYPE_BFLOAT16,
                  I8 = OAR_DTYPE_INT8, U8 = OAR_DTYPE_UINT8, I32 = OAR_DTYPE_INT32, I64 = OAR_DTYPE_INT64,
                  BOOL = OAR_DTYPE_BOOL;
inline const std::vector<int32_t> kAll = {F32, F64, F16, BF16, I8, U8, I32, I64, BOOL};
inline const std::vector<int32_t> kFloats = {F32, F64, F16, BF16};
inline const std::vector<int32_t> kArith = {F32, F64, F16, BF16, I8, U8, I32, I64};

// ---- the test host ------------------------------------------------------------------------------

/// Every host kernel, registered once through the SDK's test host (which refuses malformed definitions
/// and duplicate keys, as the runtime does).
inline const oar_kernel_registrar_t& Registrar() {
  static const oar_kernel_registrar_t registrar = [] {
    oar::sdk::Host() = TestHost();
    oar_kernel_registrar_t r;
    oar::host::RegisterHostKernels(&r);
    return r;
  }();
  return registrar;
}

// ---- tensors ------------------------------------------------------------------------------------

inline int64_t Numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

inline Shape RowMajor(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    strides[d] = s;
    s *= shape[d];
  }
  return strides;
}

/// A tensor over its own storage, with any strides and offset. Storage starts filled with a sentinel
/// byte so that tests can see what a kernel wrote.
struct Tensor {
  int32_t dtype = F32;
  Shape shape, strides;
  int64_t offset = 0;
  std::vector<uint64_t> storage;  // 8-byte aligned bytes

  size_t esize() const { return DTypeSize(dtype); }
  int64_t numel() const { return Numel(shape); }
  char* base() { return reinterpret_cast<char*>(storage.data()); }
  /// NULL for an empty tensor: a kernel that touches it crashes the test.
  void* data() { return numel() == 0 ? nullptr : base() + offset * esize(); }
  int64_t Index(const Shape& idx) const {
    int64_t i = offset;
    for (size_t d = 0; d < idx.size(); ++d) i += idx[d] * strides[d];
    return i;
  }
  template <typename T>
  T& At(const Shape& idx) {
    return reinterpret_cast<T*>(base())[Index(idx)];
  }
  char* Bytes(const Shape& idx) { return base() + Index(idx) * esize(); }
  oar_tensor_desc_t desc() {
    oar_tensor_desc_t d{};
    d.struct_size = OAR_TENSOR_DESC_STRUCT_SIZE;
    d.data = data();
    d.dtype = dtype;
    d.format = OAR_FORMAT_PLAIN;
    d.rank = static_cast<int32_t>(shape.size());
    d.shape = shape.data();
    d.strides = strides.data();
    return d;
  }
};

inline Tensor Strided(int32_t dtype, const Shape& shape, const Shape& strides, int64_t offset = 0) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.strides = strides;
  t.offset = offset;
  int64_t extent = offset + 1;
  for (size_t d = 0; d < shape.size(); ++d) extent += (std::max<int64_t>(shape[d], 1) - 1) * strides[d];
  const size_t bytes = extent * DTypeSize(dtype);
  t.storage.assign((bytes + 7) / 8, 0xcdcdcdcdcdcdcdcdull);
  return t;
}

inline Tensor Contiguous(int32_t dtype, const Shape& shape) { return Strided(dtype, shape, RowMajor(shape)); }

/// Stored with its dimensions in the order `perm` (outermost first): a permuted view.
inline Tensor Permuted(int32_t dtype, const Shape& shape, const std::vector<int>& perm) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int i = static_cast<int>(perm.size()) - 1; i >= 0; --i) {
    strides[perm[i]] = s;
    s *= shape[perm[i]];
  }
  return Strided(dtype, shape, strides);
}

/// Dimensions flagged in `broadcast` have stride 0 (the storage holds extent 1 there).
inline Tensor Broadcast(int32_t dtype, const Shape& shape, const std::vector<bool>& broadcast) {
  Shape stored = shape;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (broadcast[d]) stored[d] = 1;
  }
  Shape strides = RowMajor(stored);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (broadcast[d]) strides[d] = 0;
  }
  return Strided(dtype, shape, strides);
}

template <typename Fn>
inline void ForEachIndex(const Shape& shape, Fn&& fn) {
  if (Numel(shape) == 0) return;
  Shape idx(shape.size(), 0);
  while (true) {
    fn(idx);
    int d = static_cast<int>(shape.size()) - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

template <typename T>
constexpr bool kHalfLike = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// Any stored element as long double (exact for every dtype, int64 included).
template <typename T>
inline long double ToLong(T x) {
  if constexpr (kHalfLike<T>) {
    return static_cast<float>(x);
  } else {
    return static_cast<long double>(x);
  }
}

inline long double Get(Tensor& t, const Shape& idx) {
  long double v = 0;
  oar::sdk::VisitDType(t.dtype, [&](auto tag) { v = ToLong(t.At<decltype(tag)>(idx)); });
  return v;
}

/// Store `v` (in range for the dtype) into every element of `t` in its own layout.
inline void Set(Tensor& t, const Shape& idx, long double v) {
  oar::sdk::VisitDType(t.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kHalfLike<T>) {
      t.At<T>(idx) = T(static_cast<float>(v));
    } else {
      t.At<T>(idx) = static_cast<T>(v);
    }
  });
}

/// Random values: integers in [lo, hi] for integer dtypes (clamped to the dtype), reals otherwise.
inline void FillRandom(Tensor& t, std::mt19937& rng, double lo = -4, double hi = 4) {
  const bool integral = !oar::sdk::IsFloating(t.dtype);
  if (t.dtype == U8) lo = std::max(lo, 0.0);
  if (t.dtype == BOOL) lo = 0, hi = 1;
  std::uniform_real_distribution<double> real(lo, hi);
  std::uniform_int_distribution<int64_t> whole(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
  ForEachIndex(t.shape, [&](const Shape& idx) { Set(t, idx, integral ? whole(rng) : real(rng)); });
}

// ---- calling kernels ----------------------------------------------------------------------------

/// Call the kernel registered under (op, dtypes of ins and outs), or under `key` when given.
inline Result RunKernel(const std::string& op, const std::vector<Tensor*>& ins, const std::vector<Tensor*>& outs,
                        const std::vector<oar_attr_t>& attrs = {}, std::vector<int32_t> key = {}) {
  std::vector<oar_tensor_desc_t> in_descs, out_descs;
  const bool derive_key = key.empty();
  for (Tensor* t : ins) {
    in_descs.push_back(t->desc());
    if (derive_key) key.push_back(t->dtype);
  }
  for (Tensor* t : outs) {
    out_descs.push_back(t->desc());
    if (derive_key) key.push_back(t->dtype);
  }
  const oar::sdk::testing::Registration kernel = Registrar().Find(op, key);
  if (kernel.fn == nullptr) {
    ADD_FAILURE() << "no kernel registered for " << op;
    return {-1, "no kernel"};
  }
  oar_kernel_call_t call{};
  call.struct_size = OAR_KERNEL_CALL_STRUCT_SIZE;
  call.op = op.c_str();
  call.num_inputs = static_cast<int32_t>(ins.size());
  call.num_outputs = static_cast<int32_t>(outs.size());
  call.num_attrs = static_cast<int32_t>(attrs.size());
  call.inputs = in_descs.data();
  call.outputs = out_descs.data();
  call.attrs = attrs.data();
  return Take(kernel.fn(&call));
}

#define EXPECT_OK(expr)                  \
  do {                                   \
    const Result r_ = (expr);            \
    EXPECT_EQ(r_.code, 0) << r_.message; \
  } while (0)

/// Equal as values, with NaN equal to NaN.
inline bool SameValue(long double a, long double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// ---- helpers of the op-library tests ----------------------------------------------------------------

/// Floating and signed integer dtypes.
inline const std::vector<int32_t> kSigned = {F32, F64, F16, BF16, I8, I32, I64};

/// `v` as dtype `dt` stores it (through float for the 16-bit floats; integers must be in range).
inline long double RoundTo(int32_t dt, long double v) {
  Tensor t = Contiguous(dt, {});
  Set(t, {}, v);
  return Get(t, {});
}

/// A relative tolerance of a few roundings in dtype `dt` (0 for integers: exact).
inline long double RelTol(int32_t dt) {
  switch (dt) {
    case F64:
      return 1e-13L;
    case F32:
      return 2e-6L;
    case F16:
      return 2e-3L;
    case BF16:
      return 1.6e-2L;
    default:
      return 0;
  }
}

/// Compare every element of `out` with want(idx): equal as values (NaN = NaN, inf = inf) or within
/// atol + rtol * |want|. Reports the first five mismatches with `what`; returns the mismatch count.
template <typename Want>
int ExpectClose(Tensor& out, Want&& want, long double rtol, long double atol, const std::string& what) {
  int mismatches = 0;
  ForEachIndex(out.shape, [&](const Shape& idx) {
    const long double w = want(idx);
    const long double g = Get(out, idx);
    const bool ok = SameValue(g, w) || (std::isfinite(w) && std::fabs(g - w) <= atol + rtol * std::fabs(w));
    if (!ok && mismatches++ < 5) {
      std::string at;
      for (int64_t i : idx) at += (at.empty() ? "" : ", ") + std::to_string(i);
      ADD_FAILURE() << what << " " << DTypeName(out.dtype) << " at [" << at << "]: got " << static_cast<double>(g)
                    << ", want " << static_cast<double>(w);
    }
  });
  return mismatches;
}

/// Expect a failed call with status `code` whose message contains each of `parts`.
inline void ExpectError(const Result& r, int32_t code, std::initializer_list<std::string> parts) {
  EXPECT_EQ(r.code, code) << r.message;
  for (const std::string& part : parts) EXPECT_NE(r.message.find(part), std::string::npos) << r.message;
}

/// Whole numbers in [lo, hi] in any dtype (floats too): values that compare equal often.
inline void FillWhole(Tensor& t, std::mt19937& rng, int64_t lo, int64_t hi) {
  if (t.dtype == U8) lo = std::max<int64_t>(lo, 0);
  if (t.dtype == BOOL) lo = 0, hi = 1;
  std::uniform_int_distribution<int64_t> whole(lo, hi);
  ForEachIndex(t.shape, [&](const Shape& idx) { Set(t, idx, static_cast<long double>(whole(rng))); });
}

}  // namespace oar::host::testing

#endif  // OAR_PLUGINS_COMMON_HOST_KERNELS_TESTING_H_
