#include "plugins/common/sim/config.h"

#include <cctype>
#include <charconv>
#include <cstdlib>

#include "oar/plugin/cpp/status.hpp"

namespace oar::sim {

void Throw(oar_status_code code, const std::string& message) { throw sdk::StatusError(code, message); }

std::optional<std::string> GetEnv(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Brief(std::string_view s, size_t limit) {
  if (s.size() <= limit) return std::string(s);
  return std::string(s.substr(0, limit)) + "... (" + std::to_string(s.size()) + " bytes)";
}

std::optional<uint64_t> ParseUnsigned(std::string_view text, uint64_t max) {
  text = Trim(text);
  if (text.empty()) return std::nullopt;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v > max) return std::nullopt;
  return v;
}

std::optional<uint64_t> ParseBytes(std::string_view text) {
  text = Trim(text);
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0) return std::nullopt;
  const std::optional<uint64_t> number = ParseUnsigned(text.substr(0, digits));
  if (!number || *number == 0) return std::nullopt;
  std::string suffix;
  for (char c : Trim(text.substr(digits))) suffix += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  int shift = 0;
  if (suffix.empty() || suffix == "b") {
    shift = 0;
  } else if (suffix == "k" || suffix == "kb" || suffix == "kib") {
    shift = 10;
  } else if (suffix == "m" || suffix == "mb" || suffix == "mib") {
    shift = 20;
  } else if (suffix == "g" || suffix == "gb" || suffix == "gib") {
    shift = 30;
  } else if (suffix == "t" || suffix == "tb" || suffix == "tib") {
    shift = 40;
  } else {
    return std::nullopt;
  }
  if (*number > (UINT64_MAX >> shift)) return std::nullopt;
  return *number << shift;
}

std::optional<double> ParseProbability(std::string_view text) {
  text = Trim(text);
  if (text.empty()) return std::nullopt;
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !(v >= 0.0 && v <= 1.0)) return std::nullopt;
  return v;
}

SimOptions SimOptions::FromEnv(const std::string& prefix) {
  SimOptions o;
  const std::string memory_var = prefix + "_MEMORY";
  if (const auto v = GetEnv(memory_var.c_str())) {
    const auto bytes = ParseBytes(*v);
    // Beyond 1 TiB the two address-space reservations per device stop being harmless.
    if (!bytes || *bytes > (uint64_t{1} << 40)) {
      Throw(OAR_STATUS_INVALID_ARGUMENT, memory_var + "='" + Brief(*v) +
                                             "' is not a memory size: expected a positive number of bytes up to 1T "
                                             "with an optional K, M, G or T suffix, e.g. 512M");
    }
    o.memory_bytes = *bytes;
  }
  const std::string devices_var = prefix + "_DEVICES";
  if (const auto v = GetEnv(devices_var.c_str())) {
    const auto n = ParseUnsigned(*v, 64);
    if (!n) Throw(OAR_STATUS_INVALID_ARGUMENT, devices_var + "='" + Brief(*v) + "' is not a device count in 0..64");
    o.device_count = static_cast<int32_t>(*n);
  }
  if (const auto v = GetEnv("OAR_SIM_JITTER")) {
    const auto seed = ParseUnsigned(*v);
    if (!seed) Throw(OAR_STATUS_INVALID_ARGUMENT, "OAR_SIM_JITTER='" + Brief(*v) + "' is not a seed (a non-negative integer)");
    o.jitter_seed = *seed;
  }
  if (const auto v = GetEnv("OAR_SIM_CCL_TIMEOUT_MS")) {
    const auto ms = ParseUnsigned(*v, 86400000);
    if (!ms || *ms == 0) {
      Throw(OAR_STATUS_INVALID_ARGUMENT,
            "OAR_SIM_CCL_TIMEOUT_MS='" + Brief(*v) + "' is not a positive number of milliseconds");
    }
    o.ccl_timeout_ms = *ms;
  }
  if (const auto v = GetEnv("OAR_SIM_KERNEL_THREADS")) {
    const auto n = ParseUnsigned(*v, 1024);
    if (!n || *n == 0)
      Throw(OAR_STATUS_INVALID_ARGUMENT, "OAR_SIM_KERNEL_THREADS='" + Brief(*v) + "' is not a thread count in 1..1024");
    o.kernel_threads = static_cast<int32_t>(*n);
  }
  o.faults = GetEnv("OAR_SIM_FAULTS").value_or("");
  return o;
}

}  // namespace oar::sim
