#include "core/base/env.h"

#include <cctype>
#include <cstdlib>

#include "core/base/error.h"

namespace oar {

std::optional<std::string> GetEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

bool GetEnvFlag(const char* name) {
  const std::optional<std::string> value = GetEnv(name);
  if (!value) return false;
  std::string v;
  for (char c : *value) v += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  Throw(ErrorCode::kInvalidArgument, "{}='{}' is not a boolean; expected one of 1, 0, true, false, on, off",
        name, *value);
}

uint64_t ParseBytes(const std::string& text, const std::string& what) {
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  const std::string digits = text.substr(0, pos);
  std::string suffix = text.substr(pos);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  uint64_t scale = 0;
  if (suffix.empty()) scale = 1;
  else if (suffix == "K" || suffix == "k") scale = 1ull << 10;
  else if (suffix == "M" || suffix == "m") scale = 1ull << 20;
  else if (suffix == "G" || suffix == "g") scale = 1ull << 30;
  else if (suffix == "T" || suffix == "t") scale = 1ull << 40;
  if (digits.empty() || digits.size() > 15 || scale == 0) {
    Throw(ErrorCode::kInvalidArgument,
          "{}: '{}' is not a byte size; expected digits with an optional K, M, G or T suffix, e.g. 512M",
          what, text);
  }
  return std::stoull(digits) * scale;
}

std::optional<uint64_t> GetEnvBytes(const char* name) {
  const std::optional<std::string> value = GetEnv(name);
  if (!value) return std::nullopt;
  return ParseBytes(*value, name);
}

}  // namespace oar
