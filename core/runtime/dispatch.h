// Kernel launch: pick the device's kernel for (op, dtypes, format), or fall back to the cpu plugin
// (copying inputs over and results back) when the device has none and fallback is allowed.
#ifndef OAR_CORE_RUNTIME_DISPATCH_H_
#define OAR_CORE_RUNTIME_DISPATCH_H_

#include <cstdint>
#include <functional>
#include <span>
#include <variant>

#include "core/tensor/tensor.h"
#include "oar/plugin/kernel.h"

namespace oar::runtime {

/// One attribute of a kernel call as the layers above the runtime give it; Launch hands it to the plugin as
/// the ABI's oar_attr_t (INT, BOOL, FLOAT or INTS by the alternative held). `name` (NUL-terminated) and a
/// list's elements must stay alive for the call.
struct KernelAttr {
  const char* name = "";
  std::variant<int64_t, bool, double, std::span<const int64_t>> value;
};

/// The plugin ABI's form of a kernel attribute (name and an INTS payload point where `a`'s do): what Launch
/// passes, and what kernel selection's supports() query must pass to ask about the same call.
oar_attr_t ToAbiAttr(const KernelAttr& a);

/// At most this many attributes per call.
inline constexpr int kMaxKernelAttrs = 16;

/// Run op `op_id` (see InternOp) on `device`. `outputs` are already allocated on `device`; `attrs` are the
/// op's attributes. Every failure is an oar::Error naming the op, the dtypes and the device.
void Launch(Device device, int op_id, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
            std::span<const KernelAttr> attrs);

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
