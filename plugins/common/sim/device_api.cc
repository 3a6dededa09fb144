// The device and profiler tables of every simulator: thin guarded slots over Simulator / SimDevice.
//
// Synchronous copies and memsets wait for everything queued on every stream of the device(s) they
// touch, report a sticky stream error if one is pending (and then do not copy), and run on the calling
// thread. Asynchronous ones validate their pointers at enqueue time and run on the stream's worker;
// host buffers are read or written only when the worker reaches them, as on real hardware.
#include "plugins/common/sim/device_api.h"

#include <cstring>

#include "oar/plugin/cpp/status.hpp"
#include "plugins/common/sim/ccl.h"
#include "plugins/common/sim/kernels.h"
#include "plugins/common/sim/simulator.h"

namespace oar::sim {
namespace {

using sdk::Guard;

void CheckOut(const void* out, const char* what) {
  if (out == nullptr) Throw(OAR_STATUS_INVALID_ARGUMENT, std::string(what) + " must not be NULL");
}

SimDevice& Dev(int32_t ordinal) { return Simulator::Get().device(ordinal); }

/// A host buffer of a copy: not NULL and not one of this simulator's device addresses.
void CheckHost(const SimDevice& d, const void* ptr, const std::string& what) {
  if (ptr == nullptr) Throw(OAR_STATUS_INVALID_ARGUMENT, d.where() + ": " + what + " is NULL");
  if (Simulator::Get().IsDeviceAddress(ptr)) {
    Throw(OAR_STATUS_INVALID_ARGUMENT, d.where() + ": " + what + " is a device address, not host memory");
  }
}

/// Wait for the device's queued work and report a pending asynchronous error.
// A synchronising call on a lost device still waits for the work queued before the loss (which the loss
// cancels, bar the kernel running now) before it reports UNAVAILABLE: returning at once let the caller
// exit() while a stream worker was still inside a kernel (a segfault in oneDNN in about half the runs).
// Not from a stream worker (a host callback): that could wait on itself.
void DrainIfLost(SimDevice& d) {
  if (d.lost() && Stream::Current() == nullptr) d.WaitIdle();
}

void SyncBefore(SimDevice& d) {
  if (std::optional<SimError> e = d.Synchronize()) Throw(e->code, e->message);
}

/// The injected copy fault for this copy, if one fires.
std::optional<SimError> CopyFault(SimDevice& d, const char* direction, size_t size) {
  if (const FaultScenario* s = Simulator::Get().faults().Check(FaultKind::kCopy, d.ordinal(), direction)) {
    return SimError{
        s->code, d.where() + ": " + direction + " copy of " + std::to_string(size) + " bytes failed" + FaultSuffix(*s)};
  }
  return std::nullopt;
}

void ThrowIf(const std::optional<SimError>& e) {
  if (e) Throw(e->code, e->message);
}

void RecordSync(SimDevice& d, const char* name, int32_t kind, const Cost& cost) {
  const uint64_t start = d.AdvanceClock(cost.duration_ns);
  d.profiler().Record(name, kind, d.ordinal(), start, start + static_cast<uint64_t>(cost.duration_ns), cost.bytes,
                      cost.flops);
}

Work CopyWork(const char* name, const Cost& cost, std::optional<SimError> injected,
              std::function<std::optional<SimError>()> run) {
  Work w;
  w.name = name;
  w.kind = std::strcmp(name, "memset") == 0 ? OAR_ACTIVITY_MEMSET : OAR_ACTIVITY_COPY;
  w.cost = cost;
  w.injected = std::move(injected);
  w.run = std::move(run);
  return w;
}

// ---- enumeration, memory -----------------------------------------------------------------------------

oar_status_t* DeviceCount(int32_t* count) {
  return Guard([&] {
    CheckOut(count, "count");
    *count = Simulator::Get().device_count();
  });
}

oar_status_t* DeviceAttributes(int32_t device, const oar_attr_t** attrs, int32_t* num_attrs) {
  return Guard([&] {
    CheckOut(attrs, "attrs");
    CheckOut(num_attrs, "num_attrs");
    const SimDevice& d = Dev(device);  // answered even for a lost device: the host caches them anyway
    *attrs = d.attributes().data();
    *num_attrs = static_cast<int32_t>(d.attributes().size());
  });
}

oar_status_t* DeviceSynchronize(int32_t device) {
  return Guard([&] {
    SimDevice& d = Dev(device);
    DrainIfLost(d);
    d.CheckAlive("device_synchronize");
    SyncBefore(d);
  });
}

oar_status_t* Malloc(int32_t device, size_t size, void** ptr) {
  return Guard([&] {
    CheckOut(ptr, "ptr");
    *ptr = nullptr;
    SimDevice& d = Dev(device);
    Simulator& sim = Simulator::Get();
    sim.BeginOperation(d, "malloc");
    if (const FaultScenario* s = sim.faults().Check(FaultKind::kAlloc, device, "malloc")) {
      const DeviceMemory::Stats st = d.memory().stats();
      Throw(OAR_STATUS_RESOURCE_EXHAUSTED, d.where() + ": out of device memory: requested " + std::to_string(size) +
                                               " bytes, " + std::to_string(st.capacity - st.reserved_bytes) +
                                               " bytes free of " + std::to_string(st.capacity) + FaultSuffix(*s));
    }
    *ptr = d.memory().Allocate(size);
  });
}

oar_status_t* Free(int32_t device, void* ptr) {
  return Guard([&] {
    SimDevice& d = Dev(device);
    if (ptr == nullptr) return;
    d.WaitIdle();  // as cudaFree: queued work may still use the block
    d.memory().Free(ptr);
    d.CheckAlive("free");  // released anyway: a lost device leaks nothing
  });
}

oar_status_t* MemoryStats(int32_t device, oar_memory_stats_t* stats) {
  return Guard([&] {
    CheckOut(stats, "stats");
    const DeviceMemory::Stats st = Dev(device).memory().stats();
    const size_t size = stats->struct_size;  // an older host has a shorter struct: write only what it has
    auto set = [&](auto oar_memory_stats_t::*field, auto value, size_t end) {
      if (end <= size) stats->*field = value;
    };
#define OAR_STATS_END(f) OAR_STRUCT_SIZE(oar_memory_stats_t, f)
    set(&oar_memory_stats_t::bytes_in_use, st.bytes_in_use, OAR_STATS_END(bytes_in_use));
    set(&oar_memory_stats_t::peak_bytes_in_use, st.peak_bytes_in_use, OAR_STATS_END(peak_bytes_in_use));
    set(&oar_memory_stats_t::bytes_limit, st.capacity, OAR_STATS_END(bytes_limit));
    set(&oar_memory_stats_t::num_allocs, st.num_allocs, OAR_STATS_END(num_allocs));
    set(&oar_memory_stats_t::bytes_in_use_is_set, true, OAR_STATS_END(bytes_in_use_is_set));
    set(&oar_memory_stats_t::peak_bytes_in_use_is_set, true, OAR_STATS_END(peak_bytes_in_use_is_set));
    set(&oar_memory_stats_t::bytes_limit_is_set, true, OAR_STATS_END(bytes_limit_is_set));
    set(&oar_memory_stats_t::num_allocs_is_set, true, OAR_STATS_END(num_allocs_is_set));
#undef OAR_STATS_END
  });
}

// ---- synchronous copies ------------------------------------------------------------------------------

oar_status_t* MemcpyH2D(int32_t device, void* dst, const void* src, size_t size) {
  return Guard([&] {
    SimDevice& d = Dev(device);
    Simulator::Get().BeginOperation(d, "memcpy_h2d");
    if (size == 0) return;
    char* to = d.memory().Translate(dst, size, "memcpy_h2d destination");
    CheckHost(d, src, "memcpy_h2d source");
    SyncBefore(d);
    ThrowIf(CopyFault(d, "h2d", size));
    std::memcpy(to, src, size);
    RecordSync(d, "h2d", OAR_ACTIVITY_COPY, CopyCost(d.model(), "h2d", size));
  });
}

oar_status_t* MemcpyD2H(int32_t device, void* dst, const void* src, size_t size) {
  return Guard([&] {
    SimDevice& d = Dev(device);
    Simulator::Get().BeginOperation(d, "memcpy_d2h");
    if (size == 0) return;
    const char* from = d.memory().Translate(src, size, "memcpy_d2h source");
    CheckHost(d, dst, "memcpy_d2h destination");
    SyncBefore(d);
    ThrowIf(CopyFault(d, "d2h", size));
    std::memcpy(dst, from, size);
    RecordSync(d, "d2h", OAR_ACTIVITY_COPY, CopyCost(d.model(), "d2h", size));
  });
}

oar_status_t* MemcpyD2D(int32_t device, void* dst, const void* src, size_t size) {
  return Guard([&] {
    SimDevice& d = Dev(device);
    Simulator::Get().BeginOperation(d, "memcpy_d2d");
    if (size == 0) return;
    char* to = d.memory().Translate(dst, size, "memcpy_d2d destination");
    const char* from = d.memory().Translate(src, size, "memcpy_d2d source");
    SyncBefore(d);
    ThrowIf(CopyFault(d, "d2d", size));
    std::memmove(to, from, size);
    RecordSync(d, "d2d", OAR_ACTIVITY_COPY, CopyCost(d.model(), "d2d", size));
  });
}

oar_status_t* MemcpyP2P(int32_t dst_device, void* dst, int32_t src_device, const void* src, size_t size) {
  return Guard([&] {
    SimDevice& dd = Dev(dst_device);
    SimDevice& sd = Dev(src_device);
    Simulator::Get().BeginOperation(sd, "memcpy_p2p");
    if (&dd != &sd) Simulator::Get().BeginOperation(dd, "memcpy_p2p");
    if (size == 0) return;
    char* to = dd.memory().Translate(dst, size, "memcpy_p2p destination");
    const char* from = sd.memory().Translate(src, size, "memcpy_p2p source");
    SyncBefore(sd);
    if (&dd != &sd) SyncBefore(dd);
    ThrowIf(CopyFault(sd, "p2p", size));
    std::memmove(to, from, size);
    RecordSync(sd, "p2p", OAR_ACTIVITY_COPY, CopyCost(sd.model(), "p2p", size));
  });
}

oar_status_t* Memset(int32_t device, void* dst, uint8_t value, size_t size) {
  return Guard([&] {
    SimDevice& d = Dev(device);
    Simulator::Get().BeginOperation(d, "memset");
    if (size == 0) return;
    char* to = d.memory().Translate(dst, size, "memset destination");
    SyncBefore(d);
    std::memset(to, value, size);
    RecordSync(d, "memset", OAR_ACTIVITY_MEMSET, CopyCost(d.model(), "memset", size));
  });
}

// ---- asynchronous copies -----------------------------------------------------------------------------

oar_status_t* MemcpyH2DAsync(int32_t device, oar_stream_t stream, void* dst, const void* src, size_t size) {
  return Guard([&] {
    SimDevice& d = Dev(device);
    Simulator::Get().BeginOperation(d, "memcpy_h2d_async");
    std::shared_ptr<Stream> s = d.GetStream(stream);
    if (size == 0) return;
    char* to = d.memory().Translate(dst, size, "memcpy_h2d_async destination");
    CheckHost(d, src, "memcpy_h2d_async source");
    s->Enqueue(CopyWork("h2d", CopyCost(d.model(), "h2d", size), CopyFault(d, "h2d", size), [=] {
      std::memcpy(to, src, size);
      return std::optional<SimError>();
    }));
  });
}

oar_status_t* MemcpyD2HAsync(int32_t device, oar_stream_t stream, void* dst, const void* src, size_t size) {
  return Guard([&] {
    SimDevice& d = Dev(device);
    Simulator::Get().BeginOperation(d, "memcpy_d2h_async");
    std::shared_ptr<Stream> s = d.GetStream(stream);
    if (size == 0) return;
    const char* from = d.memory().Translate(src, size, "memcpy_d2h_async source");
    CheckHost(d, dst, "memcpy_d2h_async destination");
    s->Enqueue(CopyWork("d2h", CopyCost(d.model(), "d2h", size), CopyFault(d, "d2h", size), [=] {
      std::memcpy(dst, from, size);
      return std::optional<SimError>();
    }));
  });
}

oar_status_t* MemcpyD2DAsync(int32_t device, oar_stream_t stream, void* dst, const void* src, size_t size) {
  return Guard([&] {
    SimDevice& d = Dev(device);
    Simulator::Get().BeginOperation(d, "memcpy_d2d_async");
    std::shared_ptr<Stream> s = d.GetStream(stream);
    if (size == 0) return;
    char* to = d.memory().Translate(dst, size, "memcpy_d2d_async destination");
    const char* from = d.memory().Translate(src, size, "memcpy_d2d_async source");
    s->Enqueue(CopyWork("d2d", CopyCost(d.model(), "d2d", size), CopyFault(d, "d2d", size), [=] {
      std::memmove(to, from, size);
      return std::optional<SimError>();
    }));
  });
}

oar_status_t* MemcpyP2PAsync(int32_t dst_device, void* dst, int32_t src_device, const void* src, size_t size,
                             oar_stream_t stream) {
  return Guard([&] {
    SimDevice& dd = Dev(dst_device);
    SimDevice& sd = Dev(src_device);
    Simulator::Get().BeginOperation(sd, "memcpy_p2p_async");
    if (&dd != &sd) Simulator::Get().BeginOperation(dd, "memcpy_p2p_async");
    std::shared_ptr<Stream> s = sd.GetStream(stream);
    if (size == 0) return;
    char* to = dd.memory().Translate(dst, size, "memcpy_p2p_async destination");
    const char* from = sd.memory().Translate(src, size, "memcpy_p2p_async source");
    s->Enqueue(CopyWork("p2p", CopyCost(sd.model(), "p2p", size), CopyFault(sd, "p2p", size), [=] {
      std::memmove(to, from, size);
      return std::optional<SimError>();
    }));
  });
}

oar_status_t* MemsetAsync(int32_t device, oar_stream_t stream, void* dst, uint8_t value, size_t size) {
  return Guard([&] {
    SimDevice& d = Dev(device);
    Simulator::Get().BeginOperation(d, "memset_async");
    std::shared_ptr<Stream> s = d.GetStream(stream);
    if (size == 0) return;
    char* to = d.memory().Translate(dst, size, "memset_async destination");
    s->Enqueue(CopyWork("memset", CopyCost(d.model(), "memset", size), std::nullopt, [=] {
      std::memset(to, value, size);
      return std::optional<SimError>();
    }));
  });
}

// ---- streams -----------------------------------------------------------------------------------------

oar_status_t* StreamCreate(int32_t device, oar_stream_t* stream) {
  return Guard([&] {
    CheckOut(stream, "stream");
    SimDevice& d = Dev(device);
    d.CheckAlive("stream_create");
    *stream = d.CreateStream();
  });
}

oar_status_t* StreamDestroy(int32_t device, oar_stream_t stream) {
  return Guard([&] {
    SimDevice& d = Dev(device);
    const std::optional<SimError> pending = d.DestroyStream(stream);
    d.CheckAlive("stream_destroy");  // released anyway
    ThrowIf(pending);                // never reported otherwise
  });
}

oar_status_t* StreamSynchronize(int32_t device, oar_stream_t stream) {
  return Guard([&] {
    SimDevice& d = Dev(device);
    DrainIfLost(d);
    d.CheckAlive("stream_synchronize");
    std::shared_ptr<Stream> s = d.GetStream(stream);
    s->Drain();
    ThrowIf(s->TakeError());
  });
}

oar_status_t* StreamQuery(int32_t device, oar_stream_t stream, bool* idle) {
  return Guard([&] {
    CheckOut(idle, "idle");
    SimDevice& d = Dev(device);
    d.CheckAlive("stream_query");
    *idle = d.GetStream(stream)->Idle();
  });
}

oar_status_t* StreamWaitEvent(int32_t device, oar_stream_t stream, oar_event_t event) {
  return Guard([&] {
    SimDevice& d = Dev(device);
    d.CheckAlive("stream_wait_event");
    std::shared_ptr<Stream> s = d.GetStream(stream);
    std::shared_ptr<SimEvent> e = d.GetEvent(event);
    std::shared_ptr<Marker> marker;
    {
      std::lock_guard<std::mutex> lock(e->mu);
      marker = e->latest;
    }
    if (marker == nullptr) return;  // never recorded: already complete
    Work w;
    w.type = Work::Type::kWait;
    w.name = "wait_event";
    w.marker = std::move(marker);
    s->Enqueue(std::move(w));
  });
}

oar_status_t* StreamAddCallback(int32_t device, oar_stream_t stream, oar_host_fn_t fn, void* user_data) {
  return Guard([&] {
    if (fn == nullptr) Throw(OAR_STATUS_INVALID_ARGUMENT, "stream_add_callback: fn must not be NULL");
    SimDevice& d = Dev(device);
    d.CheckAlive("stream_add_callback");
    Work w;
    w.type = Work::Type::kCallback;
    w.name = "callback";
    w.callback = fn;
    w.user_data = user_data;
    d.GetStream(stream)->Enqueue(std::move(w));
  });
}

// ---- events ------------------------------------------------------------------------------------------

oar_status_t* EventCreate(int32_t device, oar_event_t* event) {
  return Guard([&] {
    CheckOut(event, "event");
    SimDevice& d = Dev(device);
    d.CheckAlive("event_create");
    *event = d.CreateEvent();
  });
}

oar_status_t* EventDestroy(int32_t device, oar_event_t event) {
  return Guard([&] {
    SimDevice& d = Dev(device);
    d.DestroyEvent(event);
    d.CheckAlive("event_destroy");  // released anyway
  });
}

oar_status_t* EventRecord(int32_t device, oar_event_t event, oar_stream_t stream) {
  return Guard([&] {
    SimDevice& d = Dev(device);
    d.CheckAlive("event_record");
    std::shared_ptr<Stream> s = d.GetStream(stream);
    std::shared_ptr<SimEvent> e = d.GetEvent(event);
    auto marker = std::make_shared<Marker>();
    {
      std::lock_guard<std::mutex> lock(e->mu);
      e->latest = marker;  // re-recording replaces the capture
    }
    Work w;
    w.type = Work::Type::kRecord;
    w.name = "event_record";
    w.marker = std::move(marker);
    s->Enqueue(std::move(w));
  });
}

std::shared_ptr<Marker> Latest(SimDevice& d, oar_event_t event) {
  std::shared_ptr<SimEvent> e = d.GetEvent(event);
  std::lock_guard<std::mutex> lock(e->mu);
  return e->latest;
}

oar_status_t* EventQuery(int32_t device, oar_event_t event, bool* complete) {
  return Guard([&] {
    CheckOut(complete, "complete");
    SimDevice& d = Dev(device);
    d.CheckAlive("event_query");
    const std::shared_ptr<Marker> marker = Latest(d, event);
    *complete = marker == nullptr || marker->done();
  });
}

oar_status_t* EventSynchronize(int32_t device, oar_event_t event) {
  return Guard([&] {
    SimDevice& d = Dev(device);
    DrainIfLost(d);
    d.CheckAlive("event_synchronize");
    const std::shared_ptr<Marker> marker = Latest(d, event);
    if (marker == nullptr) return;
    marker->Wait();
    ThrowIf(marker->error());
  });
}

// ---- profiler ----------------------------------------------------------------------------------------

oar_status_t* ProfilerStart(int32_t device) {
  return Guard([&] { Dev(device).profiler().Start(); });
}
oar_status_t* ProfilerStop(int32_t device) {
  return Guard([&] { Dev(device).profiler().Stop(); });
}
oar_status_t* ProfilerFlush(int32_t device, oar_activity_sink_t sink, void* context) {
  return Guard([&] {
    if (sink == nullptr) Throw(OAR_STATUS_INVALID_ARGUMENT, "profiler flush: sink must not be NULL");
    Dev(device).profiler().Flush(sink, context);
  });
}

const oar_device_api_t kDeviceApi = [] {
  oar_device_api_t d{};
  d.struct_size = OAR_DEVICE_API_STRUCT_SIZE;
  d.device_count = DeviceCount;
  d.device_attributes = DeviceAttributes;
  d.device_synchronize = DeviceSynchronize;
  d.malloc = Malloc;
  d.free = Free;
  d.host_malloc = nullptr;  // plain host memory serves async copies (they read it on the worker)
  d.host_free = nullptr;
  d.memory_stats = MemoryStats;
  d.memcpy_h2d = MemcpyH2D;
  d.memcpy_d2h = MemcpyD2H;
  d.memcpy_d2d = MemcpyD2D;
  d.memcpy_p2p = MemcpyP2P;
  d.memset = Memset;
  d.memcpy_h2d_async = MemcpyH2DAsync;
  d.memcpy_d2h_async = MemcpyD2HAsync;
  d.memcpy_d2d_async = MemcpyD2DAsync;
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

const oar_profiler_api_t kProfilerApi = [] {
  oar_profiler_api_t p{};
  p.struct_size = OAR_PROFILER_API_STRUCT_SIZE;
  p.start = ProfilerStart;
  p.stop = ProfilerStop;
  p.flush = ProfilerFlush;
  return p;
}();

}  // namespace

const oar_device_api_t* DeviceApi() { return &kDeviceApi; }
const oar_profiler_api_t* ProfilerApi() { return &kProfilerApi; }

oar_kernel_api_t MakeKernelApi(oar_status_t* (*register_kernels)(oar_kernel_registrar_t*)) {
  oar_kernel_api_t k{};
  k.struct_size = OAR_KERNEL_API_STRUCT_SIZE;
  k.register_kernels = register_kernels;
  k.supports = SupportsKernel;
  return k;
}

oar_plugin_api_t MakePluginApi(const char* name, const char* version, oar_status_t* (*initialize)(),
                               const oar_kernel_api_t* kernel, const oar_format_api_t* format) {
  oar_plugin_api_t p{};
  p.struct_size = OAR_PLUGIN_API_STRUCT_SIZE;
  p.abi_major = OAR_PLUGIN_ABI_MAJOR;
  p.abi_minor = OAR_PLUGIN_ABI_MINOR;
  p.name = name;
  p.version = version;
  p.vendor = "Oar (simulator)";
  p.initialize = initialize;
  p.shutdown = [] { Simulator::Shutdown(); };
  p.device = DeviceApi();
  p.kernel = kernel;
  p.format = format;
  p.ccl = CclApi();
  p.compiler = CompilerApi(name);
  p.profiler = ProfilerApi();
  return p;
}

}  // namespace oar::sim
