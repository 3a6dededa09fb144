// Simulator configuration: the environment variables every simulated device reads, parsed strictly.
// A malformed value is an error that quotes the variable and its value (initialize fails with it),
// never a silent default.
#ifndef OAR_PLUGINS_COMMON_SIM_CONFIG_H_
#define OAR_PLUGINS_COMMON_SIM_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "oar/plugin/status.h"

namespace oar::sim {

/// An error produced inside the simulator: a canonical code and a message. Converted to an
/// oar_status_t only at the ABI boundary (or kept "sticky" on a stream until a synchronising call).
struct SimError {
  oar_status_code code = OAR_STATUS_INTERNAL;
  std::string message;
};

/// Throw oar::sdk::StatusError with `code` and `message`.
[[noreturn]] void Throw(oar_status_code code, const std::string& message);

/// The value of environment variable `name`, or nullopt when it is unset or empty.
std::optional<std::string> GetEnv(const char* name);

/// "4096", "64K", "512M", "1G" (also "512MiB", "1gb"; binary multiples) -> bytes. nullopt when malformed
/// or zero.
std::optional<uint64_t> ParseBytes(std::string_view text);

/// A non-negative decimal integer without sign or suffix; nullopt when malformed or above `max`.
std::optional<uint64_t> ParseUnsigned(std::string_view text, uint64_t max = UINT64_MAX);

/// A decimal number in [0, 1]; nullopt when malformed.
std::optional<double> ParseProbability(std::string_view text);

/// Trim ASCII spaces and tabs.
std::string_view Trim(std::string_view s);

/// `s` cut to `limit` bytes with "... (N bytes)" appended when longer: messages never quote unbounded input.
std::string Brief(std::string_view s, size_t limit = 200);

/// What a simulator reads from the environment at initialize. `prefix` is e.g. "OAR_KUNLUN_SIM":
///  - <prefix>_MEMORY  capacity of each device (default 1G);
///  - <prefix>_DEVICES number of devices (default 2, 0..64);
///  - OAR_SIM_JITTER   seed of random delays (0-200 us) before each queued item (unset: no jitter);
///  - OAR_SIM_FAULTS   fault-injection scenarios (see faults.h), kept as text here;
///  - OAR_SIM_CCL_TIMEOUT_MS, OAR_SIM_KERNEL_THREADS (below).
struct SimOptions {
  uint64_t memory_bytes = uint64_t{1} << 30;
  int32_t device_count = 2;
  std::optional<uint64_t> jitter_seed;
  std::string faults;
  /// How long a collective waits for its peers before failing with DEADLINE_EXCEEDED
  /// (OAR_SIM_CCL_TIMEOUT_MS, default 60000).
  uint64_t ccl_timeout_ms = 60000;
  /// OpenMP threads a host kernel may use on a stream's worker (OAR_SIM_KERNEL_THREADS, 1..1024,
  /// default 1: one device queue computes on one host thread, deterministically, and ThreadSanitizer
  /// sees every synchronisation — it cannot see libgomp's).
  int32_t kernel_threads = 1;

  /// Read the variables; throws StatusError(INVALID_ARGUMENT) quoting a malformed one.
  static SimOptions FromEnv(const std::string& prefix);
};

}  // namespace oar::sim

#endif  // OAR_PLUGINS_COMMON_SIM_CONFIG_H_
