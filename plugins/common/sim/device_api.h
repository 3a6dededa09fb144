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

/// The compiler table (C modules, plugins/common/c_compiler.h) launching on the simulator's streams.
const oar_compiler_api_t* CompilerApi(const char* plugin_name);

/// The kernel table of a simulator: its registration function and the simulator's shared `supports`.
oar_kernel_api_t MakeKernelApi(oar_status_t* (*register_kernels)(oar_kernel_registrar_t*));

/// The plugin table every simulator exposes: the shared device, CCL and profiler tables plus what differs
/// per simulator (name, version, bring-up, kernels, optional storage formats). Pointers must be static.
oar_plugin_api_t MakePluginApi(const char* name, const char* version, oar_status_t* (*initialize)(),
                               const oar_kernel_api_t* kernel, const oar_format_api_t* format);

}  // namespace oar::sim

#endif  // OAR_PLUGINS_COMMON_SIM_DEVICE_API_H_
