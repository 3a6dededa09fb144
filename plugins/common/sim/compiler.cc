// The compiler table of a simulated device: C modules compiled and loaded by plugins/common/c_compiler
// (the simulators run on the host), launched like any kernel of the device: checked at launch (device
// loss, stream handle, launch faults, every BUFFER range translated from the device address space), run
// on the stream's worker in stream order, timed by the device model's roofline from the launch's
// flops/bytes estimates.
#include <omp.h>

#include <memory>
#include <string>

#include "oar/plugin/cpp/status.hpp"
#include "plugins/common/c_compiler.h"
#include "plugins/common/sim/device_api.h"
#include "plugins/common/sim/simulator.h"
#include "plugins/common/stream_store.h"

namespace oar::sim {
namespace {

oar_status_t* LaunchCompiled(int32_t device, oar_stream_t stream, const oar_launch_info_t* info) {
  return sdk::Guard([&] {
    Simulator& sim = Simulator::Get();
    SimDevice& dev = sim.device(device);
    const std::string where = dev.where() + " launch_kernel";
    sim.BeginOperation(dev, "launch of a compiled kernel");
    if (stream == nullptr) Throw(OAR_STATUS_INVALID_ARGUMENT, where + ": launched without a stream");
    std::shared_ptr<Stream> s = dev.GetStream(stream);
    std::shared_ptr<const host::CLaunch> launch = host::PrepareCLaunch(
        info,
        [&dev](const void* ptr, size_t bytes, const std::string& what) -> void* {
          return dev.memory().Translate(ptr, bytes, what);
        },
        where);
    const DeviceModel& model = dev.model();
    Work work;
    work.name = launch->name();
    work.kind = OAR_ACTIVITY_KERNEL;
    work.cost = Roofline(model, launch->flops(), static_cast<uint64_t>(launch->bytes()),
                         model.PeakFlops(OAR_DTYPE_FLOAT32));
    if (const FaultScenario* f = sim.faults().Check(FaultKind::kLaunch, dev.ordinal(), launch->name())) {
      const std::string message = where + " '" + launch->name() + "' failed" + FaultSuffix(*f);
      if (f->sync) Throw(f->code, message);
      work.injected = SimError{f->code, message};
    }
    // The worker's OpenMP threads are the stream's kernel threads (Stream sets them).
    work.run = [launch]() -> std::optional<SimError> {
      launch->Run(omp_get_max_threads());
      return std::nullopt;
    };
    s->Enqueue(std::move(work));
  });
}

}  // namespace

const oar_compiler_api_t* CompilerApi(const char* plugin_name) {
  static const oar_compiler_api_t* table = host::CCompilerApi(
      {.plugin = plugin_name, .check_device = [](int32_t device) { Simulator::Get().device(device); },
       .launch_kernel = LaunchCompiled, .stream_min_bytes = host::StreamingThresholdBytes});
  return table;
}

}  // namespace oar::sim
