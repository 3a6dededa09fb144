// The Level Zero side of the plugin: drivers and devices, memory with statistics, pooled events,
// streams on immediate command lists with host callbacks, and the kernel module built from the
// embedded SPIR-V.
//
// Ordering: Level Zero 1.x does not promise that the commands of one command list run in order, so a
// Stream appends a barrier after every command; the stream is then an in-order queue as the ABI wants.
// Synchronisation points are barriers that signal a pooled, host-visible event ("markers").
//
// Host callbacks: Level Zero has no host-function command. A callback appends "signal A" then "wait on
// B" to the list; the stream's callback thread waits for A on the host, runs the function and signals
// B from the host (zeEventHostSignal), so the callback runs after the earlier work and before any later
// work, in enqueue order.
#ifndef OAR_PLUGINS_LEVEL_ZERO_RUNTIME_H_
#define OAR_PLUGINS_LEVEL_ZERO_RUNTIME_H_

#include <level_zero/ze_api.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "oar/plugin/plugin.h"
#include "plugins/level_zero/ops.h"

namespace oar::level_zero {

class Device;

/// A host-visible event from a device's pool; it goes back to the pool (reset) with its last reference.
using EventRef = std::shared_ptr<struct PooledEvent>;
struct PooledEvent {
  ze_event_handle_t handle = nullptr;
};

/// Grows in pools of kEventsPerPool host-visible events.
class EventPool {
 public:
  explicit EventPool(Device& device) : device_(device) {}
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  EventRef Acquire();

 private:
  static constexpr uint32_t kEventsPerPool = 128;
  Device& device_;
  std::mutex mu_;
  std::vector<ze_event_pool_handle_t> pools_;
  std::vector<ze_event_handle_t> free_;
};

/// An oar stream: one asynchronous immediate command list, in order through barriers.
class Stream {
 public:
  explicit Stream(Device& device);
  ~Stream();  // waits for pending work and callbacks, then destroys the list
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  /// Append one command: `append(list)` returns the ze_result_t of the zeCommandListAppend* call named
  /// `call`; a barrier follows. `keep` stays alive until the stream has passed the command.
  template <typename Fn>
  void Append(const char* call, Fn&& append, std::shared_ptr<void> keep = nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    AppendLocked(call, append(list_), std::move(keep));
  }
  /// Block until everything enqueued so far (host callbacks included) has completed.
  void Synchronize();
  /// True when everything enqueued so far has completed.
  bool Query();
  /// A fresh event signalled once the work enqueued so far has completed.
  EventRef Record();
  /// Later work waits for `event`.
  void WaitEvent(const EventRef& event);
  /// Run fn(user_data) on the callback thread after the work enqueued so far, before later work.
  void AddCallback(oar_host_fn_t fn, void* user_data);
  Device& device() { return device_; }

 private:
  struct Callback {
    EventRef reached;  // signalled by the device when the stream gets there
    EventRef done;     // signalled by the host after fn ran
    oar_host_fn_t fn;
    void* user_data;
  };
  void AppendLocked(const char* call, ze_result_t appended, std::shared_ptr<void> keep);
  /// Marker barrier after the work so far (mu_ held); returns it and the keep-alive sequence number
  /// below which everything is complete once the marker is signalled.
  std::pair<EventRef, uint64_t> MarkerLocked();
  void Release(uint64_t upto);
  void CallbackLoop();

  Device& device_;
  ze_command_list_handle_t list_ = nullptr;
  std::mutex mu_;
  std::deque<std::pair<uint64_t, std::shared_ptr<void>>> keep_;  // resources of commands not known complete
  uint64_t next_seq_ = 0;
  EventRef last_marker_;  // valid while no command was appended after it
  std::mutex cb_mu_;
  std::condition_variable cb_cv_;
  std::deque<Callback> callbacks_;
  bool stop_ = false;
  std::thread cb_thread_;  // started by the first callback
};

/// An oar event: the marker of its latest record (none: never recorded, already complete).
struct Event {
  std::mutex mu;
  EventRef current;
};

/// One GPU of a Level Zero driver, with its context, module and bookkeeping.
class Device {
 public:
  Device(int32_t ordinal, ze_driver_handle_t driver, ze_device_handle_t device);
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  int32_t ordinal() const { return ordinal_; }
  /// "level_zero:0 (Intel(R) Arc(TM) A770 Graphics)", for messages.
  const std::string& where() const { return where_; }
  ze_context_handle_t context() const { return context_; }
  ze_device_handle_t handle() const { return device_; }
  uint32_t compute_ordinal() const { return compute_ordinal_; }
  const std::vector<oar_attr_t>& attributes() const { return attrs_; }
  uint32_t max_groups(int dim) const { return max_groups_[dim]; }
  EventPool& events() { return events_; }

  // ---- memory (statistics kept here: Level Zero has no per-process usage query) ----------------------
  void* Malloc(size_t size);
  void Free(void* ptr);
  void* HostMalloc(size_t size);
  void HostFree(void* ptr);
  /// A pinned host buffer of `size` bytes freed when the last reference goes (copy staging).
  std::shared_ptr<void> Staging(size_t size);
  /// True when `ptr` is a Level Zero (USM) allocation of this context, false for plain host memory.
  bool IsUsm(const void* ptr) const;
  /// True when [ptr, ptr + size) lies inside one allocation of Malloc.
  bool OwnsRange(const void* ptr, size_t size);
  void Stats(oar_memory_stats_t* stats);

  // ---- streams ------------------------------------------------------------------------------------
  Stream* CreateStream();
  void DestroyStream(Stream* s);
  /// `s` if this device created it and has not destroyed it; INVALID_ARGUMENT otherwise.
  Stream& Checked(oar_stream_t s);
  Event* CreateEvent();
  void DestroyEvent(Event* e);
  Event& Checked(oar_event_t e);
  /// Wait for every stream of the device.
  void Synchronize();
  /// The stream synchronous copies use (after Synchronize()).
  Stream& sync_stream() { return *sync_stream_; }

  // ---- kernels ------------------------------------------------------------------------------------
  struct Kernel {
    ze_kernel_handle_t handle = nullptr;
    std::mutex mu;  // arguments are per handle state: set and append under one lock
  };
  /// Enqueue kernel `name` of the embedded module on `stream` (builds the module on first use).
  void Launch(Stream& stream, const std::string& name, std::span<const KernelArg> args, const Grid& grid);
  /// Enqueue `kernel` (of any module) on `stream`: group size, arguments and the launch under its lock.
  /// `what` names it in messages.
  void Launch(Stream& stream, Kernel& kernel, std::span<const KernelArg> args, const Grid& grid,
              const std::string& what);
  /// A module built by zeModuleCreate from `spirv` (checked against the device's SPIR-V version first);
  /// `what` names it in messages, which carry the driver's build log.
  ze_module_handle_t CreateModule(const void* spirv, size_t size, const std::string& what);

 private:
  Kernel& GetKernel(const std::string& name);
  void BuildModule();

  int32_t ordinal_;
  ze_driver_handle_t driver_;
  ze_device_handle_t device_;
  ze_context_handle_t context_ = nullptr;
  std::string where_;
  std::string name_;
  std::string vendor_;
  std::vector<int64_t> dtypes_;
  std::vector<oar_attr_t> attrs_;
  uint32_t compute_ordinal_ = 0;
  uint32_t max_groups_[3] = {1, 1, 1};
  uint64_t total_memory_ = 0;
  EventPool events_{*this};

  std::mutex mem_mu_;
  std::map<const void*, size_t> allocations_;  // ordered: OwnsRange finds the one below an address
  uint64_t in_use_ = 0, peak_ = 0;

  std::mutex streams_mu_;
  // Shared so that Synchronize() can wait on a stream another thread is destroying.
  std::map<Stream*, std::shared_ptr<Stream>> streams_;
  std::set<Event*> events_live_;
  std::unique_ptr<Stream> sync_stream_;

  std::mutex module_mu_;
  ze_module_handle_t module_ = nullptr;
  std::map<std::string, std::unique_ptr<Kernel>> kernels_;
};

/// The driver: opens the Level Zero loader (ze_loader.h), zeInit once, then every GPU of every Level Zero
/// driver as devices 0 .. count-1.
class Runtime {
 public:
  static Runtime& Get();
  /// Number of devices; with none, the reason: why the loader could not be opened, or the failed call in
  /// Level Zero's words (empty when there are devices).
  int32_t count() const { return static_cast<int32_t>(devices_.size()); }
  const std::string& unavailable_reason() const { return reason_; }
  /// Device `ordinal`, or INVALID_ARGUMENT naming it.
  Device& device(int32_t ordinal);

 private:
  Runtime();
  std::vector<std::unique_ptr<Device>> devices_;
  std::string reason_;
};

}  // namespace oar::level_zero

#endif  // OAR_PLUGINS_LEVEL_ZERO_RUNTIME_H_
