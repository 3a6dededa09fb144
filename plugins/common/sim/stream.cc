#include "plugins/common/sim/stream.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <exception>

#include "oar/plugin/cpp/status.hpp"

namespace oar::sim {
namespace {

thread_local const Stream* t_current_stream = nullptr;

constexpr int64_t kMaxJitterUs = 200;

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

// ---- Marker ----------------------------------------------------------------------------------------

void Marker::Complete(uint64_t sim_ns, std::optional<SimError> error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    sim_ns_ = sim_ns;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

bool Marker::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void Marker::Wait() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
}

uint64_t Marker::sim_ns() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sim_ns_;
}

std::optional<SimError> Marker::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

// ---- Stream ----------------------------------------------------------------------------------------

Stream::Stream(StreamOwner* owner, uint64_t id, std::optional<uint64_t> jitter_seed, int32_t kernel_threads)
    : owner_(owner), id_(id), kernel_threads_(kernel_threads) {
  if (jitter_seed) jitter_.emplace(Mix(*jitter_seed ^ Mix(std::hash<std::string>()(owner->where()) + id)));
  worker_ = std::thread([this] { Loop(); });
}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  // The device API refuses to destroy a stream from its own worker, so this never joins itself.
  if (worker_.joinable()) worker_.join();
}

const Stream* Stream::Current() { return t_current_stream; }

void Stream::Enqueue(Work work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(work));
    ++enqueued_;
  }
  work_cv_.notify_one();
}

void Stream::Drain() {
  if (t_current_stream == this) return;
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = enqueued_;
  done_cv_.wait(lock, [&] { return completed_ >= target; });
}

bool Stream::Idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ == enqueued_;
}

std::optional<SimError> Stream::TakeError() {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<SimError> e = std::move(error_);
  error_.reset();
  return e;
}

void Stream::Loop() {
  t_current_stream = this;
  omp_set_num_threads(kernel_threads_);  // this thread's OpenMP ICV: the host kernels it runs
  for (;;) {
    Work work;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopping and nothing left to run
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    if (jitter_) {
      const auto us = static_cast<int64_t>((*jitter_)() % static_cast<uint64_t>(kMaxJitterUs + 1));
      if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
    }
    Execute(work);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++completed_;
    }
    done_cv_.notify_all();
  }
  t_current_stream = nullptr;
}

void Stream::Execute(Work& work) {
  switch (work.type) {
    case Work::Type::kRecord: {
      std::optional<SimError> error;
      {
        std::lock_guard<std::mutex> lock(mu_);
        error = error_;
      }
      work.marker->Complete(clock_ns(), std::move(error));
      return;
    }
    case Work::Type::kWait:
      work.marker->Wait();
      clock_ns_.store(std::max(clock_ns(), work.marker->sim_ns()), std::memory_order_release);
      return;
    case Work::Type::kCallback:
      // A C callback cannot throw across the ABI; a C++ one that does would end the process anyway.
      work.callback(work.user_data);
      return;
    case Work::Type::kRun:
      break;
  }
  const uint64_t start = std::max(clock_ns(), owner_->ClockFloor());
  std::optional<SimError> error = work.injected;
  if (!error) error = owner_->LostError(work.name);
  if (!error) {
    try {
      error = work.run();
    } catch (const sdk::StatusError& e) {
      error = SimError{e.code(), e.what()};
    } catch (const std::bad_alloc&) {
      error = SimError{OAR_STATUS_RESOURCE_EXHAUSTED, "host memory exhausted while running " + work.name};
    } catch (const std::exception& e) {
      error = SimError{OAR_STATUS_INTERNAL, std::string("unexpected exception: ") + e.what()};
    }
  }
  const uint64_t end = start + static_cast<uint64_t>(work.cost.duration_ns);
  clock_ns_.store(end, std::memory_order_release);
  if (error) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) {
      error_ = SimError{error->code, owner_->where() + " stream " + std::to_string(id_) + ": '" + work.name +
                                         "' failed asynchronously: " + error->message};
    }
    return;
  }
  owner_->Completed(work, start, end);
}

}  // namespace oar::sim
