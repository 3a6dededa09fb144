// The "cpu" plugin: the host CPU as one Oar device, loaded through the ABI like any vendor's plugin.
//
// Device memory is host memory, so copies are memcpy and every piece of work (copies, memsets,
// kernels, callbacks) runs to completion before its slot returns. Streams and events are therefore
// trivially idle/complete, but they are still real handles: each is registered while alive, so a
// bogus or destroyed handle is refused with INVALID_ARGUMENT instead of being dereferenced.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <unordered_map>
#include <string>
#include <unordered_set>
#include <vector>

#include "oar/plugin/cpp/kernel.hpp"
#include "oar/plugin/cpp/status.hpp"
#include "oar/plugin/plugin.h"
#include "plugins/common/c_compiler.h"
#include "plugins/common/host_kernels.h"
#include "plugins/common/stream_store.h"

#ifndef OAR_VERSION_STRING
#error "OAR_VERSION_STRING must be defined by the build"
#endif

namespace oar::cpu {
namespace {

using sdk::Guard;
using sdk::StatusError;

constexpr int32_t kDeviceCount = 1;
constexpr size_t kAlignment = 64;

[[noreturn]] void Fail(oar_status_code code, const std::string& message) { throw StatusError(code, "cpu: " + message); }

void CheckDevice(int32_t device) {
  if (device < 0 || device >= kDeviceCount) {
    Fail(OAR_STATUS_INVALID_ARGUMENT,
         "device " + std::to_string(device) + " does not exist (" + std::to_string(kDeviceCount) + " device)");
  }
}

void CheckOut(const void* out, const char* what) {
  if (out == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, std::string(what) + " must not be NULL");
}

// ===================================================================================================
// Device attributes
// ===================================================================================================

/// The value of `key` ("model name", "vendor_id") in /proc/cpuinfo, or `fallback`.
std::string CpuInfo(const std::string& key, const std::string& fallback) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t begin = line.find_first_not_of(" \t", colon + 1);
    if (begin != std::string::npos) return line.substr(begin);
  }
  return fallback;
}

int64_t TotalMemory() {
  static const int64_t total = [] {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_size = sysconf(_SC_PAGESIZE);
    return pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size : int64_t{0};
  }();
  return total;
}

struct Attributes {
  std::string name = CpuInfo("model name", "host CPU");
  std::string vendor = CpuInfo("vendor_id", "unknown");
  std::vector<int64_t> dtypes;
  std::vector<oar_attr_t> table;

  Attributes() {
    for (int32_t d = OAR_DTYPE_FLOAT32; d < OAR_DTYPE_COUNT_; ++d) dtypes.push_back(d);
    table = {
        sdk::StringAttr(OAR_DEVICE_ATTR_NAME, name),
        sdk::StringAttr(OAR_DEVICE_ATTR_VENDOR, vendor),
        sdk::IntAttr(OAR_DEVICE_ATTR_TOTAL_MEMORY, TotalMemory()),
        sdk::IntAttr(OAR_DEVICE_ATTR_COMPUTE_UNITS, omp_get_max_threads()),
        sdk::IntAttr(OAR_DEVICE_ATTR_ALIGNMENT, kAlignment),
        sdk::BoolAttr(OAR_DEVICE_ATTR_HOST_ACCESSIBLE, true),
        sdk::IntsAttr(OAR_DEVICE_ATTR_DTYPES, dtypes),
        sdk::BoolAttr("deterministic", true),  // docs/conformance.md: a fixed work split per thread count
    };
  }
};

const Attributes& DeviceAttributes() {
  static const Attributes attributes;
  return attributes;
}

// ===================================================================================================
// Memory: 64-byte aligned blocks, recorded in a registry of live allocations so that free() of a pointer
// this device never returned (or already freed) is a clean INVALID_ARGUMENT, never heap corruption.
// ===================================================================================================

std::atomic<uint64_t> bytes_in_use{0};
std::atomic<uint64_t> peak_bytes_in_use{0};
std::atomic<uint64_t> num_allocs{0};

struct LiveAllocations {
  std::mutex mutex;
  std::unordered_map<void*, size_t> sizes;
};
LiveAllocations& Live() {
  static LiveAllocations* live = new LiveAllocations();  // never destroyed: used until process exit
  return *live;
}

/// 64-byte aligned host allocation of at least `size` bytes (aligned_alloc wants a multiple of 64).
void* AlignedAlloc(size_t size) {
  const size_t rounded = (std::max<size_t>(size, 1) + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < size) return nullptr;  // overflow
  return std::aligned_alloc(kAlignment, rounded);
}

void* DeviceMalloc(size_t size) {
  // More than the machine has can only fail (or overcommit and fail later): refuse it up front.
  if (size > static_cast<uint64_t>(TotalMemory())) return nullptr;
  void* ptr = AlignedAlloc(size);
  if (ptr == nullptr) return nullptr;
  {
    std::lock_guard<std::mutex> lock(Live().mutex);
    Live().sizes.emplace(ptr, size);
  }
  const uint64_t in_use = bytes_in_use.fetch_add(size) + size;
  uint64_t peak = peak_bytes_in_use.load();
  while (in_use > peak && !peak_bytes_in_use.compare_exchange_weak(peak, in_use)) {
  }
  num_allocs.fetch_add(1);
  return ptr;
}

void DeviceFree(void* ptr) {
  if (ptr == nullptr) return;
  size_t size = 0;
  {
    std::lock_guard<std::mutex> lock(Live().mutex);
    auto it = Live().sizes.find(ptr);
    if (it == Live().sizes.end()) {
      Fail(OAR_STATUS_INVALID_ARGUMENT, "free: pointer was not returned by this device's malloc or was already freed");
    }
    size = it->second;
    Live().sizes.erase(it);
  }
  bytes_in_use.fetch_sub(size);
  num_allocs.fetch_sub(1);
  std::free(ptr);
}

// ===================================================================================================
// Streams and events: live-handle registries.
// ===================================================================================================

struct Stream {
  int32_t device;
};
struct Event {
  int32_t device;
};

/// Handles handed out and not yet destroyed. Every use looks the handle up before touching it.
template <typename T>
class Registry {
 public:
  T* Create(int32_t device) {
    auto* object = new T{device};
    std::lock_guard<std::mutex> lock(mu_);
    live_.insert(object);
    return object;
  }
  /// The live object behind `handle` on `device`; INVALID_ARGUMENT otherwise.
  T* Get(int32_t device, const void* handle, const char* kind) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(static_cast<T*>(const_cast<void*>(handle)));
    if (it == live_.end()) {
      Fail(OAR_STATUS_INVALID_ARGUMENT, std::string("unknown or destroyed ") + kind + " handle");
    }
    if ((*it)->device != device) {
      Fail(OAR_STATUS_INVALID_ARGUMENT, std::string(kind) + " belongs to device " + std::to_string((*it)->device) +
                                            ", not device " + std::to_string(device));
    }
    return *it;
  }
  void Destroy(int32_t device, const void* handle, const char* kind) {
    T* object = Get(device, handle, kind);
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_.erase(object);
    }
    delete object;
  }

 private:
  std::mutex mu_;
  std::unordered_set<T*> live_;
};

// Never destroyed, as Live(): objects destroyed after this plugin's statics at exit (a static Predictor, an
// executor's streams) still synchronise, record and destroy their handles.
Registry<Stream>& Streams() {
  static Registry<Stream>* const registry = new Registry<Stream>();
  return *registry;
}
Registry<Event>& Events() {
  static Registry<Event>* const registry = new Registry<Event>();
  return *registry;
}

void CheckStream(int32_t device, oar_stream_t stream) {
  CheckDevice(device);
  Streams().Get(device, stream, "stream");
}

// ===================================================================================================
// The device table
// ===================================================================================================

oar_status_t* DeviceCount(int32_t* count) {
  return Guard([&] {
    CheckOut(count, "count");
    *count = kDeviceCount;
  });
}

oar_status_t* GetDeviceAttributes(int32_t device, const oar_attr_t** attrs, int32_t* num_attrs) {
  return Guard([&] {
    CheckDevice(device);
    CheckOut(attrs, "attrs");
    CheckOut(num_attrs, "num_attrs");
    const Attributes& a = DeviceAttributes();
    *attrs = a.table.data();
    *num_attrs = static_cast<int32_t>(a.table.size());
  });
}

oar_status_t* DeviceSynchronize(int32_t device) {
  return Guard([&] { CheckDevice(device); });
}

oar_status_t* Malloc(int32_t device, size_t size, void** ptr) {
  return Guard([&] {
    CheckDevice(device);
    CheckOut(ptr, "ptr");
    *ptr = DeviceMalloc(size);
    if (*ptr == nullptr) {
      Fail(OAR_STATUS_RESOURCE_EXHAUSTED, "out of memory allocating " + std::to_string(size) + " bytes (" +
                                              std::to_string(bytes_in_use.load()) + " bytes in use, " +
                                              std::to_string(TotalMemory()) + " bytes total)");
    }
  });
}

oar_status_t* Free(int32_t device, void* ptr) {
  return Guard([&] {
    CheckDevice(device);
    DeviceFree(ptr);
  });
}

oar_status_t* HostMalloc(int32_t device, size_t size, void** ptr) {
  return Guard([&] {
    CheckDevice(device);
    CheckOut(ptr, "ptr");
    *ptr = AlignedAlloc(size);
    if (*ptr == nullptr) {
      Fail(OAR_STATUS_RESOURCE_EXHAUSTED, "out of host memory allocating " + std::to_string(size) + " bytes");
    }
  });
}

oar_status_t* HostFree(int32_t device, void* ptr) {
  return Guard([&] {
    CheckDevice(device);
    std::free(ptr);
  });
}

oar_status_t* MemoryStats(int32_t device, oar_memory_stats_t* stats) {
  return Guard([&] {
    CheckDevice(device);
    CheckOut(stats, "stats");
    // Write only what the caller's struct_size covers: an older host has a shorter struct.
    const size_t size = stats->struct_size;
    auto set = [&](auto oar_memory_stats_t::*field, auto value, size_t end) {
      if (end <= size) stats->*field = value;
    };
#define OAR_STATS_END(f) OAR_STRUCT_SIZE(oar_memory_stats_t, f)
    set(&oar_memory_stats_t::bytes_in_use, bytes_in_use.load(), OAR_STATS_END(bytes_in_use));
    set(&oar_memory_stats_t::peak_bytes_in_use, peak_bytes_in_use.load(), OAR_STATS_END(peak_bytes_in_use));
    set(&oar_memory_stats_t::bytes_limit, static_cast<uint64_t>(TotalMemory()), OAR_STATS_END(bytes_limit));
    set(&oar_memory_stats_t::num_allocs, num_allocs.load(), OAR_STATS_END(num_allocs));
    set(&oar_memory_stats_t::bytes_in_use_is_set, true, OAR_STATS_END(bytes_in_use_is_set));
    set(&oar_memory_stats_t::peak_bytes_in_use_is_set, true, OAR_STATS_END(peak_bytes_in_use_is_set));
    set(&oar_memory_stats_t::bytes_limit_is_set, true, OAR_STATS_END(bytes_limit_is_set));
    set(&oar_memory_stats_t::num_allocs_is_set, true, OAR_STATS_END(num_allocs_is_set));
#undef OAR_STATS_END
  });
}

void Copy(void* dst, const void* src, size_t size) {
  if (size == 0) return;
  if (dst == nullptr || src == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, "copy with a NULL pointer");
  std::memcpy(dst, src, size);
}

oar_status_t* MemcpySync(int32_t device, void* dst, const void* src, size_t size) {
  return Guard([&] {
    CheckDevice(device);
    Copy(dst, src, size);
  });
}

oar_status_t* MemcpyP2P(int32_t dst_device, void* dst, int32_t src_device, const void* src, size_t size) {
  return Guard([&] {
    CheckDevice(dst_device);
    CheckDevice(src_device);
    Copy(dst, src, size);
  });
}

oar_status_t* Memset(int32_t device, void* dst, uint8_t value, size_t size) {
  return Guard([&] {
    CheckDevice(device);
    if (size == 0) return;
    CheckOut(dst, "dst");
    std::memset(dst, value, size);
  });
}

// Work on a stream runs at once: the slot has finished it when it returns.
oar_status_t* MemcpyAsync(int32_t device, oar_stream_t stream, void* dst, const void* src, size_t size) {
  return Guard([&] {
    CheckStream(device, stream);
    Copy(dst, src, size);
  });
}

oar_status_t* MemcpyP2PAsync(int32_t dst_device, void* dst, int32_t src_device, const void* src, size_t size,
                             oar_stream_t stream) {
  return Guard([&] {
    CheckDevice(dst_device);
    CheckStream(src_device, stream);
    Copy(dst, src, size);
  });
}

oar_status_t* MemsetAsync(int32_t device, oar_stream_t stream, void* dst, uint8_t value, size_t size) {
  return Guard([&] {
    CheckStream(device, stream);
    if (size == 0) return;
    CheckOut(dst, "dst");
    std::memset(dst, value, size);
  });
}

oar_status_t* StreamCreate(int32_t device, oar_stream_t* stream) {
  return Guard([&] {
    CheckDevice(device);
    CheckOut(stream, "stream");
    *stream = reinterpret_cast<oar_stream_t>(Streams().Create(device));
  });
}

oar_status_t* StreamDestroy(int32_t device, oar_stream_t stream) {
  return Guard([&] {
    CheckDevice(device);
    Streams().Destroy(device, stream, "stream");
  });
}

oar_status_t* StreamSynchronize(int32_t device, oar_stream_t stream) {
  return Guard([&] { CheckStream(device, stream); });
}

oar_status_t* StreamQuery(int32_t device, oar_stream_t stream, bool* idle) {
  return Guard([&] {
    CheckStream(device, stream);
    CheckOut(idle, "idle");
    *idle = true;
  });
}

oar_status_t* StreamWaitEvent(int32_t device, oar_stream_t stream, oar_event_t event) {
  return Guard([&] {
    CheckStream(device, stream);
    Events().Get(device, event, "event");
  });
}

oar_status_t* StreamAddCallback(int32_t device, oar_stream_t stream, oar_host_fn_t fn, void* user_data) {
  return Guard([&] {
    CheckStream(device, stream);
    if (fn == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, "stream_add_callback: fn must not be NULL");
    fn(user_data);  // the stream is always idle: run it now, as the ABI allows
  });
}

oar_status_t* EventCreate(int32_t device, oar_event_t* event) {
  return Guard([&] {
    CheckDevice(device);
    CheckOut(event, "event");
    *event = reinterpret_cast<oar_event_t>(Events().Create(device));
  });
}

oar_status_t* EventDestroy(int32_t device, oar_event_t event) {
  return Guard([&] {
    CheckDevice(device);
    Events().Destroy(device, event, "event");
  });
}

oar_status_t* EventRecord(int32_t device, oar_event_t event, oar_stream_t stream) {
  return Guard([&] {
    CheckStream(device, stream);
    Events().Get(device, event, "event");  // the captured work has already completed
  });
}

oar_status_t* EventQuery(int32_t device, oar_event_t event, bool* complete) {
  return Guard([&] {
    CheckDevice(device);
    Events().Get(device, event, "event");
    CheckOut(complete, "complete");
    *complete = true;
  });
}

oar_status_t* EventSynchronize(int32_t device, oar_event_t event) {
  return Guard([&] {
    CheckDevice(device);
    Events().Get(device, event, "event");
  });
}

// ===================================================================================================
// Kernels and the plugin table
// ===================================================================================================

oar_status_t* RegisterKernels(oar_kernel_registrar_t* registrar) {
  return Guard([&] { host::RegisterHostKernels(registrar); });
}

// ---- compiled C modules (CINN): compiled and loaded by plugins/common/c_compiler; launches run at once,
// split over the OpenMP threads the host kernels use.
oar_status_t* LaunchKernel(int32_t device, oar_stream_t stream, const oar_launch_info_t* info) {
  return Guard([&] {
    CheckStream(device, stream);
    // Device memory is host memory: a buffer only has to be a non-NULL range. The launch runs at once, so
    // it lives on the stack (nothing allocated per launch).
    host::CLaunch launch;
    host::PrepareCLaunch(info, nullptr, "cpu: launch_kernel", &launch);
    launch.Run(omp_get_max_threads());
  });
}

const oar_compiler_api_t* CompilerApi() {
  static const oar_compiler_api_t* table = host::CCompilerApi(
      {.plugin = "cpu", .check_device = CheckDevice, .launch_kernel = LaunchKernel,
       .stream_min_bytes = host::StreamingThresholdBytes});
  return table;
}

oar_status_t* Initialize() { return nullptr; }  // nothing to bring up: attributes are read lazily

const oar_device_api_t kDeviceApi = [] {
  oar_device_api_t d{};
  d.struct_size = OAR_DEVICE_API_STRUCT_SIZE;
  d.device_count = DeviceCount;
  d.device_attributes = GetDeviceAttributes;
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

const oar_kernel_api_t kKernelApi = [] {
  oar_kernel_api_t k{};
  k.struct_size = OAR_KERNEL_API_STRUCT_SIZE;
  k.register_kernels = RegisterKernels;
  k.supports = nullptr;  // every registered key handles every layout the contract allows
  return k;
}();

const oar_plugin_api_t kApi = [] {
  oar_plugin_api_t p{};
  p.struct_size = OAR_PLUGIN_API_STRUCT_SIZE;
  p.abi_major = OAR_PLUGIN_ABI_MAJOR;
  p.abi_minor = OAR_PLUGIN_ABI_MINOR;
  p.name = "cpu";
  p.version = OAR_VERSION_STRING;
  p.vendor = "Oar";
  p.initialize = Initialize;
  p.shutdown = nullptr;
  p.device = &kDeviceApi;
  p.kernel = &kKernelApi;
  p.compiler = CompilerApi();
  return p;
}();

}  // namespace
}  // namespace oar::cpu

OAR_DEFINE_PLUGIN(&oar::cpu::kApi)
