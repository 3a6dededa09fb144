// ze_result_t names and meanings (the descriptions are those of ze_api.h, Level Zero 1.x).
#include "plugins/level_zero/ze_status.h"

#include <cstdio>

#include "oar/plugin/cpp/status.hpp"

namespace oar::level_zero {
namespace {

struct ResultInfo {
  ze_result_t result;
  const char* name;
  const char* meaning;
};

const ResultInfo* Find(ze_result_t r) {
  static constexpr ResultInfo kResults[] = {
      {ZE_RESULT_SUCCESS, "ZE_RESULT_SUCCESS", "success"},
      {ZE_RESULT_NOT_READY, "ZE_RESULT_NOT_READY", "synchronization primitive not signaled"},
      {ZE_RESULT_ERROR_DEVICE_LOST, "ZE_RESULT_ERROR_DEVICE_LOST",
       "device hung, reset, was removed, or driver update occurred"},
      {ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY, "ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY",
       "insufficient host memory to satisfy call"},
      {ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY, "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",
       "insufficient device memory to satisfy call"},
      {ZE_RESULT_ERROR_MODULE_BUILD_FAILURE, "ZE_RESULT_ERROR_MODULE_BUILD_FAILURE",
       "error occurred when building module, see build log for details"},
      {ZE_RESULT_ERROR_MODULE_LINK_FAILURE, "ZE_RESULT_ERROR_MODULE_LINK_FAILURE",
       "error occurred when linking modules, see build log for details"},
      {ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET, "ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET", "device requires a reset"},
      {ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE, "ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE",
       "device currently in low power state"},
      {ZE_RESULT_EXP_ERROR_DEVICE_IS_NOT_VERTEX, "ZE_RESULT_EXP_ERROR_DEVICE_IS_NOT_VERTEX",
       "device is not represented by a fabric vertex"},
      {ZE_RESULT_EXP_ERROR_VERTEX_IS_NOT_DEVICE, "ZE_RESULT_EXP_ERROR_VERTEX_IS_NOT_DEVICE",
       "fabric vertex does not represent a device"},
      {ZE_RESULT_EXP_ERROR_REMOTE_DEVICE, "ZE_RESULT_EXP_ERROR_REMOTE_DEVICE",
       "fabric vertex represents a remote device or subdevice"},
      {ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS, "ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS",
       "access denied due to permission level"},
      {ZE_RESULT_ERROR_NOT_AVAILABLE, "ZE_RESULT_ERROR_NOT_AVAILABLE",
       "resource already in use and simultaneous access not allowed or resource was removed"},
      {ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE, "ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE",
       "external required dependency is unavailable or missing"},
      {ZE_RESULT_WARNING_DROPPED_DATA, "ZE_RESULT_WARNING_DROPPED_DATA", "data may have been dropped"},
      {ZE_RESULT_ERROR_UNINITIALIZED, "ZE_RESULT_ERROR_UNINITIALIZED", "driver is not initialized"},
      {ZE_RESULT_ERROR_UNSUPPORTED_VERSION, "ZE_RESULT_ERROR_UNSUPPORTED_VERSION",
       "generic error code for unsupported versions"},
      {ZE_RESULT_ERROR_UNSUPPORTED_FEATURE, "ZE_RESULT_ERROR_UNSUPPORTED_FEATURE",
       "generic error code for unsupported features"},
      {ZE_RESULT_ERROR_INVALID_ARGUMENT, "ZE_RESULT_ERROR_INVALID_ARGUMENT",
       "generic error code for invalid arguments"},
      {ZE_RESULT_ERROR_INVALID_NULL_HANDLE, "ZE_RESULT_ERROR_INVALID_NULL_HANDLE", "handle argument is not valid"},
      {ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE, "ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE",
       "object pointed to by handle still in-use by device"},
      {ZE_RESULT_ERROR_INVALID_NULL_POINTER, "ZE_RESULT_ERROR_INVALID_NULL_POINTER",
       "pointer argument may not be nullptr"},
      {ZE_RESULT_ERROR_INVALID_SIZE, "ZE_RESULT_ERROR_INVALID_SIZE",
       "size argument is invalid (e.g., must not be zero)"},
      {ZE_RESULT_ERROR_UNSUPPORTED_SIZE, "ZE_RESULT_ERROR_UNSUPPORTED_SIZE",
       "size argument is not supported by the device (e.g., too large)"},
      {ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT, "ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT",
       "alignment argument is not supported by the device (e.g., too small)"},
      {ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT, "ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT",
       "synchronization object in invalid state"},
      {ZE_RESULT_ERROR_INVALID_ENUMERATION, "ZE_RESULT_ERROR_INVALID_ENUMERATION", "enumerator argument is not valid"},
      {ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION, "ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION",
       "enumerator argument is not supported by the device"},
      {ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT, "ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT",
       "image format is not supported by the device"},
      {ZE_RESULT_ERROR_INVALID_NATIVE_BINARY, "ZE_RESULT_ERROR_INVALID_NATIVE_BINARY",
       "native binary is not supported by the device"},
      {ZE_RESULT_ERROR_INVALID_GLOBAL_NAME, "ZE_RESULT_ERROR_INVALID_GLOBAL_NAME",
       "global variable is not found in the module"},
      {ZE_RESULT_ERROR_INVALID_KERNEL_NAME, "ZE_RESULT_ERROR_INVALID_KERNEL_NAME",
       "kernel name is not found in the module"},
      {ZE_RESULT_ERROR_INVALID_FUNCTION_NAME, "ZE_RESULT_ERROR_INVALID_FUNCTION_NAME",
       "function name is not found in the module"},
      {ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION, "ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION",
       "group size dimension is not valid for the kernel or device"},
      {ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION, "ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION",
       "global width dimension is not valid for the kernel or device"},
      {ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX, "ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX",
       "kernel argument index is not valid for kernel"},
      {ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE, "ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE",
       "kernel argument size does not match kernel"},
      {ZE_RESULT_ERROR_INVALID_KERNEL_ATTRIBUTE_VALUE, "ZE_RESULT_ERROR_INVALID_KERNEL_ATTRIBUTE_VALUE",
       "value of kernel attribute is not valid for the kernel or device"},
      {ZE_RESULT_ERROR_INVALID_MODULE_UNLINKED, "ZE_RESULT_ERROR_INVALID_MODULE_UNLINKED",
       "module with imports needs to be linked before kernels can be created from it."},
      {ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE, "ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE",
       "command list type does not match command queue type"},
      {ZE_RESULT_ERROR_OVERLAPPING_REGIONS, "ZE_RESULT_ERROR_OVERLAPPING_REGIONS",
       "copy operations do not support overlapping regions of memory"},
      {ZE_RESULT_WARNING_ACTION_REQUIRED, "ZE_RESULT_WARNING_ACTION_REQUIRED",
       "an action is required to complete the desired operation"},
      {ZE_RESULT_ERROR_UNKNOWN, "ZE_RESULT_ERROR_UNKNOWN", "unknown or internal error"},
  };
  for (const ResultInfo& info : kResults) {
    if (info.result == r) return &info;
  }
  return nullptr;
}

std::string Hex(ze_result_t r) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%x", static_cast<unsigned>(r));
  return buf;
}

}  // namespace

std::string ResultName(ze_result_t r) {
  const ResultInfo* info = Find(r);
  return info == nullptr ? "unknown ze_result_t " + Hex(r) : std::string(info->name) + " (" + Hex(r) + ")";
}

std::string ResultMeaning(ze_result_t r) {
  const ResultInfo* info = Find(r);
  return info == nullptr ? "not a result code of Level Zero 1.x" : info->meaning;
}

oar_status_code StatusCodeOf(ze_result_t r) {
  switch (r) {
    case ZE_RESULT_SUCCESS:
      return OAR_STATUS_OK;
    case ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY:
    case ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY:
      return OAR_STATUS_RESOURCE_EXHAUSTED;
    case ZE_RESULT_ERROR_UNINITIALIZED:
    case ZE_RESULT_ERROR_DEVICE_LOST:
    case ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET:
    case ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE:
    case ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE:
      return OAR_STATUS_UNAVAILABLE;
    case ZE_RESULT_ERROR_UNSUPPORTED_VERSION:
    case ZE_RESULT_ERROR_UNSUPPORTED_FEATURE:
    case ZE_RESULT_ERROR_UNSUPPORTED_SIZE:
    case ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT:
    case ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION:
      return OAR_STATUS_UNIMPLEMENTED;
    case ZE_RESULT_ERROR_INVALID_ARGUMENT:
    case ZE_RESULT_ERROR_INVALID_NULL_HANDLE:
    case ZE_RESULT_ERROR_INVALID_NULL_POINTER:
    case ZE_RESULT_ERROR_INVALID_SIZE:
      return OAR_STATUS_INVALID_ARGUMENT;
    default:
      return OAR_STATUS_INTERNAL;
  }
}

std::string Describe(ze_result_t r, const char* call, const std::string& where) {
  return std::string(call) + (where.empty() ? "" : " on " + where) + ": " + ResultName(r) + ": " + ResultMeaning(r);
}

void Check(ze_result_t r, const char* call, const std::string& where) {
  if (r != ZE_RESULT_SUCCESS) throw sdk::StatusError(StatusCodeOf(r), Describe(r, call, where));
}

}  // namespace oar::level_zero
