// RAII streams and events on a device, for code that orders work across streams explicitly.
#ifndef OAR_CORE_RUNTIME_STREAM_H_
#define OAR_CORE_RUNTIME_STREAM_H_

#include <functional>

#include "core/runtime/runtime.h"

namespace oar::runtime {

class Event;

class Stream {
 public:
  /// A new stream on `device`.
  explicit Stream(Device device);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Device device() const { return ctx_->device(); }
  DeviceContext& context() const { return *ctx_; }
  oar_stream_t handle() const { return stream_; }
  void Synchronize();
  /// True when all work enqueued so far has completed.
  bool Query();
  /// Later work on this stream waits for `event`'s latest record.
  void WaitEvent(const Event& event);
  /// Run `fn` once the work enqueued so far has completed (on a plugin thread or inline).
  void AddCallback(std::function<void()> fn);

 private:
  DeviceContext* ctx_;
  oar_stream_t stream_ = nullptr;
};

class Event {
 public:
  explicit Event(Device device);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  oar_event_t handle() const { return event_; }
  /// Capture the work enqueued so far on `stream` (default: the device's compute stream).
  void Record(const Stream& stream);
  void Record();
  bool Query();
  void Synchronize();

 private:
  DeviceContext* ctx_;
  oar_event_t event_ = nullptr;
};

/// Makes `stream` the calling thread's current stream of its device until destroyed (as PyTorch's
/// CUDAStreamGuard): the core's kernels, async copies, Event::Record() and the caching allocator's blocks
/// on that device go to it. Nestable; per thread. `stream` must outlive the guard.
class ScopedStream {
 public:
  explicit ScopedStream(const Stream& stream);
  ~ScopedStream();
  ScopedStream(const ScopedStream&) = delete;
  ScopedStream& operator=(const ScopedStream&) = delete;

 private:
  DeviceContext* ctx_;
  oar_stream_t previous_;
};

/// Block until all work on `device` has completed.
void Synchronize(Device device);

}  // namespace oar::runtime

#endif  // OAR_CORE_RUNTIME_STREAM_H_
