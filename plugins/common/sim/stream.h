// Streams of a simulated device: one worker thread per stream runs queued work in enqueue order
// (kernels, copies, memsets, event records, waits on events, host callbacks), with optional seeded
// jitter before each item and a simulated clock that advances by each item's modelled duration.
//
// Errors are sticky, as on CUDA: when a queued item fails on the worker, the stream keeps the first
// error until a synchronising call (stream_synchronize, device_synchronize, a synchronous copy or
// memset on the device) takes it and reports it; an event recorded after the failure carries it too
// and event_synchronize reports it. Later items still run, so work that does not depend on the failed
// item keeps its results.
#ifndef OAR_PLUGINS_COMMON_SIM_STREAM_H_
#define OAR_PLUGINS_COMMON_SIM_STREAM_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "oar/plugin/plugin.h"
#include "plugins/common/sim/config.h"
#include "plugins/common/sim/device_model.h"

namespace oar::sim {

/// The completion of one event record, set by the worker that reaches the record.
class Marker {
 public:
  void Complete(uint64_t sim_ns, std::optional<SimError> error);
  bool done() const;
  /// Block until done.
  void Wait() const;
  /// The stream's simulated clock at the record (valid once done).
  uint64_t sim_ns() const;
  /// The stream's sticky error at the record, if any (valid once done).
  std::optional<SimError> error() const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  uint64_t sim_ns_ = 0;
  std::optional<SimError> error_;
};

/// One unit of queued work.
struct Work {
  enum class Type { kRun, kRecord, kWait, kCallback };
  Type type = Type::kRun;
  std::string name;                   ///< op name or copy direction: errors and profiles
  int32_t kind = OAR_ACTIVITY_OTHER;  ///< oar_activity_kind of a kRun item
  Cost cost;
  /// kRun: does the work on the worker; returns an error or nullopt. May throw sdk::StatusError.
  std::function<std::optional<SimError>()> run;
  /// kRun: fail with this instead of running (fault injection decided at enqueue time).
  std::optional<SimError> injected;
  std::shared_ptr<Marker> marker;    ///< kRecord completes it, kWait waits for it
  oar_host_fn_t callback = nullptr;  ///< kCallback
  void* user_data = nullptr;
};

/// What a stream needs from its device.
class StreamOwner {
 public:
  virtual ~StreamOwner() = default;
  /// The UNAVAILABLE error for `operation` when the device is lost, else nullopt.
  virtual std::optional<SimError> LostError(const std::string& operation) const = 0;
  /// A kRun item finished successfully between these simulated times (for the profiler).
  virtual void Completed(const Work& work, uint64_t start_ns, uint64_t end_ns) = 0;
  /// No item may start before this simulated time (synchronous operations push it forward).
  virtual uint64_t ClockFloor() const = 0;
  /// "kunlun_sim:0", for messages.
  virtual const std::string& where() const = 0;
};

class Stream {
 public:
  /// Starts the worker. `id` numbers the stream within its device (messages, jitter seed);
  /// `kernel_threads` caps the OpenMP threads of host kernels run by the worker.
  Stream(StreamOwner* owner, uint64_t id, std::optional<uint64_t> jitter_seed, int32_t kernel_threads = 1);
  /// Runs what is queued, then stops the worker.
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void Enqueue(Work work);
  /// Block until every item enqueued before the call has completed. Called from this stream's own
  /// worker (inside a host callback) it returns at once: waiting for itself could never finish.
  void Drain();
  bool Idle() const;
  /// Take (report and clear) the sticky error.
  std::optional<SimError> TakeError();
  /// The simulated time at which the stream's last item finished.
  uint64_t clock_ns() const { return clock_ns_.load(std::memory_order_acquire); }
  uint64_t id() const { return id_; }
  /// The stream whose worker runs on the calling thread, or nullptr.
  static const Stream* Current();

 private:
  void Loop();
  void Execute(Work& work);

  StreamOwner* const owner_;
  const uint64_t id_;
  const int32_t kernel_threads_;
  std::optional<std::mt19937_64> jitter_;
  std::atomic<uint64_t> clock_ns_{0};

  mutable std::mutex mu_;
  std::condition_variable work_cv_;          // worker: new work or stop
  mutable std::condition_variable done_cv_;  // waiters: an item completed
  std::deque<Work> queue_;
  uint64_t enqueued_ = 0;
  uint64_t completed_ = 0;
  bool stop_ = false;
  std::optional<SimError> error_;
  std::thread worker_;  // last: started once everything above exists
};

}  // namespace oar::sim

#endif  // OAR_PLUGINS_COMMON_SIM_STREAM_H_
