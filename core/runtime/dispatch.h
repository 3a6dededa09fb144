// Kernel launch: pick the device's kernel for (op, dtypes, format), or fall back to the cpu plugin
// (copying inputs over and results back) when the device has none and fallback is allowed.
#ifndef OAR_CORE_RUNTIME_DISPATCH_H_
#define OAR_CORE_RUNTIME_DISPATCH_H_

#include <functional>
#include <span>

#include "core/tensor/tensor.h"
#include "oar/plugin/kernel.h"

namespace oar::runtime {

/// Run op `op_id` (see InternOp) on `device`. `outputs` are already allocated on `device`; `attrs` are the
/// op's attributes. Every failure is an oar::Error naming the op, the dtypes and the device.
void Launch(Device device, int op_id, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
            std::span<const oar_attr_t> attrs);

/// Sees every Launch on this thread while it is installed (the conformance runner uses it to name the
/// kernel that broke a guard region and the unclaimed kernel a case needs). `done` is false just before
/// the kernel is chosen and true once it has been enqueued (not run: streams are asynchronous).
using LaunchObserver = std::function<void(Device device, int op_id, std::span<const Tensor> inputs,
                                          std::span<const Tensor> outputs, bool done)>;

/// Installs `observer` for Launches on the calling thread until destroyed (nesting restores the outer one).
class ScopedLaunchObserver {
 public:
  explicit ScopedLaunchObserver(LaunchObserver observer);
  ~ScopedLaunchObserver();
  ScopedLaunchObserver(const ScopedLaunchObserver&) = delete;
  ScopedLaunchObserver& operator=(const ScopedLaunchObserver&) = delete;

 private:
  LaunchObserver observer_;
  const LaunchObserver* previous_;
};

}  // namespace oar::runtime

#endif  // OAR_CORE_RUNTIME_DISPATCH_H_
