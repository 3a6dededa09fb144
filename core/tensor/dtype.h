// Element types of tensors. Values equal the ABI's oar_dtype.
#ifndef OAR_CORE_TENSOR_DTYPE_H_
#define OAR_CORE_TENSOR_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "oar/plugin/cpp/dtype.hpp"
#include "oar/plugin/types.h"

namespace oar {

enum class DType : int32_t {
  kInvalid = OAR_DTYPE_INVALID,
  kFloat32 = OAR_DTYPE_FLOAT32,
  kFloat64 = OAR_DTYPE_FLOAT64,
  kFloat16 = OAR_DTYPE_FLOAT16,
  kBFloat16 = OAR_DTYPE_BFLOAT16,
  kInt8 = OAR_DTYPE_INT8,
  kUInt8 = OAR_DTYPE_UINT8,
  kInt32 = OAR_DTYPE_INT32,
  kInt64 = OAR_DTYPE_INT64,
  kBool = OAR_DTYPE_BOOL,
};

using Half = sdk::Half;
using BFloat16 = sdk::BFloat16;

inline size_t DTypeSize(DType t) { return sdk::DTypeSize(static_cast<int32_t>(t)); }
inline std::string_view DTypeName(DType t) { return sdk::DTypeName(static_cast<int32_t>(t)); }
inline bool IsFloating(DType t) { return sdk::IsFloating(static_cast<int32_t>(t)); }
inline bool IsIntegral(DType t) {
  return t == DType::kInt8 || t == DType::kUInt8 || t == DType::kInt32 || t == DType::kInt64;
}
/// "float32" -> kFloat32 (also "f32", "fp16", "bf16", "half"...); throws oar::Error listing the names.
DType ParseDType(std::string_view name);

/// The DType of a C++ element type.
template <typename T> constexpr DType kDTypeOf = DType::kInvalid;
template <> inline constexpr DType kDTypeOf<float> = DType::kFloat32;
template <> inline constexpr DType kDTypeOf<double> = DType::kFloat64;
template <> inline constexpr DType kDTypeOf<Half> = DType::kFloat16;
template <> inline constexpr DType kDTypeOf<BFloat16> = DType::kBFloat16;
template <> inline constexpr DType kDTypeOf<int8_t> = DType::kInt8;
template <> inline constexpr DType kDTypeOf<uint8_t> = DType::kUInt8;
template <> inline constexpr DType kDTypeOf<int32_t> = DType::kInt32;
template <> inline constexpr DType kDTypeOf<int64_t> = DType::kInt64;
template <> inline constexpr DType kDTypeOf<bool> = DType::kBool;

}  // namespace oar

#endif  // OAR_CORE_TENSOR_DTYPE_H_
