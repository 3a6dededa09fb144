// Run profile: per (device type, op) how often an op ran, how long its dispatch took on the host, how
// long the device says it ran (measured or simulated, from the plugin's profiler sub-ABI), how often it
// fell back to cpu and how often a private-format kernel ran it. `oar train --profile` prints it.
#ifndef OAR_CORE_RUNTIME_PROFILER_H_
#define OAR_CORE_RUNTIME_PROFILER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace oar::runtime {

class DeviceType;

/// How a launch was served.
enum class LaunchPath { kDevice, kPrivateFormat, kFallback };

class Profiler {
 public:
  struct Row {
    std::string device_type, name;  // op name, or a copy/memset activity ("h2d", "d2h", ...)
    uint64_t calls = 0;             // launches seen by the core (0 for device-only activities)
    uint64_t host_ns = 0;           // wall time in dispatch: launch, conversions, fallback copies
    uint64_t device_ns = 0;         // the device's own time for the activity
    uint64_t device_records = 0;    // activities the device reported under this name
    bool simulated = false;         // device_ns comes from a device model
    uint64_t fallbacks = 0;
    uint64_t private_format = 0;
  };

  /// One activity as a device reported it.
  struct Activity {
    std::string device;  // "kunlun_sim:0"
    std::string name;    // op name or copy direction
    int32_t kind = 0;    // oar_activity_kind
    uint64_t start_ns = 0, end_ns = 0, bytes = 0;
    bool simulated = false;
  };

  /// The process-wide profiler.
  static Profiler& Get();
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  /// Clear, then record every launch and ask each device with a profiler table to record activities.
  void Start();
  /// Stop, collect the devices' activities, and return rows sorted by device type, then host+device time.
  std::vector<Row> Stop();
  /// Every activity the last Stop collected, per device in its completion order (devices in load order).
  std::vector<Activity> activities() const;
  /// Called by dispatch for every launch while enabled.
  void RecordLaunch(const DeviceType& type, int op_id, uint64_t host_ns, LaunchPath path);

 private:
  std::atomic<bool> enabled_{false};
  mutable std::mutex mutex_;
  std::vector<Activity> activities_;
  std::map<std::pair<std::string, std::string>, Row> rows_;
};

/// The rows as a fixed-width table, with a totals line per device type.
std::string FormatProfile(const std::vector<Profiler::Row>& rows);

}  // namespace oar::runtime

#endif  // OAR_CORE_RUNTIME_PROFILER_H_
