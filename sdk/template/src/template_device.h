// template_device — the pieces shared by the plugin's source files.
//
// This is a small but complete Oar device plugin meant to be copied. Its "device" keeps its memory in
// host RAM, but it behaves like an accelerator in the two ways that matter to the host:
//  - device pointers are not for the host to dereference (the "host_accessible" attribute is false), so
//    every byte reaches the host through the copy slots;
//  - work is asynchronous: every stream has a worker thread that runs enqueued work in order, and the
//    host only sees results after it synchronises (or after a synchronous copy, which waits first).
// Replace the bodies marked "VENDOR:" with calls into your driver; keep the checks and the structure.
#ifndef TEMPLATE_DEVICE_TEMPLATE_DEVICE_H_
#define TEMPLATE_DEVICE_TEMPLATE_DEVICE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "oar/plugin/cpp/status.hpp"
#include "oar/plugin/plugin.h"

namespace template_device {

/// The device type name the host shows ("template_device:0"). Rename it together with the NAME given
/// to add_oar_plugin in CMakeLists.txt: [a-z][a-z0-9_]*, unique among the plugins a user loads.
inline constexpr const char* kName = "template_device";
inline constexpr int32_t kDeviceCount = 1;

/// Throw a StatusError whose message starts with the plugin name. Every slot runs inside
/// oar::sdk::Guard, which turns the exception into a status: no C++ exception ever reaches the host.
[[noreturn]] void Fail(oar_status_code code, const std::string& message);

/// INVALID_ARGUMENT unless 0 <= device < kDeviceCount.
void CheckDevice(int32_t device);

// ===================================================================================================
// Streams: an in-order queue with one worker thread.
// ===================================================================================================

/// Work enqueued on a stream gets a ticket 1, 2, 3, ... and runs on the stream's worker thread in
/// ticket order. An exception thrown by work is an asynchronous error: it is kept (sticky) and
/// returned by every later wait on the stream, because the data the failed work should have produced
/// is now wrong.
class Stream {
 public:
  explicit Stream(int32_t device);
  ~Stream();  // Stop()s if the host never destroyed the stream
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int32_t device() const { return device_; }
  /// Append `work`; returns its ticket. Never blocks on the work itself.
  uint64_t Enqueue(std::function<void()> work);
  /// Ticket of the most recently enqueued work (0 when nothing was ever enqueued).
  uint64_t LastTicket();
  /// True when the work with `ticket` (and everything before it) has finished.
  bool Done(uint64_t ticket);
  /// Block until `ticket` has finished, then throw the stream's asynchronous error, if any.
  void Wait(uint64_t ticket);
  /// Wait for all work enqueued so far (same error rule as Wait).
  void WaitAll() { Wait(LastTicket()); }
  /// Wait for all work enqueued so far without reporting errors (for free and shutdown).
  void Drain();
  /// Finish the pending work and join the worker. Enqueue must not be called afterwards.
  void Stop();

 private:
  void Run();            // the worker thread's loop
  void ThrowIfFailed();  // call with mu_ held

  const int32_t device_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  uint64_t enqueued_ = 0;   // tickets handed out
  uint64_t completed_ = 0;  // tickets finished
  bool stopping_ = false;
  oar_status_code error_code_ = OAR_STATUS_OK;
  std::string error_message_;
  std::thread worker_;  // declared last: it starts once every other member exists
};

/// The live stream behind `handle` on `device`; INVALID_ARGUMENT for an unknown, destroyed or foreign
/// handle. The shared_ptr keeps it alive while a slot uses it, even if another thread destroys it.
std::shared_ptr<Stream> GetStream(int32_t device, oar_stream_t handle);

// ===================================================================================================
// Device memory: a range check that turns a bad pointer into INVALID_ARGUMENT instead of a crash.
// ===================================================================================================

/// INVALID_ARGUMENT unless [ptr, ptr + size) lies inside one live allocation of `device`. Copies
/// check their device-side pointers with it (cheap: one map lookup); kernels do not (too hot).
void CheckDeviceRange(int32_t device, const void* ptr, size_t size, const char* what);

// ===================================================================================================
// The function tables (device.cc, kernels.cc), assembled into the plugin table in plugin.cc.
// ===================================================================================================

const oar_device_api_t* DeviceApi();
const oar_kernel_api_t* KernelApi();
/// The kernels of kernels.cc that are not bitwise reproducible, as the `nondeterministic_kernels` device
/// attribute lists them ("op(dtype,...);..."; empty when every kernel is reproducible).
const std::string& NondeterministicKernels();
/// Finish every stream's work and join the worker threads (the plugin's shutdown slot).
void StopAllStreams();

}  // namespace template_device

#endif  // TEMPLATE_DEVICE_TEMPLATE_DEVICE_H_
