#include "core/base/logging.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

#include "core/base/env.h"

namespace oar::log {
namespace {

constexpr std::string_view kNames[] = {"error", "warning", "info", "debug", "trace"};

Level ParseThreshold() {
  const std::optional<std::string> value = GetEnv("OAR_LOG_LEVEL");
  if (!value) return Level::kWarning;
  if (const std::optional<Level> level = ParseLevel(*value)) return *level;
  std::fprintf(stderr,
               "[oar:warning] OAR_LOG_LEVEL='%s' is not one of error, warning, info, debug, trace; "
               "using warning\n",
               value->c_str());
  return Level::kWarning;
}

std::atomic<int>& ThresholdStorage() {
  static std::atomic<int> threshold{static_cast<int>(ParseThreshold())};
  return threshold;
}

}  // namespace

std::optional<Level> ParseLevel(std::string_view text) {
  for (int i = 0; i < 5; ++i) {
    if (text == kNames[i]) return static_cast<Level>(i);
  }
  if (text == "warn") return Level::kWarning;
  return std::nullopt;
}

Level Threshold() { return static_cast<Level>(ThresholdStorage().load(std::memory_order_relaxed)); }

void SetThreshold(Level level) { ThresholdStorage().store(static_cast<int>(level)); }

void Write(Level level, std::string_view message) {
  static std::mutex mutex;
  const std::string line = fmt::format("[oar:{}] {}\n", kNames[static_cast<int>(level)], message);
  std::lock_guard<std::mutex> lock(mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace oar::log
