// Runtime: discovers and loads plugins, knows every device, owns each device's allocator and compute
// stream, and launches kernels (with CPU fallback). This folder is the only code that touches ABI structs.
//
// Discovery order: plugins named explicitly (Options::plugin_files, CLI --plugin), then OAR_PLUGIN_PATH
// (':'-separated files or folders), then <prefix>/lib/oar/plugins next to the running binary. Every
// candidate and every skip reason is logged at OAR_LOG_LEVEL=debug; refusals are kept for `oar devices`.
// A duplicate device type is refused naming both files. A broken plugin never stops the others.
#ifndef OAR_CORE_RUNTIME_RUNTIME_H_
#define OAR_CORE_RUNTIME_RUNTIME_H_

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/runtime/allocator.h"
#include "core/runtime/plugin.h"
#include "core/tensor/device.h"

namespace oar::runtime {

/// A typed device attribute copied out of the plugin.
struct AttrValue {
  std::string name;
  int32_t type = 0;  // oar_attr_type
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  /// Human-readable value ("16 GiB" style is left to the printer).
  std::string ToString() const;
};

class DeviceType;

/// One device: its plugin ordinal, attributes, allocator and compute stream.
class DeviceContext {
 public:
  DeviceContext(DeviceType* type, int ordinal);
  ~DeviceContext();

  Device device() const { return device_; }
  int ordinal() const { return ordinal_; }
  DeviceType& type() const { return *type_; }
  const Plugin& plugin() const;
  const oar_device_api_t* api() const;
  const std::vector<AttrValue>& attributes() const { return attributes_; }
  const AttrValue* FindAttribute(std::string_view name) const;
  /// Device pointers are host pointers (the "host_accessible" attribute).
  bool host_accessible() const { return host_accessible_; }
  CachingAllocator& allocator() { return *allocator_; }
  /// The stream every kernel, async copy and allocation of the core goes to on the calling thread: the one
  /// a runtime::ScopedStream made current, else the default stream.
  oar_stream_t stream();
  /// The device's own compute stream (created on first use).
  oar_stream_t default_stream();
  /// Block until all work on the device has finished.
  void Synchronize();
  /// Plugin-reported memory stats (fields the plugin does not report stay unset).
  struct MemoryStats {
    std::optional<uint64_t> bytes_in_use, peak_bytes_in_use, bytes_limit, num_allocs;
  };
  MemoryStats PluginMemoryStats();

 private:
  DeviceType* type_;
  int ordinal_;
  Device device_;
  std::vector<AttrValue> attributes_;
  bool host_accessible_ = false;
  std::unique_ptr<CachingAllocator> allocator_;
  std::once_flag stream_once_;
  oar_stream_t stream_ = nullptr;
};

/// Every device of one plugin, plus its kernel table and fallback counters.
class DeviceType {
 public:
  DeviceType(std::unique_ptr<Plugin> plugin);
  const std::string& name() const { return plugin_->name(); }
  const Plugin& plugin() const { return *plugin_; }
  int device_count() const { return static_cast<int>(devices_.size()); }
  /// Why the plugin reports no devices ("" when it has some or gave no reason).
  const std::string& unavailable_reason() const { return unavailable_reason_; }
  DeviceContext& device(int ordinal) { return *devices_[ordinal]; }

  /// Number of ops that ran on cpu instead, per op name.
  std::map<std::string, uint64_t> FallbackCounts() const;
  uint64_t RecordFallback(int op_id);  // returns the new count for that op

  /// How often the device's private storage formats were used (see dispatch.cc).
  struct FormatStats {
    uint64_t kernel_calls = 0;      // ops run by a private-format kernel
    uint64_t casts_to_private = 0;  // PLAIN -> private conversions (shadows made)
    uint64_t casts_to_plain = 0;    // private -> PLAIN conversions (outputs made PLAIN)
  };
  FormatStats format_stats() const;
  void RecordFormatCast(bool to_private) { (to_private ? casts_to_private_ : casts_to_plain_)++; }
  void RecordPrivateFormatCall() { private_format_calls_++; }

 private:
  std::unique_ptr<Plugin> plugin_;
  std::vector<std::unique_ptr<DeviceContext>> devices_;
  std::string unavailable_reason_;
  mutable std::mutex fallback_mutex_;
  std::map<int, uint64_t> fallbacks_;
  std::atomic<uint64_t> private_format_calls_{0}, casts_to_private_{0}, casts_to_plain_{0};
};

class Runtime {
 public:
  struct Options {
    std::vector<std::filesystem::path> plugin_files;  // loaded first, in order
    bool use_env_path = true;                         // OAR_PLUGIN_PATH
    bool use_default_dir = true;                      // <prefix>/lib/oar/plugins
  };
  /// A discovered candidate file and what happened to it.
  struct Candidate {
    std::filesystem::path path;
    std::string source;  // "explicit", "OAR_PLUGIN_PATH", "default"
    bool loaded = false;
    std::string reason;  // refusal reason when !loaded
  };

  explicit Runtime(const Options& options);
  ~Runtime();

  /// The process-wide runtime, created on first use with default options (or those given to
  /// Configure). Never destroyed (tensors with static lifetime may outlive everything else).
  static Runtime& Get();
  /// Set the options of the global runtime; throws kFailedPrecondition once it exists.
  static void Configure(const Options& options);
  /// If the global runtime exists, wait until every device is idle (errors are logged, not thrown).
  /// Programs should call this before returning from main: asynchronous plugins may otherwise still run
  /// kernels while the process tears down the libraries those kernels use. A program that does not is
  /// covered by the runtime's own exit handler, which does the same but waits at most
  /// OAR_EXIT_DRAIN_TIMEOUT_S seconds (default 10, 0 = not at all), so a hung device cannot hang exit.
  static void DrainAtExit();

  const std::vector<Candidate>& candidates() const { return candidates_; }
  const std::vector<std::unique_ptr<DeviceType>>& device_types() const { return types_; }
  /// Every device, in plugin-load order.
  std::vector<Device> devices() const;
  /// The device context for `device`; throws kNotFound naming the available devices.
  DeviceContext& Context(Device device) {
    if (device.type_id() >= 0 && static_cast<size_t>(device.type_id()) < by_type_id_.size()) {
      DeviceType* t = by_type_id_[device.type_id()];
      if (t != nullptr && device.index() < t->device_count()) return t->device(device.index());
    }
    ThrowUnknownDevice(device);
  }
  DeviceType* FindType(std::string_view name) const;
  /// OAR_DEVICE when set (validated), else cpu:0.
  Device DefaultDevice();
  /// "cpu:0, kunlun_sim:0, kunlun_sim:1".
  std::string AvailableDevicesString() const;
  /// OAR_STRICT_DEVICE=1 or SetStrict(true): a missing kernel is an error instead of a CPU fallback.
  bool strict() const { return strict_.load(std::memory_order_relaxed); }
  void SetStrict(bool strict) { strict_.store(strict); }

 private:
  [[noreturn]] void ThrowUnknownDevice(Device device) const;
  void Consider(const std::filesystem::path& path, const std::string& source);

  std::vector<Candidate> candidates_;
  std::vector<std::unique_ptr<DeviceType>> types_;
  std::vector<DeviceType*> by_type_id_;  // indexed by Device::type_id
  std::atomic<bool> strict_{false};
  std::optional<Device> default_device_;
  std::mutex default_mutex_;
};

/// Make `stream` (nullptr: the default again) the calling thread's current stream of `ctx`'s device;
/// returns the previous one (nullptr: the default). runtime::ScopedStream is the safe way to use it.
oar_stream_t SetCurrentStream(DeviceContext& ctx, oar_stream_t stream);

/// The folder <prefix>/lib/oar/plugins of the running core: beside the shared runtime library
/// (<libdir>/oar/plugins), whichever program loaded it; bin/../lib/oar/plugins when the runtime is linked
/// statically into the program.
std::filesystem::path DefaultPluginDir();

}  // namespace oar::runtime

#endif  // OAR_CORE_RUNTIME_RUNTIME_H_
