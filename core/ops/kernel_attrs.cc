#include "core/ops/kernel_attrs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/base/error.h"

namespace oar::ops {

DType KernelValueDType(const OpSchema& s, DType first_input, DType first_output) {
  return s.kind == OpKind::kFill || s.inputs.empty() ? first_output : first_input;
}

int64_t IntegralValue(double v, DType dtype) {
  if (dtype == DType::kBool) return v != 0 ? 1 : 0;
  if (std::isnan(v)) return 0;
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  switch (dtype) {
    case DType::kInt8: lo = std::numeric_limits<int8_t>::min(), hi = std::numeric_limits<int8_t>::max(); break;
    case DType::kUInt8: lo = 0, hi = std::numeric_limits<uint8_t>::max(); break;
    case DType::kInt32: lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max(); break;
    default: break;  // int64
  }
  // 2^63 is exactly representable as a double; the int64 bounds themselves are not.
  if (v >= 9223372036854775808.0) return hi;
  if (v < -9223372036854775808.0) return lo;
  return std::clamp(static_cast<int64_t>(v), lo, hi);
}

runtime::KernelAttr ToKernelAttr(const OpSchema& s, size_t i, const AttrValue& v, DType value_dtype) {
  runtime::KernelAttr a;
  a.name = s.attrs[i].name.data();  // schema names are string literals: NUL-terminated
  switch (s.attrs[i].type) {
    case OAR_ATTR_INT: a.value = std::get<int64_t>(v); break;
    case OAR_ATTR_BOOL: a.value = std::get<bool>(v); break;
    case OAR_ATTR_FLOAT:
      if (!IsFloating(value_dtype) && s.attrs[i].name == "value") {
        a.value = IntegralValue(std::get<double>(v), value_dtype);
      } else {
        a.value = std::get<double>(v);
      }
      break;
    case OAR_ATTR_INTS: a.value = std::span<const int64_t>(std::get<std::vector<int64_t>>(v)); break;
    default: Throw(ErrorCode::kInternal, "{}: unsupported attribute type {}", s.name, s.attrs[i].type);
  }
  return a;
}

}  // namespace oar::ops
