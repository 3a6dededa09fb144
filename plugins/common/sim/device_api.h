// The ABI tables of a simulated device: oar_device_api_t and oar_profiler_api_t whose slots forward to
// Simulator::Get(). A simulator plugin puts these in its oar_plugin_api_t; every slot is guarded (no
// exception crosses the ABI) and validates its device ordinal, handles and pointers.
#ifndef OAR_PLUGINS_COMMON_SIM_DEVICE_API_H_
#define OAR_PLUGINS_COMMON_SIM_DEVICE_API_H_

#include "oar/plugin/plugin.h"

namespace oar::sim {

/// Static tables, valid for the process.
const oar_device_api_t* DeviceApi();
const oar_profiler_api_t* ProfilerApi();

}  // namespace oar::sim

#endif  // OAR_PLUGINS_COMMON_SIM_DEVICE_API_H_
