// The plugin table of the GPU plugins: `cuda` (OAR_GPU_CUDA) and `hip` (OAR_GPU_HIP) are this one source
// compiled twice against the vendor shim. Nothing touches the device while loading: without a driver
// the plugin still loads, and device_count reports why there is no device.
#include "oar/plugin/plugin.h"

#include "oar/plugin/cpp/status.hpp"
#include "plugins/gpu_common/blas.h"
#include "plugins/gpu_common/ccl.h"
#include "plugins/gpu_common/kernel_table.h"
#include "plugins/gpu_common/rtc.h"
#include "plugins/gpu_common/runtime.h"

#ifndef OAR_VERSION_STRING
#error "OAR_VERSION_STRING must be defined by the build"
#endif

namespace oar::gpu {
namespace {

oar_status_t* Initialize() { return nullptr; }  // the runtime initialises lazily on the first device call

void Shutdown() { ShutdownBlas(); }

const oar_plugin_api_t kApi = [] {
  oar_plugin_api_t p{};
  p.struct_size = OAR_PLUGIN_API_STRUCT_SIZE;
  p.abi_major = OAR_PLUGIN_ABI_MAJOR;
  p.abi_minor = OAR_PLUGIN_ABI_MINOR;
  p.name = OAR_GPU_NAME;
  p.version = OAR_VERSION_STRING;
  p.vendor = "Oar";
  p.initialize = Initialize;
  p.shutdown = Shutdown;
  p.device = DeviceApi();
  p.kernel = KernelApi();
  p.ccl = CclApi();
  p.compiler = CompilerApi();
  return p;
}();

}  // namespace
}  // namespace oar::gpu

OAR_DEFINE_PLUGIN(&oar::gpu::kApi)
