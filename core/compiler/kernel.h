// A cinn.group made runnable on one device: analysed, lowered for the device's compiler language,
// generated, compiled through the plugin's compiler table (modules shared by every group with the same
// source on that device) and launched on the caller's stream. A compile error runs the group unfused (its
// ops one kernel each, on the device); a device with no usable compiler runs it on the loop-IR
// interpreter on host copies. Both are logged once per device and reason and counted in CinnStats.
#ifndef OAR_CORE_COMPILER_KERNEL_H_
#define OAR_CORE_COMPILER_KERNEL_H_

#include <memory>
#include <string>

#include "core/compiler/lower.h"
#include "core/ir/operation.h"
#include "core/scheduler/op_runner.h"

namespace oar::compiler {

/// The scheduler::OpCompiler of cinn.group (registered by RegisterCinn).
std::shared_ptr<const scheduler::CompiledOp> CompileGroupOp(const ir::Operation& group, Device device);

/// What CompileGroupOp decides for `group` on `device`, for tests and DescribeKernels.
struct GroupPlan {
  LoweredGroup lowered;
  std::string language;  ///< "c", "cuda", "hip", or "" when the device has no usable compiler
  std::string source;    ///< the generated source ("" without a language)
};
GroupPlan PlanGroup(const ir::Operation& group, Device device);

}  // namespace oar::compiler

#endif  // OAR_CORE_COMPILER_KERNEL_H_
