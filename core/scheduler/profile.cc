#include "core/scheduler/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "core/base/error.h"

namespace oar::scheduler {
namespace {

std::string Us(uint64_t ns) { return fmt::format("{:.3f}", static_cast<double>(ns) / 1e3); }

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

void RunProfile::ComputeOverlap() {
  copy_ns.clear();
  hidden_copy_ns.clear();
  std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> compute;
  for (const InstructionProfile& p : instructions) {
    if (!p.copy && p.device_start_ns && p.device_end_ns) compute[p.device].push_back({*p.device_start_ns, *p.device_end_ns});
  }
  // Merge each device's compute intervals, then intersect every copy with them.
  for (auto& [device, v] : compute) {
    std::sort(v.begin(), v.end());
    std::vector<std::pair<uint64_t, uint64_t>> merged;
    for (const auto& iv : v) {
      if (!merged.empty() && iv.first <= merged.back().second) {
        merged.back().second = std::max(merged.back().second, iv.second);
      } else {
        merged.push_back(iv);
      }
    }
    v = std::move(merged);
  }
  for (const InstructionProfile& p : instructions) {
    if (!p.copy || !p.device_start_ns || !p.device_end_ns) continue;
    const uint64_t lo = *p.device_start_ns, hi = *p.device_end_ns;
    copy_ns[p.device] += hi - lo;
    uint64_t hidden = 0;
    for (const auto& [a, b] : compute[p.device]) {
      const uint64_t s = std::max(a, lo), e = std::min(b, hi);
      if (s < e) hidden += e - s;
    }
    hidden_copy_ns[p.device] += hidden;
  }
}

std::string RunProfile::Format() const {
  std::string out = fmt::format("{:>4} {:<26} {:<14} {:<8} {:>12} {:>12} {:>14} {:>14}\n", "#", "instruction", "device",
                                "stream", "host us", "host end", "device us", "device end");
  uint64_t base = UINT64_MAX;
  for (const InstructionProfile& p : instructions) {
    if (p.device_start_ns) base = std::min(base, *p.device_start_ns);
  }
  for (const InstructionProfile& p : instructions) {
    const std::string dev = p.device_start_ns ? Us(*p.device_start_ns - base) + (p.simulated ? " sim" : "") : "-";
    const std::string dev_end = p.device_end_ns ? Us(*p.device_end_ns - base) : "-";
    out += fmt::format("{:>4} {:<26} {:<14} {:<8} {:>12} {:>12} {:>14} {:>14}\n", p.index, p.name, p.device, p.stream,
                       Us(p.host_start_ns), Us(p.host_end_ns), dev, dev_end);
  }
  out += fmt::format("host time of the run: {} us\n", Us(host_total_ns));
  for (const auto& [device, total] : copy_ns) {
    const uint64_t hidden = hidden_copy_ns.count(device) ? hidden_copy_ns.at(device) : 0;
    out += fmt::format("copy/compute overlap on {}: {} of {} us of copies hidden ({:.1f}%)\n", device, Us(hidden),
                       Us(total), total == 0 ? 0.0 : 100.0 * static_cast<double>(hidden) / static_cast<double>(total));
  }
  for (const auto& [device, bytes] : arena_bytes) {
    const uint64_t held = peak_allocated_memory.count(device) ? peak_allocated_memory.at(device) : 0;
    out += fmt::format("memory plan on {}: arena {} bytes; peak allocated {} bytes\n", device, bytes, held);
  }
  if (donated_outputs > 0) out += fmt::format("outputs written into donated inputs: {}\n", donated_outputs);
  for (const auto& [device, bytes] : peak_device_memory) out += PeakMemoryLine(bytes, device) + "\n";
  return out;
}

std::string RunProfile::ChromeTrace() const {
  // Processes: 0 = host, then one per device in name order; threads: one per stream.
  std::map<std::string, int> pids;
  for (const InstructionProfile& p : instructions) pids.emplace(p.device, 0);
  int next = 1;
  for (auto& [device, pid] : pids) pid = next++;
  std::map<std::pair<int, std::string>, int> tids;
  auto tid = [&](int pid, const std::string& name) { return tids.emplace(std::pair{pid, name}, static_cast<int>(tids.size()) + 1).first->second; };
  std::string events;
  auto add = [&](const std::string& e) { events += (events.empty() ? "\n" : ",\n") + e; };
  uint64_t base = UINT64_MAX;
  for (const InstructionProfile& p : instructions) {
    if (p.device_start_ns) base = std::min(base, *p.device_start_ns);
  }
  for (const InstructionProfile& p : instructions) {
    const std::string args = fmt::format("{{\"index\":{},\"device\":{},\"stream\":{}}}", p.index, JsonString(p.device),
                                         JsonString(p.stream));
    const std::string host_thread = p.device + " " + p.stream;
    add(fmt::format("{{\"name\":{},\"cat\":\"issue\",\"ph\":\"X\",\"pid\":0,\"tid\":{},\"ts\":{},\"dur\":{},\"args\":{}}}",
                    JsonString(p.name), tid(0, host_thread), Us(p.host_start_ns), Us(p.host_end_ns - p.host_start_ns),
                    args));
    if (p.device_start_ns && p.device_end_ns) {
      const int pid = pids.at(p.device);
      add(fmt::format("{{\"name\":{},\"cat\":\"{}\",\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},\"args\":{}}}",
                      JsonString(p.name), p.copy ? "copy" : "kernel", pid, tid(pid, p.stream),
                      Us(*p.device_start_ns - base), Us(*p.device_end_ns - *p.device_start_ns), args));
    }
  }
  add(R"json({"name":"process_name","ph":"M","pid":0,"args":{"name":"host (issue)"}})json");
  for (const auto& [device, pid] : pids) {
    add(fmt::format("{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"name\":{}}}}}", pid,
                    JsonString(device + " (device time)")));
  }
  for (const auto& [key, id] : tids) {
    add(fmt::format("{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":{}}}}}", key.first,
                    id, JsonString(key.second)));
  }
  return "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[" + events + "\n]}\n";
}

void RunProfile::WriteChromeTrace(const std::filesystem::path& path) const {
  std::ofstream f(path, std::ios::binary);
  OAR_CHECK(f.good(), kInvalidArgument, "cannot write the trace to '{}'", path.string());
  f << ChromeTrace();
  f.close();
  OAR_CHECK(f.good(), kInvalidArgument, "writing the trace to '{}' failed", path.string());
}

std::string PeakMemoryLine(uint64_t bytes, const std::string& device) {
  return fmt::format("peak device memory: {} bytes on {}", bytes, device);
}

}  // namespace oar::scheduler
