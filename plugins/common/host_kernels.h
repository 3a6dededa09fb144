// Host kernels shared by the in-tree plugins: CPU implementations of the kernel ABI (docs/ops.md).
//
// Every kernel has the ABI signature `oar_status_t* fn(const oar_kernel_call_t*)`, reads and writes
// host memory through the descriptors' data pointers, runs to completion before it returns (it ignores
// `call->stream`) and reports errors as statuses created through oar::sdk::Host(). A plugin whose device
// memory is host memory (cpu) registers them as they are; a simulator can wrap them (translate the data
// pointers, then call `fn`) by walking HostKernels().
//
// Thread-safety: every kernel may run concurrently with any other on different tensors. Kernels use
// OpenMP for large tensors and never nest parallel regions.
#ifndef OAR_PLUGINS_COMMON_HOST_KERNELS_H_
#define OAR_PLUGINS_COMMON_HOST_KERNELS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "oar/plugin/kernel.h"

namespace oar::host {

/// The longest key a host kernel has: `concat` of 15 inputs plus its output (the host's limit too).
inline constexpr int kMaxHostKeyDTypes = 16;

/// One registrable kernel: its key (op, dtypes of inputs then outputs, PLAIN format) and function.
struct HostKernel {
  const char* op;                                 ///< Static string, e.g. "add".
  std::array<int32_t, kMaxHostKeyDTypes> dtypes;  ///< The first `num_dtypes` entries are the key's dtypes.
  int32_t num_dtypes;
  oar_kernel_fn_t fn;

  std::span<const int32_t> key_dtypes() const { return {dtypes.data(), static_cast<size_t>(num_dtypes)}; }
};

/// Every kernel of the library, in registration order. Built once; valid for the process.
std::span<const HostKernel> HostKernels();

/// The kernel registered under (op, dtypes), or nullptr.
const HostKernel* FindHostKernel(std::string_view op, std::span<const int32_t> dtypes);

/// Which keys to register: return false to skip (op, dtypes).
using KernelFilter = std::function<bool(std::string_view op, std::span<const int32_t> dtypes)>;

/// Register every kernel of HostKernels() that `filter` accepts (an empty filter accepts all) through
/// oar::sdk::Host()->register_kernel. Only valid inside oar_kernel_api_t.register_kernels. Throws
/// oar::sdk::StatusError when the host refuses a definition (call it inside oar::sdk::Guard).
void RegisterHostKernels(oar_kernel_registrar_t* registrar, const KernelFilter& filter = {});

}  // namespace oar::host

#endif  // OAR_PLUGINS_COMMON_HOST_KERNELS_H_
