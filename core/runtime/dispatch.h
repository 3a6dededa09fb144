// Kernel launch: pick the device's kernel for (op, dtypes, format), or fall back to the cpu plugin
// (copying inputs over and results back) when the device has none and fallback is allowed.
#ifndef OAR_CORE_RUNTIME_DISPATCH_H_
#define OAR_CORE_RUNTIME_DISPATCH_H_

#include <span>

#include "core/tensor/tensor.h"
#include "oar/plugin/kernel.h"

namespace oar::runtime {

/// Run op `op_id` (see InternOp) on `device`. `outputs` are already allocated on `device`; `attrs` are the
/// op's attributes. Every failure is an oar::Error naming the op, the dtypes and the device.
void Launch(Device device, int op_id, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
            std::span<const oar_attr_t> attrs);

}  // namespace oar::runtime

#endif  // OAR_CORE_RUNTIME_DISPATCH_H_
