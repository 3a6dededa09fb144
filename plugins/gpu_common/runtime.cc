// The device table of the GPU plugins, on the vendor shim (vendor.h). Stream-ordered throughout: the
// asynchronous slots only enqueue; the synchronous ones wait for the whole device first (device.h:
// they are ordered after all work on every stream) and then for their own copy.
#include "plugins/gpu_common/runtime.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "oar/plugin/cpp/kernel.hpp"
#include "oar/plugin/cpp/status.hpp"

namespace oar::gpu {

using sdk::Guard;
using sdk::StatusError;

// ===================================================================================================
// Errors
// ===================================================================================================

void Fail(oar_status_code code, const std::string& message) {
  throw StatusError(code, std::string(OAR_GPU_NAME) + ": " + message);
}

oar_status_code StatusCodeOf(gpuError_t error) {
  if (error == gpuErrorMemoryAllocation) return OAR_STATUS_RESOURCE_EXHAUSTED;
  if (error == gpuErrorNoDevice || error == gpuErrorInsufficientDriver || error == gpuErrorInitializationError) {
    return OAR_STATUS_UNAVAILABLE;
  }
  if (error == gpuErrorInvalidValue) return OAR_STATUS_INVALID_ARGUMENT;
  return OAR_STATUS_INTERNAL;
}

std::string DescribeError(gpuError_t error, const char* api, int32_t device) {
  std::string where = std::string(api) + (device >= 0 ? " on device " + std::to_string(device) : std::string());
  const std::string text = gpuGetErrorString(error), name = gpuGetErrorName(error);
  return where + " failed: " + text + (text == name ? std::string() : " (" + name + ")");
}

void Check(gpuError_t error, const char* api, int32_t device) {
  if (error == gpuSuccess) return;
  (void)gpuGetLastError();  // reset the non-sticky last error so later calls do not report it again
  Fail(StatusCodeOf(error), DescribeError(error, api, device));
}

// ===================================================================================================
// Enumeration and per-device state
// ===================================================================================================

namespace {

struct Enumeration {
  int32_t count = 0;
  std::string reason;
};

const Enumeration& Enumerate() {
  static const Enumeration e = [] {
    Enumeration r;
    int count = 0;  // the runtime leaves it untouched on failure
    const gpuError_t error = gpuGetDeviceCount(&count);
    if (error != gpuSuccess) {
      (void)gpuGetLastError();
      r.reason = DescribeError(error, OAR_GPU_API_NAME(gpuGetDeviceCount), -1);
      count = 0;
    } else if (count == 0) {
      r.reason = std::string(OAR_GPU_API_NAME(gpuGetDeviceCount)) + " reports no device";
    }
    r.count = count;
    return r;
  }();
  return e;
}

/// Per-device bookkeeping: live allocations (sizes for the statistics), and a private stream for the
/// synchronous slots.
struct DeviceState {
  std::mutex mutex;
  std::unordered_map<void*, size_t> sizes;
  std::atomic<uint64_t> bytes_in_use{0};
  std::atomic<uint64_t> peak_bytes_in_use{0};
  gpuStream_t sync_stream = nullptr;
};

DeviceState& State(int32_t device) {
  static std::vector<std::unique_ptr<DeviceState>>* states = [] {
    auto* v = new std::vector<std::unique_ptr<DeviceState>>();  // never destroyed: used until exit
    for (int32_t i = 0; i < Enumerate().count; ++i) v->push_back(std::make_unique<DeviceState>());
    return v;
  }();
  return *(*states)[device];
}

}  // namespace

int32_t DeviceCount() { return Enumerate().count; }
const std::string& NoDeviceReason() { return Enumerate().reason; }

void UseDevice(int32_t device) {
  const int32_t count = DeviceCount();
  if (device < 0 || device >= count) {
    Fail(OAR_STATUS_INVALID_ARGUMENT, "device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                                          " device" + (count == 1 ? "" : "s") +
                                          (count == 0 ? ": " + NoDeviceReason() : std::string()) + ")");
  }
  OAR_GPU_CHECK(device, gpuSetDevice, device);
}

namespace {

/// The device's private stream for synchronous copies and memsets (created on first use).
gpuStream_t SyncStream(int32_t device) {
  DeviceState& s = State(device);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.sync_stream == nullptr) OAR_GPU_CHECK(device, gpuStreamCreateWithFlags, &s.sync_stream, gpuStreamNonBlocking);
  return s.sync_stream;
}

void CheckOut(const void* out, const char* what) {
  if (out == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, std::string(what) + " must not be NULL");
}

// ===================================================================================================
// Stream and event handles: registries of live handles, so a bogus handle is refused, not followed.
// ===================================================================================================

template <typename Native>
class Registry {
 public:
  struct Entry {
    int32_t device;
    Native native;
  };
  void* Add(int32_t device, Native native) {
    auto* e = new Entry{device, native};
    std::lock_guard<std::mutex> lock(mu_);
    live_.insert(e);
    return e;
  }
  Entry Get(int32_t device, const void* handle, const char* kind) {
    std::lock_guard<std::mutex> lock(mu_);
    return *Find(device, handle, kind);
  }
  Entry Remove(int32_t device, const void* handle, const char* kind) {
    std::lock_guard<std::mutex> lock(mu_);
    Entry* e = Find(device, handle, kind);
    const Entry copy = *e;
    live_.erase(e);
    delete e;
    return copy;
  }

 private:
  Entry* Find(int32_t device, const void* handle, const char* kind) {
    auto it = live_.find(static_cast<Entry*>(const_cast<void*>(handle)));
    if (it == live_.end()) Fail(OAR_STATUS_INVALID_ARGUMENT, std::string("unknown or destroyed ") + kind + " handle");
    if ((*it)->device != device) {
      Fail(OAR_STATUS_INVALID_ARGUMENT, std::string(kind) + " belongs to device " + std::to_string((*it)->device) +
                                            ", not device " + std::to_string(device));
    }
    return *it;
  }
  std::mutex mu_;
  std::unordered_set<Entry*> live_;
};

Registry<gpuStream_t>& Streams() {
  static auto* r = new Registry<gpuStream_t>();
  return *r;
}
Registry<gpuEvent_t>& Events() {
  static auto* r = new Registry<gpuEvent_t>();
  return *r;
}

gpuEvent_t NativeEvent(int32_t device, oar_event_t event) { return Events().Get(device, event, "event").native; }

}  // namespace

gpuStream_t NativeStream(int32_t device, oar_stream_t stream) { return Streams().Get(device, stream, "stream").native; }

namespace {

// ===================================================================================================
// Attributes
// ===================================================================================================

struct Attributes {
  std::string name;
  std::string vendor;
  std::string arch;
  std::vector<int64_t> dtypes;
  std::vector<oar_attr_t> table;
};

/// Fills `a` in place: its table points into a's own strings and vectors (a moved std::string with a
/// short value would leave those pointers dangling), so `a` must not move afterwards.
void ReadAttributes(int32_t device, Attributes& a) {
  gpuDeviceProp_t prop{};
  OAR_GPU_CHECK(device, gpuGetDeviceProperties, &prop, device);
  a.name = prop.name;
#if defined(OAR_GPU_CUDA)
  a.vendor = "NVIDIA";
  a.arch = "sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
#elif defined(OAR_GPU_EMU)
  a.vendor = OAR_GPU_VENDOR_NAME;
  a.arch = "host";
#else
  a.arch = prop.gcnArchName;
  // Hygon DCUs run this plugin through their HIP runtime; say who made the device.
  a.vendor = a.name.find("DCU") != std::string::npos ? "Hygon" : "AMD";
#endif
  for (int32_t d = OAR_DTYPE_FLOAT32; d < OAR_DTYPE_COUNT_; ++d) a.dtypes.push_back(d);
  int memory_clock_khz = 0, bus_width_bits = 0;
  const bool have_bandwidth =
      gpuDeviceGetAttribute(&memory_clock_khz, gpuDevAttrMemoryClockRate, device) == gpuSuccess &&
      gpuDeviceGetAttribute(&bus_width_bits, gpuDevAttrMemoryBusWidth, device) == gpuSuccess && memory_clock_khz > 0 &&
      bus_width_bits > 0;
  (void)gpuGetLastError();
  a.table = {
      sdk::StringAttr(OAR_DEVICE_ATTR_NAME, a.name),
      sdk::StringAttr(OAR_DEVICE_ATTR_VENDOR, a.vendor),
      sdk::IntAttr(OAR_DEVICE_ATTR_TOTAL_MEMORY, static_cast<int64_t>(prop.totalGlobalMem)),
      sdk::IntAttr(OAR_DEVICE_ATTR_COMPUTE_UNITS, prop.multiProcessorCount),
      sdk::IntAttr(OAR_DEVICE_ATTR_ALIGNMENT, 256),
      sdk::BoolAttr(OAR_DEVICE_ATTR_HOST_ACCESSIBLE, false),
      sdk::IntsAttr(OAR_DEVICE_ATTR_DTYPES, a.dtypes),
      sdk::StringAttr("arch", a.arch),
  };
  if (have_bandwidth) {  // double data rate: two transfers per memory clock
    a.table.push_back(
        sdk::FloatAttr(OAR_DEVICE_ATTR_MEMORY_BANDWIDTH, 2.0 * memory_clock_khz * 1e3 * (bus_width_bits / 8.0)));
  }
}

// ===================================================================================================
// The device table
// ===================================================================================================

oar_status_t* DeviceCountSlot(int32_t* count) {
  return Guard([&]() -> oar_status_t* {
    CheckOut(count, "count");
    *count = DeviceCount();
    if (*count == 0)
      return sdk::MakeStatus(OAR_STATUS_UNAVAILABLE, std::string(OAR_GPU_NAME) + ": " + NoDeviceReason());
    return nullptr;
  });
}

oar_status_t* DeviceAttributes(int32_t device, const oar_attr_t** attrs, int32_t* num_attrs) {
  return Guard([&] {
    UseDevice(device);
    CheckOut(attrs, "attrs");
    CheckOut(num_attrs, "num_attrs");
    static std::mutex mu;
    static auto* cache = new std::unordered_map<int32_t, std::unique_ptr<Attributes>>();
    std::lock_guard<std::mutex> lock(mu);
    auto& slot = (*cache)[device];
    if (!slot) {
      auto fresh = std::make_unique<Attributes>();
      ReadAttributes(device, *fresh);  // the table points into *fresh, which lives on the heap unmoved
      slot = std::move(fresh);
    }
    *attrs = slot->table.data();
    *num_attrs = static_cast<int32_t>(slot->table.size());
  });
}

oar_status_t* DeviceSynchronize(int32_t device) {
  return Guard([&] {
    UseDevice(device);
    OAR_GPU_CHECK(device, gpuDeviceSynchronize);
  });
}

oar_status_t* Malloc(int32_t device, size_t size, void** ptr) {
  return Guard([&] {
    UseDevice(device);
    CheckOut(ptr, "ptr");
    *ptr = nullptr;
    if (size == 0) return;  // NULL is a valid result for size 0 (device.h)
    const gpuError_t error = gpuMalloc(ptr, size);
    if (error != gpuSuccess) {
      *ptr = nullptr;
      (void)gpuGetLastError();
      DeviceState& s = State(device);
      Fail(StatusCodeOf(error), DescribeError(error, OAR_GPU_API_NAME(gpuMalloc), device) + " allocating " +
                                    std::to_string(size) + " bytes (" + std::to_string(s.bytes_in_use.load()) +
                                    " bytes in use through this plugin)");
    }
    DeviceState& s = State(device);
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.sizes.emplace(*ptr, size);
    }
    const uint64_t in_use = s.bytes_in_use.fetch_add(size) + size;
    uint64_t peak = s.peak_bytes_in_use.load();
    while (in_use > peak && !s.peak_bytes_in_use.compare_exchange_weak(peak, in_use)) {
    }
  });
}

oar_status_t* Free(int32_t device, void* ptr) {
  return Guard([&] {
    UseDevice(device);
    if (ptr == nullptr) return;
    DeviceState& s = State(device);
    size_t size = 0;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      auto it = s.sizes.find(ptr);
      if (it == s.sizes.end()) {
        Fail(OAR_STATUS_INVALID_ARGUMENT,
             "free: pointer was not returned by malloc of device " + std::to_string(device) + " or was already freed");
      }
      size = it->second;
      s.sizes.erase(it);
    }
    s.bytes_in_use.fetch_sub(size);
    // After an asynchronous fault the runtime reports that (sticky) error from every call, cudaFree
    // included. The memory is released either way, and free must not fail for an earlier error
    // (docs/vendor-guide.md 4.5): the error stays visible to the next synchronisation.
    const gpuError_t error = gpuFree(ptr);
    if (error != gpuSuccess) {
      (void)gpuGetLastError();
      sdk::Log(OAR_LOG_WARNING, OAR_GPU_NAME, DescribeError(error, OAR_GPU_API_NAME(gpuFree), device));
    }
  });
}

oar_status_t* HostMalloc(int32_t device, size_t size, void** ptr) {
  return Guard([&] {
    UseDevice(device);
    CheckOut(ptr, "ptr");
    *ptr = nullptr;
    if (size == 0) return;
    OAR_GPU_CHECK(device, gpuHostAlloc, ptr, size, gpuHostAllocDefault);
  });
}

oar_status_t* HostFree(int32_t device, void* ptr) {
  return Guard([&] {
    UseDevice(device);
    if (ptr != nullptr) OAR_GPU_CHECK(device, gpuFreeHost, ptr);
  });
}

oar_status_t* MemoryStats(int32_t device, oar_memory_stats_t* stats) {
  return Guard([&] {
    UseDevice(device);
    CheckOut(stats, "stats");
    size_t free_bytes = 0, total_bytes = 0;
    OAR_GPU_CHECK(device, gpuMemGetInfo, &free_bytes, &total_bytes);
    DeviceState& s = State(device);
    uint64_t live = 0;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      live = s.sizes.size();
    }
    // Write only what the caller's struct_size covers: an older host has a shorter struct.
    const size_t size = stats->struct_size;
#define OAR_SET_STAT(field, value) \
  if (OAR_STRUCT_SIZE(oar_memory_stats_t, field) <= size) stats->field = (value)
    OAR_SET_STAT(bytes_in_use, s.bytes_in_use.load());
    OAR_SET_STAT(peak_bytes_in_use, s.peak_bytes_in_use.load());
    OAR_SET_STAT(bytes_limit, static_cast<uint64_t>(total_bytes));  // the runtime's view of the device
    OAR_SET_STAT(num_allocs, live);
    OAR_SET_STAT(bytes_in_use_is_set, true);
    OAR_SET_STAT(peak_bytes_in_use_is_set, true);
    OAR_SET_STAT(bytes_limit_is_set, true);
    OAR_SET_STAT(num_allocs_is_set, true);
#undef OAR_SET_STAT
  });
}

/// A synchronous operation: wait for every stream of the device, run `enqueue` on the private stream,
/// wait for it.
template <typename Enqueue>
void RunSynchronously(int32_t device, Enqueue&& enqueue) {
  UseDevice(device);
  OAR_GPU_CHECK(device, gpuDeviceSynchronize);
  const gpuStream_t stream = SyncStream(device);
  enqueue(stream);
  OAR_GPU_CHECK(device, gpuStreamSynchronize, stream);
}

void CheckCopy(void* dst, const void* src, size_t size) {
  if (size != 0 && (dst == nullptr || src == nullptr)) Fail(OAR_STATUS_INVALID_ARGUMENT, "copy with a NULL pointer");
}

oar_status_t* MemcpySync(int32_t device, void* dst, const void* src, size_t size) {
  return Guard([&] {
    CheckCopy(dst, src, size);
    if (size == 0) return UseDevice(device);
    // cudaMemcpyDefault / hipMemcpyDefault: the direction follows from the (unified) addresses.
    RunSynchronously(
        device, [&](gpuStream_t s) { OAR_GPU_CHECK(device, gpuMemcpyAsync, dst, src, size, gpuMemcpyDefault, s); });
  });
}

oar_status_t* MemcpyP2P(int32_t dst_device, void* dst, int32_t src_device, const void* src, size_t size) {
  return Guard([&] {
    UseDevice(dst_device);
    CheckCopy(dst, src, size);
    OAR_GPU_CHECK(dst_device, gpuDeviceSynchronize);
    if (size == 0) return UseDevice(src_device);
    RunSynchronously(src_device, [&](gpuStream_t s) {
      OAR_GPU_CHECK(src_device, gpuMemcpyPeerAsync, dst, dst_device, src, src_device, size, s);
    });
  });
}

oar_status_t* Memset(int32_t device, void* dst, uint8_t value, size_t size) {
  return Guard([&] {
    if (size == 0) return UseDevice(device);
    CheckOut(dst, "dst");
    RunSynchronously(device, [&](gpuStream_t s) { OAR_GPU_CHECK(device, gpuMemsetAsync, dst, value, size, s); });
  });
}

oar_status_t* MemcpyAsync(int32_t device, oar_stream_t stream, void* dst, const void* src, size_t size) {
  return Guard([&] {
    UseDevice(device);
    const gpuStream_t s = NativeStream(device, stream);
    CheckCopy(dst, src, size);
    if (size != 0) OAR_GPU_CHECK(device, gpuMemcpyAsync, dst, src, size, gpuMemcpyDefault, s);
  });
}

oar_status_t* MemcpyP2PAsync(int32_t dst_device, void* dst, int32_t src_device, const void* src, size_t size,
                             oar_stream_t stream) {
  return Guard([&] {
    UseDevice(dst_device);
    UseDevice(src_device);
    const gpuStream_t s = NativeStream(src_device, stream);
    CheckCopy(dst, src, size);
    if (size != 0) OAR_GPU_CHECK(src_device, gpuMemcpyPeerAsync, dst, dst_device, src, src_device, size, s);
  });
}

oar_status_t* MemsetAsync(int32_t device, oar_stream_t stream, void* dst, uint8_t value, size_t size) {
  return Guard([&] {
    UseDevice(device);
    const gpuStream_t s = NativeStream(device, stream);
    if (size == 0) return;
    CheckOut(dst, "dst");
    OAR_GPU_CHECK(device, gpuMemsetAsync, dst, value, size, s);
  });
}

oar_status_t* StreamCreate(int32_t device, oar_stream_t* stream) {
  return Guard([&] {
    UseDevice(device);
    CheckOut(stream, "stream");
    gpuStream_t native = nullptr;
    // Non-blocking: no implicit synchronisation with the legacy default stream; ordering between
    // streams is only what the host asks for through events.
    OAR_GPU_CHECK(device, gpuStreamCreateWithFlags, &native, gpuStreamNonBlocking);
    *stream = static_cast<oar_stream_t>(Streams().Add(device, native));
  });
}

oar_status_t* StreamDestroy(int32_t device, oar_stream_t stream) {
  return Guard([&] {
    UseDevice(device);
    const gpuStream_t native = Streams().Remove(device, stream, "stream").native;
    const gpuError_t sync = gpuStreamSynchronize(native);
    const gpuError_t destroy = gpuStreamDestroy(native);
    Check(sync, OAR_GPU_API_NAME(gpuStreamSynchronize), device);
    Check(destroy, OAR_GPU_API_NAME(gpuStreamDestroy), device);
  });
}

oar_status_t* StreamSynchronize(int32_t device, oar_stream_t stream) {
  return Guard([&] {
    UseDevice(device);
    OAR_GPU_CHECK(device, gpuStreamSynchronize, NativeStream(device, stream));
  });
}

oar_status_t* StreamQuery(int32_t device, oar_stream_t stream, bool* idle) {
  return Guard([&] {
    UseDevice(device);
    CheckOut(idle, "idle");
    const gpuError_t e = gpuStreamQuery(NativeStream(device, stream));
    if (e == gpuErrorNotReady) {
      (void)gpuGetLastError();
      *idle = false;
      return;
    }
    Check(e, OAR_GPU_API_NAME(gpuStreamQuery), device);
    *idle = true;
  });
}

oar_status_t* StreamWaitEvent(int32_t device, oar_stream_t stream, oar_event_t event) {
  return Guard([&] {
    UseDevice(device);
    OAR_GPU_CHECK(device, gpuStreamWaitEvent, NativeStream(device, stream), NativeEvent(device, event), 0);
  });
}

#if defined(OAR_GPU_HIP)
// HIP 5.2 has no hipLaunchHostFunc: a stream callback carries the function and its argument.
struct CallbackBox {
  oar_host_fn_t fn;
  void* user_data;
};
void HipCallback(hipStream_t, hipError_t, void* box) {
  const CallbackBox b = *static_cast<CallbackBox*>(box);
  delete static_cast<CallbackBox*>(box);
  b.fn(b.user_data);
}
#endif

oar_status_t* StreamAddCallback(int32_t device, oar_stream_t stream, oar_host_fn_t fn, void* user_data) {
  return Guard([&] {
    UseDevice(device);
    const gpuStream_t s = NativeStream(device, stream);
    if (fn == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, "stream_add_callback: fn must not be NULL");
#if !defined(OAR_GPU_HIP)
    OAR_GPU_CHECK(device, gpuLaunchHostFunc, s, fn, user_data);
#else
    auto* box = new CallbackBox{fn, user_data};
    const hipError_t e = hipStreamAddCallback(s, HipCallback, box, 0);
    if (e != hipSuccess) delete box;
    Check(e, "hipStreamAddCallback", device);
#endif
  });
}

oar_status_t* EventCreate(int32_t device, oar_event_t* event) {
  return Guard([&] {
    UseDevice(device);
    CheckOut(event, "event");
    gpuEvent_t native = nullptr;
    OAR_GPU_CHECK(device, gpuEventCreateWithFlags, &native, gpuEventDisableTiming);
    *event = static_cast<oar_event_t>(Events().Add(device, native));
  });
}

oar_status_t* EventDestroy(int32_t device, oar_event_t event) {
  return Guard([&] {
    UseDevice(device);
    OAR_GPU_CHECK(device, gpuEventDestroy, Events().Remove(device, event, "event").native);
  });
}

oar_status_t* EventRecord(int32_t device, oar_event_t event, oar_stream_t stream) {
  return Guard([&] {
    UseDevice(device);
    OAR_GPU_CHECK(device, gpuEventRecord, NativeEvent(device, event), NativeStream(device, stream));
  });
}

oar_status_t* EventQuery(int32_t device, oar_event_t event, bool* complete) {
  return Guard([&] {
    UseDevice(device);
    CheckOut(complete, "complete");
    const gpuError_t e = gpuEventQuery(NativeEvent(device, event));  // never recorded: success
    if (e == gpuErrorNotReady) {
      (void)gpuGetLastError();
      *complete = false;
      return;
    }
    Check(e, OAR_GPU_API_NAME(gpuEventQuery), device);
    *complete = true;
  });
}

oar_status_t* EventSynchronize(int32_t device, oar_event_t event) {
  return Guard([&] {
    UseDevice(device);
    OAR_GPU_CHECK(device, gpuEventSynchronize, NativeEvent(device, event));
  });
}

const oar_device_api_t kDeviceApi = [] {
  oar_device_api_t d{};
  d.struct_size = OAR_DEVICE_API_STRUCT_SIZE;
  d.device_count = DeviceCountSlot;
  d.device_attributes = DeviceAttributes;
  d.device_synchronize = DeviceSynchronize;
  d.malloc = Malloc;
  d.free = Free;
  d.host_malloc = HostMalloc;
  d.host_free = HostFree;
  d.memory_stats = MemoryStats;
  d.memcpy_h2d = MemcpySync;
  d.memcpy_d2h = MemcpySync;
  d.memcpy_d2d = MemcpySync;
  d.memcpy_p2p = MemcpyP2P;
  d.memset = Memset;
  d.memcpy_h2d_async = MemcpyAsync;
  d.memcpy_d2h_async = MemcpyAsync;
  d.memcpy_d2d_async = MemcpyAsync;
  d.memcpy_p2p_async = MemcpyP2PAsync;
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

const oar_device_api_t* DeviceApi() { return &kDeviceApi; }

}  // namespace oar::gpu
