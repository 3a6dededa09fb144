// Device: a value naming one device, "type[:index]" (cpu, cuda:1, ascend_sim:0). Device types are
// interned, so a Device is two small integers and compares in one instruction. Whether the device exists
// is the runtime's business (oar::runtime::Runtime::Resolve).
#ifndef OAR_CORE_TENSOR_DEVICE_H_
#define OAR_CORE_TENSOR_DEVICE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace oar {

class Device {
 public:
  /// An invalid device (type id -1).
  Device() = default;
  /// Parse "type[:index]"; a missing index means 0. Throws oar::Error on bad syntax.
  Device(std::string_view name);  // NOLINT: implicit, so APIs accept "cuda:1"
  Device(const char* name) : Device(std::string_view(name)) {}  // NOLINT
  Device(const std::string& name) : Device(std::string_view(name)) {}  // NOLINT
  Device(std::string_view type, int index);

  bool valid() const { return type_id_ >= 0; }
  int type_id() const { return type_id_; }
  int index() const { return index_; }
  /// The device type's name, e.g. "cuda".
  const std::string& type() const;
  /// "cuda:1".
  std::string str() const;

  friend bool operator==(Device a, Device b) { return a.type_id_ == b.type_id_ && a.index_ == b.index_; }

  /// The interned id of a device type name (created on first use). Thread-safe.
  static int InternType(std::string_view type);

 private:
  int32_t type_id_ = -1;
  int32_t index_ = 0;
};

}  // namespace oar

template <>
struct std::hash<oar::Device> {
  size_t operator()(oar::Device d) const noexcept {
    return std::hash<int64_t>()((static_cast<int64_t>(d.type_id()) << 32) | d.index());
  }
};

#endif  // OAR_CORE_TENSOR_DEVICE_H_
