#include "core/base/env.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/base/error.h"
#include "core/base/text.h"

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
        name, BriefText(*value));
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
          what, BriefText(text));
  }
  uint64_t bytes = 0;
  OAR_CHECK_ARG(!__builtin_mul_overflow(std::stoull(digits), scale, &bytes),
                "{}: '{}' is more bytes than 64 bits can count", what, BriefText(text));
  return bytes;
}

std::optional<uint64_t> GetEnvBytes(const char* name) {
  const std::optional<std::string> value = GetEnv(name);
  if (!value) return std::nullopt;
  return ParseBytes(*value, name);
}

std::vector<std::string> SplitPathList(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(':', start), text.size());
    if (end > start) out.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace oar
