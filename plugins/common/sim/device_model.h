// The published model of a simulated device (its attributes) and the time model built on it: every
// kernel, copy and collective gets a simulated duration from a roofline (max of compute time at the
// dtype's peak and memory time at the device's bandwidth, plus a fixed launch overhead). Durations
// feed the per-stream simulated clocks and the profiler records (oar_activity_t, simulated = true).
#ifndef OAR_PLUGINS_COMMON_SIM_DEVICE_MODEL_H_
#define OAR_PLUGINS_COMMON_SIM_DEVICE_MODEL_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "oar/plugin/plugin.h"

namespace oar::sim {

struct DeviceModel {
  std::string name;    ///< "name" attribute
  std::string vendor;  ///< "vendor" attribute
  int64_t compute_units = 1;
  int64_t local_memory_per_unit = 0;  ///< bytes of on-chip memory per compute unit
  double peak_flops_f32 = 1e12;
  double peak_flops_f16 = 1e12;
  double peak_flops_bf16 = 1e12;
  double memory_bandwidth = 1e11;       ///< device memory, bytes/s
  double host_link_bandwidth = 2.5e10;  ///< h2d / d2h, bytes/s
  double peer_bandwidth = 5e10;         ///< p2p and collectives, bytes/s
  double launch_overhead_ns = 2000;     ///< fixed cost of every kernel
  double copy_overhead_ns = 1000;       ///< fixed cost of every copy
  int64_t alignment = 64;
  bool deterministic = true;  ///< "deterministic" attribute: kernels are bitwise reproducible
  std::vector<int64_t> dtypes;                       ///< "dtypes" attribute
  std::map<std::string, int64_t> extra_ints;         ///< more INT attributes
  std::map<std::string, std::string> extra_strings;  ///< more STRING attributes

  /// Peak FLOP/s for arithmetic in `dtype` (f32 for every dtype without its own figure).
  double PeakFlops(int32_t dtype) const;
};

/// Work and simulated time of one queued item.
struct Cost {
  double flops = 0;
  uint64_t bytes = 0;
  double duration_ns = 0;
};

/// Arithmetic per element of an op that is neither matmul nor convolution: 0 for data movement
/// (copy, cast, fill, gather, ...), 8 for transcendental functions and normalisations, 1 otherwise.
double FlopsPerElement(std::string_view op);
/// Roofline cost of a kernel call (descriptors' shapes and dtypes; data pointers are not read):
/// matmul 2*M*N*K per batch, conv2d 2 * output elements * weight elements per output channel, any
/// other op FlopsPerElement * the largest operand's elements; bytes = every operand's elements once.
Cost KernelCost(const DeviceModel& model, const oar_kernel_call_t& call);
/// Roofline from explicit figures.
Cost Roofline(const DeviceModel& model, double flops, uint64_t bytes, double peak_flops);
/// `direction` is "h2d", "d2h", "d2d", "p2p" or "memset".
Cost CopyCost(const DeviceModel& model, const char* direction, uint64_t bytes);

/// Element count of a descriptor's logical shape.
int64_t NumElements(const oar_tensor_desc_t& d);

/// Activity records of one device, gathered while started. Thread-safe.
class Profiler {
 public:
  void Start();
  void Stop();
  bool enabled() const;
  void Record(const std::string& name, int32_t kind, int32_t device, uint64_t start_ns, uint64_t end_ns, uint64_t bytes,
              double flops);
  /// Deliver every record in completion order and forget them.
  void Flush(oar_activity_sink_t sink, void* context);

 private:
  struct Entry {
    std::string name;
    int32_t kind;
    int32_t device;
    uint64_t start_ns, end_ns, bytes;
    double flops;
  };
  mutable std::mutex mu_;
  bool enabled_ = false;
  std::vector<Entry> entries_;
};

}  // namespace oar::sim

#endif  // OAR_PLUGINS_COMMON_SIM_DEVICE_MODEL_H_
