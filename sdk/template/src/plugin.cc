// template_device — the plugin table and the one exported symbol.
//
// How the host loads a plugin (oar/plugin/plugin.h has the full sequence):
//  1. dlopen, then look up `oar_plugin_get_api` — the only symbol the library exports (add_oar_plugin
//     hides everything else with a linker version script).
//  2. oar_plugin_get_api(host, &api): OAR_DEFINE_PLUGIN below stores `host` (so oar::sdk::Host() works
//     from then on, never before), refuses a host of another major version naming both versions, and
//     returns kApi. No device work happens here.
//  3. The host checks kApi: major version, every struct_size, the name, the required slots. A
//     mismatch refuses the plugin with a reason shown by `oar devices` (and logged at
//     OAR_LOG_LEVEL=debug).
//  4. initialize(), then kernel->register_kernels(registrar), then device_count / device_attributes.
#include "template_device.h"

namespace template_device {
namespace {

oar_status_t* Initialize() {
  return oar::sdk::Guard([] {
    // VENDOR: load and initialise your driver here. Fail only when the plugin cannot work at all (the
    // driver is too old, its library is corrupt); "no device present" is device_count's business.
    oar::sdk::Log(OAR_LOG_DEBUG, kName, "initialised");
  });
}

void Shutdown() { StopAllStreams(); }

const oar_plugin_api_t kApi = [] {
  oar_plugin_api_t p{};
  p.struct_size = OAR_PLUGIN_API_STRUCT_SIZE;  // what this plugin was compiled against
  p.abi_major = OAR_PLUGIN_ABI_MAJOR;
  p.abi_minor = OAR_PLUGIN_ABI_MINOR;
  p.name = kName;
  p.version = "0.1.0";          // VENDOR: your plugin's own version
  p.vendor = "Example Vendor";  // VENDOR: who ships it
  p.initialize = Initialize;
  p.shutdown = Shutdown;
  p.device = DeviceApi();
  p.kernel = KernelApi();
  p.format = nullptr;    // optional: private storage formats (docs/vendor-guide.md, "Storage formats")
  p.ccl = nullptr;       // optional: collectives
  p.compiler = nullptr;  // optional: runtime compilation for CINN
  p.profiler = nullptr;  // optional: activity records
  return p;
}();

}  // namespace
}  // namespace template_device

OAR_DEFINE_PLUGIN(&template_device::kApi)
