// The level_zero plugin's kernels as the host side sees them: which keys exist, which calls they can
// run, and how each op is turned into launches of the OpenCL C kernels in kernels/. Nothing here talks
// to Level Zero: launches go through LaunchTarget, which the plugin implements on a Level Zero stream
// (launch.cc) and the pocl test implements on an OpenCL queue, so this code is exercised on the CPU.
#ifndef OAR_PLUGINS_LEVEL_ZERO_OPS_H_
#define OAR_PLUGINS_LEVEL_ZERO_OPS_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "oar/plugin/kernel.h"

namespace oar::level_zero {

/// One kernel argument: a device address (kPointer: `value` IS the address) or `size` bytes copied
/// from `value` (kValue) at launch time.
struct KernelArg {
  enum Kind { kPointer, kValue };
  Kind kind;
  const void* value;
  size_t size;
};

/// Work-groups per dimension and the work-group size.
struct Grid {
  uint32_t groups[3] = {1, 1, 1};
  uint32_t local[3] = {1, 1, 1};
};

/// Where the kernels of one call run, in order.
class LaunchTarget {
 public:
  virtual ~LaunchTarget() = default;
  /// Enqueue kernel `name` with `args` (copied before returning).
  virtual void Launch(const std::string& name, std::span<const KernelArg> args, const Grid& grid) = 0;
  /// Copy device memory to the host once earlier work on the target is done; blocks until copied.
  virtual void ReadToHost(void* dst, const void* src, size_t bytes) = 0;
  /// The most work-groups the target launches along `dim` (0, 1, 2).
  virtual uint32_t MaxGroups(int dim) const = 0;
};

/// A registration key: the op and the dtypes of its inputs then outputs.
struct KernelKey {
  std::string op;
  std::vector<int32_t> dtypes;
};

/// Every key the plugin registers (all in OAR_FORMAT_PLAIN).
const std::vector<KernelKey>& Keys();

/// Empty when a registered kernel can run this call (shapes, strides, attributes), else the reason.
std::string Unsupported(const oar_kernel_call_t& call);

/// Every kernel name Run() may launch; the SPIR-V test checks the embedded module defines each one.
std::vector<std::string> KernelNames();

/// Check `call` against docs/ops.md and enqueue its kernels on `target`. Throws sdk::StatusError.
void Run(const oar_kernel_call_t& call, LaunchTarget& target);

}  // namespace oar::level_zero

#endif  // OAR_PLUGINS_LEVEL_ZERO_OPS_H_
