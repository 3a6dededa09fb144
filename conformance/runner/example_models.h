// The example models (examples/models.h) as conformance cases build them on the device under test.
#ifndef OAR_CONFORMANCE_RUNNER_EXAMPLE_MODELS_H_
#define OAR_CONFORMANCE_RUNNER_EXAMPLE_MODELS_H_

#ifdef OAR_CONFORMANCE_HAS_EXAMPLES
#include <memory>
#include <string>

#include "core/runtime/runtime.h"
#include "examples/models.h"

namespace oar::conformance {

/// MakeExample on `device` with CPU fallback allowed while the weights and data are put in place (they
/// are drawn on the host in float64 and converted: set-up, not the computation under test), and
/// forbidden again before it returns, so the forward and training steps run on the device or fail.
inline std::unique_ptr<examples::Example> MakeExampleOnDevice(const std::string& kind, Device device, uint64_t seed) {
  runtime::Runtime& rt = runtime::Runtime::Get();
  struct Restore {
    runtime::Runtime& rt;
    ~Restore() { rt.SetStrict(true); }
  } restore{rt};
  rt.SetStrict(false);
  return examples::MakeExample(kind, device, seed);
}

}  // namespace oar::conformance
#endif

#endif  // OAR_CONFORMANCE_RUNNER_EXAMPLE_MODELS_H_
