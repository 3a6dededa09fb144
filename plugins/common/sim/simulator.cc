#include "plugins/common/sim/simulator.h"

#include <algorithm>

#include "oar/plugin/cpp/kernel.hpp"
#include "plugins/common/host_kernels.h"

namespace oar::sim {
namespace {

// The simulator of this plugin module: created by Initialize, never destroyed implicitly (the host
// may use the plugin until the process ends; static destructors must not stop streams under it).
std::atomic<Simulator*> g_simulator{nullptr};
std::mutex g_lifecycle_mu;

}  // namespace

// ---- SimDevice ---------------------------------------------------------------------------------------

SimDevice::SimDevice(Simulator* sim, int32_t ordinal)
    : sim_(sim),
      ordinal_(ordinal),
      where_(sim->spec().name + ":" + std::to_string(ordinal)),
      memory_(where_, sim->options().memory_bytes, static_cast<uint64_t>(sim->spec().model.alignment)) {
  const DeviceModel& m = sim->spec().model;
  attr_strings_.reserve(2 + m.extra_strings.size());  // no reallocation: attributes point into it
  attr_strings_.push_back(m.name);
  attr_strings_.push_back(m.vendor);
  attrs_ = {
      sdk::StringAttr(OAR_DEVICE_ATTR_NAME, attr_strings_[0]),
      sdk::StringAttr(OAR_DEVICE_ATTR_VENDOR, attr_strings_[1]),
      sdk::IntAttr(OAR_DEVICE_ATTR_TOTAL_MEMORY, static_cast<int64_t>(memory_.capacity())),
      sdk::IntAttr(OAR_DEVICE_ATTR_COMPUTE_UNITS, m.compute_units),
      sdk::IntAttr(OAR_DEVICE_ATTR_ALIGNMENT, m.alignment),
      sdk::BoolAttr(OAR_DEVICE_ATTR_HOST_ACCESSIBLE, false),
      sdk::IntsAttr(OAR_DEVICE_ATTR_DTYPES, m.dtypes),
      sdk::FloatAttr(OAR_DEVICE_ATTR_PEAK_FLOPS_F32, m.peak_flops_f32),
      sdk::FloatAttr("peak_flops_f16", m.peak_flops_f16),
      sdk::FloatAttr("peak_flops_bf16", m.peak_flops_bf16),
      sdk::FloatAttr(OAR_DEVICE_ATTR_MEMORY_BANDWIDTH, m.memory_bandwidth),
      sdk::FloatAttr("host_link_bandwidth", m.host_link_bandwidth),
      sdk::FloatAttr("peer_bandwidth", m.peer_bandwidth),
      sdk::IntAttr("local_memory_per_unit", m.local_memory_per_unit),
      sdk::BoolAttr("simulated", true),
      sdk::BoolAttr("deterministic", m.deterministic),  // docs/conformance.md, determinism
  };
  for (const auto& [name, value] : m.extra_ints) attrs_.push_back(sdk::IntAttr(name.c_str(), value));
  for (const auto& [name, value] : m.extra_strings) {
    attr_strings_.push_back(value);
    attrs_.push_back(sdk::StringAttr(name.c_str(), attr_strings_.back()));
  }
}

SimDevice::~SimDevice() {
  std::unordered_map<Stream*, std::shared_ptr<Stream>> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams.swap(streams_);
    events_.clear();
  }
  streams.clear();  // each stream runs its queue and joins its worker
}

const DeviceModel& SimDevice::model() const { return sim_->spec().model; }

oar_stream_t SimDevice::CreateStream() {
  std::lock_guard<std::mutex> lock(mu_);
  auto stream =
      std::make_shared<Stream>(this, next_stream_id_++, sim_->options().jitter_seed, sim_->options().kernel_threads);
  Stream* handle = stream.get();
  streams_.emplace(handle, std::move(stream));
  return reinterpret_cast<oar_stream_t>(handle);
}

std::shared_ptr<Stream> SimDevice::GetStream(oar_stream_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(reinterpret_cast<Stream*>(handle));
  if (it == streams_.end()) {
    Throw(OAR_STATUS_INVALID_ARGUMENT, where_ +
                                           ": unknown or destroyed stream handle (streams belong to the device "
                                           "they were created on)");
  }
  return it->second;
}

std::optional<SimError> SimDevice::DestroyStream(oar_stream_t handle) {
  std::shared_ptr<Stream> stream = GetStream(handle);
  if (Stream::Current() == stream.get()) {
    Throw(OAR_STATUS_FAILED_PRECONDITION, where_ + ": a stream cannot be destroyed from its own host callback");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams_.erase(stream.get());
  }
  stream->Drain();
  std::optional<SimError> error = stream->TakeError();
  stream.reset();  // joins the worker unless a concurrent synchronise still holds it
  return error;
}

oar_event_t SimDevice::CreateEvent() {
  auto event = std::make_shared<SimEvent>();
  SimEvent* handle = event.get();
  std::lock_guard<std::mutex> lock(mu_);
  events_.emplace(handle, std::move(event));
  return reinterpret_cast<oar_event_t>(handle);
}

std::shared_ptr<SimEvent> SimDevice::GetEvent(oar_event_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(reinterpret_cast<SimEvent*>(handle));
  if (it == events_.end()) {
    Throw(OAR_STATUS_INVALID_ARGUMENT, where_ +
                                           ": unknown or destroyed event handle (events belong to the device "
                                           "they were created on)");
  }
  return it->second;
}

void SimDevice::DestroyEvent(oar_event_t handle) {
  std::shared_ptr<SimEvent> event = GetEvent(handle);  // validates
  std::lock_guard<std::mutex> lock(mu_);
  events_.erase(event.get());  // a queued wait keeps its marker alive on its own
}

std::vector<std::shared_ptr<Stream>> SimDevice::LiveStreams() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Stream>> out;
  out.reserve(streams_.size());
  for (const auto& [handle, stream] : streams_) out.push_back(stream);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a->id() < b->id(); });
  return out;
}

void SimDevice::WaitIdle() {
  for (const auto& stream : LiveStreams()) stream->Drain();
}

std::optional<SimError> SimDevice::Synchronize() {
  const auto streams = LiveStreams();
  for (const auto& stream : streams) stream->Drain();
  std::optional<SimError> first;
  int more = 0;
  for (const auto& stream : streams) {
    if (Stream::Current() == stream.get()) continue;  // a callback's own stream has not finished yet
    if (std::optional<SimError> e = stream->TakeError()) {
      if (!first) {
        first = std::move(e);
      } else {
        ++more;
      }
    }
  }
  if (first && more > 0) first->message += " (and " + std::to_string(more) + " more stream error(s) on " + where_ + ")";
  return first;
}

uint64_t SimDevice::LatestClock() {
  uint64_t latest = ClockFloor();
  for (const auto& stream : LiveStreams()) latest = std::max(latest, stream->clock_ns());
  return latest;
}

uint64_t SimDevice::AdvanceClock(double duration_ns) {
  const uint64_t start = LatestClock();
  const uint64_t end = start + static_cast<uint64_t>(duration_ns);
  uint64_t floor = clock_floor_.load();
  while (floor < end && !clock_floor_.compare_exchange_weak(floor, end)) {
  }
  return start;
}

void SimDevice::MarkLost(const std::string& why) {
  std::lock_guard<std::mutex> lock(lost_mu_);
  if (lost_.load()) return;
  lost_reason_ = why;
  lost_.store(true, std::memory_order_release);
  sdk::Log(OAR_LOG_ERROR, sim_->spec().name.c_str(), where_ + ": device lost" + why);
}

std::optional<SimError> SimDevice::LostError(const std::string& operation) const {
  if (!lost()) return std::nullopt;
  std::lock_guard<std::mutex> lock(lost_mu_);
  return SimError{OAR_STATUS_UNAVAILABLE, where_ + ": device lost" + lost_reason_ + "; '" + operation + "' cannot run"};
}

void SimDevice::CheckAlive(const std::string& operation) const {
  if (std::optional<SimError> e = LostError(operation)) Throw(e->code, e->message);
}

void SimDevice::Completed(const Work& work, uint64_t start_ns, uint64_t end_ns) {
  profiler_.Record(work.name, work.kind, ordinal_, start_ns, end_ns, work.cost.bytes, work.cost.flops);
}

// ---- Simulator ---------------------------------------------------------------------------------------

const std::set<std::string>& LaunchableOps() {
  static const std::set<std::string> ops = [] {
    std::set<std::string> out{"format_cast"};  // ascend_sim's own kernel
    for (const host::HostKernel& k : host::HostKernels()) out.insert(k.op);
    return out;
  }();
  return ops;
}

Simulator::Simulator(const PluginSpec& spec, SimOptions options)
    : spec_(spec), options_(std::move(options)), faults_(ParseFaults(options_.faults, &LaunchableOps()), spec.name) {
  for (int32_t i = 0; i < options_.device_count; ++i) devices_.push_back(std::make_unique<SimDevice>(this, i));
}

void Simulator::Initialize(const PluginSpec& spec) {
  std::lock_guard<std::mutex> lock(g_lifecycle_mu);
  if (g_simulator.load() != nullptr) {
    Throw(OAR_STATUS_FAILED_PRECONDITION, spec.name + ": initialize called twice without shutdown");
  }
  try {
    g_simulator.store(new Simulator(spec, SimOptions::FromEnv(spec.env_prefix)));
  } catch (const sdk::StatusError& e) {
    Throw(e.code(), spec.name + ": " + e.what());
  }
  Simulator& sim = *g_simulator.load();
  if (!sim.faults().empty()) {
    sdk::Log(OAR_LOG_WARNING, spec.name.c_str(),
             "fault injection active: OAR_SIM_FAULTS='" + sim.options().faults + "'");
  }
}

Simulator& Simulator::Get() {
  Simulator* sim = g_simulator.load(std::memory_order_acquire);
  if (sim == nullptr) Throw(OAR_STATUS_FAILED_PRECONDITION, "the simulator is not initialised (call initialize first)");
  return *sim;
}

void Simulator::Shutdown() {
  std::lock_guard<std::mutex> lock(g_lifecycle_mu);
  delete g_simulator.exchange(nullptr);
}

SimDevice& Simulator::device(int32_t ordinal) {
  if (ordinal < 0 || ordinal >= device_count()) {
    Throw(OAR_STATUS_INVALID_ARGUMENT, spec_.name + ": device " + std::to_string(ordinal) + " does not exist (" +
                                           std::to_string(device_count()) + " device(s), set by " + spec_.env_prefix +
                                           "_DEVICES)");
  }
  return *devices_[ordinal];
}

void Simulator::BeginOperation(SimDevice& device, const std::string& operation) {
  device.CheckAlive(operation);
  if (const FaultScenario* s = faults_.Check(FaultKind::kDeviceLost, device.ordinal(), operation)) {
    device.MarkLost(FaultSuffix(*s));
  }
  device.CheckAlive(operation);
}

bool Simulator::IsDeviceAddress(const void* ptr) const {
  for (const auto& d : devices_) {
    if (d->memory().InRange(ptr)) return true;
  }
  return false;
}

}  // namespace oar::sim
