// The level_zero device table: thin guarded slots over Runtime / Device / Stream (runtime.h).
//
// Copies: Level Zero copies need memory the device can reach, so plain (pageable) host buffers are
// staged through pinned zeMemAllocHost buffers: h2d copies the source into the staging buffer when the
// copy is enqueued, d2h copies out of it in a host callback once the stream gets there. Buffers from
// host_malloc (and any other USM pointer) are copied directly.
#include "plugins/level_zero/device_api.h"

#include <cstring>

#include "oar/plugin/cpp/status.hpp"
#include "plugins/level_zero/runtime.h"
#include "plugins/level_zero/ze_loader.h"
#include "plugins/level_zero/ze_status.h"

namespace oar::level_zero {
namespace {

using sdk::Guard;
using sdk::StatusError;

Device& Dev(int32_t ordinal) { return Runtime::Get().device(ordinal); }

void CheckOut(const void* out, const char* what) {
  if (out == nullptr) throw StatusError(OAR_STATUS_INVALID_ARGUMENT, std::string(what) + " must not be NULL");
}

void CheckBuffers(const Device& d, const void* dst, const void* src, size_t size) {
  if (size > 0 && (dst == nullptr || src == nullptr)) {
    throw StatusError(OAR_STATUS_INVALID_ARGUMENT,
                      d.where() + ": copy of " + std::to_string(size) + " bytes with a NULL buffer");
  }
}

void AppendCopy(Stream& s, void* dst, const void* src, size_t size, std::shared_ptr<void> keep = nullptr) {
  s.Append(
      "zeCommandListAppendMemoryCopy",
      [&](ze_command_list_handle_t list) {
        return Ze().zeCommandListAppendMemoryCopy(list, dst, src, size, nullptr, 0, nullptr);
      },
      std::move(keep));
}

void CopyH2D(Stream& s, void* dst, const void* src, size_t size) {
  CheckBuffers(s.device(), dst, src, size);
  if (size == 0) return;
  if (s.device().IsUsm(src)) return AppendCopy(s, dst, src, size);
  std::shared_ptr<void> staging = s.device().Staging(size);
  std::memcpy(staging.get(), src, size);
  AppendCopy(s, dst, staging.get(), size, staging);
}

/// Owned by the host callback that finishes a staged d2h copy.
struct StagedRead {
  std::shared_ptr<void> staging;
  void* dst;
  size_t size;
};

void FinishStagedRead(void* user_data) {
  auto* read = static_cast<StagedRead*>(user_data);
  std::memcpy(read->dst, read->staging.get(), read->size);
  delete read;
}

void CopyD2H(Stream& s, void* dst, const void* src, size_t size) {
  CheckBuffers(s.device(), dst, src, size);
  if (size == 0) return;
  if (s.device().IsUsm(dst)) return AppendCopy(s, dst, src, size);
  auto read = std::make_unique<StagedRead>(StagedRead{s.device().Staging(size), dst, size});
  AppendCopy(s, read->staging.get(), src, size, read->staging);
  s.AddCallback(FinishStagedRead, read.get());
  read.release();  // FinishStagedRead owns it now
}

void CopyD2D(Stream& s, void* dst, const void* src, size_t size) {
  CheckBuffers(s.device(), dst, src, size);
  if (size > 0) AppendCopy(s, dst, src, size);
}

void Memset(Stream& s, void* dst, uint8_t value, size_t size) {
  if (size == 0) return;
  CheckBuffers(s.device(), dst, dst, size);
  s.Append("zeCommandListAppendMemoryFill", [&](ze_command_list_handle_t list) {
    return Ze().zeCommandListAppendMemoryFill(list, dst, &value, 1, size, nullptr, 0, nullptr);
  });
}

/// A synchronous slot: after every stream of the device, on the device's synchronous stream.
template <typename Fn>
oar_status_t* Sync(int32_t device, Fn&& fn) {
  return Guard([&] {
    Device& d = Dev(device);
    d.Synchronize();
    fn(d.sync_stream());
    d.sync_stream().Synchronize();
  });
}

// ---- enumeration and memory ---------------------------------------------------------------------------

oar_status_t* DeviceCount(int32_t* count) {
  return Guard([&]() -> oar_status_t* {
    CheckOut(count, "count");
    *count = 0;
    const Runtime& rt = Runtime::Get();
    *count = rt.count();
    if (rt.count() == 0) return sdk::MakeStatus(OAR_STATUS_UNAVAILABLE, rt.unavailable_reason());
    return nullptr;
  });
}

oar_status_t* DeviceAttributes(int32_t device, const oar_attr_t** attrs, int32_t* num_attrs) {
  return Guard([&] {
    CheckOut(attrs, "attrs");
    CheckOut(num_attrs, "num_attrs");
    const std::vector<oar_attr_t>& a = Dev(device).attributes();
    *attrs = a.data();
    *num_attrs = static_cast<int32_t>(a.size());
  });
}

oar_status_t* DeviceSynchronize(int32_t device) {
  return Guard([&] { Dev(device).Synchronize(); });
}

oar_status_t* Malloc(int32_t device, size_t size, void** ptr) {
  return Guard([&] {
    CheckOut(ptr, "ptr");
    *ptr = Dev(device).Malloc(size);
  });
}
oar_status_t* Free(int32_t device, void* ptr) {
  return Guard([&] { Dev(device).Free(ptr); });
}
oar_status_t* HostMalloc(int32_t device, size_t size, void** ptr) {
  return Guard([&] {
    CheckOut(ptr, "ptr");
    *ptr = Dev(device).HostMalloc(size);
  });
}
oar_status_t* HostFree(int32_t device, void* ptr) {
  return Guard([&] { Dev(device).HostFree(ptr); });
}
oar_status_t* MemoryStats(int32_t device, oar_memory_stats_t* stats) {
  return Guard([&] {
    CheckOut(stats, "stats");
    Dev(device).Stats(stats);
  });
}

// ---- copies -----------------------------------------------------------------------------------------------

oar_status_t* MemcpyH2D(int32_t device, void* dst, const void* src, size_t size) {
  return Sync(device, [&](Stream& s) { CopyH2D(s, dst, src, size); });
}
oar_status_t* MemcpyD2H(int32_t device, void* dst, const void* src, size_t size) {
  return Sync(device, [&](Stream& s) { CopyD2H(s, dst, src, size); });
}
oar_status_t* MemcpyD2D(int32_t device, void* dst, const void* src, size_t size) {
  return Sync(device, [&](Stream& s) { CopyD2D(s, dst, src, size); });
}
oar_status_t* MemsetSync(int32_t device, void* dst, uint8_t value, size_t size) {
  return Sync(device, [&](Stream& s) { Memset(s, dst, value, size); });
}

oar_status_t* MemcpyH2DAsync(int32_t device, oar_stream_t stream, void* dst, const void* src, size_t size) {
  return Guard([&] { CopyH2D(Dev(device).Checked(stream), dst, src, size); });
}
oar_status_t* MemcpyD2HAsync(int32_t device, oar_stream_t stream, void* dst, const void* src, size_t size) {
  return Guard([&] { CopyD2H(Dev(device).Checked(stream), dst, src, size); });
}
oar_status_t* MemcpyD2DAsync(int32_t device, oar_stream_t stream, void* dst, const void* src, size_t size) {
  return Guard([&] { CopyD2D(Dev(device).Checked(stream), dst, src, size); });
}
oar_status_t* MemsetAsync(int32_t device, oar_stream_t stream, void* dst, uint8_t value, size_t size) {
  return Guard([&] { Memset(Dev(device).Checked(stream), dst, value, size); });
}

// ---- streams and events -----------------------------------------------------------------------------------

oar_status_t* StreamCreate(int32_t device, oar_stream_t* stream) {
  return Guard([&] {
    CheckOut(stream, "stream");
    *stream = reinterpret_cast<oar_stream_t>(Dev(device).CreateStream());
  });
}
oar_status_t* StreamDestroy(int32_t device, oar_stream_t stream) {
  return Guard([&] {
    Device& d = Dev(device);
    d.DestroyStream(reinterpret_cast<Stream*>(stream));
  });
}
oar_status_t* StreamSynchronize(int32_t device, oar_stream_t stream) {
  return Guard([&] { Dev(device).Checked(stream).Synchronize(); });
}
oar_status_t* StreamQuery(int32_t device, oar_stream_t stream, bool* idle) {
  return Guard([&] {
    CheckOut(idle, "idle");
    *idle = Dev(device).Checked(stream).Query();
  });
}
oar_status_t* StreamWaitEvent(int32_t device, oar_stream_t stream, oar_event_t event) {
  return Guard([&] {
    Device& d = Dev(device);
    Stream& s = d.Checked(stream);
    Event& e = d.Checked(event);
    EventRef current;
    {
      std::lock_guard<std::mutex> lock(e.mu);
      current = e.current;
    }
    if (current) s.WaitEvent(current);  // an event never recorded is already complete
  });
}
oar_status_t* StreamAddCallback(int32_t device, oar_stream_t stream, oar_host_fn_t fn, void* user_data) {
  return Guard([&] {
    if (fn == nullptr) throw StatusError(OAR_STATUS_INVALID_ARGUMENT, "callback function must not be NULL");
    Dev(device).Checked(stream).AddCallback(fn, user_data);
  });
}

oar_status_t* EventCreate(int32_t device, oar_event_t* event) {
  return Guard([&] {
    CheckOut(event, "event");
    *event = reinterpret_cast<oar_event_t>(Dev(device).CreateEvent());
  });
}
oar_status_t* EventDestroy(int32_t device, oar_event_t event) {
  return Guard([&] {
    Device& d = Dev(device);
    d.DestroyEvent(&d.Checked(event));
  });
}
oar_status_t* EventRecord(int32_t device, oar_event_t event, oar_stream_t stream) {
  return Guard([&] {
    Device& d = Dev(device);
    Event& e = d.Checked(event);
    EventRef marker = d.Checked(stream).Record();
    std::lock_guard<std::mutex> lock(e.mu);
    e.current = std::move(marker);  // the previous record stays alive where a stream still refers to it
  });
}
oar_status_t* EventQuery(int32_t device, oar_event_t event, bool* complete) {
  return Guard([&] {
    CheckOut(complete, "complete");
    Device& d = Dev(device);
    Event& e = d.Checked(event);
    EventRef current;
    {
      std::lock_guard<std::mutex> lock(e.mu);
      current = e.current;
    }
    if (!current) {
      *complete = true;
      return;
    }
    const ze_result_t r = Ze().zeEventQueryStatus(current->handle);
    *complete = r == ZE_RESULT_SUCCESS;
    if (r != ZE_RESULT_NOT_READY) Check(r, "zeEventQueryStatus", d.where());
  });
}
oar_status_t* EventSynchronize(int32_t device, oar_event_t event) {
  return Guard([&] {
    Device& d = Dev(device);
    Event& e = d.Checked(event);
    EventRef current;
    {
      std::lock_guard<std::mutex> lock(e.mu);
      current = e.current;
    }
    if (current) Check(Ze().zeEventHostSynchronize(current->handle, UINT64_MAX), "zeEventHostSynchronize", d.where());
  });
}

}  // namespace

const oar_device_api_t* DeviceApi() {
  static const oar_device_api_t api = [] {
    oar_device_api_t a{};
    a.struct_size = OAR_DEVICE_API_STRUCT_SIZE;
    a.device_count = DeviceCount;
    a.device_attributes = DeviceAttributes;
    a.device_synchronize = DeviceSynchronize;
    a.malloc = Malloc;
    a.free = Free;
    a.host_malloc = HostMalloc;
    a.host_free = HostFree;
    a.memory_stats = MemoryStats;
    a.memcpy_h2d = MemcpyH2D;
    a.memcpy_d2h = MemcpyD2H;
    a.memcpy_d2d = MemcpyD2D;
    a.memcpy_p2p = nullptr;  // the host stages peer copies through host memory
    a.memset = MemsetSync;
    a.memcpy_h2d_async = MemcpyH2DAsync;
    a.memcpy_d2h_async = MemcpyD2HAsync;
    a.memcpy_d2d_async = MemcpyD2DAsync;
    a.memcpy_p2p_async = nullptr;
    a.memset_async = MemsetAsync;
    a.stream_create = StreamCreate;
    a.stream_destroy = StreamDestroy;
    a.stream_synchronize = StreamSynchronize;
    a.stream_query = StreamQuery;
    a.stream_wait_event = StreamWaitEvent;
    a.stream_add_callback = StreamAddCallback;
    a.event_create = EventCreate;
    a.event_destroy = EventDestroy;
    a.event_record = EventRecord;
    a.event_query = EventQuery;
    a.event_synchronize = EventSynchronize;
    return a;
  }();
  return &api;
}

// ---- kernels on a stream -----------------------------------------------------------------------------------

namespace {

/// LaunchTarget on one Level Zero stream.
class StreamTarget : public LaunchTarget {
 public:
  explicit StreamTarget(Stream& s) : s_(s) {}
  void Launch(const std::string& name, std::span<const KernelArg> args, const Grid& grid) override {
    s_.device().Launch(s_, name, args, grid);
  }
  void ReadToHost(void* dst, const void* src, size_t bytes) override {
    CopyD2H(s_, dst, src, bytes);
    s_.Synchronize();
  }
  uint32_t MaxGroups(int dim) const override { return s_.device().max_groups(dim); }

 private:
  Stream& s_;
};

}  // namespace

oar_status_t* LaunchKernel(const oar_kernel_call_t* call) {
  return Guard([&] {
    if (call == nullptr) throw StatusError(OAR_STATUS_INVALID_ARGUMENT, "kernel call must not be NULL");
    Device& d = Dev(call->device);
    StreamTarget target(d.Checked(call->stream));
    Run(*call, target);
  });
}

}  // namespace oar::level_zero
