// Reading OAR_* environment variables with validation.
#ifndef OAR_CORE_BASE_ENV_H_
#define OAR_CORE_BASE_ENV_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace oar {

/// The variable's value, or nullopt when unset or empty.
std::optional<std::string> GetEnv(const char* name);

/// A boolean flag: unset/""/0/false/off/no -> false, 1/true/on/yes -> true; anything else throws
/// oar::Error naming the variable and the accepted values.
bool GetEnvFlag(const char* name);

/// A byte size like "512M", "2G", "4096" (suffixes K, M, G, T; powers of 1024). Throws oar::Error on a
/// malformed value, naming the variable.
std::optional<uint64_t> GetEnvBytes(const char* name);

/// A ':'-separated list (OAR_PLUGIN_PATH) split into its entries; empty entries are dropped.
std::vector<std::string> SplitPathList(std::string_view text);

/// Parse a byte size as GetEnvBytes does; `what` names the source in the error.
uint64_t ParseBytes(const std::string& text, const std::string& what);

}  // namespace oar

#endif  // OAR_CORE_BASE_ENV_H_
