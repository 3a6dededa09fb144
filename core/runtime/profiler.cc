#include "core/runtime/profiler.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/base/logging.h"
#include "core/runtime/kernel_registry.h"
#include "core/runtime/runtime.h"
#include "core/runtime/status.h"

namespace oar::runtime {
namespace {

/// Each device with a profiler table, in load order.
template <typename Fn>
void ForEachProfiledDevice(Fn&& fn) {
  for (const auto& type : Runtime::Get().device_types()) {
    const oar_profiler_api_t* p = type->plugin().profiler();
    if (p == nullptr) continue;
    for (int i = 0; i < type->device_count(); ++i) fn(*type, type->device(i), *p);
  }
}

struct SinkContext {
  std::map<std::pair<std::string, std::string>, Profiler::Row>* rows;
  const std::string* type;
  std::vector<Profiler::Activity>* activities;
  std::string device;
};

void Sink(void* context, const oar_activity_t* a) {
  auto* ctx = static_cast<SinkContext*>(context);
  if (a == nullptr || a->name == nullptr || a->end_ns < a->start_ns) return;
  Profiler::Row& row = (*ctx->rows)[{*ctx->type, a->name}];
  row.device_ns += a->end_ns - a->start_ns;
  row.device_records++;
  row.simulated = row.simulated || a->simulated;
  ctx->activities->push_back({ctx->device, a->name, a->kind, a->start_ns, a->end_ns, a->bytes, a->simulated});
}

std::string Ms(uint64_t ns) { return fmt::format("{:.3f}", static_cast<double>(ns) / 1e6); }

}  // namespace

Profiler& Profiler::Get() {
  static Profiler& profiler = *new Profiler;  // never destroyed: dispatch may run during exit
  return profiler;
}

void Profiler::Start() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rows_.clear();
    activities_.clear();
  }
  ForEachProfiledDevice([](DeviceType&, DeviceContext& ctx, const oar_profiler_api_t& p) {
    ThrowIfError(p.start(ctx.ordinal()), [&] { return ctx.device().str() + " profiler start"; });
  });
  enabled_.store(true);
}

std::vector<Profiler::Row> Profiler::Stop() {
  enabled_.store(false);
  std::lock_guard<std::mutex> lock(mutex_);
  ForEachProfiledDevice([this](DeviceType& type, DeviceContext& ctx, const oar_profiler_api_t& p) {
    ctx.Synchronize();  // every activity finished, so every record is there
    ThrowIfError(p.stop(ctx.ordinal()), [&] { return ctx.device().str() + " profiler stop"; });
    SinkContext sink{&rows_, &type.name(), &activities_, ctx.device().str()};
    ThrowIfError(p.flush(ctx.ordinal(), Sink, &sink), [&] { return ctx.device().str() + " profiler flush"; });
  });
  std::vector<Row> out;
  for (auto& [key, row] : rows_) {
    row.device_type = key.first;
    row.name = key.second;
    out.push_back(row);
  }
  std::sort(out.begin(), out.end(), [](const Row& a, const Row& b) {
    if (a.device_type != b.device_type) return a.device_type < b.device_type;
    return a.host_ns + a.device_ns > b.host_ns + b.device_ns;
  });
  return out;
}

std::vector<Profiler::Activity> Profiler::activities() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return activities_;
}

void Profiler::RecordLaunch(const DeviceType& type, int op_id, uint64_t host_ns, LaunchPath path) {
  std::lock_guard<std::mutex> lock(mutex_);
  Row& row = rows_[{type.name(), OpName(op_id)}];
  row.calls++;
  row.host_ns += host_ns;
  if (path == LaunchPath::kFallback) row.fallbacks++;
  if (path == LaunchPath::kPrivateFormat) row.private_format++;
}

std::string FormatProfile(const std::vector<Profiler::Row>& rows) {
  using Row = Profiler::Row;
  std::string out = fmt::format("{:<12} {:<22} {:>9} {:>12} {:>14} {:>9} {:>9}\n", "device", "op", "calls", "host ms",
                                "device ms", "fallback", "private");
  auto flush_total = [&](const std::string& type, const Row& t) {
    const std::string device = t.device_records == 0 ? "-" : Ms(t.device_ns) + (t.simulated ? " sim" : "");
    out += fmt::format("{:<12} {:<22} {:>9} {:>12} {:>14} {:>9} {:>9}\n", type, "(total)", t.calls, Ms(t.host_ns),
                       device, t.fallbacks, t.private_format);
  };
  Row total;
  std::string current;
  for (const Row& r : rows) {
    if (r.device_type != current) {
      if (!current.empty()) flush_total(current, total);
      current = r.device_type;
      total = Row{};
    }
    const std::string device = r.device_records == 0 ? "-" : Ms(r.device_ns) + (r.simulated ? " sim" : "");
    out += fmt::format("{:<12} {:<22} {:>9} {:>12} {:>14} {:>9} {:>9}\n", r.device_type, r.name, r.calls,
                       r.calls == 0 ? "-" : Ms(r.host_ns), device, r.fallbacks, r.private_format);
    total.calls += r.calls;
    total.host_ns += r.host_ns;
    total.device_ns += r.device_ns;
    total.device_records += r.device_records;
    total.simulated = total.simulated || r.simulated;
    total.fallbacks += r.fallbacks;
    total.private_format += r.private_format;
  }
  if (!current.empty()) flush_total(current, total);
  return out;
}

}  // namespace oar::runtime
