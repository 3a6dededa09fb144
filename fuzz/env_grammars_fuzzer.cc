// The other environment grammars: the first input byte picks one, the rest is the value.
//   0 OAR_*_MEMORY-style byte sizes (core ParseBytes)   1 OAR_STRICT_DEVICE-style flags (GetEnvFlag)
//   2 OAR_LOG_LEVEL (ParseLevel)                          3 OAR_PLUGIN_PATH (SplitPathList)
//   4 the simulators' OAR_<SIM>_MEMORY, _DEVICES, OAR_SIM_JITTER, OAR_SIM_KERNEL_THREADS,
//     OAR_SIM_CCL_TIMEOUT_MS (SimOptions::FromEnv)
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/base/env.h"
#include "core/base/error.h"
#include "core/base/logging.h"
#include "fuzz/fuzz_util.h"
#include "oar/plugin/cpp/status.hpp"
#include "plugins/common/sim/config.h"

namespace {

// setenv takes a C string: the value ends at the first NUL, as it would in a real environment.
void Set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string value(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 5) {
      case 0: {
        const uint64_t n = oar::ParseBytes(value, "OAR_FUZZ_BYTES");
        // Oracle in 128 bits: digits, then an optional K/M/G/T (any case), then an optional B.
        unsigned __int128 expected = 0;
        size_t pos = 0;
        for (; pos < value.size() && value[pos] >= '0' && value[pos] <= '9'; ++pos) {
          expected = expected * 10 + static_cast<unsigned>(value[pos] - '0');
        }
        const std::string suffix = value.substr(pos);
        const std::string letters = "kmgt";
        const size_t at = suffix.empty() ? std::string::npos : letters.find(static_cast<char>(suffix[0] | 0x20));
        if (at != std::string::npos) expected <<= 10 * (at + 1);
        if (expected != n) oar::fuzz::Fail("a byte size that differs from its digits times its suffix");
        break;
      }
      case 1:
        Set("OAR_FUZZ_FLAG", value);
        (void)oar::GetEnvFlag("OAR_FUZZ_FLAG");
        break;
      case 2:
        (void)oar::log::ParseLevel(value);
        break;
      case 3:
        for (const std::string& entry : oar::SplitPathList(value)) {
          if (entry.empty() || entry.find(':') != std::string::npos) oar::fuzz::Fail("a bad path-list entry");
        }
        break;
      case 4: {
        const char* vars[] = {"OAR_FUZZSIM_MEMORY", "OAR_FUZZSIM_DEVICES", "OAR_SIM_JITTER", "OAR_SIM_KERNEL_THREADS",
                              "OAR_SIM_CCL_TIMEOUT_MS"};
        const size_t which = value.empty() ? 0 : static_cast<unsigned char>(value[0]) % 5;
        for (const char* v : vars) ::unsetenv(v);
        ::unsetenv("OAR_SIM_FAULTS");
        Set(vars[which], value.empty() ? value : value.substr(1));
        const oar::sim::SimOptions o = oar::sim::SimOptions::FromEnv("OAR_FUZZSIM");
        if (o.device_count < 0 || o.device_count > 64) oar::fuzz::Fail("a device count outside 0..64");
        break;
      }
    }
  } catch (const oar::Error& e) {
    oar::fuzz::CheckMessage(e.what(), 512);
  } catch (const oar::sdk::StatusError& e) {
    if (e.code() != OAR_STATUS_INVALID_ARGUMENT) oar::fuzz::Fail("a rejection that is not INVALID_ARGUMENT");
    oar::fuzz::CheckMessage(e.what(), 512);
  }
  return 0;
}
