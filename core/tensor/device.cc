#include "core/tensor/device.h"

#include <array>
#include <atomic>
#include <cctype>
#include <charconv>
#include <mutex>

#include "core/base/error.h"
#include "core/base/text.h"

namespace oar {
namespace {

// Interned device-type names. Slots are written once, before `count` publishes them, so readers need no
// lock.
constexpr int kMaxTypes = 128;
// Function-local so that Devices can be constructed during static initialisation of other files.
std::array<std::string, kMaxTypes>& Types() {
  static std::array<std::string, kMaxTypes> types;
  return types;
}
std::atomic<int> g_count{0};
std::mutex g_mutex;

bool ValidTypeName(std::string_view type) {
  if (type.empty() || !std::islower(static_cast<unsigned char>(type[0]))) return false;
  for (char c : type) {
    if (!std::islower(static_cast<unsigned char>(c)) && !std::isdigit(static_cast<unsigned char>(c)) &&
        c != '_') {
      return false;
    }
  }
  return true;
}

}  // namespace

int Device::InternType(std::string_view type) {
  const int n = g_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    if (Types()[i] == type) return i;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  const int m = g_count.load(std::memory_order_relaxed);
  for (int i = n; i < m; ++i) {
    if (Types()[i] == type) return i;
  }
  OAR_CHECK(m < kMaxTypes, kResourceExhausted, "too many device types (at most {})", kMaxTypes);
  Types()[m] = std::string(type);
  g_count.store(m + 1, std::memory_order_release);
  return m;
}

Device::Device(std::string_view type, int index) {
  OAR_CHECK_ARG(ValidTypeName(type),
                "device type '{}' is malformed: expected lower-case letters, digits and '_', starting "
                "with a letter (e.g. cpu, cuda, ascend_sim)",
                BriefText(type));
  OAR_CHECK_ARG(index >= 0, "device index {} of '{}' is negative", index, BriefText(type));
  type_id_ = InternType(type);
  index_ = index;
}

Device::Device(std::string_view name) {
  const size_t colon = name.find(':');
  const std::string_view type = name.substr(0, colon);
  int index = 0;
  if (colon != std::string_view::npos) {
    const std::string_view digits = name.substr(colon + 1);
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    OAR_CHECK_ARG(!digits.empty() && ec == std::errc() && ptr == digits.data() + digits.size(),
                  "device name '{}' is malformed: expected type[:index], e.g. cpu, cuda:1, ascend_sim:0",
                  BriefText(name));
  }
  OAR_CHECK_ARG(ValidTypeName(type),
                "device name '{}' is malformed: expected type[:index], e.g. cpu, cuda:1, ascend_sim:0",
                BriefText(name));
  *this = Device(type, index);
}

const std::string& Device::type() const {
  static const std::string kInvalid = "invalid";
  return type_id_ < 0 ? kInvalid : Types()[type_id_];
}

std::string Device::str() const { return type() + ":" + std::to_string(index_); }

}  // namespace oar
