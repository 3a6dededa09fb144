// What one executor run did, per instruction: the device and stream it ran on, when the host issued it
// and, where the device reports activities (the simulators' time model), when the device ran it. Derived
// figures: how much copy time overlapped compute, and the peak device memory of the run. Printed as a table
// (`oar predict --profile`, `oar train --static --profile`) and written as Chrome trace-event JSON
// (`--trace FILE`, viewable in Perfetto or chrome://tracing).
#ifndef OAR_CORE_SCHEDULER_PROFILE_H_
#define OAR_CORE_SCHEDULER_PROFILE_H_

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace oar::scheduler {

struct InstructionProfile {
  int index = 0;            ///< position in the executor's instruction list
  std::string name;         ///< "kernel.matmul", "kernel.transfer", ...
  std::string device;       ///< "kunlun_sim:0"
  std::string stream;       ///< "compute" or "copy" (the executor's streams of that device), or "host"
  bool copy = false;        ///< moves bytes between devices
  uint64_t host_start_ns = 0, host_end_ns = 0;  ///< issue on the host, from the run's start
  /// The device's own record of the work (simulated time on the simulators; only differences matter).
  std::optional<uint64_t> device_start_ns, device_end_ns;
  bool simulated = false;
};

struct RunProfile {
  std::vector<InstructionProfile> instructions;
  uint64_t host_total_ns = 0;
  /// Per device: the most memory the run held from the device at once (the caching allocator's reserved
  /// segments: caches and fragmentation included, as the device's own tools would show it).
  std::map<std::string, uint64_t> peak_device_memory;
  /// Per device: the most bytes the run's tensors and arena held at once (the allocator's allocated blocks,
  /// no cache), and the arena of the run's memory plan (0 for a run without one).
  std::map<std::string, uint64_t> peak_allocated_memory, arena_bytes;
  /// Outputs the run wrote into donated inputs' bytes (ExecutorOptions::donate).
  uint64_t donated_outputs = 0;
  /// Per device with device times: copy time, and the part of it that ran while a compute instruction of
  /// the same device ran too.
  std::map<std::string, uint64_t> copy_ns, hidden_copy_ns;

  /// Fill copy_ns / hidden_copy_ns from the instructions' device times.
  void ComputeOverlap();
  /// The per-instruction table, the overlap per device and one `peak device memory: ...` line per device.
  std::string Format() const;
  /// Chrome trace-event JSON: one complete ("X") event per instruction, host issue times under a "host"
  /// process and device times under one process per device, a thread per stream.
  std::string ChromeTrace() const;
  /// Write ChromeTrace() to `path`; throws oar::Error naming the path when it cannot.
  void WriteChromeTrace(const std::filesystem::path& path) const;
};

/// `peak device memory: <bytes> bytes on <device>` — the line eager and static runs both print.
std::string PeakMemoryLine(uint64_t bytes, const std::string& device);

}  // namespace oar::scheduler

#endif  // OAR_CORE_SCHEDULER_PROFILE_H_
