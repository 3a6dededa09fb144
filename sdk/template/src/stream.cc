// template_device — streams: one worker thread per stream runs enqueued work in order.
//
// VENDOR: a real device has hardware queues; then a Stream wraps your driver's queue handle, Enqueue
// becomes "submit a command", Done/Wait become "query/wait a fence". Keep the sticky-error rule.
#include <exception>

#include "template_device.h"

namespace template_device {

Stream::Stream(int32_t device) : device_(device), worker_([this] { Run(); }) {}

Stream::~Stream() { Stop(); }

uint64_t Stream::Enqueue(std::function<void()> work) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(work));
  cv_.notify_all();
  return ++enqueued_;
}

uint64_t Stream::LastTicket() {
  std::lock_guard<std::mutex> lock(mu_);
  return enqueued_;
}

bool Stream::Done(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  ThrowIfFailed();
  return completed_ >= ticket;
}

void Stream::Wait(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return completed_ >= ticket; });
  ThrowIfFailed();
}

void Stream::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t ticket = enqueued_;
  cv_.wait(lock, [&] { return completed_ >= ticket; });
}

void Stream::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    cv_.notify_all();
  }
  worker_.join();  // the worker drains the queue before it exits
}

void Stream::ThrowIfFailed() {
  if (error_code_ != OAR_STATUS_OK) {
    throw oar::sdk::StatusError(error_code_, error_message_ +
                                                 " (asynchronous error, reported by every "
                                                 "later wait on this stream)");
  }
}

void Stream::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    // Run the work without the lock, so the host can keep enqueueing meanwhile. Work enqueued after a
    // failure still runs (it may be a callback the host waits for), but its results are suspect.
    oar_status_code code = OAR_STATUS_OK;
    std::string message;
    try {
      work();
    } catch (const oar::sdk::StatusError& e) {
      code = e.code();
      message = e.what();
    } catch (const std::exception& e) {
      code = OAR_STATUS_INTERNAL;
      message = std::string(kName) + ": " + e.what();
    } catch (...) {
      code = OAR_STATUS_INTERNAL;
      message = std::string(kName) + ": unknown exception in stream work";
    }
    lock.lock();
    if (code != OAR_STATUS_OK && error_code_ == OAR_STATUS_OK) {
      error_code_ = code;
      error_message_ = std::move(message);
    }
    ++completed_;
    cv_.notify_all();
  }
}

}  // namespace template_device
