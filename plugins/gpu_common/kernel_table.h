// The kernel table of the GPU plugins: which (op, dtypes) keys run on the device, the kernel function
// behind them, and the `supports` answer.
#ifndef OAR_PLUGINS_GPU_COMMON_KERNEL_TABLE_H_
#define OAR_PLUGINS_GPU_COMMON_KERNEL_TABLE_H_

#include "oar/plugin/plugin.h"

namespace oar::gpu {

/// The kernel table (kernel.h).
const oar_kernel_api_t* KernelApi();

}  // namespace oar::gpu

#endif  // OAR_PLUGINS_GPU_COMMON_KERNEL_TABLE_H_
