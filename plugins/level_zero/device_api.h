// The level_zero plugin's device table and its one kernel entry (device_api.cc).
#ifndef OAR_PLUGINS_LEVEL_ZERO_DEVICE_API_H_
#define OAR_PLUGINS_LEVEL_ZERO_DEVICE_API_H_

#include "oar/plugin/plugin.h"

namespace oar::level_zero {

/// The static device table.
const oar_device_api_t* DeviceApi();

/// The function registered for every kernel key: runs ops.h's Run() on the call's stream.
oar_status_t* LaunchKernel(const oar_kernel_call_t* call);

}  // namespace oar::level_zero

#endif  // OAR_PLUGINS_LEVEL_ZERO_DEVICE_API_H_
