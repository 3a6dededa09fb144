#include "core/tensor/dtype.h"

#include <string>

#include "core/base/error.h"

namespace oar {

DType ParseDType(std::string_view name) {
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"float32", DType::kFloat32}, {"f32", DType::kFloat32},   {"float", DType::kFloat32},
      {"float64", DType::kFloat64}, {"f64", DType::kFloat64},   {"double", DType::kFloat64},
      {"float16", DType::kFloat16}, {"f16", DType::kFloat16},   {"fp16", DType::kFloat16},
      {"half", DType::kFloat16},    {"bfloat16", DType::kBFloat16}, {"bf16", DType::kBFloat16},
      {"int8", DType::kInt8},       {"uint8", DType::kUInt8},   {"int32", DType::kInt32},
      {"int64", DType::kInt64},     {"bool", DType::kBool},
  };
  for (const Alias& a : kAliases) {
    if (a.name == name) return a.dtype;
  }
  Throw(ErrorCode::kInvalidArgument,
        "unknown dtype '{}'; expected one of float32, float64, float16, bfloat16, int8, uint8, int32, "
        "int64, bool",
        name);
}

}  // namespace oar
