// Kernel launch for calls whose shapes are fixed ahead of time (the scheduler's planned instructions): the
// kernel, the ABI attributes and the plugin's supports() verdict are resolved once, on the first call, and
// later calls with the same operand layouts go straight to the kernel. Anything else — another layout, a
// device that runs the op in a private storage format or falls back to cpu, the profiler enabled — takes
// runtime::Launch, so results and errors are the same either way. Launches made here are not seen by a
// ScopedLaunchObserver (only eager code is observed).
#ifndef OAR_CORE_RUNTIME_PREPARED_LAUNCH_H_
#define OAR_CORE_RUNTIME_PREPARED_LAUNCH_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/runtime/dispatch.h"
#include "core/tensor/tensor.h"
#include "oar/plugin/kernel.h"

namespace oar::runtime {

struct KernelEntry;
class DeviceContext;

/// One kernel call prepared for one device and op; the attributes are copied in (INTS payloads too).
/// Thread-safe: any number of threads may launch one PreparedKernel at once.
class PreparedKernel {
 public:
  PreparedKernel(Device device, int op_id, std::span<const KernelAttr> attrs);
  PreparedKernel(const PreparedKernel&) = delete;
  PreparedKernel& operator=(const PreparedKernel&) = delete;

  /// Run the op on the current stream of the device, as runtime::Launch(device, op_id, inputs, outputs,
  /// attrs) does (`outputs` already allocated on the device).
  void Launch(std::span<const Tensor> inputs, std::span<const Tensor> outputs) const;

  /// Calls that went straight to the kernel, and calls that took runtime::Launch (for tests).
  uint64_t direct_calls() const { return direct_.load(std::memory_order_relaxed); }
  uint64_t general_calls() const { return general_.load(std::memory_order_relaxed); }

 private:
  struct Direct;  // the kernel and the layout supports() accepted
  const Direct* Resolve(std::span<const Tensor> inputs, std::span<const Tensor> outputs) const;

  Device device_;
  int op_id_ = -1;
  DeviceContext* ctx_ = nullptr;
  std::vector<std::vector<int64_t>> lists_;  // INTS payloads
  std::vector<KernelAttr> attrs_;            // for runtime::Launch
  std::vector<oar_attr_t> abi_attrs_;        // for the kernel
  mutable std::once_flag once_;            // resolution, on the first call with the profiler off
  mutable std::unique_ptr<Direct> resolved_;  // null after resolution: always runtime::Launch
  mutable std::atomic<uint64_t> direct_{0}, general_{0};

 public:
  ~PreparedKernel();
};

}  // namespace oar::runtime

#endif  // OAR_CORE_RUNTIME_PREPARED_LAUNCH_H_
