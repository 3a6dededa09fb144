// The example models (examples/models.h) as conformance cases build them on the device under test.
#ifndef OAR_CONFORMANCE_RUNNER_EXAMPLE_MODELS_H_
#define OAR_CONFORMANCE_RUNNER_EXAMPLE_MODELS_H_

#ifdef OAR_CONFORMANCE_HAS_EXAMPLES
#include <map>
#include <memory>
#include <string>

#include "core/runtime/runtime.h"
#include "examples/models.h"

namespace oar::conformance {

/// MakeExample on `device` with CPU fallback allowed while the weights and data are put in place (they
/// are drawn on the host in float64 and converted: set-up, not the computation under test), and
/// set back as it was before it returns (strict in op cases; WithCountedFallback allows it in model cases).
inline std::unique_ptr<examples::Example> MakeExampleOnDevice(const std::string& kind, Device device, uint64_t seed) {
  runtime::Runtime& rt = runtime::Runtime::Get();
  struct Restore {
    runtime::Runtime& rt;
    bool was;
    ~Restore() { rt.SetStrict(was); }
  } restore{rt, rt.strict()};
  rt.SetStrict(false);
  return examples::MakeExample(kind, device, seed);
}

/// Runs `fn` as users run models: with the counted CPU fallback allowed for ops the plugin does not
/// claim (op cases stay strict). Returns how many launches of each op fell back to cpu meanwhile.
template <typename Fn>
std::map<std::string, uint64_t> WithCountedFallback(runtime::DeviceContext& ctx, Fn&& fn) {
  runtime::Runtime& rt = runtime::Runtime::Get();
  struct Restore {
    runtime::Runtime& rt;
    ~Restore() { rt.SetStrict(true); }
  } restore{rt};
  const std::map<std::string, uint64_t> before = ctx.type().FallbackCounts();
  rt.SetStrict(false);
  fn();
  std::map<std::string, uint64_t> used;
  for (const auto& [op, n] : ctx.type().FallbackCounts()) {
    auto it = before.find(op);
    const uint64_t delta = n - (it == before.end() ? 0 : it->second);
    if (delta > 0) used[op] = delta;
  }
  return used;
}

/// "cpu fallback: sub 30, div 12" or "no cpu fallback".
inline std::string FallbackText(const std::map<std::string, uint64_t>& used) {
  if (used.empty()) return "no cpu fallback";
  std::string t = "cpu fallback (ops the plugin does not claim):";
  for (const auto& [op, n] : used) t += fmt::format(" {} x{}", op, n);
  return t;
}

}  // namespace oar::conformance
#endif

#endif  // OAR_CONFORMANCE_RUNNER_EXAMPLE_MODELS_H_
