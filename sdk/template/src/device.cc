// template_device — the device table: enumeration, attributes, memory, copies, streams and events.
//
// Every slot follows the same pattern:
//   return Guard([&] { validate the arguments; do the work or enqueue it; });
// Guard (from the SDK) turns a thrown StatusError into the status the host receives, and any other
// exception into INTERNAL, so nothing ever unwinds into the host. The host may call any slot from any
// thread (one stream is only used by one thread at a time), hence the mutexes.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <unordered_map>
#include <vector>

#include "oar/plugin/cpp/kernel.hpp"
#include "template_device.h"

namespace template_device {
namespace {

using oar::sdk::Guard;

constexpr size_t kAlignment = 64;
// VENDOR: report what your device really has. The template refuses allocations beyond this budget with
// RESOURCE_EXHAUSTED, which is how the host's caching allocator learns to empty its cache and retry.
constexpr uint64_t kMemoryCapacity = uint64_t{4} << 30;  // 4 GiB

void CheckOut(const void* out, const char* name) {
  if (out == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, std::string(name) + " must not be NULL");
}

// ===================================================================================================
// Per-device state. Never destroyed: the host may call the plugin until the process ends.
// ===================================================================================================

struct DeviceState {
  std::mutex mu;
  std::map<uintptr_t, size_t> allocations;  // base address -> size, ordered for range lookups
  uint64_t bytes_in_use = 0;
  uint64_t peak_bytes_in_use = 0;
  std::unordered_map<const void*, std::shared_ptr<Stream>> streams;  // handle -> live stream
};

DeviceState& State(int32_t device) {
  CheckDevice(device);
  static auto* states = new DeviceState[kDeviceCount];
  return states[device];
}

/// Every live stream of `device` (copied out so the caller can wait without holding the lock).
std::vector<std::shared_ptr<Stream>> StreamsOf(int32_t device) {
  DeviceState& s = State(device);
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<std::shared_ptr<Stream>> out;
  for (auto& [handle, stream] : s.streams) out.push_back(stream);
  return out;
}

/// Synchronous slots are ordered after all work already enqueued on every stream of the device (the
/// ABI's rule, the same as cudaMemcpy): wait for it first. This also surfaces asynchronous errors.
void DrainDevice(int32_t device) {
  for (const auto& stream : StreamsOf(device)) stream->WaitAll();
}

// ===================================================================================================
// Events: "the work enqueued on a stream up to a point" = (stream, ticket).
// ===================================================================================================

struct Event {
  int32_t device;
  std::shared_ptr<Stream> stream;  // null until recorded: a never-recorded event is complete
  uint64_t ticket = 0;
};

std::mutex events_mu;
auto* events = new std::unordered_map<const void*, std::shared_ptr<Event>>();

std::shared_ptr<Event> GetEvent(int32_t device, oar_event_t handle) {
  CheckDevice(device);
  std::lock_guard<std::mutex> lock(events_mu);
  auto it = events->find(handle);
  if (it == events->end()) Fail(OAR_STATUS_INVALID_ARGUMENT, "unknown or destroyed event handle");
  if (it->second->device != device) {
    Fail(OAR_STATUS_INVALID_ARGUMENT,
         "event belongs to device " + std::to_string(it->second->device) + ", not device " + std::to_string(device));
  }
  return it->second;
}

/// (stream, ticket) captured by the event's latest record, read under the lock (records may race).
std::pair<std::shared_ptr<Stream>, uint64_t> EventTarget(const Event& event) {
  std::lock_guard<std::mutex> lock(events_mu);
  return {event.stream, event.ticket};
}

// ===================================================================================================
// Enumeration and attributes
// ===================================================================================================

oar_status_t* DeviceCount(int32_t* count) {
  return Guard([&] {
    CheckOut(count, "count");
    // VENDOR: ask the driver. If the driver or runtime library is missing, set *count = 0 and return
    // UNAVAILABLE with the driver's own words: the host lists the plugin with that reason. Never fail
    // `initialize` for "no device": that would hide the plugin (and the reason) from `oar devices`.
    *count = kDeviceCount;
  });
}

oar_status_t* DeviceAttributes(int32_t device, const oar_attr_t** attrs, int32_t* num_attrs) {
  return Guard([&] {
    CheckDevice(device);
    CheckOut(attrs, "attrs");
    CheckOut(num_attrs, "num_attrs");
    // The array and everything it points to must stay valid until shutdown: static storage.
    static const int64_t kDTypes[] = {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT64, OAR_DTYPE_INT32, OAR_DTYPE_INT64,
                                      OAR_DTYPE_BOOL};  // every dtype of a kKernels row
    static const oar_attr_t kTable[] = {
        oar::sdk::StringAttr(OAR_DEVICE_ATTR_NAME, "Template Device (host memory, async streams)"),  // REQUIRED
        oar::sdk::StringAttr(OAR_DEVICE_ATTR_VENDOR, "Example Vendor"),                              // REQUIRED
        oar::sdk::IntAttr(OAR_DEVICE_ATTR_TOTAL_MEMORY, static_cast<int64_t>(kMemoryCapacity)),      // REQUIRED
        oar::sdk::IntAttr(OAR_DEVICE_ATTR_COMPUTE_UNITS, 1),
        oar::sdk::IntAttr(OAR_DEVICE_ATTR_ALIGNMENT, kAlignment),
        // false: the host must not dereference device pointers; it copies through memcpy_* instead.
        oar::sdk::BoolAttr(OAR_DEVICE_ATTR_HOST_ACCESSIBLE, false),
        oar::sdk::IntsAttr(OAR_DEVICE_ATTR_DTYPES, kDTypes),
        // Bitwise reproducible kernels (docs/conformance.md, "Determinism"): all of them, except those
        // kKernels marks otherwise. Conformance holds the plugin to it.
        oar::sdk::BoolAttr(oar::sdk::kDeterministicAttr, true),
        oar::sdk::StringAttr(oar::sdk::kNondeterministicKernelsAttr, NondeterministicKernels()),
    };
    *attrs = kTable;
    *num_attrs = static_cast<int32_t>(std::size(kTable));
  });
}

oar_status_t* DeviceSynchronize(int32_t device) {
  return Guard([&] { DrainDevice(device); });
}

// ===================================================================================================
// Memory
// ===================================================================================================

oar_status_t* Malloc(int32_t device, size_t size, void** ptr) {
  return Guard([&] {
    DeviceState& s = State(device);
    CheckOut(ptr, "ptr");
    *ptr = nullptr;
    std::lock_guard<std::mutex> lock(s.mu);
    if (size > kMemoryCapacity - s.bytes_in_use) {
      // RESOURCE_EXHAUSTED (and nothing else) tells the host "free your cache and retry". Say what was
      // asked and what is left: the host adds its own numbers and shows the user both.
      Fail(OAR_STATUS_RESOURCE_EXHAUSTED, "out of device memory: requested " + std::to_string(size) + " bytes, " +
                                              std::to_string(s.bytes_in_use) + " of " +
                                              std::to_string(kMemoryCapacity) + " bytes in use");
    }
    // VENDOR: call your driver's allocator. size 0 still gets a unique pointer here (1 byte).
    const size_t rounded = (std::max<size_t>(size, 1) + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (p == nullptr)
      Fail(OAR_STATUS_RESOURCE_EXHAUSTED, "host allocation of " + std::to_string(size) + " bytes failed");
    s.allocations[reinterpret_cast<uintptr_t>(p)] = size;
    s.bytes_in_use += size;
    s.peak_bytes_in_use = std::max(s.peak_bytes_in_use, s.bytes_in_use);
    *ptr = p;
  });
}

oar_status_t* Free(int32_t device, void* ptr) {
  return Guard([&] {
    State(device);  // validates the ordinal
    if (ptr == nullptr) return;
    // Queued work may still read this block: like cudaFree, wait for the device first (without
    // failing: an earlier asynchronous error is reported by the next synchronisation, not by free).
    for (const auto& stream : StreamsOf(device)) stream->Drain();
    DeviceState& s = State(device);
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == s.allocations.end()) {
      Fail(OAR_STATUS_INVALID_ARGUMENT,
           "free: pointer was not returned by malloc on device " + std::to_string(device) + " or was already freed");
    }
    s.bytes_in_use -= it->second;
    s.allocations.erase(it);
    std::free(ptr);
  });
}

oar_status_t* MemoryStats(int32_t device, oar_memory_stats_t* stats) {
  return Guard([&] {
    DeviceState& s = State(device);
    CheckOut(stats, "stats");
    // The host sets stats->struct_size to the size it knows. Write only fields inside it: a 1.x host
    // always passes at least the 1.0 struct; fields added by later minors need their own check.
    if (stats->struct_size < OAR_MEMORY_STATS_STRUCT_SIZE) {
      Fail(OAR_STATUS_INVALID_ARGUMENT, "memory_stats: stats->struct_size " + std::to_string(stats->struct_size) +
                                            " is smaller than ABI 1.0's " +
                                            std::to_string(OAR_MEMORY_STATS_STRUCT_SIZE));
    }
    std::lock_guard<std::mutex> lock(s.mu);
    stats->bytes_in_use = s.bytes_in_use;
    stats->peak_bytes_in_use = s.peak_bytes_in_use;
    stats->bytes_limit = kMemoryCapacity;
    stats->num_allocs = s.allocations.size();
    stats->bytes_in_use_is_set = stats->peak_bytes_in_use_is_set = true;
    stats->bytes_limit_is_set = stats->num_allocs_is_set = true;
  });
}

}  // namespace

void CheckDeviceRange(int32_t device, const void* ptr, size_t size, const char* what) {
  DeviceState& s = State(device);
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.allocations.upper_bound(p);  // first allocation starting after p
  if (it != s.allocations.begin()) {
    --it;  // the last allocation starting at or before p
    if (p - it->first <= it->second && size <= it->second - (p - it->first)) return;
  }
  Fail(OAR_STATUS_INVALID_ARGUMENT, std::string(what) + ": [" + std::to_string(p) + ", +" + std::to_string(size) +
                                        ") is not inside an allocation of device " + std::to_string(device));
}

namespace {

// ===================================================================================================
// Copies and memset. Synchronous slots drain the device first; *_async slots validate now and
// enqueue the transfer. Host buffers of async copies stay valid until the stream passes the copy:
// that is the host's promise (the ABI says so), so the work may read them later.
// ===================================================================================================

void CheckHostPtr(const void* p, size_t size, const char* what) {
  if (size != 0 && p == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, std::string(what) + " is NULL");
}

oar_status_t* MemcpyH2D(int32_t device, void* dst, const void* src, size_t size) {
  return Guard([&] {
    CheckDevice(device);
    if (size == 0) return;  // nothing to copy: the pointers may be NULL
    CheckDeviceRange(device, dst, size, "memcpy_h2d dst");
    CheckHostPtr(src, size, "memcpy_h2d src");
    DrainDevice(device);
    std::memcpy(dst, src, size);  // VENDOR: a blocking DMA
  });
}

oar_status_t* MemcpyD2H(int32_t device, void* dst, const void* src, size_t size) {
  return Guard([&] {
    CheckDevice(device);
    if (size == 0) return;
    CheckDeviceRange(device, src, size, "memcpy_d2h src");
    CheckHostPtr(dst, size, "memcpy_d2h dst");
    DrainDevice(device);
    std::memcpy(dst, src, size);
  });
}

oar_status_t* MemcpyD2D(int32_t device, void* dst, const void* src, size_t size) {
  return Guard([&] {
    CheckDevice(device);
    if (size == 0) return;
    CheckDeviceRange(device, src, size, "memcpy_d2d src");
    CheckDeviceRange(device, dst, size, "memcpy_d2d dst");
    DrainDevice(device);
    std::memmove(dst, src, size);
  });
}

oar_status_t* Memset(int32_t device, void* dst, uint8_t value, size_t size) {
  return Guard([&] {
    CheckDevice(device);
    if (size == 0) return;
    CheckDeviceRange(device, dst, size, "memset dst");
    DrainDevice(device);
    std::memset(dst, value, size);
  });
}

oar_status_t* MemcpyH2DAsync(int32_t device, oar_stream_t stream, void* dst, const void* src, size_t size) {
  return Guard([&] {
    auto s = GetStream(device, stream);
    if (size == 0) return;
    CheckDeviceRange(device, dst, size, "memcpy_h2d_async dst");
    CheckHostPtr(src, size, "memcpy_h2d_async src");
    s->Enqueue([=] { std::memcpy(dst, src, size); });
  });
}

oar_status_t* MemcpyD2HAsync(int32_t device, oar_stream_t stream, void* dst, const void* src, size_t size) {
  return Guard([&] {
    auto s = GetStream(device, stream);
    if (size == 0) return;
    CheckDeviceRange(device, src, size, "memcpy_d2h_async src");
    CheckHostPtr(dst, size, "memcpy_d2h_async dst");
    s->Enqueue([=] { std::memcpy(dst, src, size); });
  });
}

oar_status_t* MemcpyD2DAsync(int32_t device, oar_stream_t stream, void* dst, const void* src, size_t size) {
  return Guard([&] {
    auto s = GetStream(device, stream);
    if (size == 0) return;
    CheckDeviceRange(device, src, size, "memcpy_d2d_async src");
    CheckDeviceRange(device, dst, size, "memcpy_d2d_async dst");
    s->Enqueue([=] { std::memmove(dst, src, size); });
  });
}

oar_status_t* MemsetAsync(int32_t device, oar_stream_t stream, void* dst, uint8_t value, size_t size) {
  return Guard([&] {
    auto s = GetStream(device, stream);
    if (size == 0) return;
    CheckDeviceRange(device, dst, size, "memset_async dst");
    s->Enqueue([=] { std::memset(dst, value, size); });
  });
}

// ===================================================================================================
// Streams
// ===================================================================================================

oar_status_t* StreamCreate(int32_t device, oar_stream_t* stream) {
  return Guard([&] {
    DeviceState& s = State(device);
    CheckOut(stream, "stream");
    auto created = std::make_shared<Stream>(device);
    std::lock_guard<std::mutex> lock(s.mu);
    // The handle is the object's address, but the host's handle is only ever looked up, never
    // dereferenced: a stale or foreign handle becomes INVALID_ARGUMENT, not a crash.
    *stream = reinterpret_cast<oar_stream_t>(created.get());
    s.streams.emplace(created.get(), std::move(created));
  });
}

oar_status_t* StreamDestroy(int32_t device, oar_stream_t stream) {
  return Guard([&] {
    std::shared_ptr<Stream> victim = GetStream(device, stream);
    {
      DeviceState& s = State(device);
      std::lock_guard<std::mutex> lock(s.mu);
      s.streams.erase(victim.get());
    }
    victim->Stop();  // "waits for the stream's pending work, then releases it"
  });
}

oar_status_t* StreamSynchronize(int32_t device, oar_stream_t stream) {
  return Guard([&] { GetStream(device, stream)->WaitAll(); });
}

oar_status_t* StreamQuery(int32_t device, oar_stream_t stream, bool* idle) {
  return Guard([&] {
    auto s = GetStream(device, stream);
    CheckOut(idle, "idle");
    *idle = s->Done(s->LastTicket());
  });
}

oar_status_t* StreamWaitEvent(int32_t device, oar_stream_t stream, oar_event_t event) {
  return Guard([&] {
    auto s = GetStream(device, stream);
    auto [source, ticket] = EventTarget(*GetEvent(device, event));
    if (source == nullptr || source == s) return;  // never recorded, or already ordered by the stream
    // Later work on `s` waits for the recorded work. Capturing (source, ticket) now means a later
    // re-record of the event does not change what this wait waits for.
    s->Enqueue([source, ticket] { source->Wait(ticket); });
  });
}

oar_status_t* StreamAddCallback(int32_t device, oar_stream_t stream, oar_host_fn_t fn, void* user_data) {
  return Guard([&] {
    auto s = GetStream(device, stream);
    if (fn == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, "stream_add_callback: fn must not be NULL");
    s->Enqueue([fn, user_data] { fn(user_data); });  // runs on the worker thread, after earlier work
  });
}

// ===================================================================================================
// Events
// ===================================================================================================

oar_status_t* EventCreate(int32_t device, oar_event_t* event) {
  return Guard([&] {
    CheckDevice(device);
    CheckOut(event, "event");
    auto created = std::make_shared<Event>(Event{device, nullptr, 0});
    std::lock_guard<std::mutex> lock(events_mu);
    *event = reinterpret_cast<oar_event_t>(created.get());
    events->emplace(created.get(), std::move(created));
  });
}

oar_status_t* EventDestroy(int32_t device, oar_event_t event) {
  return Guard([&] {
    GetEvent(device, event);
    std::lock_guard<std::mutex> lock(events_mu);
    events->erase(event);
  });
}

oar_status_t* EventRecord(int32_t device, oar_event_t event, oar_stream_t stream) {
  return Guard([&] {
    auto e = GetEvent(device, event);
    auto s = GetStream(device, stream);
    const uint64_t ticket = s->LastTicket();  // "the work enqueued on `stream` so far"
    std::lock_guard<std::mutex> lock(events_mu);
    e->stream = std::move(s);
    e->ticket = ticket;
  });
}

oar_status_t* EventQuery(int32_t device, oar_event_t event, bool* complete) {
  return Guard([&] {
    auto [stream, ticket] = EventTarget(*GetEvent(device, event));
    CheckOut(complete, "complete");
    *complete = stream == nullptr || stream->Done(ticket);
  });
}

oar_status_t* EventSynchronize(int32_t device, oar_event_t event) {
  return Guard([&] {
    auto [stream, ticket] = EventTarget(*GetEvent(device, event));
    if (stream != nullptr) stream->Wait(ticket);
  });
}

// ===================================================================================================
// The table. Slots left NULL are optional: the host falls back (see the comments in device.h).
// ===================================================================================================

const oar_device_api_t kDeviceApi = [] {
  oar_device_api_t d{};
  d.struct_size = OAR_DEVICE_API_STRUCT_SIZE;  // the ABI you compiled against: never a literal
  d.device_count = DeviceCount;
  d.device_attributes = DeviceAttributes;
  d.device_synchronize = DeviceSynchronize;
  d.malloc = Malloc;
  d.free = Free;
  d.host_malloc = nullptr;  // optional: the host then uses plain host memory for staging
  d.host_free = nullptr;
  d.memory_stats = MemoryStats;
  d.memcpy_h2d = MemcpyH2D;
  d.memcpy_d2h = MemcpyD2H;
  d.memcpy_d2d = MemcpyD2D;
  d.memcpy_p2p = nullptr;  // optional: one device, nothing to copy between
  d.memset = Memset;
  d.memcpy_h2d_async = MemcpyH2DAsync;
  d.memcpy_d2h_async = MemcpyD2HAsync;
  d.memcpy_d2d_async = MemcpyD2DAsync;
  d.memcpy_p2p_async = nullptr;
  d.memset_async = MemsetAsync;
  d.stream_create = StreamCreate;
  d.stream_destroy = StreamDestroy;
  d.stream_synchronize = StreamSynchronize;
  d.stream_query = StreamQuery;
  d.stream_wait_event = StreamWaitEvent;
  d.stream_add_callback = StreamAddCallback;
  d.event_create = EventCreate;
  d.event_destroy = EventDestroy;
  d.event_record = EventRecord;
  d.event_query = EventQuery;
  d.event_synchronize = EventSynchronize;
  return d;
}();

}  // namespace

void Fail(oar_status_code code, const std::string& message) {
  throw oar::sdk::StatusError(code, std::string(kName) + ": " + message);
}

void CheckDevice(int32_t device) {
  if (device < 0 || device >= kDeviceCount) {
    Fail(OAR_STATUS_INVALID_ARGUMENT,
         "device " + std::to_string(device) + " does not exist (there are " + std::to_string(kDeviceCount) + ")");
  }
}

std::shared_ptr<Stream> GetStream(int32_t device, oar_stream_t handle) {
  DeviceState& s = State(device);
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.streams.find(handle);
  if (it == s.streams.end()) {
    Fail(OAR_STATUS_INVALID_ARGUMENT, "unknown or destroyed stream handle for device " + std::to_string(device));
  }
  return it->second;
}

void StopAllStreams() {
  for (int32_t d = 0; d < kDeviceCount; ++d) {
    for (const auto& stream : StreamsOf(d)) stream->Stop();
  }
}

const oar_device_api_t* DeviceApi() { return &kDeviceApi; }

}  // namespace template_device
