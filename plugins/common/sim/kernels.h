// Kernels of a simulated device. Every registered kernel has the same ABI function, LaunchKernel,
// with a SimKernel as its kernel_data. A launch:
//  1. checks the device (loss, device_lost faults), the stream handle and the call (SupportsKernel);
//  2. deep-copies the call — descriptors, shapes, strides, attributes with their string and list
//     payloads — because the host's struct is only valid during the call;
//  3. translates every data pointer from the device address space to the shadow mapping, refusing a
//     range that is not inside one live allocation of the device (INVALID_ARGUMENT, at launch);
//  4. decides launch faults, estimates the simulated duration and enqueues the work on the stream.
// The worker then runs the SimKernel: its `run` function, or by default the host kernel `host_fn` on
// the translated call. Failures there are asynchronous: they become the stream's sticky error.
#ifndef OAR_PLUGINS_COMMON_SIM_KERNELS_H_
#define OAR_PLUGINS_COMMON_SIM_KERNELS_H_

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "oar/plugin/plugin.h"
#include "plugins/common/sim/device_model.h"

namespace oar::sim {

struct SimKernel;

/// Runs on the stream's worker with host (shadow) data pointers; throws sdk::StatusError on failure.
using KernelRunFn = void (*)(const SimKernel& kernel, const oar_kernel_call_t& call);
/// Simulated cost of a call (data pointers are not read).
using KernelCostFn = Cost (*)(const SimKernel& kernel, const DeviceModel& model, const oar_kernel_call_t& call);
/// "" when the kernel can run this call, otherwise the reason (data pointers may be NULL).
using KernelSupportsFn = std::string (*)(const SimKernel& kernel, const oar_kernel_call_t& call);

struct SimKernel {
  std::string op;
  std::vector<int32_t> dtypes;        ///< key: inputs then outputs
  int32_t format = OAR_FORMAT_PLAIN;  ///< key: the inputs' storage format
  oar_kernel_fn_t host_fn = nullptr;  ///< the host kernel the default run calls
  KernelRunFn run = nullptr;          ///< custom execution (tiling, cube unit, format casts)
  KernelCostFn cost = nullptr;        ///< custom time model; default KernelCost (roofline)
  /// Extra support rules, checked after the generic ones (ranks, dtypes against the key, and unless
  /// `checks_formats`: every input in `format`, every output in `format` or PLAIN if `outputs_plain`).
  KernelSupportsFn supports = nullptr;
  bool outputs_plain = false;   ///< outputs are PLAIN whatever the key's format
  bool checks_formats = false;  ///< `supports` checks the descriptors' formats itself
};

/// A plugin's kernels, at stable addresses (they are the kernel_data the host hands back).
class KernelSet {
 public:
  SimKernel& Add(SimKernel kernel);
  /// Add every host kernel (plugins/common) that `filter` accepts, run as they are on the worker.
  void AddHostKernels(const std::function<bool(std::string_view op, std::span<const int32_t> dtypes)>& filter);
  /// The kernel with this key, or nullptr.
  SimKernel* Find(std::string_view op, std::span<const int32_t> dtypes, int32_t format = OAR_FORMAT_PLAIN);
  std::deque<SimKernel>& kernels() { return kernels_; }
  /// Register every kernel through the host (inside register_kernels; throws StatusError).
  void Register(oar_kernel_registrar_t* registrar) const;

 private:
  std::deque<SimKernel> kernels_;
};

/// The kernel function of every simulated kernel (kernel_data = const SimKernel*).
oar_status_t* LaunchKernel(const oar_kernel_call_t* call);
/// The oar_kernel_api_t.supports slot: UNIMPLEMENTED with the reason when the kernel declines.
oar_status_t* SupportsKernel(const oar_kernel_call_t* query);
/// The generic and kernel-specific support rules: "" = supported.
std::string SupportReason(const SimKernel& kernel, const oar_kernel_call_t& call);

/// Bytes of device memory a tensor in a private format occupies (set by plugins that have private
/// formats; without it, a launch with a non-PLAIN descriptor is refused).
using StorageBytesFn = size_t (*)(int32_t format, int32_t dtype, int32_t rank, const int64_t* shape);
void SetStorageBytesFn(StorageBytesFn fn);
/// Bytes a descriptor spans from its data pointer (PLAIN: from shape and strides); 0 when empty.
size_t DescriptorSpanBytes(const oar_tensor_desc_t& d);

/// Run the host kernel `fn` on `call` and throw its status as sdk::StatusError.
void RunHostKernel(oar_kernel_fn_t fn, const oar_kernel_call_t& call);

/// A deep copy of a kernel call; descriptors can be edited (data pointers, shapes) in place.
class OwnedCall {
 public:
  explicit OwnedCall(const oar_kernel_call_t& call);
  OwnedCall(const OwnedCall&) = delete;
  OwnedCall& operator=(const OwnedCall&) = delete;

  const oar_kernel_call_t& call() const { return call_; }
  oar_tensor_desc_t& input(int i) { return inputs_[i]; }
  oar_tensor_desc_t& output(int i) { return outputs_[i]; }

 private:
  void CopyDesc(const oar_tensor_desc_t& from, oar_tensor_desc_t* to, size_t slot);

  std::string op_;
  std::vector<oar_tensor_desc_t> inputs_, outputs_;
  std::vector<std::array<int64_t, OAR_MAX_RANK>> shapes_, strides_;  // inputs then outputs
  std::vector<oar_attr_t> attrs_;
  std::deque<std::string> strings_;  // attribute names and string values
  std::deque<std::vector<int64_t>> ints_;
  std::deque<std::vector<double>> floats_;
  oar_kernel_call_t call_{};
};

}  // namespace oar::sim

#endif  // OAR_PLUGINS_COMMON_SIM_KERNELS_H_
