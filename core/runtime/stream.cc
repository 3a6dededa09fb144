#include "core/runtime/stream.h"

#include "core/base/logging.h"
#include "core/runtime/status.h"

namespace oar::runtime {
namespace {

std::string Where(const DeviceContext& ctx, const char* what) { return ctx.device().str() + " " + what; }

void RunCallback(void* user_data) {
  auto* fn = static_cast<std::function<void()>*>(user_data);
  try {
    (*fn)();
  } catch (const std::exception& e) {
    OAR_LOG_ERROR("stream callback threw: {}", e.what());  // no caller to report to
  }
  delete fn;
}

}  // namespace

Stream::Stream(Device device) : ctx_(&Runtime::Get().Context(device)) {
  ThrowIfError(ctx_->api()->stream_create(ctx_->ordinal(), &stream_), [&] { return Where(*ctx_, "stream_create"); });
}

Stream::~Stream() {
  // The caching allocator may name this stream for blocks it used: once it is idle, nothing waits for it.
  if (oar_status_t* s = ctx_->api()->stream_synchronize(ctx_->ordinal(), stream_)) {
    OAR_LOG_WARNING("{}: {}", Where(*ctx_, "stream_synchronize"), TakeStatus(s).message);
  }
  ctx_->allocator().ForgetStream(stream_);
  if (oar_status_t* s = ctx_->api()->stream_destroy(ctx_->ordinal(), stream_)) {
    OAR_LOG_WARNING("{}: {}", Where(*ctx_, "stream_destroy"), TakeStatus(s).message);
  }
}

void Stream::Synchronize() {
  ThrowIfError(ctx_->api()->stream_synchronize(ctx_->ordinal(), stream_), [&] { return Where(*ctx_, "stream_synchronize"); });
}

bool Stream::Query() {
  bool idle = false;
  ThrowIfError(ctx_->api()->stream_query(ctx_->ordinal(), stream_, &idle), [&] { return Where(*ctx_, "stream_query"); });
  return idle;
}

void Stream::WaitEvent(const Event& event) {
  ThrowIfError(ctx_->api()->stream_wait_event(ctx_->ordinal(), stream_, event.handle()),
               [&] { return Where(*ctx_, "stream_wait_event"); });
}

void Stream::AddCallback(std::function<void()> fn) {
  auto* heap = new std::function<void()>(std::move(fn));
  oar_status_t* s = ctx_->api()->stream_add_callback(ctx_->ordinal(), stream_, RunCallback, heap);
  if (s != nullptr) {
    delete heap;  // not enqueued: it will never run
    ThrowIfError(s, [&] { return Where(*ctx_, "stream_add_callback"); });
  }
}

Event::Event(Device device) : ctx_(&Runtime::Get().Context(device)) {
  ThrowIfError(ctx_->api()->event_create(ctx_->ordinal(), &event_), [&] { return Where(*ctx_, "event_create"); });
}

Event::~Event() {
  if (oar_status_t* s = ctx_->api()->event_destroy(ctx_->ordinal(), event_)) {
    OAR_LOG_WARNING("{}: {}", Where(*ctx_, "event_destroy"), TakeStatus(s).message);
  }
}

void Event::Record(const Stream& stream) {
  ThrowIfError(ctx_->api()->event_record(ctx_->ordinal(), event_, stream.handle()), [&] { return Where(*ctx_, "event_record"); });
}

void Event::Record() {
  ThrowIfError(ctx_->api()->event_record(ctx_->ordinal(), event_, ctx_->stream()), [&] { return Where(*ctx_, "event_record"); });
}

bool Event::Query() {
  bool done = false;
  ThrowIfError(ctx_->api()->event_query(ctx_->ordinal(), event_, &done), [&] { return Where(*ctx_, "event_query"); });
  return done;
}

void Event::Synchronize() {
  ThrowIfError(ctx_->api()->event_synchronize(ctx_->ordinal(), event_), [&] { return Where(*ctx_, "event_synchronize"); });
}

ScopedStream::ScopedStream(const Stream& stream)
    : ctx_(&stream.context()), previous_(SetCurrentStream(*ctx_, stream.handle())) {}

ScopedStream::~ScopedStream() { SetCurrentStream(*ctx_, previous_); }

void Synchronize(Device device) { Runtime::Get().Context(device).Synchronize(); }

}  // namespace oar::runtime
