// Runtime compilation for CINN behind the compiler sub-ABI (compiler.h): NVRTC -> PTX loaded through the
// CUDA runtime's library API (cuda), hiprtc -> code object loaded as a HIP module (hip). Kernels must be
// declared extern "C" so that get_function finds them by their source name.
#ifndef OAR_PLUGINS_GPU_COMMON_RTC_H_
#define OAR_PLUGINS_GPU_COMMON_RTC_H_

#include "oar/plugin/plugin.h"

namespace oar::gpu {

/// The compiler table (compiler.h). Compiling works without a device; loading needs one.
const oar_compiler_api_t* CompilerApi();

}  // namespace oar::gpu

#endif  // OAR_PLUGINS_GPU_COMMON_RTC_H_
