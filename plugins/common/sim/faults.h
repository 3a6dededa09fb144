// Fault injection (OAR_SIM_FAULTS): deterministic failures of allocations, kernel launches, copies and
// whole devices, so that the core's error paths can be tested without hardware.
//
// Grammar (docs/simulators.md has examples):
//   spec     := scenario { (';' | ',') scenario }
//   scenario := kind [':' option { ',' option }]      a ',' followed by "word:" starts a new scenario
//   kind     := alloc | launch | copy | device_lost
//   option   := key '=' value
// Keys for every kind:
//   after=N     the first N matching events pass; the fault fires from event N+1 on (default 0)
//   rate=P      once past `after`, each matching event fails with probability P in [0, 1], drawn from
//               `seed` and the event's index only (so the same spec fails the same events)
//   seed=S      (default 0)
//   count=N     fire at most N times (default 1 without `rate`, unlimited with it)
//   device=D    only events on device ordinal D
//   plugin=NAME only in the plugin called NAME (kunlun_sim or ascend_sim; any other name is refused);
//               default: every simulator
// Keys for one kind:
//   launch: op=NAME (only kernels of that op; a name no simulator kernel has is refused),
//           mode=async|sync (async: the launch returns OK and the kernel fails on the stream, reported at
//           the next synchronising call; sync: the launch itself fails; default async)
//   copy:   dir=h2d|d2h|d2d|p2p (default any), code=data_loss|internal (default data_loss)
// What fails: alloc -> malloc returns RESOURCE_EXHAUSTED; launch -> INTERNAL; copy -> DATA_LOSS or
// INTERNAL (sync copies return it, async ones make the stream's sticky error); device_lost -> the
// device is lost once the matching event (any malloc, copy, memset, kernel launch or collective on it)
// is reached: that call and every later call on the device return UNAVAILABLE.
#ifndef OAR_PLUGINS_COMMON_SIM_FAULTS_H_
#define OAR_PLUGINS_COMMON_SIM_FAULTS_H_

#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "oar/plugin/status.h"

namespace oar::sim {

enum class FaultKind { kAlloc, kLaunch, kCopy, kDeviceLost };

struct FaultScenario {
  FaultKind kind = FaultKind::kAlloc;
  std::string text;  ///< The scenario as written, for messages.
  uint64_t after = 0;
  std::optional<double> rate;
  uint64_t seed = 0;
  std::optional<uint64_t> count;
  std::optional<int32_t> device;
  std::string plugin;  ///< empty: any
  std::string op;      ///< launch: empty = any op
  std::string dir;     ///< copy: empty = any direction
  bool sync = false;   ///< launch: fail the launch call itself
  oar_status_code code = OAR_STATUS_INTERNAL;
};

/// Parse a spec; throws StatusError(INVALID_ARGUMENT) quoting the whole spec and the offending part.
/// `known_ops` (when given) are the op names `op=` may take: a typo would otherwise never fire.
std::vector<FaultScenario> ParseFaults(std::string_view spec, const std::set<std::string>* known_ops = nullptr);

/// The op names a simulator launches kernels for (the host kernel library's, plus format_cast).
const std::set<std::string>& LaunchableOps();

/// Counts matching events per scenario and decides which ones fail. Thread-safe.
class FaultInjector {
 public:
  FaultInjector() = default;
  /// Keep the scenarios that apply to `plugin`.
  FaultInjector(const std::vector<FaultScenario>& scenarios, const std::string& plugin);

  /// Count one event of `kind` on `device` ("what" is the op name for launches, the direction for
  /// copies) against every matching scenario; returns the first scenario that fires, else nullptr.
  const FaultScenario* Check(FaultKind kind, int32_t device, std::string_view what);
  bool empty() const { return scenarios_.empty(); }

 private:
  struct State {
    FaultScenario scenario;
    uint64_t seen = 0;
    uint64_t fired = 0;
  };
  std::mutex mu_;
  std::vector<State> scenarios_;
};

/// " (injected fault 'launch:op=matmul,after=3' from OAR_SIM_FAULTS)".
std::string FaultSuffix(const FaultScenario& s);

}  // namespace oar::sim

#endif  // OAR_PLUGINS_COMMON_SIM_FAULTS_H_
