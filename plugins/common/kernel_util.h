// Internal helpers shared by the host kernel sources: argument checks, dtype traits, the cast rules
// and the lists each source appends its kernels to. Not part of the library's interface.
#ifndef OAR_PLUGINS_COMMON_KERNEL_UTIL_H_
#define OAR_PLUGINS_COMMON_KERNEL_UTIL_H_

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "oar/plugin/cpp/dtype.hpp"
#include "oar/plugin/cpp/kernel.hpp"
#include "plugins/common/host_kernels.h"

namespace oar::host {

using sdk::BFloat16;
using sdk::Half;
using sdk::KernelCall;
using sdk::TensorRef;

// ---- the kernel lists -------------------------------------------------------------------------
void AppendElementwiseKernels(std::vector<HostKernel>* kernels);
void AppendReduceKernels(std::vector<HostKernel>* kernels);
void AppendMatmulKernels(std::vector<HostKernel>* kernels);
void AppendCopyCastKernels(std::vector<HostKernel>* kernels);
void AppendElementwiseMathKernels(std::vector<HostKernel>* kernels);
void AppendCompareLogicalKernels(std::vector<HostKernel>* kernels);
void AppendReduceExtremaKernels(std::vector<HostKernel>* kernels);
void AppendSoftmaxNormKernels(std::vector<HostKernel>* kernels);
void AppendConvKernels(std::vector<HostKernel>* kernels);
void AppendPoolKernels(std::vector<HostKernel>* kernels);
void AppendIndexingKernels(std::vector<HostKernel>* kernels);
void AppendConcatPadKernels(std::vector<HostKernel>* kernels);
void AppendFusedElementwiseKernels(std::vector<HostKernel>* kernels);

/// Append one kernel under (op, dtypes) (at most kMaxHostKeyDTypes of them).
void AddKernel(std::vector<HostKernel>* kernels, const char* op, std::initializer_list<int32_t> dtypes,
               oar_kernel_fn_t fn);

/// Wrap `Body(const KernelCall&)` into an ABI kernel function whose exceptions become statuses.
template <auto Body>
oar_status_t* GuardedKernel(const oar_kernel_call_t* call) {
  return sdk::Guard([call] { Body(KernelCall(call)); });
}

// ---- dtype traits -----------------------------------------------------------------------------
template <typename T>
inline constexpr int32_t kDTypeOf = OAR_DTYPE_INVALID;
template <>
inline constexpr int32_t kDTypeOf<float> = OAR_DTYPE_FLOAT32;
template <>
inline constexpr int32_t kDTypeOf<double> = OAR_DTYPE_FLOAT64;
template <>
inline constexpr int32_t kDTypeOf<Half> = OAR_DTYPE_FLOAT16;
template <>
inline constexpr int32_t kDTypeOf<BFloat16> = OAR_DTYPE_BFLOAT16;
template <>
inline constexpr int32_t kDTypeOf<int8_t> = OAR_DTYPE_INT8;
template <>
inline constexpr int32_t kDTypeOf<uint8_t> = OAR_DTYPE_UINT8;
template <>
inline constexpr int32_t kDTypeOf<int32_t> = OAR_DTYPE_INT32;
template <>
inline constexpr int32_t kDTypeOf<int64_t> = OAR_DTYPE_INT64;
template <>
inline constexpr int32_t kDTypeOf<bool> = OAR_DTYPE_BOOL;

template <typename T>
inline constexpr bool kIsHalfLike = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <typename T>
inline constexpr bool kIsFloating = std::is_floating_point_v<T> || kIsHalfLike<T>;

/// The type arithmetic on T happens in: float for the 16-bit floating types, T otherwise.
template <typename T>
using ComputeT = std::conditional_t<kIsHalfLike<T>, float, T>;

/// The unsigned integer type of `kBytes` bytes: kernels that only move elements use it for every dtype
/// of that size.
template <size_t kBytes>
using BitsOf =
    std::conditional_t<kBytes == 1, uint8_t,
                       std::conditional_t<kBytes == 2, uint16_t, std::conditional_t<kBytes == 4, uint32_t, uint64_t>>>;

template <typename... Ts>
struct TypeList {};
using FloatTypes = TypeList<float, double, Half, BFloat16>;
using AllTypes = TypeList<float, double, Half, BFloat16, int8_t, uint8_t, int32_t, int64_t, bool>;
/// "Numeric" in docs/ops-library-plan.md: floating, signed and U8 (every dtype but BOOL).
using NumericTypes = TypeList<float, double, Half, BFloat16, int8_t, uint8_t, int32_t, int64_t>;
/// Floating and signed integers.
using SignedTypes = TypeList<float, double, Half, BFloat16, int8_t, int32_t, int64_t>;

// ---- the cast rules (docs/ops.md, "cast") ------------------------------------------------------

/// Convert one value with the cast rules: to bool is x != 0 (NaN -> true); floating -> integer
/// truncates toward zero, NaN -> 0, out of range saturates; integer -> integer wraps; everything
/// else rounds to nearest (16-bit floats round to nearest even through float).
template <typename To, typename From>
inline To Convert(From x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (kIsHalfLike<From>) {
    return Convert<To>(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, bool>) {
    return x != From(0);
  } else if constexpr (kIsHalfLike<To>) {
    return To(static_cast<float>(x));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    // Compare in double: every To bound + 1 is exact there, so the saturation points are exact too.
    const double v = static_cast<double>(x);
    if (std::isnan(v)) return To(0);
    constexpr double kHi = static_cast<double>(std::numeric_limits<To>::max()) + 1.0;
    constexpr double kLo = static_cast<double>(std::numeric_limits<To>::min());
    if (v >= kHi) return std::numeric_limits<To>::max();
    if (v <= kLo) return std::numeric_limits<To>::min();
    return static_cast<To>(v);  // truncates toward zero
  } else {
    return static_cast<To>(x);  // integer widening/narrowing (modular), int -> float, float <-> double
  }
}

// ---- argument checks --------------------------------------------------------------------------

/// "[2, 3], [3] -> [2, 3]": the call's shapes, for error messages.
std::string ShapesOf(const KernelCall& call);

/// Throw INVALID_ARGUMENT naming the op, device and shapes, followed by `what`.
[[noreturn]] void Invalid(const KernelCall& call, const std::string& what);

// The checks below are inline: a valid call (nearly every call) costs a few compares, with no call into
// the library; only a failing one calls the out-of-line function that finds the fault and throws the
// message. Every kernel keeps its checks whoever calls it (the core's dispatcher, a plugin test through
// the ABI, another framework).

/// Throws the INVALID_ARGUMENT of a CheckArity that failed.
[[noreturn]] void ArityError(const KernelCall& call, int inputs, int outputs);
/// Throws the INVALID_ARGUMENT of a CheckDTypes that failed.
[[noreturn]] void DTypesError(const KernelCall& call, std::initializer_list<int32_t> dtypes);
/// Throws the INVALID_ARGUMENT of a CheckSameShape that failed.
[[noreturn]] void SameShapeError(const KernelCall& call, const TensorRef& t, const TensorRef& ref, const char* what);

/// Require `inputs` inputs and `outputs` outputs, each of rank 0..OAR_MAX_RANK with no negative extent or
/// stride.
inline void CheckArity(const KernelCall& call, int inputs, int outputs) {
  if (call.num_inputs() != inputs || call.num_outputs() != outputs) [[unlikely]] {
    ArityError(call, inputs, outputs);
  }
  for (int i = 0; i < inputs + outputs; ++i) {
    const TensorRef t = i < inputs ? call.input(i) : call.output(i - inputs);
    const int rank = t.rank();
    if (rank < 0 || rank > OAR_MAX_RANK) [[unlikely]] ArityError(call, inputs, outputs);
    int64_t sign = 0;  // negative when any extent or stride is
    for (int d = 0; d < rank; ++d) sign |= t.dim(d) | t.stride(d);
    if (sign < 0) [[unlikely]] ArityError(call, inputs, outputs);
  }
}

/// Require the dtypes of the inputs then the outputs to be `dtypes` (the kernel's key).
inline void CheckDTypes(const KernelCall& call, std::initializer_list<int32_t> dtypes) {
  int i = 0;
  for (int32_t want : dtypes) {
    const int32_t got = i < call.num_inputs() ? call.input(i).dtype() : call.output(i - call.num_inputs()).dtype();
    if (got != want) [[unlikely]] DTypesError(call, dtypes);
    ++i;
  }
}

/// Require `t` to have exactly `ref`'s rank and shape.
inline void CheckSameShape(const KernelCall& call, const TensorRef& t, const TensorRef& ref, const char* what) {
  bool same = t.rank() == ref.rank();
  for (int d = 0; same && d < t.rank(); ++d) same = t.dim(d) == ref.dim(d);
  if (!same) [[unlikely]] SameShapeError(call, t, ref, what);
}

/// Require the output `t` to be row-major contiguous.
void CheckContiguous(const KernelCall& call, const TensorRef& t, const char* what);

/// Throw OUT_OF_RANGE naming the op, device and shapes, followed by `what`.
[[noreturn]] void OutOfRange(const KernelCall& call, const std::string& what);

/// "[1, 0, 2]".
std::string IndexString(std::span<const int64_t> index);

// ---- attributes (every attribute of the op's schema is present: a missing one is INVALID_ARGUMENT) --

/// An INT (or BOOL) attribute.
int64_t RequireInt(const KernelCall& call, const char* name);
/// A FLOAT (or INT) attribute.
double RequireFloat(const KernelCall& call, const char* name);
/// A BOOL (or INT) attribute.
bool RequireBool(const KernelCall& call, const char* name);
/// An INTS attribute with exactly `count` entries.
std::span<const int64_t> RequireInts(const KernelCall& call, const char* name, size_t count);
/// The INT attribute `name` as an axis of a rank-`rank` tensor: in [0, rank), or 0 when rank is 0 (a
/// scalar is treated as one element along axis 0).
int RequireAxis(const KernelCall& call, const char* name, int rank);

/// The numeric attribute `name` (FLOAT, INT or BOOL, whichever the caller used) converted to T with the
/// cast rules.
template <typename T>
T NumberAttr(const KernelCall& call, const char* name) {
  const oar_attr_t* attr = call.FindAttr(name);
  if (attr == nullptr) Invalid(call, "missing attribute '" + std::string(name) + "'");
  switch (attr->type) {
    case OAR_ATTR_FLOAT:
      return Convert<T>(attr->v.f);
    case OAR_ATTR_INT:
      return Convert<T>(attr->v.i);
    case OAR_ATTR_BOOL:
      return Convert<T>(attr->v.b);
    default:
      Invalid(call, "attribute '" + std::string(name) + "' must be a number (INT or FLOAT), got attribute type " +
                        std::to_string(attr->type));
  }
}

}  // namespace oar::host

#endif  // OAR_PLUGINS_COMMON_KERNEL_UTIL_H_
