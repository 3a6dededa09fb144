// Device names (`type[:index]`, core/tensor/device.cc): accepted names round-trip through str().
#include <cstdint>
#include <string_view>

#include "core/base/error.h"
#include "core/tensor/device.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view name(reinterpret_cast<const char*>(data), size);
  try {
    const oar::Device d(name);
    if (d.index() < 0) oar::fuzz::Fail("a negative index was accepted");
    if (oar::Device(d.str()) != d) oar::fuzz::Fail("str() does not parse back to the same device");
  } catch (const oar::Error& e) {
    // kResourceExhausted: the table of device types is full (every valid name is interned).
    if (e.code() != oar::ErrorCode::kInvalidArgument && e.code() != oar::ErrorCode::kResourceExhausted) {
      oar::fuzz::Fail("an unexpected error code");
    }
    oar::fuzz::CheckMessage(e.what(), 512);
  }
  return 0;
}
