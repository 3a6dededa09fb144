// Level Zero drivers, devices, memory, events, streams and the kernel module (see runtime.h).
#include "plugins/level_zero/runtime.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "oar/plugin/cpp/kernel.hpp"
#include "oar/plugin/cpp/status.hpp"
#include "plugins/level_zero/kernels/layout.h"
#include "plugins/level_zero/spirv_blob.h"
#include "plugins/level_zero/ze_loader.h"
#include "plugins/level_zero/ze_status.h"

namespace oar::level_zero {
namespace {

using sdk::StatusError;

constexpr size_t kAlignment = 256;  // every device allocation; reported as the "alignment" attribute
constexpr uint64_t kForever = UINT64_MAX;

[[noreturn]] void Invalid(const std::string& message) { throw StatusError(OAR_STATUS_INVALID_ARGUMENT, message); }

}  // namespace

// ---- EventPool ------------------------------------------------------------------------------------------

EventRef EventPool::Acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) {
    ze_event_pool_desc_t desc{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr, ZE_EVENT_POOL_FLAG_HOST_VISIBLE,
                              kEventsPerPool};
    ze_device_handle_t dev = device_.handle();
    ze_event_pool_handle_t pool = nullptr;
    Check(Ze().zeEventPoolCreate(device_.context(), &desc, 1, &dev, &pool), "zeEventPoolCreate", device_.where());
    pools_.push_back(pool);
    for (uint32_t i = 0; i < kEventsPerPool; ++i) {
      ze_event_desc_t ed{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, i, ZE_EVENT_SCOPE_FLAG_HOST, ZE_EVENT_SCOPE_FLAG_HOST};
      ze_event_handle_t e = nullptr;
      Check(Ze().zeEventCreate(pool, &ed, &e), "zeEventCreate", device_.where());
      free_.push_back(e);
    }
  }
  ze_event_handle_t e = free_.back();
  free_.pop_back();
  // Returned only once nothing on the device refers to it any more (see Stream::Release): reset it then.
  return EventRef(new PooledEvent{e}, [this](PooledEvent* p) {
    if (Ze().zeEventHostReset(p->handle) == ZE_RESULT_SUCCESS) {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(p->handle);
    } else {
      Ze().zeEventDestroy(p->handle);  // never hand out an event in an unknown state
    }
    delete p;
  });
}

// ---- Stream ---------------------------------------------------------------------------------------------

Stream::Stream(Device& device) : device_(device) {
  ze_command_queue_desc_t desc{
      ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, nullptr, device.compute_ordinal(), 0, 0, ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
      ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  Check(Ze().zeCommandListCreateImmediate(device.context(), device.handle(), &desc, &list_),
        "zeCommandListCreateImmediate", device.where());
}

Stream::~Stream() {
  try {
    Synchronize();
  } catch (...) {  // destroying a stream whose device failed: release what we can
  }
  {
    std::lock_guard<std::mutex> lock(cb_mu_);
    stop_ = true;
  }
  cb_cv_.notify_all();
  if (cb_thread_.joinable()) cb_thread_.join();
  Ze().zeCommandListDestroy(list_);
}

void Stream::AppendLocked(const char* call, ze_result_t appended, std::shared_ptr<void> keep) {
  Check(appended, call, device_.where());
  if (keep) keep_.emplace_back(next_seq_++, std::move(keep));
  last_marker_.reset();
  Check(Ze().zeCommandListAppendBarrier(list_, nullptr, 0, nullptr), "zeCommandListAppendBarrier", device_.where());
}

std::pair<EventRef, uint64_t> Stream::MarkerLocked() {
  if (!last_marker_) {
    EventRef marker = device_.events().Acquire();
    Check(Ze().zeCommandListAppendBarrier(list_, marker->handle, 0, nullptr), "zeCommandListAppendBarrier",
          device_.where());
    keep_.emplace_back(next_seq_++, marker);
    last_marker_ = marker;
  }
  return {last_marker_, next_seq_};
}

void Stream::Release(uint64_t upto) {
  // Everything kept before the marker (sequence numbers below `upto`) has completed.
  std::lock_guard<std::mutex> lock(mu_);
  while (!keep_.empty() && keep_.front().first < upto) keep_.pop_front();
}

void Stream::Synchronize() {
  std::pair<EventRef, uint64_t> marker;
  {
    std::lock_guard<std::mutex> lock(mu_);
    marker = MarkerLocked();
  }
  Check(Ze().zeEventHostSynchronize(marker.first->handle, kForever), "zeEventHostSynchronize", device_.where());
  Release(marker.second);
}

bool Stream::Query() {
  std::pair<EventRef, uint64_t> marker;
  {
    std::lock_guard<std::mutex> lock(mu_);
    marker = MarkerLocked();
  }
  const ze_result_t r = Ze().zeEventQueryStatus(marker.first->handle);
  if (r == ZE_RESULT_NOT_READY) return false;
  Check(r, "zeEventQueryStatus", device_.where());
  Release(marker.second);
  return true;
}

EventRef Stream::Record() {
  std::lock_guard<std::mutex> lock(mu_);
  return MarkerLocked().first;
}

void Stream::WaitEvent(const EventRef& event) {
  std::lock_guard<std::mutex> lock(mu_);
  ze_event_handle_t h = event->handle;
  AppendLocked("zeCommandListAppendWaitOnEvents", Ze().zeCommandListAppendWaitOnEvents(list_, 1, &h), event);
}

void Stream::AddCallback(oar_host_fn_t fn, void* user_data) {
  Callback cb{device_.events().Acquire(), device_.events().Acquire(), fn, user_data};
  {
    std::lock_guard<std::mutex> lock(mu_);
    AppendLocked("zeCommandListAppendSignalEvent", Ze().zeCommandListAppendSignalEvent(list_, cb.reached->handle),
                 cb.reached);
    ze_event_handle_t done = cb.done->handle;
    AppendLocked("zeCommandListAppendWaitOnEvents", Ze().zeCommandListAppendWaitOnEvents(list_, 1, &done), cb.done);
  }
  std::lock_guard<std::mutex> lock(cb_mu_);
  callbacks_.push_back(std::move(cb));
  if (!cb_thread_.joinable()) cb_thread_ = std::thread([this] { CallbackLoop(); });
  cb_cv_.notify_all();
}

void Stream::CallbackLoop() {
  for (;;) {
    Callback cb;
    {
      std::unique_lock<std::mutex> lock(cb_mu_);
      cb_cv_.wait(lock, [&] { return stop_ || !callbacks_.empty(); });
      if (callbacks_.empty()) return;  // stop_ and nothing left
      cb = std::move(callbacks_.front());
      callbacks_.pop_front();
    }
    const ze_result_t r = Ze().zeEventHostSynchronize(cb.reached->handle, kForever);
    if (r != ZE_RESULT_SUCCESS) {
      sdk::Log(OAR_LOG_ERROR, "level_zero", Describe(r, "zeEventHostSynchronize (host callback)", device_.where()));
    }
    cb.fn(cb.user_data);  // runs even after a device error, so the host never leaks what it waits for
    const ze_result_t s = Ze().zeEventHostSignal(cb.done->handle);
    if (s != ZE_RESULT_SUCCESS) {
      sdk::Log(OAR_LOG_ERROR, "level_zero", Describe(s, "zeEventHostSignal (host callback)", device_.where()));
    }
  }
}

// ---- Device ---------------------------------------------------------------------------------------------

Device::Device(int32_t ordinal, ze_driver_handle_t driver, ze_device_handle_t device)
    : ordinal_(ordinal), driver_(driver), device_(device) {
  where_ = "level_zero:" + std::to_string(ordinal);
  ze_device_properties_t props{};
  props.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
  Check(Ze().zeDeviceGetProperties(device, &props), "zeDeviceGetProperties", where_);
  name_ = props.name;
  where_ += " (" + name_ + ")";
  char vendor[32];
  std::snprintf(vendor, sizeof(vendor), "PCI vendor 0x%04x", props.vendorId);
  vendor_ = props.vendorId == 0x8086 ? "Intel" : vendor;

  ze_device_compute_properties_t compute{};
  compute.stype = ZE_STRUCTURE_TYPE_DEVICE_COMPUTE_PROPERTIES;
  Check(Ze().zeDeviceGetComputeProperties(device, &compute), "zeDeviceGetComputeProperties", where_);
  max_groups_[0] = compute.maxGroupCountX;
  max_groups_[1] = compute.maxGroupCountY;
  max_groups_[2] = compute.maxGroupCountZ;
  if (compute.maxTotalGroupSize < OAR_L0_REDUCE_GROUP) {
    throw StatusError(OAR_STATUS_UNAVAILABLE, where_ + ": work-groups of at most " +
                                                  std::to_string(compute.maxTotalGroupSize) +
                                                  " items; the kernels need 256");
  }

  uint32_t count = 0;
  Check(Ze().zeDeviceGetMemoryProperties(device, &count, nullptr), "zeDeviceGetMemoryProperties", where_);
  std::vector<ze_device_memory_properties_t> memory(count);
  for (auto& m : memory) m = {ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES, nullptr};
  Check(Ze().zeDeviceGetMemoryProperties(device, &count, memory.data()), "zeDeviceGetMemoryProperties", where_);
  for (const auto& m : memory) total_memory_ += m.totalSize;

  count = 0;
  Check(Ze().zeDeviceGetCommandQueueGroupProperties(device, &count, nullptr), "zeDeviceGetCommandQueueGroupProperties",
        where_);
  std::vector<ze_command_queue_group_properties_t> groups(count);
  for (auto& g : groups) g = {ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES, nullptr};
  Check(Ze().zeDeviceGetCommandQueueGroupProperties(device, &count, groups.data()),
        "zeDeviceGetCommandQueueGroupProperties", where_);
  const auto compute_group = std::find_if(groups.begin(), groups.end(), [](const auto& g) {
    return (g.flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE) != 0;
  });
  if (compute_group == groups.end()) {
    throw StatusError(OAR_STATUS_UNAVAILABLE, where_ + ": no command queue group with the COMPUTE flag");
  }
  compute_ordinal_ = static_cast<uint32_t>(compute_group - groups.begin());

  ze_context_desc_t cdesc{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
  Check(Ze().zeContextCreate(driver, &cdesc, &context_), "zeContextCreate", where_);

  // Attributes: the strings and arrays live in members, valid until shutdown as the ABI requires.
  const int64_t eus = static_cast<int64_t>(props.numSlices) * props.numSubslicesPerSlice * props.numEUsPerSubslice;
  dtypes_ = {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT16, OAR_DTYPE_INT32, OAR_DTYPE_INT64, OAR_DTYPE_BOOL};
  attrs_ = {sdk::StringAttr(OAR_DEVICE_ATTR_NAME, name_),
            sdk::StringAttr(OAR_DEVICE_ATTR_VENDOR, vendor_),
            sdk::IntAttr(OAR_DEVICE_ATTR_TOTAL_MEMORY, static_cast<int64_t>(total_memory_)),
            sdk::IntAttr(OAR_DEVICE_ATTR_COMPUTE_UNITS, eus),
            sdk::IntAttr(OAR_DEVICE_ATTR_ALIGNMENT, static_cast<int64_t>(kAlignment)),
            sdk::BoolAttr(OAR_DEVICE_ATTR_HOST_ACCESSIBLE, false),
            sdk::IntsAttr(OAR_DEVICE_ATTR_DTYPES, dtypes_),
            sdk::IntAttr("max_group_size", compute.maxTotalGroupSize),
            sdk::IntAttr("max_shared_local_memory", compute.maxSharedLocalMemory),
            sdk::IntAttr("core_clock_mhz", props.coreClockRate)};

  sync_stream_ = std::make_unique<Stream>(*this);
  BuildModule();
}

void Device::BuildModule() { module_ = CreateModule(kKernelsSpirv, kKernelsSpirvSize, "the embedded kernels"); }

ze_module_handle_t Device::CreateModule(const void* spirv, size_t size, const std::string& what) {
  if (size < 20 || size % 4 != 0) {
    throw StatusError(OAR_STATUS_INVALID_ARGUMENT,
                      where_ + ": " + what + " is not a SPIR-V module (" + std::to_string(size) + " bytes)");
  }
  ze_device_module_properties_t module_props{};
  module_props.stype = ZE_STRUCTURE_TYPE_DEVICE_MODULE_PROPERTIES;
  Check(Ze().zeDeviceGetModuleProperties(device_, &module_props), "zeDeviceGetModuleProperties", where_);
  uint32_t version = 0;  // word 1 of the module: 0x00MMmm00
  std::memcpy(&version, static_cast<const uint8_t*>(spirv) + 4, sizeof(version));
  const uint32_t major = (version >> 16) & 0xff, minor = (version >> 8) & 0xff;
  const uint32_t needed = (major << 16) | minor;  // ZE_MAKE_VERSION's layout
  if (module_props.spirvVersionSupported < needed) {
    throw StatusError(OAR_STATUS_UNAVAILABLE,
                      where_ + ": the driver takes SPIR-V up to " +
                          std::to_string(ZE_MAJOR_VERSION(module_props.spirvVersionSupported)) + "." +
                          std::to_string(ZE_MINOR_VERSION(module_props.spirvVersionSupported)) +
                          ", " + what + " are SPIR-V " + std::to_string(major) + "." + std::to_string(minor));
  }
  ze_module_desc_t desc{ZE_STRUCTURE_TYPE_MODULE_DESC, nullptr, ZE_MODULE_FORMAT_IL_SPIRV, size,
                        static_cast<const uint8_t*>(spirv), "", nullptr};
  ze_module_build_log_handle_t log = nullptr;
  ze_module_handle_t module = nullptr;
  const ze_result_t r = Ze().zeModuleCreate(context_, device_, &desc, &module, &log);
  std::string text;
  if (log != nullptr) {
    size_t size = 0;
    if (Ze().zeModuleBuildLogGetString(log, &size, nullptr) == ZE_RESULT_SUCCESS && size > 0) {
      text.resize(size);
      if (Ze().zeModuleBuildLogGetString(log, &size, text.data()) != ZE_RESULT_SUCCESS) text.clear();
      text.resize(std::strlen(text.c_str()));
    }
    Ze().zeModuleBuildLogDestroy(log);
  }
  if (r != ZE_RESULT_SUCCESS) {
    throw StatusError(StatusCodeOf(r), Describe(r, ("zeModuleCreate (" + what + ")").c_str(), where_) +
                                           (text.empty() ? "" : "; build log: " + text));
  }
  return module;
}

void* Device::Malloc(size_t size) {
  ze_device_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
  void* ptr = nullptr;
  const size_t bytes = std::max<size_t>(size, 1);  // size 0 still gets a unique pointer
  const ze_result_t r = Ze().zeMemAllocDevice(context_, &desc, bytes, kAlignment, device_, &ptr);
  if (r != ZE_RESULT_SUCCESS) {
    std::lock_guard<std::mutex> lock(mem_mu_);
    throw StatusError(StatusCodeOf(r), Describe(r, "zeMemAllocDevice", where_) + " (requested " + std::to_string(size) +
                                           " bytes, " + std::to_string(in_use_) + " in use)");
  }
  std::lock_guard<std::mutex> lock(mem_mu_);
  allocations_[ptr] = size;
  in_use_ += size;
  peak_ = std::max(peak_, in_use_);
  return ptr;
}

void Device::Free(void* ptr) {
  if (ptr == nullptr) return;
  // zeMemFree needs the device to be done with the memory; like cudaFree, wait for the device first.
  Synchronize();
  size_t size = 0;
  {
    std::lock_guard<std::mutex> lock(mem_mu_);
    auto it = allocations_.find(ptr);
    if (it == allocations_.end()) Invalid(where_ + ": free of a pointer this device did not allocate");
    size = it->second;
    allocations_.erase(it);
    in_use_ -= size;
  }
  Check(Ze().zeMemFree(context_, ptr), "zeMemFree", where_);
}

void* Device::HostMalloc(size_t size) {
  ze_host_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, nullptr, 0};
  void* ptr = nullptr;
  Check(Ze().zeMemAllocHost(context_, &desc, std::max<size_t>(size, 1), 64, &ptr), "zeMemAllocHost", where_);
  return ptr;
}

void Device::HostFree(void* ptr) {
  if (ptr == nullptr) return;
  Synchronize();  // an async copy may still read or write it
  Check(Ze().zeMemFree(context_, ptr), "zeMemFree (host)", where_);
}

std::shared_ptr<void> Device::Staging(size_t size) {
  return std::shared_ptr<void>(HostMalloc(size), [ctx = context_](void* p) { Ze().zeMemFree(ctx, p); });
}

bool Device::OwnsRange(const void* ptr, size_t size) {
  std::lock_guard<std::mutex> lock(mem_mu_);
  auto it = allocations_.upper_bound(ptr);
  if (it == allocations_.begin()) return false;
  --it;
  const auto base = reinterpret_cast<uintptr_t>(it->first), p = reinterpret_cast<uintptr_t>(ptr);
  return p - base <= it->second && size <= it->second - (p - base);
}

bool Device::IsUsm(const void* ptr) const {
  ze_memory_allocation_properties_t props{ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES, nullptr};
  ze_device_handle_t owner = nullptr;
  Check(Ze().zeMemGetAllocProperties(context_, ptr, &props, &owner), "zeMemGetAllocProperties", where_);
  return props.type != ZE_MEMORY_TYPE_UNKNOWN;
}

void Device::Stats(oar_memory_stats_t* stats) {
  std::lock_guard<std::mutex> lock(mem_mu_);
  stats->bytes_in_use = in_use_;
  stats->peak_bytes_in_use = peak_;
  stats->bytes_limit = total_memory_;
  stats->num_allocs = allocations_.size();
  stats->bytes_in_use_is_set = stats->peak_bytes_in_use_is_set = stats->bytes_limit_is_set = stats->num_allocs_is_set =
      true;
}

Stream* Device::CreateStream() {
  auto s = std::make_shared<Stream>(*this);
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_[s.get()] = s;
  return s.get();
}

void Device::DestroyStream(Stream* s) {
  std::shared_ptr<Stream> last;
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    auto it = streams_.find(s);
    if (it == streams_.end()) Invalid(where_ + ": unknown stream handle");
    last = std::move(it->second);
    streams_.erase(it);
  }
  last.reset();  // waits for the stream's work unless a concurrent Synchronize() still holds it
}

Stream& Device::Checked(oar_stream_t s) {
  auto* stream = reinterpret_cast<Stream*>(s);
  std::lock_guard<std::mutex> lock(streams_mu_);
  if (streams_.count(stream) == 0) Invalid(where_ + ": unknown stream handle");
  return *stream;
}

Event* Device::CreateEvent() {
  auto* e = new Event;
  std::lock_guard<std::mutex> lock(streams_mu_);
  events_live_.insert(e);
  return e;
}

void Device::DestroyEvent(Event* e) {
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    events_live_.erase(e);
  }
  delete e;  // a pending record stays alive in the stream that signals it
}

Event& Device::Checked(oar_event_t e) {
  auto* event = reinterpret_cast<Event*>(e);
  std::lock_guard<std::mutex> lock(streams_mu_);
  if (events_live_.count(event) == 0) Invalid(where_ + ": unknown event handle");
  return *event;
}

void Device::Synchronize() {
  std::vector<std::shared_ptr<Stream>> streams;
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    for (const auto& [raw, stream] : streams_) streams.push_back(stream);
  }
  for (const std::shared_ptr<Stream>& s : streams) s->Synchronize();
  sync_stream_->Synchronize();
}

Device::Kernel& Device::GetKernel(const std::string& name) {
  std::lock_guard<std::mutex> lock(module_mu_);
  if (module_ == nullptr) BuildModule();
  std::unique_ptr<Kernel>& k = kernels_[name];
  if (!k) {
    auto created = std::make_unique<Kernel>();
    ze_kernel_desc_t desc{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, name.c_str()};
    Check(Ze().zeKernelCreate(module_, &desc, &created->handle), ("zeKernelCreate(" + name + ")").c_str(), where_);
    k = std::move(created);
  }
  return *k;
}

void Device::Launch(Stream& stream, const std::string& name, std::span<const KernelArg> args, const Grid& grid) {
  Launch(stream, GetKernel(name), args, grid, "kernel " + name);
}

void Device::Launch(Stream& stream, Kernel& k, std::span<const KernelArg> args, const Grid& grid,
                    const std::string& name) {
  std::lock_guard<std::mutex> lock(k.mu);
  const std::string what = where_ + ", " + name;
  Check(Ze().zeKernelSetGroupSize(k.handle, grid.local[0], grid.local[1], grid.local[2]), "zeKernelSetGroupSize", what);
  for (size_t i = 0; i < args.size(); ++i) {
    const void* value = args[i].kind == KernelArg::kPointer ? static_cast<const void*>(&args[i].value) : args[i].value;
    Check(Ze().zeKernelSetArgumentValue(k.handle, static_cast<uint32_t>(i), args[i].size, value),
          "zeKernelSetArgumentValue", what + ", argument " + std::to_string(i));
  }
  const ze_group_count_t groups{grid.groups[0], grid.groups[1], grid.groups[2]};
  stream.Append("zeCommandListAppendLaunchKernel", [&](ze_command_list_handle_t list) {
    return Ze().zeCommandListAppendLaunchKernel(list, k.handle, &groups, nullptr, 0, nullptr);
  });
}

// ---- Runtime --------------------------------------------------------------------------------------------

Runtime& Runtime::Get() {
  // Never destroyed: at process exit the Level Zero loader and driver may already be gone, and a
  // destructor waiting on their events could hang or crash. The OS reclaims everything.
  static Runtime* runtime = new Runtime;
  return *runtime;
}

Runtime::Runtime() {
  const ZeLoader& loader = Loader();
  if (!loader.ok()) {  // no libze1: the plugin still loads, with 0 devices and this reason
    reason_ = loader.error;
    return;
  }
  const ze_result_t init = Ze().zeInit(ZE_INIT_FLAG_GPU_ONLY);
  if (init != ZE_RESULT_SUCCESS) {
    reason_ = Describe(init, "zeInit", "") +
              " (the Level Zero loader found no GPU driver, or no driver found a device: Intel's GPU "
              "compute runtime is packaged as intel-level-zero-gpu or libze-intel-gpu1 depending on the "
              "distribution)";
    return;
  }
  uint32_t num_drivers = 0;
  ze_result_t r = Ze().zeDriverGet(&num_drivers, nullptr);
  std::vector<ze_driver_handle_t> drivers(num_drivers);
  if (r == ZE_RESULT_SUCCESS && num_drivers > 0) r = Ze().zeDriverGet(&num_drivers, drivers.data());
  if (r != ZE_RESULT_SUCCESS) {
    reason_ = Describe(r, "zeDriverGet", "");
    return;
  }
  for (ze_driver_handle_t driver : drivers) {
    uint32_t n = 0;
    if (Ze().zeDeviceGet(driver, &n, nullptr) != ZE_RESULT_SUCCESS) continue;
    std::vector<ze_device_handle_t> devices(n);
    if (Ze().zeDeviceGet(driver, &n, devices.data()) != ZE_RESULT_SUCCESS) continue;
    for (ze_device_handle_t d : devices) {
      ze_device_properties_t props{};
      props.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
      if (Ze().zeDeviceGetProperties(d, &props) != ZE_RESULT_SUCCESS || props.type != ZE_DEVICE_TYPE_GPU) continue;
      try {
        devices_.push_back(std::make_unique<Device>(static_cast<int32_t>(devices_.size()), driver, d));
      } catch (const StatusError& e) {  // a GPU we cannot drive is skipped and said why
        sdk::Log(OAR_LOG_WARNING, "level_zero", std::string("skipping a GPU: ") + e.what());
        if (reason_.empty()) reason_ = e.what();
      }
    }
  }
  if (devices_.empty() && reason_.empty()) {
    reason_ = "zeInit succeeded but the " + std::to_string(num_drivers) + " Level Zero driver(s) report no GPU";
  }
  if (!devices_.empty()) reason_.clear();
}

Device& Runtime::device(int32_t ordinal) {
  if (ordinal < 0 || ordinal >= count()) {
    Invalid("level_zero: device " + std::to_string(ordinal) + " does not exist (" + std::to_string(count()) +
            (count() == 1 ? " device)" : " devices)"));
  }
  return *devices_[static_cast<size_t>(ordinal)];
}

}  // namespace oar::level_zero
