// Collectives behind the CCL sub-ABI (ccl.h): NCCL for cuda, RCCL for hip (same API, nccl* names). Only
// built when the library is found (OAR_GPU_HAVE_CCL); otherwise the plugin has no CCL table.
#ifndef OAR_PLUGINS_GPU_COMMON_CCL_H_
#define OAR_PLUGINS_GPU_COMMON_CCL_H_

#include "oar/plugin/plugin.h"

namespace oar::gpu {

/// The CCL table, or NULL when the plugin was built without NCCL/RCCL.
const oar_ccl_api_t* CclApi();

}  // namespace oar::gpu

#endif  // OAR_PLUGINS_GPU_COMMON_CCL_H_
