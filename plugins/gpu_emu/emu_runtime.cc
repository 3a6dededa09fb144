// The GPU emulator's runtime (emu_runtime.h) and kernel execution (emu_kernel.h) on the host CPU.
#include "plugins/gpu_emu/emu_runtime.h"

#include <algorithm>
#include <atomic>
#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "plugins/gpu_emu/emu_kernel.h"

namespace oar::gpu::emu {
namespace {

// ===================================================================================================
// Configuration
// ===================================================================================================

int64_t EnvInt(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long parsed = std::strtoll(v, &end, 10);
  if (*end != '\0' || parsed < lo || parsed > hi) {  // said, not silently replaced
    std::fprintf(stderr, "gpu_emu: %s='%s' is not an integer in [%lld, %lld]; using %lld\n", name, v,
                 static_cast<long long>(lo), static_cast<long long>(hi), static_cast<long long>(fallback));
    return fallback;
  }
  return parsed;
}

struct Config {
  int devices;
  size_t memory_bytes;
  bool reverse_schedule;
};

const Config& Cfg() {
  static const Config c = [] {
    Config r{};
    r.devices = static_cast<int>(EnvInt("OAR_GPU_EMU_DEVICES", 2, 0, 16));
    r.memory_bytes = static_cast<size_t>(EnvInt("OAR_GPU_EMU_MEMORY_MB", 4096, 1, 1 << 20)) << 20;
    const char* s = std::getenv("OAR_GPU_EMU_SCHEDULE");
    r.reverse_schedule = s != nullptr && std::strcmp(s, "reverse") == 0;
    return r;
  }();
  return c;
}

// ===================================================================================================
// Errors: the calling thread's last error, and per-device sticky faults
// ===================================================================================================

thread_local emuError_t tls_last_error = emuSuccess;
thread_local int tls_device = 0;

emuError_t Record(emuError_t e) {
  if (e != emuSuccess) tls_last_error = e;
  return e;
}

struct Fault {
  std::atomic<int> code{emuSuccess};
  std::mutex mutex;
  std::string what;  // written once, before `code` is published
};

// ===================================================================================================
// Streams and events
// ===================================================================================================

struct EventState {
  std::mutex mutex;
  std::condition_variable cv;
  uint64_t recorded = 0;   // generation of the latest record
  uint64_t completed = 0;  // highest generation the stream has passed
};

struct Device;

}  // namespace

struct EmuEvent {
  int device;
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

struct EmuStream {
  explicit EmuStream(Device* d);
  ~EmuStream();
  void Enqueue(std::function<void()> task);
  /// Marks `event` complete up to `generation` when the stream gets there: in the same step that counts
  /// the stream's earlier work done, so no observer sees the event complete and the stream busy, or the
  /// reverse.
  void EnqueueEventRecord(std::shared_ptr<EventState> event, uint64_t generation);
  void Wait();  // until everything enqueued so far has run
  bool Idle();

  Device* device;
  int index;

 private:
  void Work();
  std::mutex mutex_;
  std::condition_variable cv_;
  struct Task {
    std::function<void()> run;
    std::shared_ptr<EventState> event;  // or an event record
    uint64_t generation = 0;
  };
  std::deque<Task> tasks_;
  uint64_t enqueued_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

namespace {

struct Device {
  int index = 0;
  Fault fault;
  std::mutex mutex;  // allocations and the stream list
  std::map<uintptr_t, size_t> allocations;
  size_t bytes_in_use = 0;
  std::vector<EmuStream*> streams;
  EmuStream* default_stream = nullptr;
};

std::vector<std::unique_ptr<Device>>& Devices() {
  static auto* d = [] {
    auto* v = new std::vector<std::unique_ptr<Device>>();  // never destroyed: streams may outlive exit
    for (int i = 0; i < Cfg().devices; ++i) {
      v->push_back(std::make_unique<Device>());
      v->back()->index = i;
    }
    return v;
  }();
  return *d;
}

Device* CurrentDevice() { return Devices()[static_cast<size_t>(tls_device)].get(); }

/// A sticky fault of the device, or success.
emuError_t Sticky(const Device* d) { return static_cast<emuError_t>(d->fault.code.load(std::memory_order_acquire)); }

void RaiseFault(Device* d, emuError_t code, const std::string& what) {
  std::lock_guard<std::mutex> lock(d->fault.mutex);
  if (d->fault.code.load() != emuSuccess) return;  // the first fault is the one reported
  d->fault.what = what;
  d->fault.code.store(code, std::memory_order_release);
}

/// The first fault's description on any device (for emuGetErrorString), or nullptr.
const char* FaultText(emuError_t code) {
  for (auto& d : Devices()) {
    if (d->fault.code.load(std::memory_order_acquire) == code) return d->fault.what.c_str();
  }
  return nullptr;
}

}  // namespace

EmuStream::EmuStream(Device* d) : device(d), index(d->index), worker_([this] { Work(); }) {}

EmuStream::~EmuStream() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void EmuStream::Enqueue(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(Task{std::move(task), nullptr, 0});
    ++enqueued_;
  }
  cv_.notify_all();
}

void EmuStream::EnqueueEventRecord(std::shared_ptr<EventState> event, uint64_t generation) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(Task{nullptr, std::move(event), generation});
    ++enqueued_;
  }
  cv_.notify_all();
}

void EmuStream::Wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t target = enqueued_;
  cv_.wait(lock, [&] { return done_ >= target; });
}

bool EmuStream::Idle() {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_ == enqueued_;
}

void EmuStream::Work() {
  tls_device = index;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, and everything enqueued has run
    Task task = std::move(tasks_.front());
    tasks_.pop_front();
    // After a fault the device runs nothing more (the real context is unusable too); host functions
    // and event records still complete so that waiting hosts are released and see the error.
    if (task.run) {
      lock.unlock();
      task.run();
      lock.lock();
    }
    ++done_;
    if (task.event) {  // lock order: stream, then event (nothing takes them the other way round)
      {
        std::lock_guard<std::mutex> event_lock(task.event->mutex);
        task.event->completed = std::max(task.event->completed, task.generation);
      }
      task.event->cv.notify_all();
    }
    cv_.notify_all();
  }
}

namespace {

EmuStream* Resolve(emuStream_t s) {
  Device* d = CurrentDevice();
  if (s != nullptr) return s;
  std::lock_guard<std::mutex> lock(d->mutex);
  if (d->default_stream == nullptr) d->default_stream = new EmuStream(d);  // like the legacy stream: lives forever
  return d->default_stream;
}

// ===================================================================================================
// Kernel execution: blocks in order on the stream's worker, threads as fibers switched at barriers
// ===================================================================================================

namespace ctx = boost::context;
constexpr size_t kFiberStack = 64 * 1024;

/// One block runs at a time in the whole emulator (the "single multiprocessor"): launches on different
/// streams still overlap with copies and host functions, but not with each other. That lets the state of
/// the running block — and `__shared__` variables, plain statics (emu_kernel.h) — be ordinary globals
/// rather than thread-locals, which in a dlopen'ed plugin cost a __tls_get_addr call per access.
std::mutex& ExecutionMutex() {
  static auto* m = new std::mutex();
  return *m;
}

/// Fiber stacks reused across blocks and launches, each with a guard page.
class StackPool {
 public:
  ctx::stack_context Take() {
    if (free_.empty()) return ctx::protected_fixedsize_stack(kFiberStack).allocate();
    ctx::stack_context s = free_.back();
    free_.pop_back();
    return s;
  }
  void Give(ctx::stack_context s) { free_.push_back(s); }

 private:
  std::vector<ctx::stack_context> free_;
};
StackPool& Stacks() {  // used under ExecutionMutex(); never destroyed (workers may run during exit)
  static auto* p = new StackPool();
  return *p;
}

struct PooledStack {
  ctx::stack_context allocate() { return Stacks().Take(); }
  void deallocate(ctx::stack_context& s) noexcept { Stacks().Give(s); }
};

struct GpuThread {
  ThreadIndices indices;
  ctx::fiber fiber;  // this thread, while suspended at a barrier
  ctx::fiber sink;   // the scheduler, while this thread runs
  bool on_fiber = false;
};

GpuThread* g_thread = nullptr;  // the running GPU thread (under ExecutionMutex())
/// Set when a thread reaches a barrier the block cannot honour: the block is then run to its end
/// without barriers (its results are void) and the launch reports a fault.
const char* g_barrier_fault = nullptr;

ctx::fiber StartFiber(GpuThread& t, const std::function<void()>& body) {
  t.on_fiber = true;
  return ctx::fiber(std::allocator_arg, PooledStack(), [&t, &body](ctx::fiber&& sink) {
    t.sink = std::move(sink);
    body();
    return std::move(t.sink);
  });
}

void Resume(GpuThread& t) {
  g_thread = &t;
  t.fiber = std::move(t.fiber).resume();
  g_thread = nullptr;
}

std::string Dim(dim3 d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

/// Runs one block; returns an empty string or the description of a barrier fault. Threads run in
/// thread order, or in reverse with OAR_GPU_EMU_SCHEDULE=reverse, up to each barrier.
std::string RunBlock(const std::function<void()>& body, dim3 grid, dim3 block, dim3 block_idx,
                     std::vector<GpuThread>& threads) {
  const unsigned n = block.x * block.y * block.z;
  threads.resize(n);
  for (unsigned i = 0; i < n; ++i) {
    GpuThread& t = threads[i];
    t.indices = {dim3(i % block.x, (i / block.x) % block.y, i / (block.x * block.y)), block_idx, block, grid};
    t.on_fiber = false;
  }
  const bool reverse = Cfg().reverse_schedule;
  auto nth = [&](unsigned k) -> GpuThread& { return threads[reverse ? n - 1 - k : k]; };
  g_barrier_fault = nullptr;
  // The first thread of the order runs on a fiber. If it finishes without a barrier, no thread of the
  // block may reach one (a barrier must be reached by every thread or none), so the others run as plain
  // calls; one that does reach a barrier is the divergence fault.
  GpuThread& probe = nth(0);
  probe.fiber = StartFiber(probe, body);
  Resume(probe);
  if (!probe.fiber) {
    for (unsigned k = 1; k < n; ++k) {
      g_thread = &nth(k);
      body();
    }
    g_thread = nullptr;
    if (g_barrier_fault != nullptr) {
      return "barrier divergence in block " + Dim(block_idx) + ": thread " + Dim(probe.indices.thread_idx) +
             " finished without __syncthreads but another thread reached one";
    }
    return {};
  }
  for (unsigned k = 1; k < n; ++k) {
    nth(k).fiber = StartFiber(nth(k), body);
    Resume(nth(k));
  }
  for (int phase = 1;; ++phase) {
    unsigned waiting = 0;
    for (const GpuThread& t : threads) waiting += t.fiber ? 1 : 0;
    if (waiting == 0) return {};
    if (waiting != n) {
      std::string fault = "barrier divergence in block " + Dim(block_idx) + ": " + std::to_string(waiting) + " of " +
                          std::to_string(n) + " threads reached __syncthreads #" + std::to_string(phase) +
                          ", the others had returned";
      for (GpuThread& t : threads) t.fiber = ctx::fiber();  // unwinds the suspended threads
      return fault;
    }
    for (unsigned k = 0; k < n; ++k) Resume(nth(k));
  }
}

}  // namespace

const ThreadIndices& Current() { return g_thread->indices; }

void SyncThreads() {
  GpuThread* t = g_thread;
  if (!t->on_fiber) {  // see RunBlock: the block was judged barrier-free
    g_barrier_fault = "divergent";
    return;
  }
  t->sink = std::move(t->sink).resume();
}

void LaunchKernel(const char* name, dim3 grid, dim3 block, emuStream_t stream, std::function<void()> body) {
  Device* d = CurrentDevice();
  if (Sticky(d) != emuSuccess) {
    Record(Sticky(d));
    return;
  }
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
    Record(emuErrorInvalidConfiguration);
    return;
  }
  EmuStream* s = Resolve(stream);
  if (s->device != d) {
    Record(emuErrorInvalidResourceHandle);
    return;
  }
  s->Enqueue([d, grid, block, body = std::move(body), name = std::string(name)] {
    if (Sticky(d) != emuSuccess) return;
    std::lock_guard<std::mutex> one_block_at_a_time(ExecutionMutex());
    static auto& scratch = *new std::vector<GpuThread>();  // under the mutex; never destroyed
    for (unsigned z = 0; z < grid.z; ++z) {
      for (unsigned y = 0; y < grid.y; ++y) {
        for (unsigned x = 0; x < grid.x; ++x) {
          const std::string fault = RunBlock(body, grid, block, dim3(x, y, z), scratch);
          if (!fault.empty()) {
            RaiseFault(d, emuErrorLaunchFailure,
                       "unspecified launch failure: kernel " + name + " grid " + Dim(grid) + " block " + Dim(block) +
                           ": " + fault);
            return;
          }
        }
      }
    }
  });
}

bool InsideAllocation(int device, const void* ptr, size_t size) {
  if (device < 0 || static_cast<size_t>(device) >= Devices().size()) return false;
  Device& d = *Devices()[static_cast<size_t>(device)];
  const auto a = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(d.mutex);
  auto it = d.allocations.upper_bound(a);
  if (it == d.allocations.begin()) return false;
  --it;
  return a >= it->first && a - it->first <= it->second && size <= it->second - (a - it->first);
}

}  // namespace oar::gpu::emu

// =====================================================================================================
// The runtime API
// =====================================================================================================

using oar::gpu::emu::CurrentDevice;
using oar::gpu::emu::Device;
using oar::gpu::emu::Devices;
using oar::gpu::emu::EmuEvent;
using oar::gpu::emu::EmuStream;
using oar::gpu::emu::EventState;
using oar::gpu::emu::Record;
using oar::gpu::emu::Sticky;

namespace {

/// The API's common prologue: the current device's sticky fault, if any.
#define OAR_EMU_STICKY()                                                                    \
  do {                                                                                      \
    if (const emuError_t s_ = Sticky(CurrentDevice()); s_ != emuSuccess) return Record(s_); \
  } while (0)

bool ValidDevice(int device) { return device >= 0 && device < static_cast<int>(Devices().size()); }

/// For a copy: a device range must lie inside one live allocation; other addresses are host memory.
bool RangeOk(const void* p, size_t size) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (auto& d : Devices()) {
    std::lock_guard<std::mutex> lock(d->mutex);
    auto it = d->allocations.upper_bound(a);
    if (it == d->allocations.begin()) continue;
    --it;
    if (a >= it->first && a < it->first + it->second) return a + size <= it->first + it->second;
  }
  return true;
}

}  // namespace

const char* emuGetErrorName(emuError_t error) {
  switch (error) {
    case emuSuccess:
      return "emuSuccess";
    case emuErrorInvalidValue:
      return "emuErrorInvalidValue";
    case emuErrorMemoryAllocation:
      return "emuErrorMemoryAllocation";
    case emuErrorInitializationError:
      return "emuErrorInitializationError";
    case emuErrorInvalidConfiguration:
      return "emuErrorInvalidConfiguration";
    case emuErrorInvalidDevice:
      return "emuErrorInvalidDevice";
    case emuErrorInvalidResourceHandle:
      return "emuErrorInvalidResourceHandle";
    case emuErrorNotReady:
      return "emuErrorNotReady";
    case emuErrorIllegalAddress:
      return "emuErrorIllegalAddress";
    case emuErrorLaunchFailure:
      return "emuErrorLaunchFailure";
    case emuErrorNoDevice:
      return "emuErrorNoDevice";
    case emuErrorInsufficientDriver:
      return "emuErrorInsufficientDriver";
  }
  return "emuErrorUnknown";
}

const char* emuGetErrorString(emuError_t error) {
  if (const char* fault = oar::gpu::emu::FaultText(error)) return fault;
  switch (error) {
    case emuSuccess:
      return "no error";
    case emuErrorInvalidValue:
      return "invalid argument";
    case emuErrorMemoryAllocation:
      return "out of memory";
    case emuErrorInitializationError:
      return "initialization error";
    case emuErrorInvalidConfiguration:
      return "invalid configuration argument";
    case emuErrorInvalidDevice:
      return "invalid device ordinal";
    case emuErrorInvalidResourceHandle:
      return "invalid resource handle";
    case emuErrorNotReady:
      return "device not ready";
    case emuErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case emuErrorLaunchFailure:
      return "unspecified launch failure";
    case emuErrorNoDevice:
      return "no GPU emulator devices (OAR_GPU_EMU_DEVICES=0)";
    case emuErrorInsufficientDriver:
      return "insufficient driver";
  }
  return "unknown error";
}

emuError_t emuGetLastError() {
  const emuError_t e = oar::gpu::emu::tls_last_error;
  oar::gpu::emu::tls_last_error = emuSuccess;
  if (e != emuSuccess) return e;
  return Devices().empty() ? emuSuccess : Sticky(CurrentDevice());
}

emuError_t emuGetDeviceCount(int* count) {
  if (count == nullptr) return Record(emuErrorInvalidValue);
  *count = static_cast<int>(Devices().size());
  return *count == 0 ? Record(emuErrorNoDevice) : emuSuccess;
}

emuError_t emuGetDeviceProperties(emuDeviceProp* prop, int device) {
  if (prop == nullptr) return Record(emuErrorInvalidValue);
  if (!ValidDevice(device)) return Record(emuErrorInvalidDevice);
  *prop = {};
  std::snprintf(prop->name, sizeof prop->name, "Oar GPU emulator (host CPU)");
  prop->totalGlobalMem = oar::gpu::emu::Cfg().memory_bytes;
  prop->multiProcessorCount = 1;  // blocks run one after another
  return emuSuccess;
}

emuError_t emuDeviceGetAttribute(int* value, emuDeviceAttr, int device) {
  if (value == nullptr) return Record(emuErrorInvalidValue);
  if (!ValidDevice(device)) return Record(emuErrorInvalidDevice);
  return Record(emuErrorInvalidValue);  // no memory clock or bus: the emulator has no bandwidth figure
}

emuError_t emuSetDevice(int device) {
  if (!ValidDevice(device)) return Record(emuErrorInvalidDevice);
  oar::gpu::emu::tls_device = device;
  return emuSuccess;
}

emuError_t emuDeviceSynchronize() {
  Device* d = CurrentDevice();
  std::vector<EmuStream*> streams;
  {
    std::lock_guard<std::mutex> lock(d->mutex);
    streams = d->streams;
    if (d->default_stream != nullptr) streams.push_back(d->default_stream);
  }
  for (EmuStream* s : streams) s->Wait();
  OAR_EMU_STICKY();
  return emuSuccess;
}

emuError_t emuDeviceCanAccessPeer(int* can, int device, int peer) {
  if (can == nullptr) return Record(emuErrorInvalidValue);
  if (!ValidDevice(device) || !ValidDevice(peer)) return Record(emuErrorInvalidDevice);
  *can = device != peer;
  return emuSuccess;
}

emuError_t emuDeviceEnablePeerAccess(int peer, unsigned) {
  return ValidDevice(peer) ? emuSuccess : Record(emuErrorInvalidDevice);
}

emuError_t emuMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return Record(emuErrorInvalidValue);
  OAR_EMU_STICKY();
  Device* d = CurrentDevice();
  std::lock_guard<std::mutex> lock(d->mutex);
  *total_bytes = oar::gpu::emu::Cfg().memory_bytes;
  *free_bytes = *total_bytes - d->bytes_in_use;
  return emuSuccess;
}

emuError_t emuMalloc(void** ptr, size_t size) {
  if (ptr == nullptr) return Record(emuErrorInvalidValue);
  OAR_EMU_STICKY();
  Device* d = CurrentDevice();
  const size_t rounded = (std::max<size_t>(size, 1) + 255) / 256 * 256;
  std::lock_guard<std::mutex> lock(d->mutex);
  if (rounded > oar::gpu::emu::Cfg().memory_bytes - d->bytes_in_use) return Record(emuErrorMemoryAllocation);
  void* p = std::aligned_alloc(256, rounded);
  if (p == nullptr) return Record(emuErrorMemoryAllocation);
  d->allocations.emplace(reinterpret_cast<uintptr_t>(p), size);
  d->bytes_in_use += rounded;
  *ptr = p;
  return emuSuccess;
}

emuError_t emuFree(void* ptr) {
  if (ptr == nullptr) return emuSuccess;
  Device* d = CurrentDevice();
  {
    std::lock_guard<std::mutex> lock(d->mutex);
    auto it = d->allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == d->allocations.end()) return Record(emuErrorInvalidValue);
    d->bytes_in_use -= (std::max<size_t>(it->second, 1) + 255) / 256 * 256;
    d->allocations.erase(it);
  }
  // Like cudaFree: the memory may still be in use by enqueued work, so wait for the device first.
  (void)emuDeviceSynchronize();
  std::free(ptr);
  OAR_EMU_STICKY();
  return emuSuccess;
}

emuError_t emuHostAlloc(void** ptr, size_t size, unsigned) {
  if (ptr == nullptr) return Record(emuErrorInvalidValue);
  *ptr = std::aligned_alloc(256, (std::max<size_t>(size, 1) + 255) / 256 * 256);
  return *ptr == nullptr ? Record(emuErrorMemoryAllocation) : emuSuccess;
}

emuError_t emuFreeHost(void* ptr) {
  std::free(ptr);
  return emuSuccess;
}

emuError_t emuMemcpyAsync(void* dst, const void* src, size_t size, emuMemcpyKind, emuStream_t stream) {
  OAR_EMU_STICKY();
  if (size == 0) return emuSuccess;
  if (dst == nullptr || src == nullptr || !RangeOk(dst, size) || !RangeOk(src, size)) {
    return Record(emuErrorInvalidValue);
  }
  EmuStream* s = oar::gpu::emu::Resolve(stream);
  s->Enqueue([dst, src, size, d = s->device] {
    if (Sticky(d) == emuSuccess) std::memmove(dst, src, size);
  });
  return emuSuccess;
}

emuError_t emuMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t size,
                              emuStream_t stream) {
  if (!ValidDevice(dst_device) || !ValidDevice(src_device)) return Record(emuErrorInvalidDevice);
  return emuMemcpyAsync(dst, src, size, emuMemcpyDefault, stream);
}

emuError_t emuMemsetAsync(void* dst, int value, size_t size, emuStream_t stream) {
  OAR_EMU_STICKY();
  if (size == 0) return emuSuccess;
  if (dst == nullptr || !RangeOk(dst, size)) return Record(emuErrorInvalidValue);
  EmuStream* s = oar::gpu::emu::Resolve(stream);
  s->Enqueue([dst, value, size, d = s->device] {
    if (Sticky(d) == emuSuccess) std::memset(dst, value, size);
  });
  return emuSuccess;
}

emuError_t emuStreamCreateWithFlags(emuStream_t* stream, unsigned) {
  if (stream == nullptr) return Record(emuErrorInvalidValue);
  OAR_EMU_STICKY();
  Device* d = CurrentDevice();
  auto* s = new EmuStream(d);
  std::lock_guard<std::mutex> lock(d->mutex);
  d->streams.push_back(s);
  *stream = s;
  return emuSuccess;
}

emuError_t emuStreamDestroy(emuStream_t stream) {
  if (stream == nullptr) return Record(emuErrorInvalidResourceHandle);
  Device* d = stream->device;
  {
    std::lock_guard<std::mutex> lock(d->mutex);
    auto it = std::find(d->streams.begin(), d->streams.end(), stream);
    if (it == d->streams.end()) return Record(emuErrorInvalidResourceHandle);
    d->streams.erase(it);
  }
  delete stream;  // runs what was enqueued, then joins the worker
  return emuSuccess;
}

emuError_t emuStreamSynchronize(emuStream_t stream) {
  oar::gpu::emu::Resolve(stream)->Wait();
  OAR_EMU_STICKY();
  return emuSuccess;
}

emuError_t emuStreamQuery(emuStream_t stream) {
  OAR_EMU_STICKY();
  return oar::gpu::emu::Resolve(stream)->Idle() ? emuSuccess : emuErrorNotReady;
}

emuError_t emuStreamWaitEvent(emuStream_t stream, emuEvent_t event, unsigned) {
  if (event == nullptr) return Record(emuErrorInvalidResourceHandle);
  OAR_EMU_STICKY();
  std::shared_ptr<EventState> e = event->state;
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(e->mutex);
    target = e->recorded;
  }
  oar::gpu::emu::Resolve(stream)->Enqueue([e, target] {
    std::unique_lock<std::mutex> lock(e->mutex);
    e->cv.wait(lock, [&] { return e->completed >= target; });
  });
  return emuSuccess;
}

emuError_t emuLaunchHostFunc(emuStream_t stream, emuHostFn_t fn, void* user_data) {
  if (fn == nullptr) return Record(emuErrorInvalidValue);
  OAR_EMU_STICKY();
  oar::gpu::emu::Resolve(stream)->Enqueue([fn, user_data] { fn(user_data); });
  return emuSuccess;
}

emuError_t emuEventCreateWithFlags(emuEvent_t* event, unsigned) {
  if (event == nullptr) return Record(emuErrorInvalidValue);
  OAR_EMU_STICKY();
  *event = new EmuEvent{oar::gpu::emu::tls_device};
  return emuSuccess;
}

emuError_t emuEventCreate(emuEvent_t* event) { return emuEventCreateWithFlags(event, 0); }

emuError_t emuEventDestroy(emuEvent_t event) {
  if (event == nullptr) return Record(emuErrorInvalidResourceHandle);
  delete event;  // pending records and waits hold the state
  return emuSuccess;
}

emuError_t emuEventRecord(emuEvent_t event, emuStream_t stream) {
  if (event == nullptr) return Record(emuErrorInvalidResourceHandle);
  OAR_EMU_STICKY();
  EmuStream* s = oar::gpu::emu::Resolve(stream);
  if (s->index != event->device) return Record(emuErrorInvalidResourceHandle);
  std::shared_ptr<EventState> e = event->state;
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(e->mutex);
    generation = ++e->recorded;
  }
  s->EnqueueEventRecord(std::move(e), generation);
  return emuSuccess;
}

emuError_t emuEventQuery(emuEvent_t event) {
  if (event == nullptr) return Record(emuErrorInvalidResourceHandle);
  OAR_EMU_STICKY();
  std::lock_guard<std::mutex> lock(event->state->mutex);
  return event->state->completed >= event->state->recorded ? emuSuccess : emuErrorNotReady;
}

emuError_t emuEventSynchronize(emuEvent_t event) {
  if (event == nullptr) return Record(emuErrorInvalidResourceHandle);
  std::shared_ptr<EventState> e = event->state;
  {
    std::unique_lock<std::mutex> lock(e->mutex);
    const uint64_t target = e->recorded;
    e->cv.wait(lock, [&] { return e->completed >= target; });
  }
  OAR_EMU_STICKY();
  return emuSuccess;
}

emuError_t emuEventElapsedTime(float* ms, emuEvent_t, emuEvent_t) {
  if (ms != nullptr) *ms = 0;
  return Record(emuErrorInvalidValue);  // events are created without timing (emuEventDisableTiming)
}
