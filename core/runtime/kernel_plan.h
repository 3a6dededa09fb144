// Kernel selection ahead of time, for static programs: how an op with a given dtype key and input shapes
// will run on a device — on the device in PLAIN layout, on the device in one of its private storage formats
// (with format casts around it), or on the cpu fallback (with copies both ways). The eager dispatcher makes
// the same decision per call (dispatch.cc); this answers it without tensors, so kernel selection can write
// it into the program. A plugin's supports() query needs real tensors and is still asked at run time.
#ifndef OAR_CORE_RUNTIME_KERNEL_PLAN_H_
#define OAR_CORE_RUNTIME_KERNEL_PLAN_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/tensor/device.h"
#include "core/tensor/dims.h"

namespace oar::runtime {

struct KernelPlan {
  enum class Path { kDevice, kPrivateFormat, kFallback };
  Path path = Path::kDevice;
  /// kPrivateFormat: the format of the inputs and outputs (format casts convert them from and to PLAIN).
  int32_t format = 0;
  /// kFallback: why the device cannot run the op.
  std::string reason;
};

/// Plan op `op` (schema name) on `device` for `dtypes` (inputs then outputs, as the kernel key) and the
/// inputs' shapes (empty spans for shapes that are not static: the device is then not asked about private
/// formats). Throws oar::Error naming the op, dtypes and device when neither the device nor an allowed
/// cpu fallback has a kernel (OAR_STRICT_DEVICE forbids the fallback).
KernelPlan PlanKernel(Device device, std::string_view op, std::span<const int32_t> dtypes,
                      std::span<const std::span<const int64_t>> input_shapes);

/// "plain", "NC1HWC0", "FRACTAL_NZ", or "vendor:<n>".
std::string FormatName(int32_t format);
/// The inverse of FormatName; throws kInvalidArgument for unknown names.
int32_t ParseFormatName(std::string_view name);

}  // namespace oar::runtime

#endif  // OAR_CORE_RUNTIME_KERNEL_PLAN_H_
