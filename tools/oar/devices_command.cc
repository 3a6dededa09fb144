#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/base/json.h"
#include "core/runtime/runtime.h"
#include "tools/oar/commands.h"

namespace oar::cli {
namespace {

using runtime::AttrValue;
using runtime::DeviceContext;
using runtime::Runtime;

std::string Bytes(double n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (n >= 1024 && u < 4) {
    n /= 1024;
    ++u;
  }
  return fmt::format("{:.1f} {}", n, units[u]);
}

nlohmann::json AttrJson(const AttrValue& a) {
  switch (a.type) {
    case OAR_ATTR_INT: return a.i;
    case OAR_ATTR_FLOAT: return a.f;
    case OAR_ATTR_BOOL: return a.b;
    case OAR_ATTR_STRING: return a.s;
    case OAR_ATTR_INTS: return a.ints;
    case OAR_ATTR_FLOATS: return a.floats;
    default: return nullptr;
  }
}

std::string Summary(const DeviceContext& ctx) {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : " | ") + part; };
  if (const AttrValue* a = ctx.FindAttribute(OAR_DEVICE_ATTR_NAME)) add(a->s);
  if (const AttrValue* a = ctx.FindAttribute(OAR_DEVICE_ATTR_VENDOR)) add("vendor " + a->s);
  if (const AttrValue* a = ctx.FindAttribute(OAR_DEVICE_ATTR_TOTAL_MEMORY)) add("memory " + Bytes(static_cast<double>(a->i)));
  if (const AttrValue* a = ctx.FindAttribute(OAR_DEVICE_ATTR_COMPUTE_UNITS)) add(fmt::format("{} compute units", a->i));
  if (const AttrValue* a = ctx.FindAttribute(OAR_DEVICE_ATTR_PEAK_FLOPS_F32)) add(fmt::format("{:.1f} TFLOP/s f32", a->f / 1e12));
  if (const AttrValue* a = ctx.FindAttribute(OAR_DEVICE_ATTR_MEMORY_BANDWIDTH)) add(fmt::format("{:.0f} GB/s", a->f / 1e9));
  return s;
}

nlohmann::json DevicesJson(Runtime& rt) {
  nlohmann::json j;
  j["abi"] = {{"major", OAR_PLUGIN_ABI_MAJOR}, {"minor", OAR_PLUGIN_ABI_MINOR}};
  j["plugins"] = nlohmann::json::array();
  j["devices"] = nlohmann::json::array();
  for (const auto& type : rt.device_types()) {
    const runtime::Plugin& p = type->plugin();
    nlohmann::json fallbacks = nlohmann::json::object();
    for (const auto& [op, n] : type->FallbackCounts()) fallbacks[op] = n;
    j["plugins"].push_back({{"name", p.name()},
                            {"path", p.path().string()},
                            {"version", p.version()},
                            {"vendor", p.vendor()},
                            {"abi", fmt::format("{}.{}", p.abi_major(), p.abi_minor())},
                            {"device_count", type->device_count()},
                            {"unavailable_reason", type->unavailable_reason()},
                            {"kernels", p.kernels().size()},
                            {"fallbacks", fallbacks}});
    for (int i = 0; i < type->device_count(); ++i) {
      DeviceContext& ctx = type->device(i);
      nlohmann::json attrs = nlohmann::json::object();
      for (const AttrValue& a : ctx.attributes()) attrs[a.name] = AttrJson(a);
      const runtime::AllocatorStats st = ctx.allocator().stats();
      nlohmann::json mem = {{"allocator",
                             {{"allocated_bytes", st.allocated_bytes},
                              {"reserved_bytes", st.reserved_bytes},
                              {"peak_allocated_bytes", st.peak_allocated_bytes},
                              {"num_allocations", st.num_allocations},
                              {"num_device_mallocs", st.num_device_mallocs}}}};
      const DeviceContext::MemoryStats ps = ctx.PluginMemoryStats();
      nlohmann::json plugin_mem = nlohmann::json::object();
      if (ps.bytes_in_use) plugin_mem["bytes_in_use"] = *ps.bytes_in_use;
      if (ps.peak_bytes_in_use) plugin_mem["peak_bytes_in_use"] = *ps.peak_bytes_in_use;
      if (ps.bytes_limit) plugin_mem["bytes_limit"] = *ps.bytes_limit;
      if (ps.num_allocs) plugin_mem["num_allocs"] = *ps.num_allocs;
      mem["plugin"] = plugin_mem;
      j["devices"].push_back({{"name", ctx.device().str()},
                              {"plugin", p.name()},
                              {"plugin_path", p.path().string()},
                              {"plugin_version", p.version()},
                              {"abi", fmt::format("{}.{}", p.abi_major(), p.abi_minor())},
                              {"attributes", attrs},
                              {"memory", mem},
                              {"fallbacks", fallbacks}});
    }
  }
  j["skipped"] = nlohmann::json::array();
  for (const auto& c : rt.candidates()) {
    if (!c.loaded) j["skipped"].push_back({{"path", c.path.string()}, {"source", c.source}, {"reason", c.reason}});
  }
  return j;
}

void PrintDevices(Runtime& rt) {
  std::printf("Devices:\n");
  bool any = false;
  for (const auto& type : rt.device_types()) {
    for (int i = 0; i < type->device_count(); ++i) {
      DeviceContext& ctx = type->device(i);
      std::printf("  %-14s %s\n", ctx.device().str().c_str(), Summary(ctx).c_str());
      any = true;
    }
  }
  if (!any) std::printf("  (none)\n");
  std::printf("\nPlugins:\n");
  for (const auto& type : rt.device_types()) {
    const runtime::Plugin& p = type->plugin();
    std::string note = fmt::format("{} device{}", type->device_count(), type->device_count() == 1 ? "" : "s");
    if (!type->unavailable_reason().empty()) note += " — " + type->unavailable_reason();
    std::printf("  %-12s %-8s ABI %u.%u  %4zu kernels  %s\n               %s\n", p.name().c_str(), p.version().c_str(),
                p.abi_major(), p.abi_minor(), p.kernels().size(), note.c_str(), p.path().string().c_str());
  }
  bool skipped = false;
  for (const auto& c : rt.candidates()) {
    if (c.loaded) continue;
    if (!skipped) std::printf("\nSkipped plugins:\n");
    skipped = true;
    std::printf("  %s: %s\n", c.path.string().c_str(), c.reason.c_str());
  }
}

}  // namespace

void AddDevicesCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("devices", "List devices, plugins and skipped plugins with the reason");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Machine-readable output");
  cmd->callback([json] {
    Runtime& rt = Runtime::Get();
    if (*json) {
      nlohmann::json j = DevicesJson(rt);
      EscapeInvalidUtf8(&j);  // paths, vendor strings and reasons are bytes, not necessarily UTF-8
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      PrintDevices(rt);
    }
  });
}

}  // namespace oar::cli
