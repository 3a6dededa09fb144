// The "level_zero" plugin: Intel GPUs through the Level Zero loader, built only on the SDK.
//
// Kernels are OpenCL C (kernels/*.cl) compiled to SPIR-V at build time, embedded in this library and
// loaded with zeModuleCreate when a device is brought up. Registered keys and the support rule are in
// ops.cc; everything else falls back to cpu in the core. The compiler table (compiler.h) takes CINN's
// OpenCL C and compiles it to SPIR-V with the clang and llvm-spirv found at run time.
//
// The Level Zero loader is opened at run time, not linked (ze_loader.h). Without it (no libze1), or
// without a driver, the plugin still loads and initialises; device_count reports 0 devices and
// UNAVAILABLE with the reason: the loader that could not be opened, or zeInit's result in Level Zero's words.
#include "oar/plugin/cpp/kernel.hpp"
#include "oar/plugin/cpp/status.hpp"
#include "plugins/level_zero/compiler.h"
#include "plugins/level_zero/device_api.h"
#include "plugins/level_zero/ops.h"

#ifndef OAR_VERSION_STRING
#error "OAR_VERSION_STRING must be defined by the build"
#endif

namespace oar::level_zero {
namespace {

using sdk::Guard;

oar_status_t* Initialize() {
  // Nothing can fail here: a missing driver is "no device", reported by device_count.
  return nullptr;
}

oar_status_t* RegisterKernels(oar_kernel_registrar_t* registrar) {
  return Guard([&] {
    for (const KernelKey& key : Keys()) {
      oar_kernel_def_t def{};
      def.struct_size = OAR_KERNEL_DEF_STRUCT_SIZE;
      def.op = key.op.c_str();
      def.dtypes = key.dtypes.data();
      def.num_dtypes = static_cast<int32_t>(key.dtypes.size());
      def.format = OAR_FORMAT_PLAIN;
      def.fn = LaunchKernel;
      oar_status_t* s = sdk::Host()->register_kernel(registrar, &def);
      if (s != nullptr) return s;
    }
    return static_cast<oar_status_t*>(nullptr);
  });
}

oar_status_t* Supports(const oar_kernel_call_t* query) {
  return Guard([&]() -> oar_status_t* {
    if (query == nullptr) return sdk::MakeStatus(OAR_STATUS_INVALID_ARGUMENT, "query must not be NULL");
    const std::string reason = Unsupported(*query);
    return reason.empty() ? nullptr : sdk::MakeStatus(OAR_STATUS_UNIMPLEMENTED, reason);
  });
}

const oar_kernel_api_t kKernelApi = {OAR_KERNEL_API_STRUCT_SIZE, nullptr, RegisterKernels, Supports};

const oar_plugin_api_t* Api() {
  static const oar_plugin_api_t api = [] {
    oar_plugin_api_t a{};
    a.struct_size = OAR_PLUGIN_API_STRUCT_SIZE;
    a.abi_major = OAR_PLUGIN_ABI_MAJOR;
    a.abi_minor = OAR_PLUGIN_ABI_MINOR;
    a.name = "level_zero";
    a.version = OAR_VERSION_STRING;
    a.vendor = "Oar";
    a.initialize = Initialize;
    a.shutdown = nullptr;  // drivers, contexts and modules live until the process ends
    a.device = DeviceApi();
    a.kernel = &kKernelApi;
    a.compiler = CompilerApi();
    return a;
  }();
  return &api;
}

}  // namespace
}  // namespace oar::level_zero

OAR_DEFINE_PLUGIN(oar::level_zero::Api())
