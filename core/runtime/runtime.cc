#include "core/runtime/runtime.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <boost/dll/runtime_symbol_info.hpp>
#include <chrono>
#include <cmath>
#include <future>
#include <memory>
#include <set>
#include <thread>

#include "core/base/env.h"
#include "core/base/error.h"
#include "core/base/files.h"
#include "core/base/text.h"
#include "core/base/logging.h"
#include "core/runtime/status.h"

namespace oar::runtime {
namespace {

std::string Where(const DeviceContext& ctx, std::string_view what) {
  return fmt::format("{} ({}) {}", ctx.device().str(), ctx.plugin().path().filename().string(), what);
}

AttrValue CopyAttr(const oar_attr_t& a) {
  AttrValue v;
  v.name = a.name ? a.name : "";
  v.type = a.type;
  switch (a.type) {
    case OAR_ATTR_INT:
      v.i = a.v.i;
      break;
    case OAR_ATTR_FLOAT:
      v.f = a.v.f;
      break;
    case OAR_ATTR_BOOL:
      v.b = a.v.b;
      break;
    case OAR_ATTR_STRING:
      v.s.assign(a.v.s.data ? a.v.s.data : "", a.v.s.data ? a.v.s.size : 0);
      break;
    case OAR_ATTR_INTS:
      if (a.v.ints.data) v.ints.assign(a.v.ints.data, a.v.ints.data + a.v.ints.size);
      break;
    case OAR_ATTR_FLOATS:
      if (a.v.floats.data) v.floats.assign(a.v.floats.data, a.v.floats.data + a.v.floats.size);
      break;
    default:
      Throw(ErrorCode::kInvalidArgument, "attribute '{}' has unknown type {}", v.name, a.type);
  }
  return v;
}

}  // namespace

std::string AttrValue::ToString() const {
  switch (type) {
    case OAR_ATTR_INT:
      return std::to_string(i);
    case OAR_ATTR_FLOAT:
      return fmt::format("{:g}", f);
    case OAR_ATTR_BOOL:
      return b ? "true" : "false";
    case OAR_ATTR_STRING:
      return s;
    case OAR_ATTR_INTS:
      return fmt::format("[{}]", fmt::join(ints, ", "));
    case OAR_ATTR_FLOATS:
      return fmt::format("[{}]", fmt::join(floats, ", "));
    default:
      return "?";
  }
}

// ---- DeviceContext ---------------------------------------------------------------------------------

DeviceContext::DeviceContext(DeviceType* type, int ordinal)
    : type_(type), ordinal_(ordinal), device_(type->name(), ordinal) {
  const oar_attr_t* attrs = nullptr;
  int32_t n = 0;
  ThrowIfError(api()->device_attributes(ordinal, &attrs, &n), Where(*this, "device_attributes"));
  OAR_CHECK(n >= 0 && (n == 0 || attrs != nullptr), kInternal, "{}: device_attributes returned {} entries",
            Where(*this, ""), n);
  for (int i = 0; i < n; ++i) {
    attributes_.push_back(CopyAttr(attrs[i]));
    if (attributes_.back().name == OAR_DEVICE_ATTR_HOST_ACCESSIBLE && attributes_.back().type == OAR_ATTR_BOOL) {
      host_accessible_ = attributes_.back().b;
    }
  }
  const oar_device_api_t* dev = api();
  const int32_t ord = ordinal;
  const std::string where = device_.str();
  allocator_ = std::make_unique<CachingAllocator>(
      where,
      RawMemory{[dev, ord, where](size_t n) {
                  void* p = nullptr;
                  ThrowIfError(dev->malloc(ord, n, &p), [&] { return fmt::format("{} malloc({} bytes)", where, n); });
                  OAR_CHECK(p != nullptr, kInternal, "{} malloc({} bytes) returned NULL without an error", where, n);
                  return p;
                },
                [dev, ord, where](void* p) { ThrowIfError(dev->free(ord, p), [&] { return where + " free"; }); },
                StreamHooks{
                    .current = [this] { return static_cast<void*>(stream()); },
                    .record =
                        [dev, ord, where](void* stream) {
                          oar_event_t e = nullptr;
                          ThrowIfError(dev->event_create(ord, &e), [&] { return where + " event_create"; });
                          if (oar_status_t* s = dev->event_record(ord, e, static_cast<oar_stream_t>(stream))) {
                            if (oar_status_t* d = dev->event_destroy(ord, e)) TakeStatus(d);
                            ThrowIfError(s, [&] { return where + " event_record"; });
                          }
                          return static_cast<void*>(e);
                        },
                    .done =
                        [dev, ord, where](void* event) {
                          bool complete = false;
                          ThrowIfError(dev->event_query(ord, static_cast<oar_event_t>(event), &complete),
                                       [&] { return where + " event_query"; });
                          return complete;
                        },
                    .wait =
                        [dev, ord, where](void* stream, void* event) {
                          ThrowIfError(dev->stream_wait_event(ord, static_cast<oar_stream_t>(stream),
                                                              static_cast<oar_event_t>(event)),
                                       [&] { return where + " stream_wait_event"; });
                        },
                    .destroy =
                        [dev, ord, where](void* event) {
                          if (oar_status_t* s = dev->event_destroy(ord, static_cast<oar_event_t>(event))) {
                            OAR_LOG_WARNING("{} event_destroy: {}", where, TakeStatus(s).message);
                          }
                        },
                }});
}

DeviceContext::~DeviceContext() {
  allocator_.reset();
  if (stream_ != nullptr) {
    oar_status_t* s = api()->stream_destroy(ordinal_, stream_);
    if (s != nullptr) OAR_LOG_WARNING("{}: {}", Where(*this, "stream_destroy"), TakeStatus(s).message);
  }
}

const Plugin& DeviceContext::plugin() const { return type_->plugin(); }
const oar_device_api_t* DeviceContext::api() const { return type_->plugin().device(); }

const AttrValue* DeviceContext::FindAttribute(std::string_view name) const {
  for (const AttrValue& a : attributes_) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

namespace {
// The streams a runtime::ScopedStream made current on this thread, innermost last. Plain arrays: the
// lookup runs on every allocation and launch, and trivial thread-locals need no initialisation check.
constexpr int kMaxCurrentStreams = 16;
thread_local std::pair<const DeviceContext*, oar_stream_t> t_current_streams[kMaxCurrentStreams];
thread_local int t_num_current_streams = 0;
// Entries in every thread's list together. While it is zero (no ScopedStream anywhere: plain eager code)
// stream() skips the thread-local lookup, which in a shared library costs a __tls_get_addr call per access.
// A thread only ever reads its own entries, which it counted itself, so relaxed ordering suffices.
std::atomic<int> g_num_current_streams{0};
}  // namespace

oar_stream_t SetCurrentStream(DeviceContext& ctx, oar_stream_t stream) {
  for (int i = t_num_current_streams - 1; i >= 0; --i) {
    if (t_current_streams[i].first != &ctx) continue;
    const oar_stream_t previous = t_current_streams[i].second;
    if (stream == nullptr) {
      for (int j = i; j + 1 < t_num_current_streams; ++j) t_current_streams[j] = t_current_streams[j + 1];
      --t_num_current_streams;
      g_num_current_streams.fetch_sub(1, std::memory_order_relaxed);
    } else {
      t_current_streams[i].second = stream;
    }
    return previous;
  }
  if (stream != nullptr) {
    OAR_CHECK(t_num_current_streams < kMaxCurrentStreams, kResourceExhausted,
              "{}: more than {} devices have a ScopedStream on this thread at once", ctx.device().str(),
              kMaxCurrentStreams);
    t_current_streams[t_num_current_streams++] = {&ctx, stream};
    g_num_current_streams.fetch_add(1, std::memory_order_relaxed);
  }
  return nullptr;
}

oar_stream_t DeviceContext::default_stream() {
  // Made once; read without call_once on the hot path (allocations and launches ask for it).
  if (oar_stream_t s = std::atomic_ref<oar_stream_t>(stream_).load(std::memory_order_acquire)) return s;
  std::call_once(stream_once_, [this] {
    oar_stream_t s = nullptr;
    ThrowIfError(api()->stream_create(ordinal_, &s), [&] { return Where(*this, "stream_create"); });
    std::atomic_ref<oar_stream_t>(stream_).store(s, std::memory_order_release);
  });
  return std::atomic_ref<oar_stream_t>(stream_).load(std::memory_order_acquire);
}

oar_stream_t DeviceContext::stream() {
  if (g_num_current_streams.load(std::memory_order_relaxed) == 0) return default_stream();
  for (int i = 0; i < t_num_current_streams; ++i) {
    if (t_current_streams[i].first == this) return t_current_streams[i].second;
  }
  return default_stream();
}

void DeviceContext::Synchronize() {
  ThrowIfError(api()->device_synchronize(ordinal_), [&] { return Where(*this, "device_synchronize"); });
}

DeviceContext::MemoryStats DeviceContext::PluginMemoryStats() {
  MemoryStats out;
  if (!OAR_HAS_SLOT(api(), memory_stats)) return out;
  oar_memory_stats_t s{};
  s.struct_size = OAR_MEMORY_STATS_STRUCT_SIZE;
  ThrowIfError(api()->memory_stats(ordinal_, &s), Where(*this, "memory_stats"));
  if (s.bytes_in_use_is_set) out.bytes_in_use = s.bytes_in_use;
  if (s.peak_bytes_in_use_is_set) out.peak_bytes_in_use = s.peak_bytes_in_use;
  if (s.bytes_limit_is_set) out.bytes_limit = s.bytes_limit;
  if (s.num_allocs_is_set) out.num_allocs = s.num_allocs;
  return out;
}

// ---- DeviceType ------------------------------------------------------------------------------------

DeviceType::DeviceType(std::unique_ptr<Plugin> plugin) : plugin_(std::move(plugin)) {
  int32_t count = 0;
  oar_status_t* s = plugin_->device()->device_count(&count);
  if (s != nullptr) {
    StatusInfo info = TakeStatus(s);
    unavailable_reason_ = fmt::format("{}: {}", ErrorCodeName(info.code), info.message);
    count = 0;
  }
  OAR_CHECK(count >= 0 && count < 4096, kInternal, "device_count returned {}", count);
  for (int i = 0; i < count; ++i) devices_.push_back(std::make_unique<DeviceContext>(this, i));
}

std::map<std::string, uint64_t> DeviceType::FallbackCounts() const {
  std::lock_guard<std::mutex> lock(fallback_mutex_);
  std::map<std::string, uint64_t> out;
  for (const auto& [op, n] : fallbacks_) out[OpName(op)] = n;
  return out;
}

DeviceType::FormatStats DeviceType::format_stats() const {
  return {private_format_calls_.load(), casts_to_private_.load(), casts_to_plain_.load()};
}

uint64_t DeviceType::RecordFallback(int op_id) {
  std::lock_guard<std::mutex> lock(fallback_mutex_);
  return ++fallbacks_[op_id];
}

// ---- Runtime ---------------------------------------------------------------------------------------

std::filesystem::path DefaultPluginDir() {
  boost::dll::fs::error_code ec;
  // The runtime is a shared library in <prefix>/lib (build tree: build/lib): the plugins are beside it,
  // wherever the application that loaded it lives. Linked statically into a program, this is the program
  // itself, in <prefix>/bin.
  const boost::dll::fs::path self = boost::dll::this_line_location(ec);
  if (ec) return {};
  const boost::dll::fs::path exe = boost::dll::program_location(ec);
  const std::filesystem::path dir(self.parent_path().string());
  const std::filesystem::path self_path(self.string()), exe_path(exe.string());
  if (!ec && std::filesystem::equivalent(exe_path, self_path, ec)) {
    return dir / ".." / "lib" / "oar" / "plugins";
  }
  return dir / "oar" / "plugins";
}

Runtime::Runtime(const Options& options) {
  strict_ = GetEnvFlag("OAR_STRICT_DEVICE");
  // Plugins bring OpenMP (libgomp reads its settings when the first plugin loads it). Its default wait
  // policy spins between parallel regions; on a machine whose cores are shared with other processes
  // (CI, laptops) that made eager training steps up to 400x slower. Threads that sleep cost a few
  // microseconds per region instead. A user's explicit OMP_WAIT_POLICY / GOMP_SPINCOUNT wins.
  if (!GetEnv("OMP_WAIT_POLICY") && !GetEnv("GOMP_SPINCOUNT")) setenv("OMP_WAIT_POLICY", "passive", 0);
  // Every *.so in a folder, in name order; Consider refuses (with the reason) what is not a regular file.
  auto consider_folder = [this](const std::filesystem::path& dir, const std::string& source) {
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".so") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    OAR_LOG_DEBUG("{} plugin folder {}: {} candidate(s)", source, dir.string(), files.size());
    for (const auto& f : files) Consider(f, source);
  };
  for (const auto& file : options.plugin_files) Consider(file, "explicit");
  if (options.use_env_path) {
    if (const std::optional<std::string> env = GetEnv("OAR_PLUGIN_PATH")) {
      for (const std::string& entry : SplitPathList(*env)) {
        std::error_code ec;
        if (std::filesystem::is_directory(entry, ec)) {
          consider_folder(entry, "OAR_PLUGIN_PATH");
        } else {
          Consider(entry, "OAR_PLUGIN_PATH");
        }
      }
    }
  }
  if (options.use_default_dir) {
    const std::filesystem::path dir = DefaultPluginDir();
    std::error_code ec;
    if (!dir.empty() && std::filesystem::is_directory(dir, ec)) {
      consider_folder(dir.lexically_normal(), "default");
    } else {
      OAR_LOG_DEBUG("default plugin folder {} does not exist", dir.string());
    }
  }
}

Runtime::~Runtime() = default;

void Runtime::Consider(const std::filesystem::path& given, const std::string& source) {
  std::error_code ec;
  std::filesystem::path path = std::filesystem::weakly_canonical(given, ec);
  if (ec) path = given;
  for (const Candidate& c : candidates_) {
    if (c.path == path) {
      OAR_LOG_DEBUG("plugin candidate {} ({}) already considered; skipping", path.string(), source);
      return;
    }
  }
  Candidate candidate{path, source, false, ""};
  OAR_LOG_DEBUG("plugin candidate {} ({})", path.string(), source);
  // Only regular files are opened: opening a FIFO would block every command, and a folder is no plugin.
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    candidate.reason = "file does not exist";
  } else if (ec) {
    candidate.reason = fmt::format("cannot be examined: {}", ec.message());
  } else if (status.type() != std::filesystem::file_type::regular) {
    candidate.reason = fmt::format("is {}, not a regular file; only regular files are loaded as plugins",
                                   FileTypeName(status.type()));
  } else {
    auto loaded = LoadPlugin(path);
    if (auto* refusal = std::get_if<Refusal>(&loaded)) {
      candidate.reason = refusal->reason;
    } else {
      std::unique_ptr<Plugin>& plugin = std::get<std::unique_ptr<Plugin>>(loaded);
      if (DeviceType* existing = FindType(plugin->name())) {
        candidate.reason = fmt::format("device type '{}' is already provided by {}", plugin->name(),
                                       existing->plugin().path().string());
      } else {
        try {
          auto type = std::make_unique<DeviceType>(std::move(plugin));
          const int id = Device::InternType(type->name());
          if (by_type_id_.size() <= static_cast<size_t>(id)) by_type_id_.resize(id + 1, nullptr);
          by_type_id_[id] = type.get();
          types_.push_back(std::move(type));
          candidate.loaded = true;
        } catch (const Error& e) {
          candidate.reason = fmt::format("device setup failed: {}", e.what());
        }
      }
    }
  }
  if (candidate.loaded) {
    const DeviceType& t = *types_.back();
    OAR_LOG_DEBUG("plugin '{}' from {}: {} device(s){}", t.name(), path.string(), t.device_count(),
                  t.unavailable_reason().empty() ? "" : " — " + t.unavailable_reason());
  } else {
    OAR_LOG_WARNING("skipped plugin {} ({}): {}", path.string(), source, candidate.reason);
  }
  candidates_.push_back(std::move(candidate));
}

namespace {
std::mutex g_runtime_mutex;
Runtime* g_runtime = nullptr;
std::optional<Runtime::Options> g_options;
}  // namespace

// The exit drain. A program that returns from main while a device still runs its work would let exit tear
// down the libraries that work uses (oneDNN frees its JIT code in a static destructor) under a running
// kernel. So the runtime registers a handler with atexit once it and its plugins exist: handlers run in the
// reverse order of registration, so it runs before the destructors of every library loaded until then. It
// waits for the devices, but at most OAR_EXIT_DRAIN_TIMEOUT_S seconds (default 10; 0 turns it off): a
// device hung by a fault must not turn an exit into a hang. A forked child skips it (the devices' worker
// threads were not forked with it).
namespace {
double g_exit_drain_timeout_s = 10;
pid_t g_runtime_pid = 0;

double ExitDrainTimeoutFromEnv() {
  const auto text = GetEnv("OAR_EXIT_DRAIN_TIMEOUT_S");
  if (!text) return 10;
  char* end = nullptr;
  const double v = std::strtod(text->c_str(), &end);
  OAR_CHECK_ARG(!text->empty() && end == text->c_str() + text->size() && std::isfinite(v) && v >= 0,
                "OAR_EXIT_DRAIN_TIMEOUT_S='{}' is not a number of seconds >= 0 (0 turns the exit drain off)",
                BriefText(*text));
  return v;
}

void DrainAtExitBounded() {
  if (getpid() != g_runtime_pid || g_exit_drain_timeout_s == 0) return;
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> drained = done->get_future();
  std::thread([done] {
    Runtime::DrainAtExit();
    done->set_value();
  }).detach();
  if (drained.wait_for(std::chrono::duration<double>(g_exit_drain_timeout_s)) != std::future_status::ready) {
    OAR_LOG_WARNING("devices still busy {} s after main returned (OAR_EXIT_DRAIN_TIMEOUT_S); exiting without "
                    "waiting for them", g_exit_drain_timeout_s);
  }
}
}  // namespace

Runtime& Runtime::Get() {
  // Double-checked through a function-local static: the common path is one atomic load.
  static Runtime* const runtime = [] {
    std::lock_guard<std::mutex> lock(g_runtime_mutex);
    g_exit_drain_timeout_s = ExitDrainTimeoutFromEnv();  // a bad value fails before any plugin loads
    g_runtime = new Runtime(g_options.value_or(Options{}));
    g_runtime_pid = getpid();
    std::atexit(&DrainAtExitBounded);
    return g_runtime;
  }();
  return *runtime;
}

void Runtime::DrainAtExit() {
  Runtime* rt = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_runtime_mutex);
    rt = g_runtime;
  }
  if (rt == nullptr) return;
  for (const auto& t : rt->types_) {
    for (int i = 0; i < t->device_count(); ++i) {
      try {
        t->device(i).Synchronize();
      } catch (const Error& e) {
        OAR_LOG_WARNING("{} at exit: {}", t->device(i).device().str(), e.what());
      }
    }
  }
}

void Runtime::Configure(const Options& options) {
  std::lock_guard<std::mutex> lock(g_runtime_mutex);
  OAR_CHECK(g_runtime == nullptr, kFailedPrecondition,
            "Runtime::Configure must be called before the runtime is first used");
  g_options = options;
}

std::vector<Device> Runtime::devices() const {
  std::vector<Device> out;
  for (const auto& t : types_) {
    for (int i = 0; i < t->device_count(); ++i) out.push_back(t->device(i).device());
  }
  return out;
}

DeviceType* Runtime::FindType(std::string_view name) const {
  for (const auto& t : types_) {
    if (t->name() == name) return t.get();
  }
  return nullptr;
}

std::string Runtime::AvailableDevicesString() const {
  std::string s;
  for (Device d : devices()) s += (s.empty() ? "" : ", ") + d.str();
  return s.empty() ? "none" : s;
}

void Runtime::ThrowUnknownDevice(Device device) const {
  if (const DeviceType* t = FindType(device.type())) {
    if (t->device_count() == 0) {
      Throw(ErrorCode::kNotFound,
            "device {} is not available: plugin '{}' reports no devices ({}); available "
            "devices: {}",
            device.str(), t->name(), t->unavailable_reason().empty() ? "no reason given" : t->unavailable_reason(),
            AvailableDevicesString());
    }
    Throw(ErrorCode::kNotFound, "device {} does not exist: {} has {} device(s); available devices: {}", device.str(),
          t->name(), t->device_count(), AvailableDevicesString());
  }
  std::string refused;
  for (const Candidate& c : candidates_) {
    if (!c.loaded) refused += fmt::format("; skipped {}: {}", c.path.filename().string(), c.reason);
  }
  Throw(ErrorCode::kNotFound, "unknown device '{}'; available devices: {}{} (run `oar devices` for details)",
        device.str(), AvailableDevicesString(), refused);
}

Device Runtime::DefaultDevice() {
  std::lock_guard<std::mutex> lock(default_mutex_);
  if (!default_device_) {
    Device d("cpu", 0);
    if (const std::optional<std::string> env = GetEnv("OAR_DEVICE")) {
      try {
        d = Device(*env);
        Context(d);  // validates, naming the available devices
      } catch (const Error& e) {
        // Say where the name came from: the user may not know OAR_DEVICE is set.
        Throw(e.code(), "OAR_DEVICE='{}' (the default device): {}", BriefText(*env), e.what());
      }
    } else {
      Context(d);
    }
    default_device_ = d;
  }
  return *default_device_;
}

}  // namespace oar::runtime
