// The simulator shared by kunlun_sim and ascend_sim: a set of devices, each with its own memory
// space, streams, events, profiler and loss state, plus the fault injector, built from a PluginSpec
// and the environment (config.h). Each plugin module links its own copy of this static library (all
// symbols hidden), so "the" simulator below is per plugin even when both plugins share a process.
//
// The ABI tables that forward to it are in device_api.h; kernels, collectives and formats build on
// the accessors here.
#ifndef OAR_PLUGINS_COMMON_SIM_SIMULATOR_H_
#define OAR_PLUGINS_COMMON_SIM_SIMULATOR_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "oar/plugin/plugin.h"
#include "plugins/common/sim/config.h"
#include "plugins/common/sim/device_model.h"
#include "plugins/common/sim/faults.h"
#include "plugins/common/sim/memory.h"
#include "plugins/common/sim/stream.h"

namespace oar::sim {

/// What a plugin tells the simulator about itself.
struct PluginSpec {
  std::string name;        ///< device type, e.g. "kunlun_sim"
  std::string env_prefix;  ///< e.g. "OAR_KUNLUN_SIM": reads <prefix>_MEMORY and <prefix>_DEVICES
  DeviceModel model;
};

/// An event: the marker of its most recent record (null: never recorded, hence complete).
struct SimEvent {
  std::mutex mu;
  std::shared_ptr<Marker> latest;
};

class Simulator;

/// One simulated device.
class SimDevice final : public StreamOwner {
 public:
  SimDevice(Simulator* sim, int32_t ordinal);
  ~SimDevice() override;

  int32_t ordinal() const { return ordinal_; }
  const std::string& where() const override { return where_; }
  DeviceMemory& memory() { return memory_; }
  Profiler& profiler() { return profiler_; }
  const DeviceModel& model() const;
  const std::vector<oar_attr_t>& attributes() const { return attrs_; }

  // ---- streams and events: live-handle registries -------------------------------------------
  oar_stream_t CreateStream();
  /// Removes the stream, runs what it has queued, stops it; returns its unreported sticky error.
  std::optional<SimError> DestroyStream(oar_stream_t handle);
  /// The live stream behind `handle`; throws INVALID_ARGUMENT for an unknown one.
  std::shared_ptr<Stream> GetStream(oar_stream_t handle);
  oar_event_t CreateEvent();
  void DestroyEvent(oar_event_t handle);
  std::shared_ptr<SimEvent> GetEvent(oar_event_t handle);

  /// Wait for the work enqueued so far on every stream (except the calling worker's own), then take
  /// every stream's sticky error: the first one, naming how many more there were.
  std::optional<SimError> Synchronize();
  /// Wait like Synchronize without taking errors (free uses it: a block may still be in use).
  void WaitIdle();
  /// The latest simulated time of any stream of the device.
  uint64_t LatestClock();
  /// Account a synchronous operation of `duration_ns` after everything queued: returns its start.
  uint64_t AdvanceClock(double duration_ns);

  // ---- loss -------------------------------------------------------------------------------------
  bool lost() const { return lost_.load(std::memory_order_acquire); }
  void MarkLost(const std::string& why);
  /// Throw UNAVAILABLE naming `operation` when the device is lost.
  void CheckAlive(const std::string& operation) const;

  // ---- StreamOwner ------------------------------------------------------------------------------
  std::optional<SimError> LostError(const std::string& operation) const override;
  void Completed(const Work& work, uint64_t start_ns, uint64_t end_ns) override;
  uint64_t ClockFloor() const override { return clock_floor_.load(std::memory_order_acquire); }

 private:
  std::vector<std::shared_ptr<Stream>> LiveStreams();

  Simulator* const sim_;
  const int32_t ordinal_;
  const std::string where_;
  DeviceMemory memory_;
  Profiler profiler_;
  std::vector<oar_attr_t> attrs_;
  std::vector<std::string> attr_strings_;  // storage for STRING attribute values (reserved up front)

  std::mutex mu_;
  std::unordered_map<Stream*, std::shared_ptr<Stream>> streams_;
  std::unordered_map<SimEvent*, std::shared_ptr<SimEvent>> events_;
  uint64_t next_stream_id_ = 0;
  std::atomic<uint64_t> clock_floor_{0};

  std::atomic<bool> lost_{false};
  mutable std::mutex lost_mu_;
  std::string lost_reason_;
};

class Simulator {
 public:
  /// Read the environment and bring up the devices; the plugin's initialize calls it once. Throws
  /// StatusError (INVALID_ARGUMENT for a malformed variable) and leaves no simulator behind then.
  static void Initialize(const PluginSpec& spec);
  /// The initialised simulator; throws FAILED_PRECONDITION before Initialize.
  static Simulator& Get();
  /// Stop every stream and release every device (the plugin's shutdown). Safe to call when not
  /// initialised.
  static void Shutdown();

  const PluginSpec& spec() const { return spec_; }
  const SimOptions& options() const { return options_; }
  int32_t device_count() const { return static_cast<int32_t>(devices_.size()); }
  /// The device with this ordinal; throws INVALID_ARGUMENT naming the valid range.
  SimDevice& device(int32_t ordinal);
  FaultInjector& faults() { return faults_; }

  /// Start a device operation (malloc, copy, memset, kernel launch, collective): counts it for
  /// device_lost scenarios and throws UNAVAILABLE when the device is, or thereby becomes, lost.
  void BeginOperation(SimDevice& device, const std::string& operation);
  /// True when `ptr` lies inside any device's address range of this simulator (a host pointer never
  /// does): lets copies refuse a device pointer passed as the host side instead of faulting.
  bool IsDeviceAddress(const void* ptr) const;

 private:
  Simulator(const PluginSpec& spec, SimOptions options);

  PluginSpec spec_;
  SimOptions options_;
  FaultInjector faults_;
  std::vector<std::unique_ptr<SimDevice>> devices_;
};

}  // namespace oar::sim

#endif  // OAR_PLUGINS_COMMON_SIM_SIMULATOR_H_
