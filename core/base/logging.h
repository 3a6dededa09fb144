// Logging for the core, filtered by OAR_LOG_LEVEL (error | warning | info | debug | trace; default
// warning). Messages go to stderr as "[oar:<level>] message".
#ifndef OAR_CORE_BASE_LOGGING_H_
#define OAR_CORE_BASE_LOGGING_H_

#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace oar::log {

enum class Level : int { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

/// The active threshold (read once from OAR_LOG_LEVEL; an unknown value warns and keeps the default).
Level Threshold();
/// An OAR_LOG_LEVEL value: error, warning (or warn), info, debug, trace; nullopt for anything else.
std::optional<Level> ParseLevel(std::string_view text);
/// Override the threshold (tests, CLI -v).
void SetThreshold(Level level);
inline bool Enabled(Level level) { return static_cast<int>(level) <= static_cast<int>(Threshold()); }
/// Write one line; thread-safe.
void Write(Level level, std::string_view message);

template <typename... Args>
void Log(Level level, fmt::format_string<Args...> format, Args&&... args) {
  if (Enabled(level)) Write(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace oar::log

#define OAR_LOG_ERROR(...) ::oar::log::Log(::oar::log::Level::kError, __VA_ARGS__)
#define OAR_LOG_WARNING(...) ::oar::log::Log(::oar::log::Level::kWarning, __VA_ARGS__)
#define OAR_LOG_INFO(...) ::oar::log::Log(::oar::log::Level::kInfo, __VA_ARGS__)
#define OAR_LOG_DEBUG(...) ::oar::log::Log(::oar::log::Level::kDebug, __VA_ARGS__)

#endif  // OAR_CORE_BASE_LOGGING_H_
