// Device runtime of the GPU plugins on the vendor shim: error conversion, device enumeration, and the
// registries that turn ABI stream/event handles into vendor handles. Shared by cuda and hip (compiled
// once per vendor).
#ifndef OAR_PLUGINS_GPU_COMMON_RUNTIME_H_
#define OAR_PLUGINS_GPU_COMMON_RUNTIME_H_

#include <string>

#include "oar/plugin/plugin.h"
#include "plugins/gpu_common/vendor.h"

#define OAR_GPU_STR_(x) #x
/// The vendor's name of a shimmed API, e.g. OAR_GPU_API_NAME(gpuMalloc) is "cudaMalloc" or "hipMalloc".
#define OAR_GPU_API_NAME(fn) OAR_GPU_STR_(fn)
/// Call a vendor API and throw a StatusError naming the call, the device and the vendor's words.
#define OAR_GPU_CHECK(device, fn, ...) ::oar::gpu::Check(fn(__VA_ARGS__), OAR_GPU_API_NAME(fn), (device))

namespace oar::gpu {

/// Throw StatusError(code, "<plugin>: message").
[[noreturn]] void Fail(oar_status_code code, const std::string& message);

/// The status code for a vendor error: RESOURCE_EXHAUSTED for out of memory, UNAVAILABLE for a missing
/// driver or device, INVALID_ARGUMENT for invalid values, INTERNAL otherwise.
oar_status_code StatusCodeOf(gpuError_t error);

/// "<api> on device <d> failed: <vendor string> (<vendor error name>)".
std::string DescribeError(gpuError_t error, const char* api, int32_t device);

/// Throw unless `error` is success. Clears the vendor's (non-sticky) last-error state first.
void Check(gpuError_t error, const char* api, int32_t device);

/// Number of usable devices (0 when the runtime or driver is missing) and, when 0, why.
int32_t DeviceCount();
const std::string& NoDeviceReason();

/// INVALID_ARGUMENT unless 0 <= device < DeviceCount(); then makes it the calling thread's device.
void UseDevice(int32_t device);

/// The vendor stream behind an ABI handle created by this plugin for `device`; INVALID_ARGUMENT for
/// unknown handles or handles of another device.
gpuStream_t NativeStream(int32_t device, oar_stream_t stream);

/// The device table (device.h).
const oar_device_api_t* DeviceApi();

}  // namespace oar::gpu

#endif  // OAR_PLUGINS_GPU_COMMON_RUNTIME_H_
