#include "core/passes/pass.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "core/base/error.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/passes/transforms.h"

namespace oar::passes {
namespace {

struct Entry {
  std::string description;
  PassFactory make;
};

std::map<std::string, Entry, std::less<>>& RawRegistry() {
  static std::map<std::string, Entry, std::less<>> registry;
  return registry;
}
std::map<std::string, Entry, std::less<>>& Registry() { return RawRegistry(); }
// The built-in passes register on first use rather than from static initialisers, which a static
// library would drop. Called before taking the registry lock.
void EnsureBuiltins() {
  static const bool builtins = [] {
    RegisterGenericPasses();
    return true;
  }();
  (void)builtins;
}
std::mutex& RegistryMutex() {
  static std::mutex m;
  return m;
}

std::string Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

std::string KnownPasses() {
  std::string known;
  for (const PassInfo& p : RegisteredPasses()) known += (known.empty() ? "" : ", ") + p.name;
  return known;
}

}  // namespace

void CheckPassOptions(std::string_view pass, const PassOptions& options, std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : options) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string list;
    for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    Throw(ErrorCode::kInvalidArgument, "pass '{}' has no option '{}' (options: {})", pass, key.substr(0, 64),
          list.empty() ? "none" : list);
  }
}

void RegisterPass(std::string_view name, std::string_view description, PassFactory make) {
  std::lock_guard lock(RegistryMutex());
  OAR_CHECK(RawRegistry().emplace(std::string(name), Entry{std::string(description), std::move(make)}).second,
            kAlreadyExists, "pass '{}' is registered twice", name);
}

std::vector<PassInfo> RegisteredPasses() {
  EnsureBuiltins();
  std::lock_guard lock(RegistryMutex());
  std::vector<PassInfo> out;
  for (const auto& [name, e] : Registry()) out.push_back({name, e.description});
  return out;
}

std::unique_ptr<Pass> CreatePass(std::string_view name, const PassOptions& options) {
  EnsureBuiltins();
  PassFactory make;
  {
    std::lock_guard lock(RegistryMutex());
    auto it = Registry().find(name);
    if (it != Registry().end()) make = it->second.make;
  }
  if (!make) Throw(ErrorCode::kNotFound, "unknown pass '{}' (registered passes: {})", name.substr(0, 64), KnownPasses());
  return make(options);
}

PassManager::PassManager() {
  options_.print = [](std::string_view header, std::string_view ir) {
    std::fprintf(stderr, "%.*s\n%.*s", static_cast<int>(header.size()), header.data(), static_cast<int>(ir.size()),
                 ir.data());
  };
}

void PassManager::ConfigureFromEnvironment() {
  const char* v = std::getenv("OAR_IR_PRINT");
  if (v == nullptr || *v == '\0') return;
  const std::string_view value(v);
  EnsureBuiltins();
  if (value == "after-all") {
    options_.print_after_all = true;
  } else if (value == "before-all") {
    options_.print_before_all = true;
  } else {
    size_t start = 0;
    while (start <= value.size()) {
      const size_t comma = std::min(value.find(',', start), value.size());
      const std::string name = Trim(value.substr(start, comma - start));
      OAR_CHECK_ARG(!name.empty(), "OAR_IR_PRINT='{}': empty pass name at position {} (expected after-all, "
                    "before-all or pass names separated by commas)", value.substr(0, 128), start);
      {
        std::lock_guard lock(RegistryMutex());
        OAR_CHECK_ARG(Registry().contains(name), "OAR_IR_PRINT='{}': unknown pass '{}' (registered passes: {})",
                      value.substr(0, 128), name.substr(0, 64), [] {
                        std::string k;
                        for (const auto& [n, e] : Registry()) k += (k.empty() ? "" : ", ") + n;
                        return k;
                      }());
      }
      options_.print_after.insert(name);
      start = comma + 1;
    }
  }
}

void PassManager::AddPipeline(std::string_view pipeline) {
  if (Trim(pipeline).empty()) return;
  const std::string_view shown = pipeline.substr(0, 128);
  size_t start = 0;
  while (start <= pipeline.size()) {
    // One entry: name, or name{key=value,...}; commas inside braces belong to the options.
    size_t end = start;
    while (end < pipeline.size() && pipeline[end] != ',' && pipeline[end] != '{') ++end;
    const std::string name = Trim(pipeline.substr(start, end - start));
    OAR_CHECK_ARG(!name.empty(), "pass pipeline '{}': empty pass name at position {}", shown, start);
    PassOptions options;
    if (end < pipeline.size() && pipeline[end] == '{') {
      const size_t close = pipeline.find('}', end);
      OAR_CHECK_ARG(close != std::string_view::npos, "pass pipeline '{}': the options of '{}' at position {} have no "
                    "closing '}}'", shown, name, end);
      std::string_view body = pipeline.substr(end + 1, close - end - 1);
      size_t at = 0;
      while (at <= body.size() && !Trim(body).empty()) {
        const size_t c = std::min(body.find(',', at), body.size());
        const std::string_view item = body.substr(at, c - at);
        const size_t eq = item.find('=');
        OAR_CHECK_ARG(eq != std::string_view::npos && !Trim(item.substr(0, eq)).empty(),
                      "pass pipeline '{}': option '{}' of '{}' is not key=value", shown, Trim(item).substr(0, 64), name);
        options[Trim(item.substr(0, eq))] = Trim(item.substr(eq + 1));
        at = c + 1;
      }
      end = close + 1;
      while (end < pipeline.size() && (pipeline[end] == ' ' || pipeline[end] == '\t')) ++end;
      OAR_CHECK_ARG(end == pipeline.size() || pipeline[end] == ',', "pass pipeline '{}': expected ',' after the options "
                    "of '{}' at position {}", shown, name, end);
    }
    try {
      AddPass(CreatePass(name, options));
    } catch (const Error& e) {
      Throw(ErrorCode::kInvalidArgument, "pass pipeline '{}', position {}: {}", shown, start, e.what());
    }
    start = end + 1;
  }
}

void PassManager::Run(ir::Program& program) {
  timings_.clear();
  if (options_.verify_each) {
    try {
      ir::Verify(program);
    } catch (const Error& e) {
      Throw(e.code(), "the input program does not verify: {}", e.what());
    }
  }
  for (const auto& pass : passes_) {
    if (options_.print_before_all) options_.print(fmt::format("// -----// IR before {} //----- //", pass->name()), ir::Print(program));
    const auto start = std::chrono::steady_clock::now();
    try {
      pass->Run(program);
    } catch (const Error& e) {
      Throw(e.code(), "pass '{}' failed: {}", pass->name(), e.what());
    }
    timings_.push_back({std::string(pass->name()), std::chrono::steady_clock::now() - start});
    if (options_.verify_each) {
      try {
        ir::Verify(program);
      } catch (const Error& e) {
        Throw(ErrorCode::kInternal, "pass '{}' produced a program that does not verify: {}", pass->name(), e.what());
      }
    }
    if (options_.print_after_all || options_.print_after.contains(pass->name())) {
      options_.print(fmt::format("// -----// IR after {} //----- //", pass->name()), ir::Print(program));
    }
  }
}

std::string PassManager::TimingReport() const {
  std::chrono::nanoseconds total{0};
  for (const PassTiming& t : timings_) total += t.time;
  std::string out = fmt::format("{:<24} {:>12} {:>7}\n", "pass", "time (ms)", "share");
  for (const PassTiming& t : timings_) {
    const double ms = static_cast<double>(t.time.count()) / 1e6;
    const double share = total.count() > 0 ? 100.0 * static_cast<double>(t.time.count()) / static_cast<double>(total.count()) : 0;
    out += fmt::format("{:<24} {:>12.3f} {:>6.1f}%\n", t.pass, ms, share);
  }
  out += fmt::format("{:<24} {:>12.3f}\n", "total", static_cast<double>(total.count()) / 1e6);
  return out;
}

}  // namespace oar::passes
